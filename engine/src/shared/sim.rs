//! The lease schedule's guarantee as seeded properties, checked from inputs and outputs alone:
//! every ticket a client holds is live at the store whenever it polls (by a lower bound of its
//! lease at the store, with answers late, failed or lost), a store that answers in time never
//! sees a ticket given up, and two clients sharing a model store (the engine's grant rule) with
//! lost messages and late timers never both believe they hold its one place.

use std::collections::BTreeMap;

use super::grant::{Decision, Head, KeyState, decide};
use super::*;
use crate::limits::{LEASE_MS_MIN, RENEW_TICKETS_MAX};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

/// xorshift64*: the property tests' seeded randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What the test knows of one ticket: the send time of the latest request or renewal the store
/// confirmed (its lease at the store ends no sooner than that plus the lease).
struct Known {
    confirmed_ms: u64,
    answered: bool,
}

/// Drives a schedule against a model of the store for one seed. `healthy`: every request and
/// renewal is answered within a quarter period and the host polls within a quarter period of
/// `wake`, so no ticket may ever be given up. Otherwise answers come late, fail or never come,
/// and every ticket the host still holds must be live at the store whenever it polls.
fn run_seed(seed: u64, healthy: bool) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let lease = LEASE_MS_MIN as u64 + rng.below(3000);
    let mut schedule = LeaseSchedule::new(lease as u32).unwrap();
    let period = lease / 3;
    let quarter = period / 4;
    let mut now = rng.below(1_000_000);
    let mut next_ticket = 0;
    let mut known: BTreeMap<u64, Known> = BTreeMap::new();
    // Reports not yet delivered: (due time, what) in flight.
    let mut requests: Vec<(u64, u64, u64)> = Vec::new(); // (due, ticket, sent)
    let mut renewals: Vec<(u64, Renewal, u64, bool)> = Vec::new(); // (due, renewal, sent, ok)
    let mut wake: Option<u64> = None;
    for _step in 0..400 {
        // The host's next moment: never later than its timer allows.
        let mut step = rng.below(period);
        if let Some(w) = wake {
            let late = if healthy {
                rng.below(quarter)
            } else {
                rng.below(period / 2)
            };
            step = step.min((w + late).saturating_sub(now));
        }
        now += step;
        match rng.below(10) {
            0..=2 => {
                let key = ["a", "b", "c"][rng.below(3) as usize];
                next_ticket += 1 + rng.below(2);
                schedule.requested(key, next_ticket, now).unwrap();
                known.insert(
                    next_ticket,
                    Known {
                        confirmed_ms: now,
                        answered: false,
                    },
                );
                let latency = if healthy {
                    rng.below(quarter)
                } else {
                    rng.below(lease * 2)
                };
                requests.push((now + latency, next_ticket, now));
            }
            3 if !known.is_empty() => {
                let pick = *known
                    .keys()
                    .nth(rng.below(known.len() as u64) as usize)
                    .unwrap();
                if known[&pick].answered {
                    schedule.remove(pick).unwrap();
                    known.remove(&pick);
                }
            }
            _ => {}
        }
        // Deliver every answer due by now.
        requests.retain(|&(due, ticket, _)| {
            if due > now {
                return true;
            }
            match schedule.answered(ticket) {
                Ok(()) => known.get_mut(&ticket).unwrap().answered = true,
                Err(e) => {
                    assert_eq!(e.code, LeaseErrorCode::UnknownTicket);
                    assert!(
                        !known.contains_key(&ticket),
                        "seed {seed}: answer refused for a live ticket"
                    );
                }
            }
            false
        });
        let mut delivered = Vec::new();
        renewals.retain(|(due, renewal, sent, ok)| {
            if *due > now {
                return true;
            }
            delivered.push((renewal.clone(), *sent, *ok));
            false
        });
        for (renewal, sent, ok) in delivered {
            if ok {
                schedule.renewed(renewal.id).unwrap();
                for t in &renewal.tickets {
                    if let Some(k) = known.get_mut(t) {
                        k.confirmed_ms = k.confirmed_ms.max(sent);
                    }
                }
            } else {
                schedule.renew_failed(renewal.id).unwrap();
            }
        }
        let poll = schedule.poll(now).unwrap();
        // The guarantee: every ticket the host held until this poll is live at the store now.
        for (ticket, k) in &known {
            assert!(
                now < k.confirmed_ms + lease,
                "seed {seed}: ticket {ticket} held at {now}, its lease may have ended at {}",
                k.confirmed_ms + lease
            );
        }
        for g in &poll.given_up {
            assert!(
                known.remove(&g.ticket).is_some(),
                "seed {seed}: {g:?} was not live"
            );
            assert!(!healthy, "seed {seed}: {g:?} given up with a healthy store");
        }
        for r in poll.renewals {
            assert!(!r.tickets.is_empty() && r.tickets.len() <= RENEW_TICKETS_MAX);
            for t in &r.tickets {
                assert!(
                    known[t].answered,
                    "seed {seed}: renewing unanswered ticket {t}"
                );
            }
            let (latency, ok) = if healthy {
                (rng.below(quarter), true)
            } else if rng.chance(10) {
                (u64::MAX / 4, false) // never answered
            } else {
                (rng.below(period * 2), rng.chance(60))
            };
            renewals.push((now.saturating_add(latency), r, now, ok));
        }
        assert_eq!(schedule.len(), known.len(), "seed {seed}");
        wake = poll.wake_at_ms;
        if let Some(w) = wake {
            assert!(w > now, "seed {seed}: wake {w} not after {now}");
        }
    }
}

fn seeds() -> u64 {
    if cfg!(target_arch = "wasm32") {
        100
    } else {
        500
    }
}

#[test]
fn no_ticket_is_held_once_its_lease_could_have_ended_at_the_store() {
    for seed in 0..seeds() {
        run_seed(seed, false);
    }
}

#[test]
fn a_healthy_store_never_sees_a_ticket_given_up() {
    for seed in 0..seeds() {
        run_seed(seed, true);
    }
}

/// A store for [`two_clients_never_both_believe_they_hold_one_place`]: tickets with leases on
/// the store's clock, granted by [`decide`] (limit `LIMIT`, no delay).
#[derive(Default)]
struct ModelStore {
    next_seq: u64,
    /// (client, ticket) -> (seq, expires, granted)
    tickets: BTreeMap<(usize, u64), (u64, u64, bool)>,
}

const LIMIT: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Waiting,
    Granted,
    Lost,
}

impl ModelStore {
    fn purge_and_grant(&mut self, now: u64) {
        self.tickets.retain(|_, t| t.1 > now);
        loop {
            let held = self.tickets.values().filter(|t| t.2).count() as u32;
            let head = self
                .tickets
                .iter_mut()
                .filter(|(_, t)| !t.2)
                .min_by_key(|(_, t)| t.0);
            let state = KeyState {
                held,
                last_grant_ms: 0,
                paused_until_ms: 0,
                arrivals: Vec::new(),
            };
            let terms = Head::plain(LIMIT, 0);
            let decision = decide(head.as_ref().map(|_| &terms), &state, now);
            match (decision, head) {
                (Ok(Decision::Grant { .. }), Some((_, t))) => t.2 = true,
                _ => return,
            }
        }
    }
    fn answer(&self, id: (usize, u64)) -> Answer {
        match self.tickets.get(&id) {
            Some(t) if t.2 => Answer::Granted,
            Some(_) => Answer::Waiting,
            None => Answer::Lost,
        }
    }
    fn request(&mut self, id: (usize, u64), lease: u64, now: u64) -> Answer {
        self.purge_and_grant(now);
        self.next_seq += 1;
        self.tickets.insert(id, (self.next_seq, now + lease, false));
        self.purge_and_grant(now);
        self.answer(id)
    }
    fn renew(&mut self, ids: &[(usize, u64)], lease: u64, now: u64) -> Vec<Answer> {
        self.purge_and_grant(now);
        for id in ids {
            if let Some(t) = self.tickets.get_mut(id) {
                t.1 = now + lease;
            }
        }
        self.purge_and_grant(now);
        ids.iter().map(|&id| self.answer(id)).collect()
    }
    fn remove(&mut self, id: (usize, u64), now: u64) {
        self.tickets.remove(&id);
        self.purge_and_grant(now);
    }
}

/// What travels between a client and the store, and when it lands.
enum Message {
    /// A request (or renewal) on its way to the store; `drop`: it never arrives.
    Request {
        client: usize,
        ticket: u64,
        drop: bool,
        back: u64,
    },
    Renew {
        client: usize,
        renewal: Renewal,
        drop: bool,
        back: u64,
    },
    Remove {
        client: usize,
        ticket: u64,
    },
    /// An answer on its way back; `None`: lost (the client sees a failure).
    RequestAnswer {
        client: usize,
        ticket: u64,
        answer: Option<Answer>,
    },
    RenewAnswer {
        client: usize,
        renewal: Renewal,
        answers: Option<Vec<Answer>>,
    },
}

#[derive(Default)]
struct Client {
    held: Vec<u64>,
    waiting: Vec<u64>,
    next: u64,
}

/// Two clients on one key of limit 1 through a model store (its clock is theirs, as SQLite's),
/// with random latency, lost requests and lost answers, and late timers: whenever a client
/// believes it holds a ticket, the store has that ticket granted and live, so no two clients
/// ever believe they hold the one place.
fn run_store_seed(seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0xd134_2543_de82_ef95) | 1);
    let lease = LEASE_MS_MIN as u64 + rng.below(2000);
    let period = lease / 3;
    let mut store = ModelStore::default();
    let mut clients: Vec<(LeaseSchedule, Client, Option<u64>)> = (0..2)
        .map(|_| {
            (
                LeaseSchedule::new(lease as u32).unwrap(),
                Client::default(),
                None,
            )
        })
        .collect();
    let mut flight: Vec<(u64, Message)> = Vec::new();
    let mut now = 0;
    for _ in 0..600 {
        // The next moment: a message landing, a client's timer (late by less than half a
        // period), or a client acting on its own.
        let mut next = now + rng.below(period);
        for (_, _, wake) in &clients {
            if let Some(w) = wake {
                next = next.min(w + rng.below(period / 2));
            }
        }
        if let Some(at) = flight.iter().map(|(at, _)| *at).min() {
            next = next.min(at);
        }
        now = now.max(next);
        let (landed, rest): (Vec<_>, Vec<_>) = flight.drain(..).partition(|(at, _)| *at <= now);
        flight = rest;
        let latency = |rng: &mut Rng| {
            if rng.chance(10) {
                rng.below(lease)
            } else {
                rng.below(period / 4)
            }
        };
        let mut touched = vec![false; clients.len()];
        for (_, message) in landed {
            match message {
                Message::Request {
                    client,
                    ticket,
                    drop,
                    back,
                } => {
                    let answer = (!drop).then(|| store.request((client, ticket), lease, now));
                    let answer = if rng.chance(10) { None } else { answer };
                    flight.push((
                        now + back,
                        Message::RequestAnswer {
                            client,
                            ticket,
                            answer,
                        },
                    ));
                }
                Message::Renew {
                    client,
                    renewal,
                    drop,
                    back,
                } => {
                    let ids: Vec<_> = renewal.tickets.iter().map(|&t| (client, t)).collect();
                    let answers = (!drop).then(|| store.renew(&ids, lease, now));
                    let answers = if rng.chance(10) { None } else { answers };
                    flight.push((
                        now + back,
                        Message::RenewAnswer {
                            client,
                            renewal,
                            answers,
                        },
                    ));
                }
                Message::Remove { client, ticket } => store.remove((client, ticket), now),
                Message::RequestAnswer {
                    client,
                    ticket,
                    answer,
                } => {
                    touched[client] = true;
                    let (schedule, c, _) = &mut clients[client];
                    let Some(answer) = answer else {
                        let _ = schedule.remove(ticket); // the request failed
                        flight.push((now + latency(&mut rng), Message::Remove { client, ticket }));
                        continue;
                    };
                    // The host polls first, then reports the answer (as both packages do).
                    let poll = schedule.poll(now).unwrap();
                    apply_poll(client, c, poll, &mut flight, now, &mut rng);
                    let (schedule, c, _) = &mut clients[client];
                    match (answer, schedule.answered(ticket)) {
                        (_, Err(_)) | (Answer::Lost, Ok(())) => {
                            let _ = schedule.remove(ticket);
                            flight.push((
                                now + latency(&mut rng),
                                Message::Remove { client, ticket },
                            ));
                        }
                        (Answer::Granted, Ok(())) => c.held.push(ticket),
                        (Answer::Waiting, Ok(())) => c.waiting.push(ticket),
                    }
                }
                Message::RenewAnswer {
                    client,
                    renewal,
                    answers,
                } => {
                    touched[client] = true;
                    let (schedule, c, _) = &mut clients[client];
                    let Some(answers) = answers else {
                        schedule.renew_failed(renewal.id).unwrap();
                        continue;
                    };
                    schedule.renewed(renewal.id).unwrap();
                    for (&ticket, answer) in renewal.tickets.iter().zip(answers) {
                        let live = c.held.contains(&ticket) || c.waiting.contains(&ticket);
                        match answer {
                            Answer::Granted if c.waiting.contains(&ticket) => {
                                c.waiting.retain(|&t| t != ticket);
                                c.held.push(ticket);
                            }
                            Answer::Lost if live => {
                                c.held.retain(|&t| t != ticket);
                                c.waiting.retain(|&t| t != ticket);
                                schedule.remove(ticket).unwrap();
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        // A client acts: asks for a permit, or gives one back.
        let who = rng.below(2) as usize;
        let (schedule, c, _) = &mut clients[who];
        touched[who] = true;
        if rng.chance(30) && c.held.len() + c.waiting.len() < 3 {
            c.next += 1;
            schedule.requested("k", c.next, now).unwrap();
            let (drop, back) = (rng.chance(5), latency(&mut rng));
            flight.push((
                now + latency(&mut rng),
                Message::Request {
                    client: who,
                    ticket: c.next,
                    drop,
                    back,
                },
            ));
        } else if rng.chance(10) && !c.held.is_empty() {
            let ticket = c.held.remove(0);
            schedule.remove(ticket).unwrap();
            flight.push((
                now + latency(&mut rng),
                Message::Remove {
                    client: who,
                    ticket,
                },
            ));
        }
        for (client, was_touched) in touched.into_iter().enumerate() {
            let due = clients[client].2.is_some_and(|w| w <= now);
            if was_touched || due {
                let poll = clients[client].0.poll(now).unwrap();
                clients[client].2 = poll.wake_at_ms;
                apply_poll(
                    client,
                    &mut clients[client].1,
                    poll,
                    &mut flight,
                    now,
                    &mut rng,
                );
            }
        }
        // The guarantee, from the store's side.
        for (client, (_, c, _)) in clients.iter().enumerate() {
            for ticket in &c.held {
                let live = store
                    .tickets
                    .get(&(client, *ticket))
                    .is_some_and(|t| t.2 && t.1 > now);
                assert!(
                    live,
                    "seed {seed}: client {client} believes it holds ticket {ticket} at {now}, the store does not"
                );
            }
        }
        let believed: usize = clients.iter().map(|(_, c, _)| c.held.len()).sum();
        assert!(
            believed <= LIMIT as usize,
            "seed {seed}: {believed} holders of one place at {now}"
        );
    }
}

/// Gives up what the poll gave up and sends its renewals.
fn apply_poll(
    client: usize,
    c: &mut Client,
    poll: Poll,
    flight: &mut Vec<(u64, Message)>,
    now: u64,
    rng: &mut Rng,
) {
    for g in poll.given_up {
        c.held.retain(|&t| t != g.ticket);
        c.waiting.retain(|&t| t != g.ticket);
    }
    for renewal in poll.renewals {
        // A renewal's way there and back: up to 100 ms each (a period is at least 100 ms).
        let (drop, there, back) = (rng.chance(10), rng.below(100), rng.below(100));
        flight.push((
            now + there,
            Message::Renew {
                client,
                renewal,
                drop,
                back,
            },
        ));
    }
}

#[test]
fn two_clients_never_both_believe_they_hold_one_place() {
    for seed in 0..seeds() {
        run_store_seed(seed);
    }
}
