//! The `shared` interface: the lease-schedule resource over the engine's [`LeaseSchedule`],
//! and the grant rule, with their conversions. Every decision is the engine's. (The store texts
//! are data the packages ship from `shared/store/`, not the component's.)

use std::cell::RefCell;

use turnstile_engine::shared::grant::{self, Arrival, Decision, GrantError, Head, KeyState};
use turnstile_engine::shared::{GiveUpReason, LeaseError, LeaseErrorCode, LeaseSchedule, Poll};

use crate::Component;
use crate::exports::turnstile::scheduler::shared as wit;

/// The `lease-schedule` resource.
pub struct LeaseScheduleResource {
    inner: RefCell<LeaseSchedule>,
}

impl wit::Guest for Component {
    type LeaseSchedule = LeaseScheduleResource;

    fn decide(
        head: Option<wit::Head>,
        key: wit::KeyState,
        now: u64,
    ) -> Result<wit::Decision, wit::GrantError> {
        let head = head.map(|h| Head {
            limit: h.limit,
            delay_ms: h.delay_ms,
            rates: h.rates.into_iter().map(crate::convert::rate_in).collect(),
            weight: h.weight,
        });
        let key = KeyState {
            held: key.held,
            last_grant_ms: key.last_grant_ms,
            paused_until_ms: key.paused_until_ms,
            arrivals: key
                .arrivals
                .into_iter()
                .map(|a| Arrival {
                    count: a.count,
                    per_ms: a.per_ms,
                    at_ms: a.at_ms,
                    rest: a.rest,
                })
                .collect(),
        };
        grant::decide(head.as_ref(), &key, now)
            .map(decision)
            .map_err(grant_error)
    }
}

impl wit::GuestLeaseSchedule for LeaseScheduleResource {
    fn create(lease_ms: u32) -> Result<wit::LeaseSchedule, wit::LeaseError> {
        let inner = LeaseSchedule::new(lease_ms).map_err(lease_error)?;
        Ok(wit::LeaseSchedule::new(Self {
            inner: RefCell::new(inner),
        }))
    }

    fn requested(&self, key: String, ticket: u64, now: u64) -> Result<(), wit::LeaseError> {
        (self.inner.borrow_mut())
            .requested(&key, ticket, now)
            .map_err(lease_error)
    }

    fn answered(&self, ticket: u64) -> Result<(), wit::LeaseError> {
        self.inner
            .borrow_mut()
            .answered(ticket)
            .map_err(lease_error)
    }

    fn renewed(&self, id: u64) -> Result<(), wit::LeaseError> {
        self.inner.borrow_mut().renewed(id).map_err(lease_error)
    }

    fn renew_failed(&self, id: u64) -> Result<(), wit::LeaseError> {
        self.inner
            .borrow_mut()
            .renew_failed(id)
            .map_err(lease_error)
    }

    fn remove(&self, ticket: u64) -> Result<(), wit::LeaseError> {
        self.inner.borrow_mut().remove(ticket).map_err(lease_error)
    }

    fn poll(&self, now: u64) -> Result<wit::LeasePoll, wit::LeaseError> {
        self.inner
            .borrow_mut()
            .poll(now)
            .map(lease_poll)
            .map_err(lease_error)
    }
}

fn lease_poll(poll: Poll) -> wit::LeasePoll {
    wit::LeasePoll {
        given_up: poll
            .given_up
            .into_iter()
            .map(|g| wit::GivenUp {
                ticket: g.ticket,
                key: g.key,
                reason: match g.reason {
                    GiveUpReason::RequestUnanswered => wit::GiveUpReason::RequestUnanswered,
                    GiveUpReason::RenewalFailed => wit::GiveUpReason::RenewalFailed,
                    GiveUpReason::RenewalUnanswered => wit::GiveUpReason::RenewalUnanswered,
                    GiveUpReason::NotRenewed => wit::GiveUpReason::NotRenewed,
                },
            })
            .collect(),
        renewals: poll
            .renewals
            .into_iter()
            .map(|r| wit::Renewal {
                id: r.id,
                key: r.key,
                tickets: r.tickets,
            })
            .collect(),
        wake_at: poll.wake_at_ms,
    }
}

fn lease_error(e: LeaseError) -> wit::LeaseError {
    use wit::LeaseErrorCode as W;
    let code = match e.code {
        LeaseErrorCode::LeaseOutOfRange => W::LeaseOutOfRange,
        LeaseErrorCode::InvalidKey => W::InvalidKey,
        LeaseErrorCode::TicketNotNew => W::TicketNotNew,
        LeaseErrorCode::TooMany => W::TooMany,
        LeaseErrorCode::UnknownTicket => W::UnknownTicket,
        LeaseErrorCode::AlreadyAnswered => W::AlreadyAnswered,
        LeaseErrorCode::UnknownRenewal => W::UnknownRenewal,
        LeaseErrorCode::ClockWentBack => W::ClockWentBack,
    };
    wit::LeaseError {
        code,
        message: e.message,
    }
}

fn decision(d: Decision) -> wit::Decision {
    match d {
        Decision::Grant {
            arrivals,
            rested_ms,
        } => wit::Decision::Grant(wit::Granted {
            arrivals: arrivals
                .into_iter()
                .map(|a| wit::Arrival {
                    count: a.count,
                    per_ms: a.per_ms,
                    at_ms: a.at_ms,
                    rest: a.rest,
                })
                .collect(),
            rested_ms,
        }),
        Decision::Empty => wit::Decision::Empty,
        Decision::Full => wit::Decision::Full,
        Decision::Wait { retry_ms } => wit::Decision::Wait(retry_ms),
    }
}

fn grant_error(e: GrantError) -> wit::GrantError {
    let code = match e.code {
        grant::GrantErrorCode::LimitOutOfRange => wit::GrantErrorCode::LimitOutOfRange,
        grant::GrantErrorCode::DelayOutOfRange => wit::GrantErrorCode::DelayOutOfRange,
        grant::GrantErrorCode::RateOutOfRange => wit::GrantErrorCode::RateOutOfRange,
        grant::GrantErrorCode::WeightOutOfRange => wit::GrantErrorCode::WeightOutOfRange,
        grant::GrantErrorCode::ArrivalOutOfRange => wit::GrantErrorCode::ArrivalOutOfRange,
    };
    wit::GrantError {
        code,
        message: e.message,
    }
}
