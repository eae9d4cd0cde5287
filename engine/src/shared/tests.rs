//! Shared keys' rules: the lease schedule through one `check` (a script of reports and polls,
//! and the trace it must produce), the grant rule against the table
//! `tests/shared/grant-rule.txt` (the hosts test the Redis script against the same table), and
//! the store texts in `shared/store/`. The schedule's guarantee as seeded properties is in
//! `sim.rs`.
//!
//! Script lines: `lease MS` (first), `request KEY N at T`, `answer N`, `renewed R`,
//! `failed R`, `remove N`, `poll T`. A poll's trace lists `give-up N (reason)`, `renew R KEY
//! [N...]` and `wake T`; a refused input traces `error CODE`.

use super::grant::{Arrival, Decision, Head, KeyState, decide};
use super::*;
use crate::config::RateWindow;
use crate::limits::{KEY_BYTES_MAX, LEASE_MS_MAX, LEASE_MS_MIN, RENEW_TICKETS_MAX};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

#[track_caller]
fn check(script: &str, expect: &str) {
    let mut lines = script.lines().map(str::trim).filter(|l| !l.is_empty());
    let lease: u32 = lines
        .next()
        .and_then(|l| l.strip_prefix("lease "))
        .and_then(|n| n.parse().ok())
        .expect("first line: lease MS");
    let mut schedule = LeaseSchedule::new(lease).expect("lease in range");
    let mut trace = Vec::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| words[i].parse::<u64>().expect("a number");
        let result = match words[0] {
            "request" => schedule.requested(words[1], num(2), num(4)),
            "answer" => schedule.answered(num(1)),
            "renewed" => schedule.renewed(num(1)),
            "failed" => schedule.renew_failed(num(1)),
            "remove" => schedule.remove(num(1)),
            "poll" => schedule.poll(num(1)).map(|poll| {
                let mut out = Vec::new();
                for g in &poll.given_up {
                    out.push(format!("give-up {} ({})", g.ticket, g.reason));
                }
                for r in &poll.renewals {
                    let tickets: Vec<String> = r.tickets.iter().map(u64::to_string).collect();
                    out.push(format!("renew {} {} [{}]", r.id, r.key, tickets.join(" ")));
                }
                match poll.wake_at_ms {
                    Some(t) => out.push(format!("wake {t}")),
                    None => out.push("idle".to_owned()),
                }
                trace.push(format!("{line}: {}", out.join(", ")));
            }),
            other => panic!("unknown script line {other}"),
        };
        if let Err(e) = result {
            trace.push(format!("{line}: error {}", e.code));
        }
    }
    let got = trace.join("\n");
    let want: Vec<&str> = expect
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(got, want.join("\n"), "\n--- got ---\n{got}\n");
}

#[test]
fn renews_a_period_after_the_request_was_sent_and_one_renewal_per_key() {
    check(
        "lease 3000
         request a 1 at 0
         answer 1
         request a 2 at 400
         answer 2
         request b 3 at 500
         answer 3
         poll 999
         poll 1000
         renewed 1
         poll 1000
         poll 1500",
        "poll 999: wake 1000
         poll 1000: renew 1 a [1 2], wake 1500
         poll 1000: wake 1500
         poll 1500: renew 2 b [3], wake 2000",
    );
}

#[test]
fn survives_one_failed_renewal_and_gives_up_half_a_period_before_the_lease_ends() {
    // Lease 3000: period 1000, give-up at confirmed + 2500.
    check(
        "lease 3000
         request k 1 at 0
         answer 1
         poll 1000
         failed 1
         poll 1000
         poll 2000
         failed 2
         poll 2000
         poll 2499
         poll 2500
         poll 2600",
        "poll 1000: renew 1 k [1], wake 2500
         poll 1000: wake 2000
         poll 2000: renew 2 k [1], wake 2500
         poll 2000: wake 2500
         poll 2499: wake 2500
         poll 2500: give-up 1 (renewal-failed), idle
         poll 2600: idle",
    );
}

#[test]
fn a_confirmed_renewal_counts_from_when_it_was_sent() {
    // Sent at 1000, confirmed at 2400: the lease counts from 1000 (give-up at 3500).
    check(
        "lease 3000
         request k 1 at 0
         answer 1
         poll 1000
         poll 2400
         renewed 1
         poll 2400
         poll 3499
         failed 2
         poll 3500",
        "poll 1000: renew 1 k [1], wake 2500
         poll 2400: wake 2500
         poll 2400: renew 2 k [1], wake 3500
         poll 3499: wake 3500
         poll 3500: give-up 1 (renewal-failed), idle",
    );
}

#[test]
fn unanswered_requests_and_renewals_are_given_up_in_time() {
    check(
        "lease 300
         request k 1 at 0
         request k 2 at 10
         answer 2
         poll 100
         poll 250
         poll 260
         answer 1
         renewed 1",
        "poll 100: wake 110
         poll 250: give-up 1 (request-unanswered), renew 1 k [2], wake 260
         poll 260: give-up 2 (renewal-unanswered), idle
         answer 1: error unknown-ticket",
    );
}

#[test]
fn a_late_poll_gives_up_and_removed_tickets_are_not_renewed() {
    check(
        "lease 3000
         request k 1 at 0
         answer 1
         request k 2 at 0
         answer 2
         remove 2
         poll 5000
         request k 3 at 5000
         answer 3
         poll 6000
         remove 3
         renewed 1
         poll 6000",
        "poll 5000: give-up 1 (not-renewed), idle
         poll 6000: renew 1 k [3], wake 7500
         poll 6000: idle",
    );
}

#[test]
fn renewals_are_split_at_the_store_limit() {
    let mut schedule = LeaseSchedule::new(3000).unwrap();
    let count = RENEW_TICKETS_MAX as u64 + 5;
    for n in 0..count {
        schedule.requested("k", n, 0).unwrap();
        schedule.answered(n).unwrap();
    }
    let poll = schedule.poll(1000).unwrap();
    let sizes: Vec<usize> = poll.renewals.iter().map(|r| r.tickets.len()).collect();
    assert_eq!(sizes, [RENEW_TICKETS_MAX, 5]);
}

#[test]
fn every_bad_input_is_a_typed_error_that_changes_nothing() {
    for lease in [0, LEASE_MS_MIN - 1, LEASE_MS_MAX + 1, u32::MAX] {
        let e = LeaseSchedule::new(lease).unwrap_err();
        assert_eq!(e.code, LeaseErrorCode::LeaseOutOfRange);
    }
    assert!(LeaseSchedule::new(LEASE_MS_MIN).is_ok() && LeaseSchedule::new(LEASE_MS_MAX).is_ok());
    check(
        "lease 3000
         request k 5 at 100
         request k 5 at 100
         request k 4 at 100
         poll 99
         request k 6 at 99
         answer 7
         answer 5
         answer 5
         renewed 1
         failed 1
         remove 9
         poll 100",
        "request k 5 at 100: error ticket-not-new
         request k 4 at 100: error ticket-not-new
         poll 99: error clock-went-back
         request k 6 at 99: error clock-went-back
         answer 7: error unknown-ticket
         answer 5: error already-answered
         renewed 1: error unknown-renewal
         failed 1: error unknown-renewal
         remove 9: error unknown-ticket
         poll 100: wake 1100",
    );
    let mut schedule = LeaseSchedule::new(3000).unwrap();
    let long = "k".repeat(KEY_BYTES_MAX + 1);
    for key in ["", long.as_str()] {
        let e = schedule.requested(key, 1, 0).unwrap_err();
        assert_eq!(e.code, LeaseErrorCode::InvalidKey);
    }
    schedule
        .requested(&"k".repeat(KEY_BYTES_MAX), 1, 0)
        .unwrap();
}

/// `COUNT/PER_MS:MS+REST` of the table, MS from `now`.
fn table_arrival(text: &str, now: u64) -> Arrival {
    let (window, time) = text.split_once(':').expect("COUNT/PER_MS:MS+REST");
    let (count, per_ms) = window.split_once('/').expect("COUNT/PER_MS");
    let (ms, rest) = time.rsplit_once('+').expect("MS+REST");
    Arrival {
        count: count.parse().unwrap(),
        per_ms: per_ms.parse().unwrap(),
        at_ms: now.checked_add_signed(ms.parse::<i64>().unwrap()).unwrap(),
        rest: rest.parse().unwrap(),
    }
}

/// Reads `tests/shared/grant-rule.txt` into `(head, key, now, expected)` cases.
fn grant_table() -> Vec<(String, Option<Head>, KeyState, u64, Decision)> {
    const NOW: u64 = 1_000_000_000_000;
    let text = include_str!("../../../tests/shared/grant-rule.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (input, output) = line.split_once("->").expect("a `->`");
            let w: Vec<&str> = input.split_whitespace().collect();
            let mut head =
                (w[0] != "-").then(|| Head::plain(w[0].parse().unwrap(), w[1].parse().unwrap()));
            let mut arrivals = Vec::new();
            for term in &w[5..] {
                let (name, value) = term.split_once('=').expect("NAME=VALUE");
                let head = head.as_mut().expect("a head for a rate");
                match name {
                    "rate" => {
                        let n: Vec<u32> = value.split('/').map(|n| n.parse().unwrap()).collect();
                        head.rates.push(RateWindow {
                            count: n[0],
                            per_ms: n[1],
                            burst: n[2],
                        });
                    }
                    "weight" => head.weight = value.parse().unwrap(),
                    "at" => arrivals.push(table_arrival(value, NOW)),
                    other => panic!("unknown term {other}"),
                }
            }
            let last_grant_ms = match w[3] {
                "never" => 0,
                ago => NOW - ago.parse::<u64>().unwrap(),
            };
            let paused_until_ms = match w[4] {
                "none" => 0,
                left => NOW
                    .checked_add_signed(left.parse::<i64>().unwrap())
                    .unwrap(),
            };
            let key = KeyState {
                held: w[2].parse().unwrap(),
                last_grant_ms,
                paused_until_ms,
                arrivals,
            };
            let out: Vec<&str> = output.split_whitespace().collect();
            let decision = match out[0] {
                "grant" => {
                    let arrivals: Vec<Arrival> = out[1..]
                        .iter()
                        .filter(|&&t| t != "exact")
                        .map(|t| table_arrival(t.strip_prefix("at=").expect("at="), NOW))
                        .collect();
                    // The store keeps the key until its windows rested: 2 ms past the latest.
                    let rested_ms = arrivals.iter().map(|a| a.at_ms + 2).max().unwrap_or(0);
                    Decision::Grant {
                        arrivals,
                        rested_ms,
                    }
                }
                "full" => Decision::Full,
                "empty" => Decision::Empty,
                "wait" => Decision::Wait {
                    retry_ms: out[1].parse().unwrap(),
                },
                other => panic!("unknown decision {other}"),
            };
            (line.to_owned(), head, key, NOW, decision)
        })
        .collect()
}

#[test]
fn the_grant_rule_follows_the_shared_table() {
    let table = grant_table();
    assert!(table.len() >= 15);
    for (line, head, key, now, want) in table {
        assert_eq!(decide(head.as_ref(), &key, now), Ok(want), "{line}");
    }
}

#[test]
fn the_grant_rule_refuses_terms_no_client_writes() {
    use grant::GrantErrorCode as C;
    let key = KeyState {
        held: 0,
        last_grant_ms: 0,
        paused_until_ms: 0,
        arrivals: Vec::new(),
    };
    let window = |count, per_ms, burst| RateWindow {
        count,
        per_ms,
        burst,
    };
    let rated = |rates: Vec<RateWindow>, weight| Head {
        rates,
        weight,
        ..Head::plain(1, 0)
    };
    let cases = [
        (Head::plain(0, 0), C::LimitOutOfRange),
        (Head::plain(1_000_001, 0), C::LimitOutOfRange),
        (Head::plain(1, 86_400_001), C::DelayOutOfRange),
        (rated(vec![window(0, 1000, 1)], 1), C::RateOutOfRange),
        (
            rated(vec![window(1_000_001, 1000, 1)], 1),
            C::RateOutOfRange,
        ),
        (
            rated(vec![window(1, 1000, 1_000_001)], 1),
            C::RateOutOfRange,
        ),
        (rated(vec![window(1, 0, 1)], 1), C::RateOutOfRange),
        (
            rated(vec![window(1, 1000, 1), window(1, 1000, 2)], 1),
            C::RateOutOfRange,
        ),
        (rated(vec![window(1, 1000, 1); 9], 1), C::RateOutOfRange),
        (rated(vec![window(1, 1000, 2)], 0), C::WeightOutOfRange),
        (
            rated(vec![window(1, 1000, 2), window(1, 10, 1)], 2),
            C::WeightOutOfRange,
        ),
        (rated(Vec::new(), 2), C::WeightOutOfRange),
    ];
    for (head, code) in cases {
        let e = decide(Some(&head), &key, 5).unwrap_err();
        assert_eq!(e.code, code, "{head:?}");
    }
    let bad = KeyState {
        arrivals: vec![Arrival {
            count: 3,
            per_ms: 1000,
            at_ms: 5,
            rest: 3,
        }],
        ..key.clone()
    };
    let e = decide(Some(&rated(vec![window(3, 1000, 1)], 1)), &bad, 5).unwrap_err();
    assert_eq!(e.code, C::ArrivalOutOfRange);
    // Times at the ends of u64 saturate rather than wrap.
    let key = KeyState {
        last_grant_ms: u64::MAX,
        ..key
    };
    let head = Head::plain(1, 1);
    assert_eq!(
        decide(Some(&head), &key, u64::MAX),
        Ok(Decision::Grant {
            arrivals: Vec::new(),
            rested_ms: 0
        })
    );
}

/// The store texts, which both packages ship from `shared/store/` (not the component).
const SQLITE_SCHEMA: &str = include_str!("../../../shared/store/sqlite.sql");
const SQLITE_STATEMENTS: &str = include_str!("../../../shared/store/sqlite-statements.json");
const REDIS_SCRIPT: &str = include_str!("../../../shared/store/redis.lua");

/// The statements of `sqlite-statements.json` as `(name, text)`: its lines `"name": "text",`
/// (one statement a line, no escapes; the hosts parse the file as JSON).
fn sqlite_statements() -> Vec<(&'static str, &'static str)> {
    let body = SQLITE_STATEMENTS
        .split_once("\"statements\": {")
        .expect("a statements object")
        .1;
    let body = body.split_once('}').expect("the statements object ends").0;
    body.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let l = l.strip_suffix(',').unwrap_or(l);
            let (name, text) = l.split_once("\": \"").expect("\"name\": \"text\"");
            let name = name.strip_prefix('"').expect("a quoted name");
            let text = text.strip_suffix('"').expect("a quoted text");
            assert!(!text.contains(['\\', '"']), "{name}: no escapes");
            (name, text)
        })
        .collect()
}

#[test]
fn the_store_texts_are_the_schema_the_files_hold() {
    // The schema writes the version the statements file names.
    assert!(SQLITE_STATEMENTS.contains("\"schemaVersion\": 3,"));
    assert!(SQLITE_SCHEMA.contains("VALUES ('schema', '3')"));
    assert!(SQLITE_SCHEMA.contains("turnstile_shared_tickets") && !SQLITE_SCHEMA.ends_with('\n'));
    let statements = sqlite_statements();
    let names: Vec<&str> = statements.iter().map(|&(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "version",
            "meta",
            "setMeta",
            "wipeTickets",
            "wipeKeys",
            "wipeArrivals",
            "ensureKey",
            "purge",
            "ticket",
            "nextSeq",
            "insert",
            "renew",
            "head",
            "held",
            "keyState",
            "arrivals",
            "setArrival",
            "grant",
            "countGrant",
            "remove",
            "pause",
            "peek",
            "earliestExpiry",
            "list",
            "settle",
            "forgetArrivals",
            "forget",
            "sweepTickets",
            "sweepArrivals",
            "sweepKeys",
            "countKeys"
        ]
    );
    for (name, text) in statements {
        assert!(!text.is_empty() && !text.contains('\n'), "{name}");
        assert!(text.contains("turnstile_shared_"), "{name}");
    }
    assert!(REDIS_SCRIPT.starts_with("-- Turnstile shared keys, script 1"));
    assert!(REDIS_SCRIPT.contains("for _ = 1, 10000 do"));
}
