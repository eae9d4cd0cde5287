//! Admission per binding: which requests on one shared MCP connection may be in flight at once.
//!
//! # Rules
//!
//! - Four classes: [`Class::Call`] (a tool call, may have effects), [`Class::Request`] (reads),
//!   [`Class::Control`] (lifecycle, auth, catalog refresh) and [`Class::Reentrant`] (a tool call
//!   issued from a sampling handler while the call it descends from is in flight). Calls and
//!   re-entrant calls are the *tool calls*.
//! - *In flight* means admitted, whether or not the host has drained the admission yet; in-flight
//!   requests hold a place in the budget and their class's lock until they end.
//! - `max_concurrent` bounds the requests in flight over every class; below 1 it is clamped to 1
//!   (a budget of zero would block forever). Requests are bounded by the budget only; control
//!   operations run one at a time.
//! - Without `allow_parallel`, a call is admitted only when no tool call is in flight. A
//!   re-entrant call with an ancestor in flight (its parent, or any call up its line of parents,
//!   ended links skipped) is admitted without the serializer, bounded by the budget only, as the
//!   seed says: the ancestor holds the serializer and waits for it. Its siblings, and their
//!   nested calls, likewise: together they count against the budget. A re-entrant call whose
//!   ancestors have all ended is serialized like a call (nothing waits for it any more). So the
//!   tool calls in flight all descend from one call (through their parents, ended ones
//!   included), and a call waits for all of them, re-entrant calls whose ancestors ended
//!   included. (The Go original takes no lock for a re-entrant call, so there a call could run
//!   next to one whose ancestors had ended.) With `allow_parallel`, tool calls are bounded by the
//!   budget only.
//! - A re-entrant call names its parent: a tool call in flight. Its parent, the parent's parent
//!   while that is in flight, and so on up to the first ended link, are waiting for it (each
//!   waits for its sampling round-trip). When they hold the whole budget it could never be
//!   admitted, so [`Admission::begin`] fails at once with [`BeginErrorCode::WouldDeadlock`]. A
//!   call above an ended link no longer waits on this one and does not count. (Calls that are
//!   not one line, siblings or unrelated calls under `allow_parallel`, can still fill the budget
//!   while each waits on a nested call of its own; as in the Go original, only the host's
//!   deadlines break that.)
//! - [`Admission::begin`] returns a [`Ticket`] no other request of the controller ever gets; the
//!   request id only has to be unique among live requests, and names the request in messages.
//!   [`end`](Admission::end) and [`abandon`](Admission::abandon) take the ticket, so a stale or
//!   repeated ticket is [`EndErrorCode::UnknownRequest`] and touches no other request.
//! - Tickets of two controllers do not coincide in practice: a controller made
//!   [`with_tag`](Admission::with_tag) numbers its tickets upward from a base derived from the
//!   host's tag, a random `u64` per controller, so two controllers' ranges are 2^63 wide apart
//!   at random. A ticket below the base or beyond the last one handed out was not handed out by
//!   this controller: `unknown-request` for `end` and `abandon`, `invalid-parent` as a parent,
//!   and nothing else is looked at. [`Admission::new`] is tag 0: tickets 1, 2, 3, ...
//! - A request that gives up before the host learned it was admitted
//!   ([`abandon`](Admission::abandon): queued, or admitted but not drained) consumes nothing: an
//!   admitted one is taken back out of [`next_admissions`](Admission::next_admissions) and
//!   returns its place and lock, as if never admitted. A drained one must be ended instead.
//! - [`Admission::shutdown`] refuses new work first, then reports every drained request in flight
//!   for the host to cancel (each still needs its `end`), and as refused every queued request and
//!   every admission not yet drained (the host never started those; their tickets retire).
//!   Nothing it reports is admitted or drained afterwards. A second shutdown reports nothing.
//! - Every error changes nothing. At most [`REQUESTS_MAX`] requests are live (queued or in
//!   flight); ids are 1 to [`NAME_BYTES_MAX`] bytes.
//!
//! # Order
//!
//! Whenever the budget has room, the earliest-arrived waiter whose class allows it is admitted,
//! then the next, until the budget is full or no waiter is allowed: first-come first-served
//! within what each class allows. A blocked class never blocks another. Nor does a re-entrant
//! call waiting for the serializer (its ancestors ended) block one with an ancestor in flight:
//! with nested sampling, `b` may wait for the serializer while `a`, in flight, waits for its
//! own nested call `a1`; a strict FIFO that kept `a1` behind `b` would deadlock. `a1` is
//! admitted as soon as the budget allows, and `b` once no tool call is in flight.
//!
//! Unlike the Go original, which made no ordering promise, the order is deterministic: the same
//! inputs always admit the same requests in the same order.
//!
//! # Call order
//!
//! Inputs are [`begin`](Admission::begin), [`end`](Admission::end),
//! [`abandon`](Admission::abandon) and [`shutdown`](Admission::shutdown); each returns an error
//! and changes nothing, or changes state. Every admission, including one that happens inside
//! `begin`, is then drained from [`next_admissions`](Admission::next_admissions) in admission
//! order; drain after every input (or group of inputs) and start what it returns. A ticket that
//! was ended or abandoned before the drain is not reported. [`id`](Admission::id),
//! [`in_flight`](Admission::in_flight) and [`budget`](Admission::budget) are queries.
//!
//! # Cost
//!
//! `begin`, `end` and `abandon` cost O(1) amortized (hash look-ups), plus as much for each request
//! they admit, and O(log n) for n live requests where a re-entrant call waits as an orphan: waiters
//! sit in lanes per class in arrival (ticket) order with lazy removal (`lane.rs`), and only the
//! head of each is looked at. `would-deadlock` is answered from counters in O(1). When a tool call
//! ends while k tool calls it issued are still in flight or waiting, they move below its nearest
//! in-flight ancestor: O(k) amortized more, plus O(log n) for each that becomes an orphan (see
//! `serial.rs`); in the usual nesting k is 0. `shutdown` sorts what it reports.

mod error;
mod lane;
mod lifecycle;
mod method;
mod serial;
#[cfg(test)]
mod tests;

pub use error::{
    AbandonError, AbandonErrorCode, BeginError, BeginErrorCode, EndError, EndErrorCode,
};
pub use method::class_of_method;

use crate::fx::FxHashMap;
use crate::limits::{NAME_BYTES_MAX, REQUESTS_MAX};
use lane::Lane;
use lifecycle::{Request, State};
use serial::Serializer;

/// A request's ticket: unique over the controller's whole life, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// The kind of work a request is, which decides its serialization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// A tool call: serialized against other tool calls unless the binding allows parallelism.
    Call,
    /// Any other server request (a resource read, a prompt): bounded by the budget only.
    Request,
    /// Lifecycle, auth, catalog refresh: one at a time.
    Control,
    /// A tool call from within a sampling handler; names the in-flight tool call it descends
    /// from.
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

/// What [`Admission::shutdown`] hands the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Drained requests in flight, to cancel, in admission order. Each still needs its `end`.
    pub cancel: Vec<Ticket>,
    /// Queued requests and undrained admissions, in arrival order: they never run, and their
    /// tickets are retired.
    pub refused: Vec<Ticket>,
}

/// The admission controller of one binding. See the [module docs](self).
#[derive(Debug)]
pub struct Admission {
    budget: u32,
    allow_parallel: bool,
    shut_down: bool,
    /// Every live request by ticket.
    requests: FxHashMap<Ticket, Request>,
    /// Every live request's ticket by id.
    ids: FxHashMap<Box<str>, Ticket>,
    /// Ticket `n` (counting from 1) is `Ticket(ticket_base + n)`; below 2^63, so never wraps.
    ticket_base: u64,
    /// The count of the next ticket: every ticket counted below it was handed out.
    next_ticket: u64,
    /// The next admission number.
    next_seq: u64,
    /// Waiting calls (and, with `allow_parallel`, re-entrant calls), by arrival: members while
    /// queued.
    calls: Lane,
    /// Waiting requests of class `Request`, by arrival: members while queued.
    requests_waiting: Lane,
    /// Waiting control operations, by arrival: members while queued.
    controls: Lane,
    /// Without `allow_parallel`: the tool calls in flight, and waiting re-entrant calls.
    serial: Serializer,
    /// Admitted, not yet drained, in admission order: members while admitted.
    undrained: Lane,
    /// Drained and in flight, in admission order: members while live (drained).
    drained: Lane,
    in_flight: u32,
    control_in_flight: bool,
    /// The in-flight tool calls form a forest, each under its parent when that is in flight:
    /// how many there are, and how many have no child in flight.
    tool_calls_in_flight: u32,
    leaves: u32,
}

impl Admission {
    /// A controller for `config` with tag 0 (tickets 1, 2, 3, ...), clamping the budget to at
    /// least 1. Tests and case files use it; a host with more than one controller uses
    /// [`Admission::with_tag`].
    pub fn new(config: AdmissionConfig) -> Self {
        Self::with_tag(config, 0)
    }

    /// A controller for `config` whose tickets start from a base derived from `tag`, clamping
    /// the budget to at least 1. The engine has no randomness: the host passes a random `u64`
    /// for each controller, so that a ticket of one controller is never taken for a ticket of
    /// another (it is refused as unknown). Two controllers with the same tag number their tickets
    /// alike; tag 0 numbers them 1, 2, 3, ... Nearby tags give unrelated bases.
    pub fn with_tag(config: AdmissionConfig, tag: u64) -> Self {
        Self {
            budget: config.max_concurrent.max(1),
            allow_parallel: config.allow_parallel,
            shut_down: false,
            requests: FxHashMap::default(),
            ids: FxHashMap::default(),
            ticket_base: mix(tag) >> 1,
            next_ticket: 1,
            next_seq: 1,
            calls: Lane::default(),
            requests_waiting: Lane::default(),
            controls: Lane::default(),
            serial: Serializer::default(),
            undrained: Lane::default(),
            drained: Lane::default(),
            in_flight: 0,
            control_in_flight: false,
            tool_calls_in_flight: 0,
            leaves: 0,
        }
    }

    /// The effective budget (after clamping).
    pub fn budget(&self) -> u32 {
        self.budget
    }

    /// Requests in flight now (admitted, drained or not). For tests and diagnostics only.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The id of a live request (queued or in flight).
    pub fn id(&self, ticket: Ticket) -> Option<&str> {
        self.live(ticket).ok().map(|r| &*r.id)
    }

    /// Asks to admit a request and returns its ticket. It is admitted now or queued; either way
    /// its admission is reported by [`Admission::next_admissions`]. `parent` is the ticket of
    /// the in-flight tool call a re-entrant call descends from, and only for those.
    pub fn begin(
        &mut self,
        id: &str,
        class: Class,
        parent: Option<Ticket>,
    ) -> Result<Ticket, BeginError> {
        use BeginErrorCode as E;
        if self.shut_down {
            let message = "the binding is shut down: no further work is admitted".to_owned();
            return Err(BeginError::new(E::Shutdown, message));
        }
        if id.is_empty() || id.len() > NAME_BYTES_MAX {
            let message = format!("a request id must be 1 to {NAME_BYTES_MAX} bytes");
            return Err(BeginError::new(E::InvalidId, message));
        }
        if let Some(live) = self.ids.get(id) {
            let message = format!("request {id:?} is already live as ticket {}", live.0);
            return Err(BeginError::new(E::DuplicateRequest, message));
        }
        if self.requests.len() >= REQUESTS_MAX {
            let message = format!("at most {REQUESTS_MAX} requests are live at once");
            return Err(BeginError::new(E::TooMany, message));
        }
        self.check_parent(id, class, parent)?;
        let ticket = Ticket(self.ticket_base + self.next_ticket);
        self.next_ticket += 1;
        self.enqueue(ticket, id, class, parent);
        self.admit_waiting();
        Ok(ticket)
    }

    /// An admitted request finished, whatever its outcome; its place in the budget and its lock
    /// are returned. An admission not yet drained may be ended too (it is then never reported).
    pub fn end(&mut self, ticket: Ticket) -> Result<(), EndError> {
        let request = self
            .live(ticket)
            .map_err(|message| EndError::new(EndErrorCode::UnknownRequest, message))?;
        if request.state == State::Queued {
            let message = format!(
                "request {:?} (ticket {}) is still queued; abandon it instead",
                request.id, ticket.0
            );
            return Err(EndError::new(EndErrorCode::NotAdmitted, message));
        }
        self.release(ticket);
        self.admit_waiting();
        Ok(())
    }

    /// A request gave up before the host learned it was admitted: queued, or admitted but not
    /// yet drained. It consumed nothing; an admitted one is taken back and others may take its
    /// place.
    pub fn abandon(&mut self, ticket: Ticket) -> Result<(), AbandonError> {
        let request = self
            .live(ticket)
            .map_err(|message| AbandonError::new(AbandonErrorCode::UnknownRequest, message))?;
        match request.state {
            State::Drained => {
                let message = format!(
                    "request {:?} (ticket {}) was reported admitted; end it instead",
                    request.id, ticket.0
                );
                Err(AbandonError::new(AbandonErrorCode::NotQueued, message))
            }
            // Its departure allows nothing new: a waiter never blocks another.
            State::Queued => {
                self.remove_queued(ticket);
                Ok(())
            }
            State::Admitted => {
                self.release(ticket);
                self.admit_waiting();
                Ok(())
            }
        }
    }

    /// Refuses all further work, then reports what is in flight (to cancel) and what will never
    /// run (refused). Idempotent: a second call reports nothing.
    pub fn shutdown(&mut self) -> ShutdownReport {
        if self.shut_down {
            return ShutdownReport::default();
        }
        self.shut_down = true;
        let refused = self.refuse_all();
        // In admission order, as `drained` holds them (no sort).
        let mut cancel = Vec::with_capacity(self.drained.len());
        let requests = &self.requests;
        self.drained
            .take_into(&mut cancel, &|t| requests.contains_key(&t));
        // They stay in flight until ended.
        for &ticket in &cancel {
            self.drained.push(Ticket(ticket));
        }
        debug_assert_eq!(self.undrained.len(), 0);
        debug_assert_eq!(cancel.len(), self.in_flight as usize);
        debug_assert!(
            cancel
                .windows(2)
                .all(|w| self.requests[&Ticket(w[0])].seq < self.requests[&Ticket(w[1])].seq),
            "cancel out of admission order"
        );
        ShutdownReport {
            cancel: cancel.into_iter().map(Ticket).collect(),
            refused,
        }
    }

    /// Drains the tickets admitted since the last call, in admission order.
    pub fn next_admissions(&mut self) -> Vec<Ticket> {
        self.drain()
    }

    /// The live request with `ticket`, or why there is none (a message): a ticket this
    /// controller never handed out (another controller's, or not yet issued) is told apart
    /// from a stale one, and only a ticket it handed out is looked up.
    fn live(&self, ticket: Ticket) -> Result<&Request, String> {
        let handed_out = ticket
            .0
            .checked_sub(self.ticket_base)
            .is_some_and(|n| n >= 1 && n < self.next_ticket);
        if !handed_out {
            return Err(format!(
                "ticket {} was not handed out by this controller",
                ticket.0
            ));
        }
        let request = self.requests.get(&ticket);
        request.ok_or_else(|| format!("no live request has ticket {}", ticket.0))
    }

    /// Checks a re-entrant call's parent (and that only re-entrant calls have one), then that
    /// the calls waiting on it leave room in the budget.
    fn check_parent(
        &self,
        id: &str,
        class: Class,
        parent: Option<Ticket>,
    ) -> Result<(), BeginError> {
        use BeginErrorCode as E;
        let parent = match (class, parent) {
            (Class::Reentrant, Some(parent)) => parent,
            (Class::Reentrant, None) => {
                let message =
                    format!("re-entrant call {id:?} needs the in-flight call it descends from");
                return Err(BeginError::new(E::InvalidParent, message));
            }
            (_, None) => return Ok(()),
            (_, Some(_)) => {
                let message = format!(
                    "only a re-entrant call has a parent; {id:?} is a {}",
                    class.name()
                );
                return Err(BeginError::new(E::InvalidParent, message));
            }
        };
        let request = self
            .live(parent)
            .map_err(|why| BeginError::new(E::InvalidParent, format!("parent of {id:?}: {why}")))?;
        if !request.in_flight() || !matches!(request.class, Class::Call | Class::Reentrant) {
            let message = format!(
                "parent {:?} of {id:?} is not a tool call in flight (it is a {} {})",
                request.id,
                if request.in_flight() {
                    "in-flight"
                } else {
                    "queued"
                },
                request.class.name()
            );
            return Err(BeginError::new(E::InvalidParent, message));
        }
        if self.would_deadlock(parent) {
            let message = format!(
                "re-entrant call {id:?} would wait forever: the calls waiting on it hold the \
                 whole budget of {}",
                self.budget
            );
            return Err(BeginError::new(E::WouldDeadlock, message));
        }
        Ok(())
    }

    /// True when a re-entrant call under in-flight tool call `parent` could never be admitted:
    /// `parent` and its unbroken line of in-flight ancestors hold the whole budget.
    ///
    /// That line counts at most every request in flight, so it holds the budget exactly when the
    /// budget is full, every request in flight is a tool call, and they form one line ending at
    /// `parent`: the forest of in-flight tool calls (each under its parent when that is in
    /// flight) has a single leaf (so a single tree, a line), and `parent` has no child. Counters
    /// make that O(1).
    fn would_deadlock(&self, parent: Ticket) -> bool {
        let Some(request) = self.requests.get(&parent) else {
            return false;
        };
        let full = self.in_flight == self.budget
            && self.tool_calls_in_flight == self.in_flight
            && self.leaves == 1
            && request.kids == 0;
        debug_assert_eq!(full, self.line_above(parent) >= self.budget);
        debug_assert!(
            self.allow_parallel || self.serial.len() == self.tool_calls_in_flight as usize
        );
        full
    }

    /// `ticket` and its ancestors while in flight, counted by walking up (for the paired
    /// assertion only).
    fn line_above(&self, ticket: Ticket) -> u32 {
        let mut count = 0;
        let mut cursor = Some(ticket);
        while let Some(request) = cursor.and_then(|t| self.requests.get(&t)) {
            if !request.in_flight() {
                break;
            }
            count += 1;
            cursor = request.parent;
        }
        count
    }
}

/// The splitmix64 finalizer: a bijection on `u64` that spreads nearby tags far apart and keeps
/// 0 at 0.
fn mix(tag: u64) -> u64 {
    let mut z = tag;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
