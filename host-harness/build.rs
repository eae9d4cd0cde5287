//! Embeds the component in `host-harness`, so the binary runs from anywhere.
//!
//! The component is `turnstile.wasm` in the target directory (`$CARGO_TARGET_DIR`, else the
//! workspace's `target/`), where `cargo xtask build-guest` writes it. When it exists, it is
//! copied to `$OUT_DIR/turnstile.wasm`, which `lib.rs` includes, and cargo reruns this script
//! (rebuilding host-harness) whenever the file changes. When it does not (a fresh clone), an
//! empty file stands in: the build succeeds with nothing embedded, and the binary looks for the
//! component at run time. Cargo reruns a script whose watched file is missing on every build,
//! so the first build after `build-guest` embeds it.
//!
//! This script never builds the component itself: that would run cargo inside cargo.

use std::path::PathBuf;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_DIR");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| manifest.join("../target"), PathBuf::from);
    let source = target.join("turnstile.wasm");
    let source = std::fs::canonicalize(&source).unwrap_or(source);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("turnstile.wasm");
    println!("cargo::rerun-if-changed={}", source.display());
    let bytes = match std::fs::read(&source) {
        Ok(bytes) => {
            println!(
                "cargo::rustc-env=TURNSTILE_EMBEDDED_FROM={}",
                source.display()
            );
            bytes
        }
        Err(e) => {
            println!(
                "cargo::warning=no component embedded: {}: {e}; run `cargo xtask build-guest`, \
                 then build again",
                source.display()
            );
            println!("cargo::rustc-env=TURNSTILE_EMBEDDED_FROM=");
            Vec::new()
        }
    };
    // Rewrite only on change, so an unchanged component does not look new to rustc.
    if std::fs::read(&out).ok().as_deref() != Some(bytes.as_slice())
        && let Err(e) = std::fs::write(&out, &bytes)
    {
        println!("cargo::error={}: {e}", out.display());
    }
}
