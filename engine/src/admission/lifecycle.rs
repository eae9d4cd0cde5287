//! The only place a request's state changes, and the admission pass.
//!
//! ```text
//! begin ─▶ Queued ──admit──▶ Admitted ──next_admissions──▶ Drained
//!            │                  │                            │
//!     abandon, shutdown   end, abandon, shutdown            end
//!            ▼                  ▼                            ▼
//!          gone               gone                         gone
//! ```
//!
//! `Admitted` and `Drained` are both in flight: they hold a place in the budget and their
//! class's lock. A request that is gone is forgotten; its ticket is never handed out again.

use super::{Admission, Class, Ticket};

/// Where a live request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Waiting for the budget or its class.
    Queued,
    /// In flight; the host has not drained it from `next_admissions` yet.
    Admitted,
    /// In flight, and the host was told.
    Drained,
}

/// A live request.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) id: Box<str>,
    pub(super) class: Class,
    pub(super) state: State,
    /// The parent's ticket (re-entrant calls).
    pub(super) parent: Option<Ticket>,
    /// This request's admission number, once admitted: admission order.
    pub(super) seq: u64,
    /// In-flight tool calls whose parent this is (while in flight).
    pub(super) kids: u32,
}

impl Request {
    pub(super) fn in_flight(&self) -> bool {
        matches!(self.state, State::Admitted | State::Drained)
    }
}

impl Admission {
    /// A new request, queued where its class waits. Its validity was checked by `begin`.
    pub(super) fn enqueue(
        &mut self,
        ticket: Ticket,
        id: &str,
        class: Class,
        parent: Option<Ticket>,
    ) {
        let request = Request {
            id: id.into(),
            class,
            state: State::Queued,
            parent,
            seq: 0,
            kids: 0,
        };
        self.requests.insert(ticket, request);
        self.ids.insert(id.into(), ticket);
        match (class, parent) {
            (Class::Reentrant, Some(parent)) if !self.allow_parallel => {
                self.serial.wait(ticket, parent);
            }
            (Class::Call | Class::Reentrant, _) => self.calls.push_newest(ticket),
            (Class::Request, _) => self.requests_waiting.push_newest(ticket),
            (Class::Control, _) => self.controls.push_newest(ticket),
        }
    }

    /// Admits, while the budget has room, the earliest-arrived waiter its class allows.
    pub(super) fn admit_waiting(&mut self) {
        if self.shut_down {
            return;
        }
        while self.in_flight < self.budget {
            let Some(ticket) = self.next_waiter() else {
                break;
            };
            self.withdraw(ticket);
            self.admit(ticket);
        }
    }

    /// The earliest-arrived waiter that its class allows now, if any.
    fn next_waiter(&self) -> Option<Ticket> {
        let calls_allowed = self.allow_parallel || self.serial.is_idle();
        [
            self.calls.first().filter(|_| calls_allowed),
            self.requests_waiting.first(),
            self.controls.first().filter(|_| !self.control_in_flight),
        ]
        .into_iter()
        .flatten()
        .chain(self.serial.candidate())
        .min()
    }

    /// Takes a queued request out of its queue (to admit it or abandon it).
    fn withdraw(&mut self, ticket: Ticket) {
        let Some(request) = self.requests.get(&ticket) else {
            debug_assert!(false, "withdrew unknown ticket {ticket:?}");
            return;
        };
        debug_assert_eq!(request.state, State::Queued);
        let requests = &self.requests;
        let queued = |t: Ticket| requests.get(&t).is_some_and(|r| r.state == State::Queued);
        let lane = match request.class {
            Class::Reentrant if !self.allow_parallel => {
                self.serial.withdraw(ticket, &queued);
                return;
            }
            Class::Call | Class::Reentrant => &mut self.calls,
            Class::Request => &mut self.requests_waiting,
            Class::Control => &mut self.controls,
        };
        debug_assert!(
            lane.holds(ticket),
            "ticket {ticket:?} was not waiting where its class waits"
        );
        lane.remove(ticket, &queued);
    }

    /// Queued (and withdrawn) → admitted: takes its place in the budget and its class's lock.
    fn admit(&mut self, ticket: Ticket) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let Some(request) = self.requests.get_mut(&ticket) else {
            debug_assert!(false, "admitted unknown ticket {ticket:?}");
            return;
        };
        // Paired with `release`: each ticket is admitted at most once, and the budget holds.
        debug_assert_eq!(
            request.state,
            State::Queued,
            "ticket {ticket:?} admitted twice"
        );
        debug_assert!(self.in_flight < self.budget, "admitted over the budget");
        request.state = State::Admitted;
        request.seq = seq;
        let (class, parent) = (request.class, request.parent);
        self.in_flight += 1;
        self.undrained.push(ticket);
        match class {
            Class::Request => {}
            Class::Control => {
                debug_assert!(!self.control_in_flight, "two controls in flight");
                self.control_in_flight = true;
            }
            Class::Call | Class::Reentrant => {
                self.link(parent);
                if !self.allow_parallel {
                    self.serial.admit(ticket);
                }
            }
        }
    }

    /// Admitted or drained → gone: returns its place in the budget and its class's lock. The
    /// caller runs the admission pass afterwards (unless shut down).
    pub(super) fn release(&mut self, ticket: Ticket) {
        let Some(request) = self.forget(ticket) else {
            debug_assert!(false, "released unknown ticket {ticket:?}");
            return;
        };
        // Paired with `admit`.
        debug_assert!(request.in_flight(), "released a queued request");
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        // Gone from `requests` already, so no longer a member of either lane.
        let requests = &self.requests;
        let lane = if request.state == State::Admitted {
            &mut self.undrained
        } else {
            &mut self.drained
        };
        lane.remove(ticket, &|t| requests.contains_key(&t));
        match request.class {
            Class::Request => {}
            Class::Control => {
                debug_assert!(self.control_in_flight);
                self.control_in_flight = false;
            }
            Class::Call | Class::Reentrant => {
                self.unlink(&request);
                if !self.allow_parallel {
                    let requests = &self.requests;
                    let queued =
                        |t: Ticket| requests.get(&t).is_some_and(|r| r.state == State::Queued);
                    self.serial.release(ticket, &queued);
                }
            }
        }
    }

    /// Queued → gone.
    pub(super) fn remove_queued(&mut self, ticket: Ticket) {
        self.withdraw(ticket);
        if !self.allow_parallel {
            self.serial.forget(ticket);
        }
        self.forget(ticket);
    }

    /// Queued → gone and admitted (not drained) → gone, for all of them at once (shutdown): the
    /// host never started any of them. Returns their tickets in arrival order.
    pub(super) fn refuse_all(&mut self) -> Vec<Ticket> {
        let mut refused: Vec<u64> = Vec::new();
        let requests = &self.requests;
        let queued = |t: Ticket| requests.get(&t).is_some_and(|r| r.state == State::Queued);
        self.calls.take_into(&mut refused, &queued);
        self.requests_waiting.take_into(&mut refused, &queued);
        self.controls.take_into(&mut refused, &queued);
        self.serial.take_waiting(&mut refused, &queued);
        for &ticket in &refused {
            let request = self.forget(Ticket(ticket));
            debug_assert!(request.is_some_and(|r| r.state == State::Queued));
        }
        // In admission order: the front of `undrained` is always live.
        while let Some(ticket) = self.undrained.first() {
            self.release(ticket);
            refused.push(ticket.0);
        }
        debug_assert_eq!(self.undrained.len(), 0);
        // Sorted as plain numbers: the scheduler's outputs use the same sort, so the component
        // carries one copy of it.
        refused.sort_unstable();
        refused.into_iter().map(Ticket).collect()
    }

    /// Admitted → drained, for everything admitted since the last drain, in admission order.
    pub(super) fn drain(&mut self) -> Vec<Ticket> {
        let mut out = Vec::with_capacity(self.undrained.len());
        let requests = &self.requests;
        let admitted = |t: Ticket| requests.get(&t).is_some_and(|r| r.state == State::Admitted);
        self.undrained.take_into(&mut out, &admitted);
        for &ticket in &out {
            let ticket = Ticket(ticket);
            if let Some(request) = self.requests.get_mut(&ticket) {
                // Paired with `admit`: reported at most once.
                debug_assert_eq!(request.state, State::Admitted, "drained twice");
                request.state = State::Drained;
                // Everything drained before was admitted earlier: admission order holds.
                self.drained.push(ticket);
            }
        }
        out.into_iter().map(Ticket).collect()
    }

    /// Removes a request and its id.
    fn forget(&mut self, ticket: Ticket) -> Option<Request> {
        let request = self.requests.remove(&ticket)?;
        let id = self.ids.remove(&request.id);
        debug_assert_eq!(id, Some(ticket));
        Some(request)
    }

    /// A tool call enters the forest of in-flight tool calls, under its parent if that is in
    /// flight. See [`Admission::would_deadlock`].
    fn link(&mut self, parent: Option<Ticket>) {
        self.tool_calls_in_flight += 1;
        self.leaves += 1;
        if let Some(parent) = parent.and_then(|p| self.requests.get_mut(&p)) {
            debug_assert!(parent.in_flight(), "a parent is always in flight");
            if parent.kids == 0 {
                self.leaves -= 1;
            }
            parent.kids += 1;
        }
    }

    /// A tool call leaves the forest: its in-flight children become roots of their own trees.
    fn unlink(&mut self, request: &Request) {
        debug_assert!(self.tool_calls_in_flight > 0);
        self.tool_calls_in_flight -= 1;
        if request.kids == 0 {
            self.leaves -= 1;
        }
        if let Some(parent) = request.parent.and_then(|p| self.requests.get_mut(&p)) {
            parent.kids -= 1;
            if parent.kids == 0 {
                self.leaves += 1;
            }
        }
    }
}
