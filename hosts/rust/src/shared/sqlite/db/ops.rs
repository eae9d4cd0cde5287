//! The contract's operations as transactions on the file (the JS store's `request`, `renew`,
//! `#remove`, `pause`, `inspect`, `#poll`), and the grant rule applied between their
//! statements (`#promote`, `#decide`: the engine's [`decide`]).

use std::collections::HashMap;

use turnstile_engine::shared::grant::{Decision, Head, KeyState, decide};

use super::{Db, GRANTS_PER_CALL_MAX, Op, failed, num, refused, store_error};
use crate::shared::store::{HeldTicket, KeyInspection, Removal, Terms, TicketState};
use crate::shared::store::{RateWindow, WaitingTicket};
use crate::shared::{Arrival, StoreError};

/// The head ticket's row: ticket, limit, delay, lease, rates (JSON), weight.
struct HeadRow {
    ticket: String,
    limit: u32,
    delay_ms: u32,
    lease_ms: u32,
    rates: String,
    weight: u32,
}

/// The head left waiting and, when only its delay, a rate window or a pause holds it, the ms
/// until it may be granted.
#[derive(Default)]
struct HeadLeft {
    ticket: Option<String>,
    retry_ms: Option<u64>,
}

impl Db {
    pub(in crate::shared::sqlite) fn request(
        &self,
        key: &str,
        ticket: &str,
        terms: &Terms,
    ) -> Result<TicketState, StoreError> {
        let rates: Vec<[u32; 3]> = (terms.rates.iter())
            .map(|w| [w.count, w.per_ms, w.burst])
            .collect();
        let rates = serde_json::to_string(&rates).map_err(|e| failed(e.to_string()))?;
        self.write("request", |db, now| {
            db.exec("purge", (key, now))?;
            db.exec("ensureKey", [key])?;
            if db.row("ticket", (key, ticket), |_| Ok(()))?.is_some() {
                db.exec("renew", (now, key, ticket))?;
            } else {
                // Terms the rule refuses never enter the key (the transaction rolls back;
                // written, they would refuse every later grant on the key until their lease
                // ended).
                let fresh = KeyState {
                    held: 0,
                    last_grant_ms: 0,
                    paused_until_ms: 0,
                    arrivals: Vec::new(),
                };
                decide(Some(&head(terms)), &fresh, now).map_err(|e| refused(&e.message))?;
                let seq: i64 = db.one("nextSeq", [key], |r| r.get(0))?;
                let expires_ms = now + u64::from(terms.lease_ms);
                let insert = rusqlite::params![
                    key,
                    ticket,
                    seq,
                    terms.limit,
                    terms.delay_ms,
                    &rates,
                    terms.weight,
                    terms.lease_ms,
                    now, // requested_ms
                    expires_ms,
                ];
                db.exec("insert", insert)?;
            }
            let left = db.promote(key, now)?;
            let state = db.state(key, ticket, &left)?;
            db.settle(key, now)?;
            Ok(state)
        })
    }

    pub(in crate::shared::sqlite) fn renew(
        &self,
        key: &str,
        tickets: &[String],
    ) -> Result<Vec<TicketState>, StoreError> {
        self.write("renew", |db, now| {
            db.exec("purge", (key, now))?;
            for ticket in tickets {
                db.exec("renew", (now, key, ticket))?;
            }
            let left = db.promote(key, now)?;
            let states = (tickets.iter())
                .map(|t| db.state(key, t, &left))
                .collect::<Op<Vec<_>>>()?;
            db.settle(key, now)?;
            Ok(states)
        })
    }

    pub(in crate::shared::sqlite) fn remove(
        &self,
        what: &str,
        key: &str,
        ticket: &str,
    ) -> Result<Removal, StoreError> {
        self.write(what, |db, now| {
            db.exec("purge", (key, now))?;
            let granted: Option<Option<i64>> = db.row("ticket", (key, ticket), |r| r.get(1))?;
            if granted.is_some() {
                db.exec("remove", (key, ticket))?;
                db.promote(key, now)?;
            }
            db.settle(key, now)?;
            Ok(match granted {
                None => Removal::Lost,
                Some(None) => Removal::Withdrawn,
                Some(Some(_)) => Removal::Released,
            })
        })
    }

    pub(in crate::shared::sqlite) fn pause(
        &self,
        key: &str,
        for_ms: u32,
    ) -> Result<u64, StoreError> {
        self.write("pause", |db, now| {
            db.exec("ensureKey", [key])?;
            let until: i64 = db.one("pause", (now + u64::from(for_ms), key), |r| r.get(0))?;
            db.settle(key, now)?;
            num(until)
        })
    }

    pub(in crate::shared::sqlite) fn inspect(
        &self,
        key: &str,
    ) -> Result<KeyInspection, StoreError> {
        self.read("inspect", |db, now_ms| {
            let counters: Option<[i64; 4]> = db.row("keyState", [key], |r| {
                Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?])
            })?;
            let [seq, grants, last_grant_ms, paused_until_ms] = counters.unwrap_or_default();
            let mut seen = KeyInspection {
                key: key.to_owned(),
                now_ms,
                seq: num(seq)?,
                grants: num(grants)?,
                last_grant_ms: num(last_grant_ms)?,
                paused_until_ms: num(paused_until_ms)?,
                arrivals: db.arrivals(key)?,
                held: Vec::new(),
                waiting: Vec::new(),
            };
            type Listed = (String, i64, Option<i64>, Option<i64>, i64);
            let rows: Vec<Listed> = db.rows("list", [key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?;
            for (ticket, seq, granted_ms, grant, expires_ms) in rows {
                let (seq, expires_ms) = (num(seq)?, num(expires_ms)?);
                match (granted_ms, grant) {
                    (Some(granted_ms), Some(grant)) => seen.held.push(HeldTicket {
                        ticket,
                        seq,
                        grant: num(grant)?,
                        granted_ms: num(granted_ms)?,
                        expires_ms,
                    }),
                    _ => seen.waiting.push(WaitingTicket {
                        ticket,
                        seq,
                        expires_ms,
                    }),
                }
            }
            Ok(seen)
        })
    }

    pub(in crate::shared::sqlite) fn key_count(&self) -> Result<u64, StoreError> {
        self.read("key_count", |db, _| {
            let n: i64 = db.one("countKeys", [], |r| r.get(0))?;
            num(n)
        })
    }

    /// One poll of a watched key: the tickets of `mine` that are granted or lost, read without
    /// a lock; a write transaction only when the rule could grant something now. Tried once:
    /// a locked file fails at once, and the poll is tried again later.
    pub(in crate::shared::sqlite) fn poll(
        &self,
        key: &str,
        mine: &[String],
    ) -> Result<Vec<TicketState>, StoreError> {
        if let Some(split) = self.split() {
            return Err(split);
        }
        let mine_json = serde_json::to_string(mine).map_err(|e| failed(e.to_string()))?;
        let read = |db: &Self, now: u64| -> Op<(Vec<TicketState>, bool)> {
            type Peeked = (i64, Option<i64>, Option<i64>);
            let rows: HashMap<String, Peeked> = db
                .rows("peek", (key, &mine_json), |r| {
                    Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
                })?
                .into_iter()
                .collect();
            let mut changed = Vec::new();
            for ticket in mine {
                match rows.get(ticket) {
                    None => changed.push(TicketState::Lost {
                        ticket: ticket.clone(),
                    }),
                    Some((seq, Some(granted_ms), grant)) => changed.push(TicketState::Granted {
                        ticket: ticket.clone(),
                        seq: num(*seq)?,
                        grant: num(grant.unwrap_or(0))?,
                        granted_ms: num(*granted_ms)?,
                    }),
                    Some(_) => {}
                }
            }
            let promotable = changed.is_empty() && db.promotable(key, now)?;
            Ok((changed, promotable))
        };
        let once = |f: &dyn Fn() -> Op<(Vec<TicketState>, bool)>| {
            f().map_err(|e| store_error("poll", &self.path, self.busy_timeout_ms, e))
        };
        let (changed, promotable) = once(&|| self.transaction(false, read))?;
        if !promotable {
            return Ok(changed);
        }
        once(&|| {
            self.transaction(true, |db, now| {
                db.exec("purge", (key, now))?;
                db.promote(key, now)?;
                db.settle(key, now)?;
                Ok((Vec::new(), false))
            })
        })?;
        Ok(once(&|| self.transaction(false, read))?.0)
    }

    /// After a write on `key`: its `idle_at_ms`, its row deleted once idle, and a sweep of up
    /// to 16 other keys idle past their time (with their expired tickets).
    fn settle(&self, key: &str, now: u64) -> Op<()> {
        self.exec("settle", [key, key])?;
        self.exec("forgetArrivals", (key, now))?;
        self.exec("forget", (key, now))?;
        self.exec("sweepTickets", [now])?;
        self.exec("sweepArrivals", [now])?;
        self.exec("sweepKeys", [now])?;
        Ok(())
    }

    /// The grant rule (the engine's `decide`): grants heads while it allows.
    fn promote(&self, key: &str, now: u64) -> Op<HeadLeft> {
        for _ in 0..GRANTS_PER_CALL_MAX {
            let head = self.head(key)?;
            let decision = self.decide(key, head.as_ref(), now)?;
            let Some(head) = head else {
                return Ok(HeadLeft::default());
            };
            let (arrivals, rested_ms) = match decision {
                Decision::Empty => return Ok(HeadLeft::default()),
                Decision::Full => {
                    return Ok(HeadLeft {
                        ticket: Some(head.ticket),
                        retry_ms: None,
                    });
                }
                Decision::Wait { retry_ms } => {
                    return Ok(HeadLeft {
                        ticket: Some(head.ticket),
                        retry_ms: Some(retry_ms),
                    });
                }
                Decision::Grant {
                    arrivals,
                    rested_ms,
                } => (arrivals, rested_ms),
            };
            let grants: i64 = self.one("keyState", [key], |r| r.get(1))?;
            for a in arrivals {
                self.exec("setArrival", (key, a.count, a.per_ms, a.at_ms, a.rest))?;
            }
            self.exec("grant", (now, grants + 1, now, key, &head.ticket))?;
            self.exec("countGrant", (now, head.delay_ms, rested_ms, key))?;
        }
        Err(failed(format!(
            "more than {GRANTS_PER_CALL_MAX} grants in one operation on key {key:?}"
        ))
        .into())
    }

    /// The grant rule on the key's rows: the head's terms, the key's counters and arrival
    /// times, and as the pause the key's, and on a new file its creation plus the head's lease.
    fn decide(&self, key: &str, head: Option<&HeadRow>, now: u64) -> Op<Decision> {
        let Some(head) = head else {
            return Ok(Decision::Empty);
        };
        let counters: Option<(i64, i64)> =
            self.row("keyState", [key], |r| Ok((r.get(2)?, r.get(3)?)))?;
        let (last_grant_ms, paused_until_ms) = counters.unwrap_or_default();
        let held: i64 = self.one("held", [key], |r| r.get(0))?;
        let windows: Vec<[u32; 3]> = serde_json::from_str(if head.rates.is_empty() {
            "[]"
        } else {
            &head.rates
        })
        .map_err(|_| refused(&format!("rates {:?}", head.rates)))?;
        let rates = (windows.into_iter())
            .map(|[count, per_ms, burst]| RateWindow {
                count,
                per_ms,
                burst,
            })
            .collect();
        let terms = Head {
            limit: head.limit,
            delay_ms: head.delay_ms,
            rates,
            weight: head.weight,
        };
        let state = KeyState {
            held: u32::try_from(held).map_err(|_| refused(&format!("{held} held")))?,
            last_grant_ms: num(last_grant_ms)?,
            paused_until_ms: num::<u64>(paused_until_ms)?
                .max(self.created_ms + u64::from(head.lease_ms)),
            arrivals: self.arrivals(key)?,
        };
        decide(Some(&terms), &state, now).map_err(|e| refused(&e.message).into())
    }

    fn head(&self, key: &str) -> Op<Option<HeadRow>> {
        self.row("head", [key], |r| {
            Ok(HeadRow {
                ticket: r.get(0)?,
                limit: r.get(1)?,
                delay_ms: r.get(2)?,
                lease_ms: r.get(3)?,
                rates: r.get(4)?,
                weight: r.get(5)?,
            })
        })
    }

    fn arrivals(&self, key: &str) -> Op<Vec<Arrival>> {
        self.rows("arrivals", [key], |r| {
            Ok(Arrival {
                count: r.get(0)?,
                per_ms: r.get(1)?,
                at_ms: r.get(2)?,
                rest: r.get(3)?,
            })
        })
    }

    fn state(&self, key: &str, ticket: &str, left: &HeadLeft) -> Op<TicketState> {
        type Found = (i64, Option<i64>, Option<i64>);
        let row: Option<Found> = self.row("ticket", (key, ticket), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        let ticket_id = ticket.to_owned();
        Ok(match row {
            None => TicketState::Lost { ticket: ticket_id },
            Some((seq, Some(granted_ms), grant)) => TicketState::Granted {
                ticket: ticket_id,
                seq: num(seq)?,
                grant: num(grant.unwrap_or(0))?,
                granted_ms: num(granted_ms)?,
            },
            Some((seq, None, _)) => TicketState::Waiting {
                ticket: ticket_id,
                seq: num(seq)?,
                retry_ms: left
                    .retry_ms
                    .filter(|_| left.ticket.as_deref() == Some(ticket)),
            },
        })
    }

    fn promotable(&self, key: &str, now: u64) -> Op<bool> {
        let earliest: Option<i64> = self.one("earliestExpiry", [key], |r| r.get(0))?;
        if earliest.is_some_and(|e| num::<u64>(e).is_ok_and(|e| e <= now)) {
            return Ok(true);
        }
        let head = self.head(key)?;
        Ok(matches!(
            self.decide(key, head.as_ref(), now)?,
            Decision::Grant { .. }
        ))
    }
}

fn head(terms: &Terms) -> Head {
    Head {
        limit: terms.limit,
        delay_ms: terms.delay_ms,
        rates: terms.rates.clone(),
        weight: terms.weight,
    }
}
