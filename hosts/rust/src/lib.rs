//! Turnstile for Rust agent hosts: decides *when* each tool call of an agent's response may
//! start, natively (the engine the WebAssembly component is built from, no wasmtime), with an
//! async [tokio] driver.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod driver;
pub mod shared;
