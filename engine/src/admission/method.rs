//! The MCP method-to-class table: which [`Class`] a client request of each MCP method is
//! admitted under. The JS and Python hosts' MCP adapters carried copies of this table; this is
//! the one rule they follow.
//!
//! | method                                                               | class     |
//! | -------------------------------------------------------------------- | --------- |
//! | `tools/call`                                                         | `call`    |
//! | `resources/read`, `prompts/get`, `completion/complete`, any other    | `request` |
//! | `initialize`, `ping`, `tools/list`, `prompts/list`, `resources/list`, | `control` |
//! | `resources/templates/list`, `resources/subscribe`,                   |           |
//! | `resources/unsubscribe`, `logging/setLevel`                          |           |
//!
//! The method alone never makes a request [`Class::Reentrant`]: that is where it is sent from.
//! A request a host sends from its handler of a server request (sampling, elicitation, roots)
//! while a tool call of the connection is in flight is `reentrant`, with that call as its
//! parent, whatever its method.

use super::Class;

/// The admission class of an MCP client request by its method (the table in the module docs).
///
/// Methods compare exactly (MCP method names are case-sensitive; nothing is trimmed). A method
/// not in the table is a [`Class::Request`]: bounded by the budget, never serialized, so a
/// newer MCP method is admitted without deadlock risk and without a lock it might not need.
/// Never returns [`Class::Reentrant`].
pub fn class_of_method(method: &str) -> Class {
    match method {
        "tools/call" => Class::Call,
        "initialize"
        | "ping"
        | "tools/list"
        | "prompts/list"
        | "resources/list"
        | "resources/templates/list"
        | "resources/subscribe"
        | "resources/unsubscribe"
        | "logging/setLevel" => Class::Control,
        // "resources/read", "prompts/get", "completion/complete" and anything else.
        _ => Class::Request,
    }
}
