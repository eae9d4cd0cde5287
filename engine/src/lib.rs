//! Turnstile's engine: decides *when* each tool call of an agent may start.
//!
//! Three parts, none of which performs I/O or reads a clock:
//!
//! - [`config`]: layered TOML (`conversation.tools.<name>.concurrency`, `fan_out`) resolved into
//!   a typed [`config::Policy`], or a list of [`diagnostic::Diagnostic`]s that name the tools
//!   involved and point at the lines.
//! - [`schedule`]: the sans-IO scheduler of RFD 129. The host submits batches
//!   ([`schedule::Scheduler::submit_batch`]), reports ends and other inputs as they happen, and
//!   asks [`schedule::Scheduler::next_releases`] what to start and what it settled.
//! - [`admission`]: per-connection admission control (classes of work under one budget).
//! - [`retry_after`]: a `Retry-After` header value read as a wait, the same in every host.
//! - [`simulate`]: batches on a virtual clock, as a timeline (every CLI's `simulate`).
//! - [`shared`]: shared keys' rules: the lease schedule a client drives and the store's grant
//!   rule (the store texts are data in `shared/store/`, which the packages ship).
//!
//! Every mistake a host can make is a typed error that changes nothing; the engine never panics
//! on host input, because a panic inside the WebAssembly component poisons the instance for
//! every caller. Sizes are bounded by the constants in [`limits`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod codes;
mod fx;
mod json;

pub mod admission;
pub mod config;
pub mod diagnostic;
pub mod limits;
pub mod path;
pub mod retry_after;
pub mod schedule;
pub mod shared;
pub mod simulate;
pub mod template;
