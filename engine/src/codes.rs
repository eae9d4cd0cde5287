//! The two macros every operation's error type is made with: a code enum with its stable
//! kebab-case spelling, and the error record (code and message) around it. Used by
//! `schedule/error.rs` and `admission/error.rs`.

macro_rules! codes {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// The stable kebab-case spelling that crosses the boundary.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

macro_rules! error_type {
    ($(#[$meta:meta])* $name:ident, $code:ident) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            /// What went wrong.
            pub code: $code,
            /// For people: lowercase, no trailing period.
            pub message: String,
        }

        impl $name {
            pub(crate) fn new(code: $code, message: String) -> Self {
                Self { code, message }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}: {}", self.code.as_str(), self.message)
            }
        }

        impl std::error::Error for $name {}
    };
}
