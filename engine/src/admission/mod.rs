//! Admission per binding: which requests on one shared MCP connection may be in flight at once.
//!
//! # Rules
//!
//! - Four classes: [`Class::Call`] (a tool call, may have effects), [`Class::Request`] (reads),
//!   [`Class::Control`] (lifecycle, auth, catalog refresh) and [`Class::Reentrant`] (a tool call
//!   issued from a sampling handler while its ancestor call is still in flight).
//! - `max_concurrent` bounds the requests in flight over every class; below 1 it is clamped to
//!   1 (a budget of zero would block forever).
//! - Tool calls run one at a time unless `allow_parallel`; control operations always run one at
//!   a time; requests are bounded only by the budget.
//! - A re-entrant call skips the call serializer (its ancestor holds it) but counts against the
//!   budget. When its own in-flight ancestors hold the whole budget it can never be admitted,
//!   so [`Admission::begin`] returns [`AdmissionErrorCode::WouldDeadlock`] at once.
//! - A queued request that gives up ([`Admission::abandon`]) consumes nothing.
//! - [`Admission::shutdown`] refuses new work first, then reports everything in flight for the
//!   host to cancel, and every queued request as refused.
//!
//! Unlike the Go original, waiting requests are admitted first-come first-served within what
//! their class allows, and a blocked class never blocks another: a request queued behind a
//! waiting tool call is admitted as soon as the budget has room.
//!
//! # Call order
//!
//! Inputs are [`begin`](Admission::begin), [`end`](Admission::end),
//! [`abandon`](Admission::abandon) and [`shutdown`](Admission::shutdown); each returns an error
//! and changes nothing, or changes state. Every admission, including one that happens inside
//! `begin`, is drained from [`next_admissions`](Admission::next_admissions) in order.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use crate::limits::{NAME_BYTES_MAX, REQUESTS_MAX};

/// The kind of work a request is, which decides its serialization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// A tool call: serialized against other tool calls unless the binding allows parallelism.
    Call,
    /// Any other server request (a resource read, a prompt): bounded by the budget only.
    Request,
    /// Lifecycle, auth, catalog refresh: one at a time.
    Control,
    /// A tool call from within a sampling handler; needs the in-flight request it descends from.
    Reentrant,
}

impl Class {
    /// The lowercase name used in case files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Request => "request",
            Self::Control => "control",
            Self::Reentrant => "reentrant",
        }
    }
}

/// A binding's admission policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Requests in flight over every class; values below 1 mean 1.
    pub max_concurrent: u32,
    /// Tool calls may run in parallel, up to the budget.
    pub allow_parallel: bool,
}

/// What [`Admission::begin`] and friends can refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdmissionErrorCode {
    /// The controller is shut down; nothing is admitted.
    Shutdown,
    /// The id is already in flight or queued.
    DuplicateRequest,
    /// No request in flight or queued has this id.
    UnknownRequest,
    /// The id is empty or longer than `NAME_BYTES_MAX` bytes.
    InvalidId,
    /// A re-entrant call without a parent, a parent that is not an in-flight call, or a parent
    /// given for another class.
    InvalidParent,
    /// The re-entrant call's own ancestors hold the whole budget: waiting would never end.
    WouldDeadlock,
    /// `end` on a request that is still queued (use `abandon`).
    NotAdmitted,
    /// `abandon` on a request that is already in flight (use `end`).
    NotQueued,
    /// More than `REQUESTS_MAX` requests at once.
    TooMany,
}

impl AdmissionErrorCode {
    /// The stable kebab-case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Shutdown => "shutdown",
            Self::DuplicateRequest => "duplicate-request",
            Self::UnknownRequest => "unknown-request",
            Self::InvalidId => "invalid-id",
            Self::InvalidParent => "invalid-parent",
            Self::WouldDeadlock => "would-deadlock",
            Self::NotAdmitted => "not-admitted",
            Self::NotQueued => "not-queued",
            Self::TooMany => "too-many",
        }
    }
}

/// A refused admission call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionError {
    /// What went wrong.
    pub code: AdmissionErrorCode,
    /// For people.
    pub message: String,
}

impl fmt::Display for AdmissionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for AdmissionError {}

fn error(code: AdmissionErrorCode, message: String) -> AdmissionError {
    AdmissionError { code, message }
}

/// What shutdown hands the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// In-flight requests to cancel, in admission order. Each still needs its `end`.
    pub cancel: Vec<String>,
    /// Queued requests that will never be admitted, in arrival order.
    pub refused: Vec<String>,
}

#[derive(Debug)]
struct Request {
    id: String,
    class: Class,
    /// Sequence number of the parent request, for re-entrant calls.
    parent: Option<u64>,
    admitted: bool,
}

/// The admission controller of one binding. See the [module docs](self).
#[derive(Debug)]
pub struct Admission {
    budget: u32,
    allow_parallel: bool,
    requests: HashMap<u64, Request>,
    ids: HashMap<String, u64>,
    queue: VecDeque<u64>,
    in_flight: u32,
    calls_in_flight: u32,
    control_in_flight: bool,
    shut_down: bool,
    next_seq: u64,
    admitted: Vec<u64>,
    out: Vec<String>,
}

impl Admission {
    /// A controller for `config`, clamping the budget to at least 1.
    pub fn new(config: AdmissionConfig) -> Self {
        Self {
            budget: config.max_concurrent.max(1),
            allow_parallel: config.allow_parallel,
            requests: HashMap::new(),
            ids: HashMap::new(),
            queue: VecDeque::new(),
            in_flight: 0,
            calls_in_flight: 0,
            control_in_flight: false,
            shut_down: false,
            next_seq: 0,
            admitted: Vec::new(),
            out: Vec::new(),
        }
    }

    /// The effective budget (after clamping).
    pub fn budget(&self) -> u32 {
        self.budget
    }

    /// Requests in flight now. For tests and diagnostics only.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Asks to admit a request. It is admitted now or queued; either way its admission is
    /// reported by [`Admission::next_admissions`]. `parent` names the in-flight call a
    /// re-entrant call descends from, and is an error for other classes.
    pub fn begin(
        &mut self,
        id: &str,
        class: Class,
        parent: Option<&str>,
    ) -> Result<(), AdmissionError> {
        if self.shut_down {
            return Err(error(
                AdmissionErrorCode::Shutdown,
                "the binding is shut down: no further work is admitted".to_owned(),
            ));
        }
        if id.is_empty() || id.len() > NAME_BYTES_MAX {
            return Err(error(
                AdmissionErrorCode::InvalidId,
                format!("a request id must be 1 to {NAME_BYTES_MAX} bytes"),
            ));
        }
        if self.ids.contains_key(id) {
            return Err(error(
                AdmissionErrorCode::DuplicateRequest,
                format!("request {id:?} is already in flight or queued"),
            ));
        }
        if self.requests.len() >= REQUESTS_MAX {
            return Err(error(
                AdmissionErrorCode::TooMany,
                format!("at most {REQUESTS_MAX} requests are held at once"),
            ));
        }
        let parent = self.check_parent(id, class, parent)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.ids.insert(id.to_owned(), seq);
        self.requests.insert(
            seq,
            Request {
                id: id.to_owned(),
                class,
                parent,
                admitted: false,
            },
        );
        self.queue.push_back(seq);
        self.admit_waiting();
        Ok(())
    }

    /// An admitted request finished (whatever its outcome); its budget and lock are returned.
    pub fn end(&mut self, id: &str) -> Result<(), AdmissionError> {
        let seq = self.seq(id)?;
        let Some(req) = self.requests.get(&seq) else {
            return Err(unknown(id));
        };
        if !req.admitted {
            return Err(error(
                AdmissionErrorCode::NotAdmitted,
                format!("request {id:?} is still queued; abandon it instead"),
            ));
        }
        let class = req.class;
        self.requests.remove(&seq);
        self.ids.remove(id);
        self.admitted.retain(|&s| s != seq);
        self.in_flight = self.in_flight.saturating_sub(1);
        match class {
            Class::Call => self.calls_in_flight = self.calls_in_flight.saturating_sub(1),
            Class::Control => self.control_in_flight = false,
            Class::Request | Class::Reentrant => {}
        }
        self.admit_waiting();
        Ok(())
    }

    /// A queued request gave up (its deadline passed); it consumed nothing.
    pub fn abandon(&mut self, id: &str) -> Result<(), AdmissionError> {
        let seq = self.seq(id)?;
        if self.requests.get(&seq).is_some_and(|r| r.admitted) {
            return Err(error(
                AdmissionErrorCode::NotQueued,
                format!("request {id:?} is in flight; end it instead"),
            ));
        }
        self.requests.remove(&seq);
        self.ids.remove(id);
        self.queue.retain(|&s| s != seq);
        Ok(())
    }

    /// Refuses all further work, then reports what is in flight (to cancel) and what was
    /// queued (refused). Idempotent: a second call reports nothing new.
    pub fn shutdown(&mut self) -> ShutdownReport {
        self.shut_down = true;
        let refused: Vec<String> = self
            .queue
            .drain(..)
            .filter_map(|seq| self.requests.remove(&seq))
            .map(|r| r.id)
            .collect();
        for id in &refused {
            self.ids.remove(id);
        }
        let cancel = std::mem::take(&mut self.admitted)
            .into_iter()
            .filter_map(|seq| self.requests.get(&seq).map(|r| r.id.clone()))
            .collect();
        ShutdownReport { cancel, refused }
    }

    /// Drains the requests admitted since the last call, in admission order.
    pub fn next_admissions(&mut self) -> Vec<String> {
        std::mem::take(&mut self.out)
    }

    fn seq(&self, id: &str) -> Result<u64, AdmissionError> {
        self.ids.get(id).copied().ok_or_else(|| unknown(id))
    }

    fn check_parent(
        &self,
        id: &str,
        class: Class,
        parent: Option<&str>,
    ) -> Result<Option<u64>, AdmissionError> {
        let Some(parent) = parent else {
            if class == Class::Reentrant {
                return Err(error(
                    AdmissionErrorCode::InvalidParent,
                    format!("re-entrant call {id:?} needs the in-flight call it descends from"),
                ));
            }
            return Ok(None);
        };
        if class != Class::Reentrant {
            return Err(error(
                AdmissionErrorCode::InvalidParent,
                format!(
                    "only a re-entrant call has a parent; {id:?} is a {}",
                    class.name()
                ),
            ));
        }
        let seq = self.ids.get(parent).copied();
        let req = seq.and_then(|s| self.requests.get(&s));
        let Some((seq, req)) = seq.zip(req) else {
            return Err(error(
                AdmissionErrorCode::InvalidParent,
                format!("parent {parent:?} is not in flight"),
            ));
        };
        if !req.admitted || !matches!(req.class, Class::Call | Class::Reentrant) {
            return Err(error(
                AdmissionErrorCode::InvalidParent,
                format!("parent {parent:?} is not an in-flight tool call"),
            ));
        }
        // The ancestors hold their slots until this call returns: if they hold them all, it
        // never can.
        let mut ancestors = 0u32;
        let mut cursor = Some(seq);
        while let Some(s) = cursor {
            let Some(r) = self.requests.get(&s).filter(|r| r.admitted) else {
                break;
            };
            ancestors += 1;
            cursor = r.parent;
        }
        if ancestors >= self.budget {
            return Err(error(
                AdmissionErrorCode::WouldDeadlock,
                format!(
                    "re-entrant call {id:?} would wait forever: its {ancestors} in-flight \
                     ancestors hold the whole budget of {}",
                    self.budget
                ),
            ));
        }
        Ok(Some(seq))
    }

    /// Admits waiting requests in arrival order, each as soon as its class allows.
    fn admit_waiting(&mut self) {
        let mut i = 0;
        while i < self.queue.len() && self.in_flight < self.budget {
            let Some(&seq) = self.queue.get(i) else {
                break;
            };
            let Some(class) = self.requests.get(&seq).map(|r| r.class) else {
                self.queue.remove(i);
                continue;
            };
            let allowed = match class {
                Class::Call => self.allow_parallel || self.calls_in_flight == 0,
                Class::Control => !self.control_in_flight,
                Class::Request | Class::Reentrant => true,
            };
            if !allowed {
                i += 1;
                continue;
            }
            self.queue.remove(i);
            self.in_flight += 1;
            match class {
                Class::Call => self.calls_in_flight += 1,
                Class::Control => self.control_in_flight = true,
                Class::Request | Class::Reentrant => {}
            }
            if let Some(req) = self.requests.get_mut(&seq) {
                req.admitted = true;
                self.out.push(req.id.clone());
            }
            self.admitted.push(seq);
        }
    }
}

fn unknown(id: &str) -> AdmissionError {
    error(
        AdmissionErrorCode::UnknownRequest,
        format!("no request in flight or queued has id {id:?}"),
    )
}
