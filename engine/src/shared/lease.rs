//! The lease schedule of one shared-key client (`SharedKeys` in a host): a sans-IO machine that
//! says when to renew each ticket's lease at the store and when to give a ticket up, because its
//! lease could end at the store before another renewal lands.
//!
//! A ticket's lease at the store ends no sooner than `lease_ms` after the store received the
//! request or renewal that last extended it, and the store received it after the host sent it.
//! So the schedule counts a ticket's lease from when the host *sent* its last renewal that the
//! store confirmed (or its request), never from the confirmation:
//!
//! - `period = lease / 3`: a ticket is renewed `period` after its last attempt (sent), one
//!   renewal per key naming every ticket of the key that has none in flight (at most
//!   [`RENEW_TICKETS_MAX`] each); a failed renewal is tried again a period after it was sent.
//! - A ticket is given up at `confirmed + lease - period / 2`, whatever is in flight: so a ticket
//!   survives one failed (or unanswered) renewal, and is given up half a period before the store
//!   could end its lease. The host tells its execution to stop, and the store cannot grant the
//!   place to anyone else while this process believes it holds it.
//!
//! Methods come in three kinds. Reports: [`LeaseSchedule::requested`] (a request was sent),
//! [`LeaseSchedule::answered`] (the store answered it: waiting or granted), [`LeaseSchedule::renewed`]
//! / [`LeaseSchedule::renew_failed`] (what became of a renewal), [`LeaseSchedule::remove`] (the
//! host gave the ticket back or the store lost it). The poll: [`LeaseSchedule::poll`] with the
//! host's clock returns the renewals to send now, the tickets given up (with why) and when to
//! poll next; call it after every report and when that time comes. Every refused input changes
//! nothing. Ticket numbers are the host's, counting up (never reused), so a late report about
//! an old ticket can never touch a new one.

use crate::limits::{
    KEY_BYTES_MAX, LEASE_MS_MAX, LEASE_MS_MIN, LEASE_TICKETS_MAX, RENEW_TICKETS_MAX,
};

/// The lease schedule of one client (see the module doc).
#[derive(Clone, Debug)]
pub struct LeaseSchedule {
    lease_ms: u64,
    period_ms: u64,
    /// The latest time the host gave; an earlier one is refused.
    clock_ms: u64,
    /// The highest ticket number requested so far.
    last_ticket: Option<u64>,
    /// Live tickets by number, ascending (numbers only grow, so a new one goes last). Sorted
    /// vectors rather than maps: a client holds a few tickets, and the component stays small.
    tickets: Vec<(u64, Ticket)>,
    /// Renewals polled and not yet reported, by id, ascending.
    renewals: Vec<(u64, InFlight)>,
    next_renewal: u64,
}

/// A renewal to send now: `renew(key, tickets)` at the store, then
/// [`LeaseSchedule::renewed`] or [`LeaseSchedule::renew_failed`] with its `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// Names the renewal in the report of its outcome.
    pub id: u64,
    /// The key whose tickets it renews.
    pub key: String,
    /// The tickets, in ticket order (1 ..= [`RENEW_TICKETS_MAX`]).
    pub tickets: Vec<u64>,
}

/// A ticket given up: its lease could end at the store before another renewal lands. The host
/// fails its waiter or stops its execution, and forgets it (no [`LeaseSchedule::remove`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GivenUp {
    /// The ticket.
    pub ticket: u64,
    /// Its key.
    pub key: String,
    /// Why no renewal landed in time.
    pub reason: GiveUpReason,
}

codes! {
    /// Why a ticket was given up.
    GiveUpReason {
        /// Its request was never answered.
        RequestUnanswered => "request-unanswered",
        /// Its last renewal failed.
        RenewalFailed => "renewal-failed",
        /// Its last renewal was never answered.
        RenewalUnanswered => "renewal-unanswered",
        /// No renewal was sent in time: the host polled too late.
        NotRenewed => "not-renewed",
    }
}

/// What [`LeaseSchedule::poll`] asks the host to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Poll {
    /// Tickets given up since the last poll, in ticket order.
    pub given_up: Vec<GivenUp>,
    /// Renewals to send now, by key.
    pub renewals: Vec<Renewal>,
    /// When to poll again at the latest (`None`: no tickets, nothing to do until a request).
    pub wake_at_ms: Option<u64>,
}

codes! {
    /// Why the lease schedule refused an input; each means nothing changed.
    LeaseErrorCode {
        /// The lease is not in [`LEASE_MS_MIN`] ..= [`LEASE_MS_MAX`].
        LeaseOutOfRange => "lease-out-of-range",
        /// The key is empty or longer than [`KEY_BYTES_MAX`] bytes.
        InvalidKey => "invalid-key",
        /// The ticket number is not above every number requested before.
        TicketNotNew => "ticket-not-new",
        /// [`LEASE_TICKETS_MAX`] tickets are live already.
        TooMany => "too-many",
        /// No live ticket has this number (never requested, removed or given up).
        UnknownTicket => "unknown-ticket",
        /// The ticket's request was answered already.
        AlreadyAnswered => "already-answered",
        /// No renewal in flight has this id (never polled, or reported already).
        UnknownRenewal => "unknown-renewal",
        /// The time is earlier than one given before.
        ClockWentBack => "clock-went-back",
    }
}

error_type!(
    /// A refused input of the [`LeaseSchedule`]; nothing changed.
    LeaseError,
    LeaseErrorCode
);

#[derive(Clone, Debug)]
struct Ticket {
    key: String,
    /// When the request or renewal the store last confirmed was sent (the request's send time
    /// until then): the lease ends no sooner than this plus the lease.
    confirmed_ms: u64,
    /// When the latest request or renewal was sent.
    attempt_ms: u64,
    /// Whether the request was answered (a ticket is renewed only once it is).
    answered: bool,
    /// The renewal in flight, if any.
    in_flight: Option<u64>,
    /// Whether the latest renewal failed.
    failed: bool,
}

#[derive(Clone, Debug)]
struct InFlight {
    sent_ms: u64,
    tickets: Vec<u64>,
}

impl LeaseSchedule {
    /// A schedule for tickets of `lease_ms` ([`LEASE_MS_MIN`] ..= [`LEASE_MS_MAX`]).
    pub fn new(lease_ms: u32) -> Result<Self, LeaseError> {
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
            return Err(LeaseError::new(
                LeaseErrorCode::LeaseOutOfRange,
                format!("lease {lease_ms} ms is not in {LEASE_MS_MIN} ..= {LEASE_MS_MAX}"),
            ));
        }
        let lease_ms = u64::from(lease_ms);
        Ok(Self {
            lease_ms,
            period_ms: lease_ms / 3,
            clock_ms: 0,
            last_ticket: None,
            tickets: Vec::new(),
            renewals: Vec::new(),
            next_renewal: 1,
        })
    }

    /// The lease every ticket gets.
    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// How often a ticket is renewed: a third of the lease.
    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }

    /// Live tickets (requested, and neither removed nor given up).
    pub fn len(&self) -> usize {
        self.tickets.len()
    }

    /// Whether no ticket is live.
    pub fn is_empty(&self) -> bool {
        self.tickets.is_empty()
    }

    /// The host sent a request for `ticket` on `key` at `now_ms`: its lease counts from now.
    /// It is not renewed until [`Self::answered`], and given up if no answer comes in time.
    pub fn requested(&mut self, key: &str, ticket: u64, now_ms: u64) -> Result<(), LeaseError> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Err(LeaseError::new(
                LeaseErrorCode::InvalidKey,
                format!("key of {} bytes is not in 1 ..= {KEY_BYTES_MAX}", key.len()),
            ));
        }
        if self.last_ticket.is_some_and(|last| ticket <= last) {
            return Err(LeaseError::new(
                LeaseErrorCode::TicketNotNew,
                format!("ticket {ticket} is not above every ticket requested before"),
            ));
        }
        if self.tickets.len() >= LEASE_TICKETS_MAX {
            return Err(LeaseError::new(
                LeaseErrorCode::TooMany,
                format!("{LEASE_TICKETS_MAX} tickets are live already"),
            ));
        }
        self.advance(now_ms)?;
        self.last_ticket = Some(ticket);
        self.tickets.push((
            ticket,
            Ticket {
                key: key.to_owned(),
                confirmed_ms: now_ms,
                attempt_ms: now_ms,
                answered: false,
                in_flight: None,
                failed: false,
            },
        ));
        Ok(())
    }

    /// The store answered `ticket`'s request (it waits or is granted): renewals start a period
    /// after the request was sent. A ticket given up meanwhile is unknown: the host gives it
    /// back and fails its request.
    pub fn answered(&mut self, ticket: u64) -> Result<(), LeaseError> {
        let t = self.ticket_mut(ticket)?;
        if t.answered {
            return Err(LeaseError::new(
                LeaseErrorCode::AlreadyAnswered,
                format!("ticket {ticket} was answered already"),
            ));
        }
        t.answered = true;
        Ok(())
    }

    /// The store confirmed renewal `id`: the lease of each of its tickets still live counts
    /// from when it was sent. (Tickets the store reported lost are the host's to
    /// [`Self::remove`].)
    pub fn renewed(&mut self, id: u64) -> Result<(), LeaseError> {
        self.settle(id, true)
    }

    /// Renewal `id` failed (the store was unreachable, or answered something unexpected): its
    /// tickets are tried again a period after it was sent, and given up when their lease runs
    /// short.
    pub fn renew_failed(&mut self, id: u64) -> Result<(), LeaseError> {
        self.settle(id, false)
    }

    /// The host no longer holds `ticket` (it released, abandoned or withdrew it, or the store
    /// reported it lost).
    pub fn remove(&mut self, ticket: u64) -> Result<(), LeaseError> {
        let at = self.position(ticket)?;
        self.tickets.remove(at);
        Ok(())
    }

    /// What to do at `now_ms`: the tickets given up (their lease could end before a renewal
    /// lands), the renewals to send now (recorded as sent now), and when to poll again.
    pub fn poll(&mut self, now_ms: u64) -> Result<Poll, LeaseError> {
        self.advance(now_ms)?;
        let mut out = Poll {
            given_up: self.give_up(now_ms),
            ..Poll::default()
        };
        self.renew(now_ms, &mut out.renewals);
        out.wake_at_ms = self.tickets.iter().map(|(_, t)| self.wake_ms(t)).min();
        Ok(out)
    }

    /// Removes and returns the tickets whose give-up time has come.
    fn give_up(&mut self, now_ms: u64) -> Vec<GivenUp> {
        let mut given_up = Vec::new();
        let period_ms = self.period_ms;
        let lease_ms = self.lease_ms;
        self.tickets.retain(|(number, t)| {
            if now_ms < give_up_ms(t, lease_ms, period_ms) {
                return true;
            }
            let reason = match (t.answered, t.in_flight.is_some(), t.failed) {
                (false, _, _) => GiveUpReason::RequestUnanswered,
                (true, true, _) => GiveUpReason::RenewalUnanswered,
                (true, false, true) => GiveUpReason::RenewalFailed,
                (true, false, false) => GiveUpReason::NotRenewed,
            };
            given_up.push(GivenUp {
                ticket: *number,
                key: t.key.clone(),
                reason,
            });
            false
        });
        given_up
    }

    /// One renewal per key with a ticket due, naming every ticket of the key that can be
    /// renewed (answered, none in flight), in chunks of [`RENEW_TICKETS_MAX`].
    fn renew(&mut self, now_ms: u64, out: &mut Vec<Renewal>) {
        // Keys with a ticket due, kept in key order (a sorted insert: no sort's code).
        let mut due: Vec<(String, Vec<u64>)> = Vec::new();
        for (_, t) in &self.tickets {
            if renewable(t)
                && now_ms >= t.attempt_ms.saturating_add(self.period_ms)
                && let Err(at) = due.binary_search_by(|(key, _)| key.as_str().cmp(&t.key))
            {
                due.insert(at, (t.key.clone(), Vec::new()));
            }
        }
        for (number, t) in &self.tickets {
            if renewable(t)
                && let Ok(at) = due.binary_search_by(|(key, _)| key.as_str().cmp(&t.key))
            {
                due[at].1.push(*number);
            }
        }
        for (key, numbers) in due {
            for chunk in numbers.chunks(RENEW_TICKETS_MAX) {
                let id = self.next_renewal;
                self.next_renewal += 1;
                for (number, t) in &mut self.tickets {
                    if chunk.binary_search(number).is_ok() {
                        t.in_flight = Some(id);
                        t.attempt_ms = now_ms;
                    }
                }
                let tickets = chunk.to_vec();
                self.renewals.push((
                    id,
                    InFlight {
                        sent_ms: now_ms,
                        tickets: tickets.clone(),
                    },
                ));
                out.push(Renewal {
                    id,
                    key: key.clone(),
                    tickets,
                });
            }
        }
    }

    /// The ticket's next deadline: its give-up, or its next renewal when sooner.
    fn wake_ms(&self, t: &Ticket) -> u64 {
        let give_up = give_up_ms(t, self.lease_ms, self.period_ms);
        if renewable(t) {
            give_up.min(t.attempt_ms.saturating_add(self.period_ms))
        } else {
            give_up
        }
    }

    fn advance(&mut self, now_ms: u64) -> Result<(), LeaseError> {
        if now_ms < self.clock_ms {
            return Err(LeaseError::new(
                LeaseErrorCode::ClockWentBack,
                format!("time {now_ms} is before {} given earlier", self.clock_ms),
            ));
        }
        self.clock_ms = now_ms;
        Ok(())
    }

    fn position(&self, ticket: u64) -> Result<usize, LeaseError> {
        self.tickets
            .binary_search_by_key(&ticket, |(number, _)| *number)
            .map_err(|_| {
                LeaseError::new(
                    LeaseErrorCode::UnknownTicket,
                    format!("no live ticket {ticket} (never requested, removed or given up)"),
                )
            })
    }

    fn ticket_mut(&mut self, ticket: u64) -> Result<&mut Ticket, LeaseError> {
        let at = self.position(ticket)?;
        Ok(&mut self.tickets[at].1)
    }

    /// Ends renewal `id`: its tickets still live and still waiting on it count their lease
    /// from its send time when `confirmed`, or are marked failed.
    fn settle(&mut self, id: u64, confirmed: bool) -> Result<(), LeaseError> {
        let at = self
            .renewals
            .binary_search_by_key(&id, |(id, _)| *id)
            .map_err(|_| {
                LeaseError::new(
                    LeaseErrorCode::UnknownRenewal,
                    format!("no renewal {id} in flight (never polled, or reported already)"),
                )
            })?;
        let (_, renewal) = self.renewals.remove(at);
        for number in &renewal.tickets {
            if let Ok(at) = self.position(*number)
                && let t = &mut self.tickets[at].1
                && t.in_flight == Some(id)
            {
                t.in_flight = None;
                t.failed = !confirmed;
                if confirmed {
                    t.confirmed_ms = t.confirmed_ms.max(renewal.sent_ms);
                }
            }
        }
        Ok(())
    }
}

fn renewable(t: &Ticket) -> bool {
    t.answered && t.in_flight.is_none()
}

/// Half a period before the lease could end at the store.
fn give_up_ms(t: &Ticket, lease_ms: u64, period_ms: u64) -> u64 {
    t.confirmed_ms
        .saturating_add(lease_ms)
        .saturating_sub(period_ms / 2)
}
