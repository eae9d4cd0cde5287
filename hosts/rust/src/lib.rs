//! Turnstile for Rust agent hosts: decides *when* each tool call of an agent's response may
//! start (RFD 129, the design of tool-call concurrency), natively (the engine the WebAssembly
//! component is built from, no wasmtime), with an async [tokio] driver.
//!
//! - [`Policy`]: TOML layers resolved by the engine (diagnostics rendered like rustc).
//! - [`Driver`]: runs batches of calls ([`Driver::run`]), with cancellation, questions,
//!   deadlines, pauses, and persistence with [`Driver::resume`].
//!
//! See the crate's README for a tour, and hosts/DRIVERS.md for the contract every driver
//! (JS, Python, Rust) follows.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod driver;
pub mod shared;

pub use driver::{
    Abort, ArgumentsOf, Call, CallOutcome, CancelToken, ConfigError, Decide, Decision, Diagnostic,
    Driver, DriverError, DriverOptions, EntryOutcome, ExecError, Execute, Execution, HostError,
    Layer, LiveBatch, OnOutcome, Outcomes, PauseError, Persist, PersistError, Policy, ResumeError,
    ResumeOptions, Resumed, Run, RunError, RunOptions, Snapshot, Status,
};
pub use turnstile_engine::schedule::{AbortCause, EntryStatus, Reason, Started, Wait};
