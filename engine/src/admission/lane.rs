//! A lane: tickets in the order they joined, with lazy removal, in place of an ordered set.
//!
//! A member leaves by [`Lane::remove`], which only counts it out and drops dead tickets from the
//! front; the others stay in place until they reach the front or the lane is compacted. Whether
//! a ticket is still a member is read from the request's own state (the `live` predicate the
//! caller passes), so the front is always a live member, each ticket is pushed and dropped
//! once, and the lane holds at most twice its live members (plus a few): O(1) amortized per
//! operation. The lanes whose tickets join in ticket order (the waiting queues: tickets are
//! handed out in increasing order) are ordered sets with O(1) `first`.

use std::collections::VecDeque;

use super::Ticket;

/// Tickets in joining order, with lazy removal. See the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct Lane {
    tickets: VecDeque<u64>,
    /// Live members; `tickets` holds these and dead ones.
    live: usize,
}

impl Lane {
    /// Live members.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// The earliest live member.
    pub(super) fn first(&self) -> Option<Ticket> {
        self.tickets.front().copied().map(Ticket)
    }

    /// Adds `ticket` at the back.
    pub(super) fn push(&mut self, ticket: Ticket) {
        self.tickets.push_back(ticket.0);
        self.live += 1;
    }

    /// Adds `ticket`, later than every ticket in the lane, at the back: the lane stays ordered.
    pub(super) fn push_newest(&mut self, ticket: Ticket) {
        debug_assert!(
            self.tickets.back().is_none_or(|&last| last < ticket.0),
            "ticket {ticket:?} joined out of order (or twice)"
        );
        self.push(ticket);
    }

    /// Whether `ticket` is in an ordered lane, live or not (for assertions).
    pub(super) fn holds(&self, ticket: Ticket) -> bool {
        self.tickets.binary_search(&ticket.0).is_ok()
    }

    /// Counts member `ticket` out. `live` tells whether another ticket of the lane is still a
    /// member (it may still say so of `ticket`, which the caller is taking out).
    pub(super) fn remove(&mut self, ticket: Ticket, live: &dyn Fn(Ticket) -> bool) {
        debug_assert!(self.live > 0, "removed {ticket:?} from an empty lane");
        self.live = self.live.saturating_sub(1);
        let member = |t: u64| t != ticket.0 && live(Ticket(t));
        while self.tickets.front().is_some_and(|&t| !member(t)) {
            self.tickets.pop_front();
        }
        // Dead tickets outnumber live ones: at least as many removals as the lane now holds
        // were counted since the last compaction, which pays for this one.
        if self.tickets.len() > 2 * self.live + 16 {
            self.tickets.retain(|&t| member(t));
            debug_assert_eq!(self.tickets.len(), self.live);
        }
    }

    /// Whether the dead tickets are within bounds (for tests).
    #[cfg(test)]
    pub(super) fn bounded(&self) -> bool {
        self.tickets.len() <= 2 * self.live + 16
    }

    /// Empties the lane, appending its live members to `out` in order.
    pub(super) fn take_into(&mut self, out: &mut Vec<u64>, live: &dyn Fn(Ticket) -> bool) {
        self.live = 0;
        let tickets = std::mem::take(&mut self.tickets);
        out.extend(tickets.into_iter().filter(|&t| live(Ticket(t))));
    }
}

/// Lazy removal under churn: dead tickets behind a stuck head are compacted away (the lanes stay
/// within twice their live members, plus a few), and the order survives compaction.
#[cfg(test)]
mod tests {
    use super::super::{Admission, AdmissionConfig, Class, Ticket};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    const CHURN: usize = 1000;

    fn admission(max_concurrent: u32) -> Admission {
        Admission::new(AdmissionConfig {
            max_concurrent,
            allow_parallel: false,
        })
    }

    fn begin(a: &mut Admission, id: &str, class: Class, parent: Option<Ticket>) -> Ticket {
        a.begin(id, class, parent).expect("begin")
    }

    #[test]
    fn waiting_lanes_compact_behind_a_stuck_head() {
        let mut a = admission(1);
        let call = begin(&mut a, "call", Class::Call, None);
        assert_eq!(a.next_admissions(), [call]);
        let head = begin(&mut a, "head", Class::Call, None);
        let head_control = begin(&mut a, "head-control", Class::Control, None);
        let head_request = begin(&mut a, "head-request", Class::Request, None);
        let mut last = Vec::new();
        for i in 0..CHURN {
            let ts = [
                begin(&mut a, &format!("c{i}"), Class::Call, None),
                begin(&mut a, &format!("k{i}"), Class::Control, None),
                begin(&mut a, &format!("r{i}"), Class::Request, None),
            ];
            if i + 1 == CHURN {
                last = ts.to_vec();
            } else {
                ts.iter().for_each(|&t| a.abandon(t).expect("abandon"));
            }
            assert!(a.calls.bounded());
            assert!(a.controls.bounded());
            assert!(a.requests_waiting.bounded());
        }
        assert!(a.next_admissions().is_empty());
        a.end(call).expect("end");
        // Budget 1: the earliest waiter, then each in arrival order as the one before ends.
        let mut order = Vec::new();
        while let [t] = a.next_admissions()[..] {
            order.push(t);
            a.end(t).expect("end");
        }
        assert_eq!(
            order,
            [head, head_control, head_request, last[0], last[1], last[2]]
        );
    }

    #[test]
    fn undrained_and_drained_compact() {
        let mut a = admission(3);
        let first = begin(&mut a, "first", Class::Request, None);
        assert_eq!(a.next_admissions(), [first]);
        let held = begin(&mut a, "held", Class::Request, None);
        for i in 0..CHURN {
            let t = begin(&mut a, &format!("u{i}"), Class::Request, None);
            a.abandon(t).expect("abandon");
            let t = begin(&mut a, &format!("d{i}"), Class::Request, None);
            assert!(a.undrained.bounded());
            if i % 10 == 0 {
                a.end(t).expect("end undrained");
            } else {
                assert_eq!(a.next_admissions(), [held, t][usize::from(i > 1)..]);
                a.end(t).expect("end drained");
            }
            assert!(a.drained.bounded());
        }
        let last = begin(&mut a, "last", Class::Request, None);
        let report = a.shutdown();
        assert_eq!(report.cancel, [first, held]);
        assert_eq!(report.refused, [last]);
        a.end(first).expect("end after shutdown");
        a.end(held).expect("end after shutdown");
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn ready_waiters_orphans_and_hanging_calls_compact() {
        // Budget 2: the root call and a read fill it, so re-entrant calls under the root wait.
        let mut a = admission(2);
        let root = begin(&mut a, "root", Class::Call, None);
        let read = begin(&mut a, "read", Class::Request, None);
        assert_eq!(a.next_admissions(), [root, read]);
        let mut kept = Vec::new();
        for i in 0..CHURN {
            let t = begin(&mut a, &format!("w{i}"), Class::Reentrant, Some(root));
            if i % 10 == 0 {
                kept.push(t);
            } else {
                a.abandon(t).expect("abandon ready");
            }
            assert!(a.serial.bounded());
        }
        // The root ends: every waiter below it is an orphan, and the read leaves room for one.
        a.end(root).expect("end root");
        assert_eq!(a.next_admissions(), [kept[0]]);
        // Abandon the others from the latest down, so the earliest stays on top and the dead
        // pile up below it.
        for &t in kept[2..].iter().rev() {
            a.abandon(t).expect("abandon orphan");
            assert!(a.serial.bounded());
        }
        let survivor = kept[1];
        for i in 0..CHURN {
            // More waiters below the admitted orphan, in and out.
            let t = begin(&mut a, &format!("o{i}"), Class::Reentrant, Some(kept[0]));
            assert!(a.next_admissions().is_empty());
            a.abandon(t).expect("abandon");
            assert!(a.serial.bounded());
        }
        assert!(a.serial.bounded());
        a.end(kept[0]).expect("end orphan");
        assert_eq!(a.next_admissions(), [survivor]);
        a.end(survivor).expect("end");
        a.end(read).expect("end");
        assert_eq!(a.in_flight(), 0);
    }
}
