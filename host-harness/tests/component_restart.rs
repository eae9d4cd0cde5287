//! Restart through the component: `unfinished` exports version 2 with a policy fingerprint,
//! `resume` restores every state with the same numbers, under `run-again`, `interrupt`, and a
//! changed policy; hostile saved states are refused or listed call by call. Needs
//! `cargo xtask build-guest` first.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;

use common::{
    HostSettle, HostSettlement, InputErrorCode, InputKind, Inputs, NO_LIMITS, STOP_POLICY, Sched,
    assert_out, none,
};
use host_harness::wit_scheduler as ws;
use ws::Reason as R;

/// `w` and `s` have keys of limit 1; `s` and `f` fan out, `s` stops on error.
const P1: &str = "\
[conversation.tools.w]
concurrency = 1

[conversation.tools.s]
concurrency = 1
fan_out = { on_error = \"stop\" }

[conversation.tools.f]
fan_out = true
";

/// P1 written differently: the same meaning.
const P1_AGAIN: &str = "\
# the same tools, reformatted, with sections the scheduler ignores
[conversation]
model = \"whatever\"

[conversation.tools.w]
concurrency = { key = \"w\", limit = 1 }

[conversation.tools.s]
concurrency = 1
fan_out = { enabled = true, on_error = \"stop\" }

[conversation.tools.f]
fan_out = true
";

/// P1, except that `f` no longer fans out.
const P2: &str = "\
[conversation.tools.w]
concurrency = 1

[conversation.tools.s]
concurrency = 1
fan_out = { on_error = \"stop\" }

[conversation.tools.f]
fan_out = false
";

/// Batch 1: run (1) running, ask (2) asking, rej (3) rejected, s#0 (4) ended failed, s#1 and
/// s#2 (5, 6) stopped, fo#0 and fo#1 (7, 8) running.
/// Batch 2, cancelled: c1 (9) running, c2 (10) running on `w`, c3 (11) cancelled.
/// Batch 3: p (12) pending, q (13) approved.
fn every_state() -> Sched {
    let mut s = Sched::new(P1);
    let ids = "run\nask\nrej\ns\nfo";
    assert_eq!(
        s.submit(ids, "u\nu\nu\ns\nf", &[0, 0, 0, 3, 2]),
        Ok((1, 1, 8))
    );
    let out = s.step(&Inputs {
        approve: vec![1, 2, 4, 5, 6, 7, 8],
        settle: vec![HostSettlement {
            entry: 3,
            how: HostSettle::Rejected,
        }],
        ..none()
    });
    assert_out(&out, &[1, 2, 4, 7, 8], &[], &[], &[]);
    let out = s.step(&Inputs {
        ask: vec![2],
        failed: vec![4],
        ..none()
    });
    assert_out(
        &out,
        &[],
        &[(5, R::Stopped(1)), (6, R::Stopped(1))],
        &[],
        &[],
    );
    assert_eq!(s.submit("c1\nc2\nc3", "u\nw\nw", &[0, 0, 0]), Ok((2, 9, 3)));
    assert_out(&s.approve(&[9, 10, 11]), &[9, 10], &[], &[], &[]);
    let out = s.step(&Inputs {
        cancel: vec![2],
        ..none()
    });
    assert_out(&out, &[], &[(11, R::Cancelled)], &[], &[]);
    assert_eq!(s.submit("p\nq", "u\nu", &[0, 0]), Ok((3, 12, 2)));
    assert_out(&s.approve(&[13]), &[], &[], &[], &[]);
    s
}

fn saved_call(
    id: &str,
    tool: &str,
    operations: Option<u32>,
    entries: &[(u32, ws::Saved)],
) -> ws::SavedCall {
    ws::SavedCall {
        id: id.to_owned(),
        tool: tool.to_owned(),
        operations,
        keys: Vec::new(),
        entries: entries
            .iter()
            .map(|&(operation, state)| ws::SavedEntry { operation, state })
            .collect(),
    }
}

fn fingerprint(s: &mut Sched, toml: &str) -> u64 {
    let p = s.policy(toml);
    let other = s.scheduler(p);
    let iface = s.inst.exports.turnstile_scheduler_scheduler().scheduler();
    host_harness::unfinished(&iface, &mut s.inst.store, other)
        .expect("no trap")
        .expect("an export")
        .policy
}

#[test]
fn export_is_version_2_with_every_state_and_a_policy_fingerprint() {
    let mut s = every_state();
    let state = s.unfinished();
    let started = ws::Saved::Started;
    let stopped = ws::Saved::Settled(R::Stopped(1));
    let expected = ws::SavedState {
        version: 2,
        policy: state.policy,
        next_batch: 4,
        next_entry: 14,
        batches: vec![
            ws::SavedBatch {
                batch: 1,
                first: 1,
                cancelled: false,
                limits: NO_LIMITS,
                calls: vec![
                    saved_call("run", "u", None, &[(0, started)]),
                    saved_call("ask", "u", None, &[(0, started)]),
                    saved_call("rej", "u", None, &[(0, ws::Saved::Settled(R::Rejected))]),
                    saved_call(
                        "s",
                        "s",
                        Some(3),
                        &[
                            (0, ws::Saved::Ended(ws::Outcome::Failed)),
                            (1, stopped),
                            (2, stopped),
                        ],
                    ),
                    saved_call("fo", "f", Some(2), &[(0, started), (1, started)]),
                ],
            },
            ws::SavedBatch {
                batch: 2,
                first: 9,
                cancelled: true,
                limits: NO_LIMITS,
                calls: vec![
                    saved_call("c1", "u", None, &[(0, started)]),
                    saved_call("c2", "w", None, &[(0, started)]),
                    saved_call("c3", "w", None, &[(0, ws::Saved::Settled(R::Cancelled))]),
                ],
            },
            ws::SavedBatch {
                batch: 3,
                first: 12,
                cancelled: false,
                limits: NO_LIMITS,
                calls: vec![
                    saved_call("p", "u", None, &[]),
                    saved_call("q", "u", None, &[]),
                ],
            },
        ],
    };
    assert_eq!(state, expected);
    // The fingerprint: equal for equal policies (however written), different otherwise.
    let p1 = fingerprint(&mut s, P1);
    assert_eq!(state.policy, p1);
    assert_eq!(fingerprint(&mut s, P1_AGAIN), p1);
    let p2 = fingerprint(&mut s, P2);
    assert_ne!(p2, p1);
    assert_ne!(fingerprint(&mut s, ""), p1);
    assert_ne!(fingerprint(&mut s, ""), p2);
    // Exporting is a query: the scheduler is unchanged and goes on.
    assert_eq!(s.unfinished(), expected);
    assert_out(&s.approve(&[12]), &[12, 13], &[], &[], &[]);
}

#[test]
fn run_again_restores_every_state_with_the_same_numbers() {
    let mut s = every_state();
    let state = s.unfinished();
    let p = s.policy(P1);
    assert_eq!(s.resume(p, &state, ws::Started::RunAgain), Ok(Vec::new()));
    assert_eq!(
        s.states(1).unwrap(),
        [
            "run pending",
            "ask pending",
            "rej rejected",
            "s#0 ended-failed",
            "s#1 stopped 1",
            "s#2 stopped 1",
            "fo#0 pending",
            "fo#1 pending"
        ]
    );
    // A cancelled batch never runs again: what had started there is interrupted.
    assert_eq!(
        s.states(2).unwrap(),
        ["c1 interrupted", "c2 interrupted", "c3 cancelled"]
    );
    assert_eq!(s.states(3).unwrap(), ["p pending", "q pending"]);
    assert_out(
        &s.step(&none()),
        &[],
        &[(9, R::Interrupted), (10, R::Interrupted)],
        &[],
        &[2],
    );
    let resumed = s.unfinished();
    assert_eq!((resumed.next_batch, resumed.next_entry), (4, 14));
    assert_eq!(resumed.policy, state.policy);
    // The same numbers are stepped; what has a response cannot be decided again.
    let out = s.step(&Inputs {
        approve: vec![1, 2, 7, 8, 12, 13, 3, 5],
        ..none()
    });
    use crate::common::InputErrorCode as C;
    use crate::common::InputKind as K;
    assert_out(
        &out,
        &[1, 2, 7, 8, 12, 13],
        &[],
        &[
            (K::Approve, 6, C::AlreadyDecided),
            (K::Approve, 7, C::AlreadyDecided),
        ],
        &[],
    );
    // The interrupted c2 holds no slot of `w`; new numbers continue after the saved ones.
    assert_eq!(s.submit("w1", "w", &[0]), Ok((4, 14, 1)));
    assert_out(&s.approve(&[14]), &[14], &[], &[], &[]);
    assert_out(&s.ok(&[1, 2, 7, 8, 12, 13, 14]), &[], &[], &[], &[1, 3, 4]);
    let done = s.unfinished();
    assert!(done.batches.is_empty(), "{done:?}");
}

#[test]
fn interrupt_settles_what_had_started_in_the_first_step() {
    let mut s = every_state();
    let state = s.unfinished();
    let p = s.policy(P1);
    assert_eq!(s.resume(p, &state, ws::Started::Interrupt), Ok(Vec::new()));
    assert_eq!(
        s.states(1).unwrap(),
        [
            "run interrupted",
            "ask interrupted",
            "rej rejected",
            "s#0 ended-failed",
            "s#1 stopped 1",
            "s#2 stopped 1",
            "fo#0 interrupted",
            "fo#1 interrupted"
        ]
    );
    assert_eq!(
        s.states(2).unwrap(),
        ["c1 interrupted", "c2 interrupted", "c3 cancelled"]
    );
    assert_eq!(s.states(3).unwrap(), ["p pending", "q pending"]);
    let interrupted: Vec<(u64, R)> = [1, 2, 7, 8, 9, 10].map(|e| (e, R::Interrupted)).to_vec();
    assert_out(&s.step(&none()), &[], &interrupted, &[], &[1, 2]);
    assert_eq!(s.inspect(1), None);
    assert_eq!(s.label(1), None);
    // Reported once: a second empty step reports nothing.
    assert_out(&s.step(&none()), &[], &[], &[], &[]);
    assert_out(&s.approve(&[12, 13]), &[12, 13], &[], &[], &[]);
    assert_out(&s.ok(&[12, 13]), &[], &[], &[], &[3]);
}

#[test]
fn a_changed_policy_leaves_out_only_what_it_no_longer_allows() {
    let mut s = every_state();
    let state = s.unfinished();
    let p2 = s.policy(P2);
    let unrestored = s
        .resume(p2, &state, ws::Started::RunAgain)
        .expect("resumes");
    let listed: Vec<(u64, &str, ws::UnrestoredCode)> = unrestored
        .iter()
        .map(|u| (u.batch, u.call.as_str(), u.code))
        .collect();
    assert_eq!(listed, [(1, "fo", ws::UnrestoredCode::InvalidOperations)]);
    assert!(!unrestored[0].message.is_empty());
    // Everything else is restored; fo's entries are never released, the host answers them.
    assert_eq!(
        s.states(1).unwrap(),
        [
            "run pending",
            "ask pending",
            "rej rejected",
            "s#0 ended-failed",
            "s#1 stopped 1",
            "s#2 stopped 1",
            "fo#0 interrupted",
            "fo#1 interrupted"
        ]
    );
    assert_eq!(s.states(3).unwrap(), ["p pending", "q pending"]);
    assert_out(
        &s.step(&none()),
        &[],
        &[(9, R::Interrupted), (10, R::Interrupted)],
        &[],
        &[2],
    );
    use crate::common::InputErrorCode as C;
    use crate::common::InputKind as K;
    let out = s.step(&Inputs {
        approve: vec![1, 2, 7, 12, 13],
        ..none()
    });
    assert_out(
        &out,
        &[1, 2, 12, 13],
        &[],
        &[(K::Approve, 2, C::AlreadyDecided)],
        &[],
    );
    assert_out(
        &s.ok(&[1, 2, 8]),
        &[],
        &[],
        &[(K::Ok, 2, C::NotRunning)],
        &[1],
    );
    // Under P2 the export carries P2's fingerprint, and `f` is a plain tool now.
    let after = s.unfinished();
    assert_ne!(after.policy, state.policy);
    assert_eq!(
        s.submit("fo", "f", &[2]),
        Err(ws::SubmitErrorCode::NotFanOut)
    );
    assert_eq!(s.submit("fo", "f", &[0]), Ok((4, 14, 1)));
}

/// A host that resumes, exports again and crashes before its first `step` resumes a second
/// time: the entries the first resume interrupted were never reported, so the export saves them
/// as started again, and the second resume decides them afresh: under `run-again` they are
/// pending (they run again, and get their response then), except in a cancelled batch, where
/// they are interrupted; under `interrupt` its first `step` reports them all.
#[test]
fn a_second_restart_before_the_first_step_still_reports_interrupted_entries() {
    let mut s = every_state();
    let first = s.unfinished();
    let p = s.policy(P1);
    assert_eq!(s.resume(p, &first, ws::Started::Interrupt), Ok(Vec::new()));
    let second = s.unfinished();
    assert_eq!((second.next_batch, second.next_entry), (4, 14));
    // Nothing was reported in between: the export is the state before the first resume.
    assert_eq!(second, first);

    assert_eq!(s.resume(p, &second, ws::Started::RunAgain), Ok(Vec::new()));
    assert_eq!(
        s.states(1).unwrap(),
        [
            "run pending",
            "ask pending",
            "rej rejected",
            "s#0 ended-failed",
            "s#1 stopped 1",
            "s#2 stopped 1",
            "fo#0 pending",
            "fo#1 pending"
        ]
    );
    assert_eq!(
        s.states(2).unwrap(),
        ["c1 interrupted", "c2 interrupted", "c3 cancelled"]
    );
    assert_eq!(s.states(3).unwrap(), ["p pending", "q pending"]);
    assert_out(
        &s.step(&none()),
        &[],
        &[(9, R::Interrupted), (10, R::Interrupted)],
        &[],
        &[2],
    );
    assert_eq!(s.unfinished().batches.len(), 2);
    assert_out(
        &s.approve(&[1, 2, 7, 8, 12, 13]),
        &[1, 2, 7, 8, 12, 13],
        &[],
        &[],
        &[],
    );
    assert_out(&s.ok(&[1, 2, 7, 8, 12, 13]), &[], &[], &[], &[1, 3]);

    // The same export resumed under `interrupt`: its first step reports every one of them.
    assert_eq!(s.resume(p, &second, ws::Started::Interrupt), Ok(Vec::new()));
    let interrupted: Vec<(u64, R)> = [1, 2, 7, 8, 9, 10].map(|e| (e, R::Interrupted)).to_vec();
    assert_out(&s.step(&none()), &[], &interrupted, &[], &[1, 2]);
    assert_eq!(s.unfinished().batches.len(), 1);
}

/// Hostile saved states: each refused as a whole with its code, or each bad call listed with
/// why while the rest is restored and schedules.
#[test]
fn resume_refuses_bad_states() {
    let mut s = Sched::new(STOP_POLICY);
    assert_eq!(s.submit("a", "t", &[0]), Ok((1, 1, 1)));
    let good = s.unfinished();
    assert_eq!(good.version, 2);
    let p = s.policy;
    for version in [0, 1, 3, u32::MAX] {
        let state = ws::SavedState {
            version,
            ..good.clone()
        };
        assert_eq!(
            s.resume(p, &state, ws::Started::RunAgain),
            Err(ws::ResumeErrorCode::UnsupportedVersion),
            "version {version}"
        );
    }
    let call = |id: &str, tool: &str, operations: Option<u32>, entries: Vec<ws::SavedEntry>| {
        ws::SavedCall {
            id: id.to_owned(),
            tool: tool.to_owned(),
            operations,
            entries,
            keys: Vec::new(),
        }
    };
    let batch = |batch: u64, first: u64, calls: Vec<ws::SavedCall>| ws::SavedBatch {
        batch,
        first,
        cancelled: false,
        limits: NO_LIMITS,
        calls,
    };
    let at = |operation: u32, state: ws::Saved| ws::SavedEntry { operation, state };
    let state = |batches: Vec<ws::SavedBatch>| ws::SavedState {
        version: 2,
        policy: good.policy,
        next_batch: 10,
        next_entry: 21,
        batches,
    };
    for huge in [
        vec![call("h", "f", Some(u32::MAX), Vec::new())],
        (0..41)
            .map(|i| call(&format!("h{i}"), "f", Some(100_000), Vec::new()))
            .collect(),
    ] {
        assert_eq!(
            s.resume(p, &state(vec![batch(1, 1, huge)]), ws::Started::RunAgain),
            Err(ws::ResumeErrorCode::TooLarge)
        );
    }

    let long = "x".repeat(100_000);
    let started = ws::Saved::Started;
    let hostile = state(vec![
        batch(1, 1, vec![call("ok1", "t", None, Vec::new())]),
        batch(2, 1, vec![call("ov", "t", None, Vec::new())]),
        batch(1, 2, vec![call("dupnum", "t", None, Vec::new())]),
        batch(
            3,
            2,
            vec![
                call("", "t", None, Vec::new()),
                call("#", "t", None, Vec::new()),
                call(&long, "t", None, Vec::new()),
                call("ok1", "t", None, Vec::new()),
                call("plainop", "t", None, vec![at(1, started)]),
                call(
                    "fo",
                    "f",
                    Some(2),
                    vec![at(5, ws::Saved::Ended(ws::Outcome::Ok))],
                ),
                call("fo2", "f", Some(2), vec![at(1, started), at(1, started)]),
                call("nf", "t", Some(2), Vec::new()),
                call(
                    "ok2",
                    "f",
                    Some(2),
                    vec![at(0, ws::Saved::Ended(ws::Outcome::Failed))],
                ),
            ],
        ),
        batch(
            4,
            20,
            vec![
                call("far1", "t", None, Vec::new()),
                call("far2", "t", None, Vec::new()),
            ],
        ),
        batch(12, 15, vec![call("b12", "t", None, Vec::new())]),
        batch(5, 15, vec![call("zero", "f", Some(0), Vec::new())]),
        batch(6, 15, Vec::new()),
        batch(7, 16, vec![call("last", "t", None, Vec::new())]),
    ]);
    let unrestored = s
        .resume(p, &hostile, ws::Started::RunAgain)
        .expect("a state with bad calls resumes");
    use ws::UnrestoredCode as U;
    let listed: Vec<(u64, String, U)> = unrestored
        .iter()
        .map(|u| (u.batch, u.call.clone(), u.code))
        .collect();
    let want = |b: u64, c: &str, code: U| (b, c.to_owned(), code);
    assert_eq!(
        listed,
        [
            want(2, "ov", U::InvalidNumbers),
            want(1, "dupnum", U::InvalidNumbers),
            want(3, "", U::InvalidId),
            want(3, "#", U::InvalidId),
            want(3, &long, U::InvalidId),
            want(3, "ok1", U::DuplicateId),
            want(3, "plainop", U::InvalidOperations),
            want(3, "fo", U::InvalidOperations),
            want(3, "fo2", U::InvalidOperations),
            want(3, "nf", U::InvalidOperations),
            want(4, "far1", U::InvalidNumbers),
            want(4, "far2", U::InvalidNumbers),
            want(12, "b12", U::InvalidNumbers),
            want(5, "zero", U::InvalidNumbers),
        ]
    );
    for u in &unrestored {
        assert!(!u.message.is_empty(), "{u:?}");
    }
    // What was restored keeps its numbers.
    assert_eq!(s.label(0), None);
    assert_eq!(s.label(1).as_deref(), Some("ok1"));
    assert_eq!(s.label(13).as_deref(), Some("ok2#0"));
    assert_eq!(s.label(14).as_deref(), Some("ok2#1"));
    assert_eq!(s.label(16).as_deref(), Some("last"));
    for b in [2, 4, 5, 6, 12] {
        assert_eq!(s.inspect(b), None, "batch {b} was not restored");
    }
    let b3 = s.states(3).expect("batch 3 is live");
    assert_eq!(&b3[b3.len() - 2..], ["ok2#0 ended-failed", "ok2#1 pending"]);
    assert_out(&s.step(&none()), &[], &[], &[], &[]);
    // ok2#1 comes back behind a failed ok2#0 under stop: approving it stops it.
    assert_out(
        &s.approve(&[1, 14, 16]),
        &[1, 16],
        &[(14, ws::Reason::Stopped(1))],
        &[],
        &[3],
    );
    assert_out(&s.ok(&[1, 16]), &[], &[], &[], &[1, 7]);
    let after = s.unfinished();
    assert_eq!(
        (after.next_batch, after.next_entry, after.batches.len()),
        (10, 21, 0)
    );
    assert_eq!(s.submit("ok1", "t", &[0]), Ok((10, 21, 1)));
    // Numbers start at 1: a batch or an entry numbered 0 is not restored, and a state whose
    // next numbers are 0 does not hand out 0 afterwards.
    let zero = ws::SavedState {
        next_batch: 5,
        next_entry: 5,
        ..state(vec![
            batch(1, 0, vec![call("e0", "t", None, Vec::new())]),
            batch(0, 1, vec![call("b0", "t", None, Vec::new())]),
        ])
    };
    let unrestored = s
        .resume(p, &zero, ws::Started::RunAgain)
        .expect("a state numbered from 0 resumes");
    assert_eq!(
        unrestored
            .iter()
            .map(|u| (u.batch, u.call.as_str(), u.code))
            .collect::<Vec<_>>(),
        [(1, "e0", U::InvalidNumbers), (0, "b0", U::InvalidNumbers)]
    );
    assert_eq!(s.label(0), None);
    let zero = ws::SavedState {
        next_batch: 0,
        next_entry: 0,
        ..state(Vec::new())
    };
    assert_eq!(s.resume(p, &zero, ws::Started::RunAgain), Ok(Vec::new()));
    assert_eq!(s.submit("fresh", "t", &[0]), Ok((1, 1, 1)));
}

/// A resumed state's next numbers at the top of the `u64` range: `submit` hands out each
/// number at most once, never wraps around to numbers below them, and never hands out
/// `u64::MAX` or lets a counter reach it: the submit that would is refused with `too-large`,
/// takes no number, and the scheduler goes on.
#[test]
fn numbers_never_wrap_around() {
    use ws::SubmitErrorCode::TooLarge;
    const M: u64 = u64::MAX;
    let mut s = Sched::new(STOP_POLICY);
    let p = s.policy;
    let at = |s: &mut Sched, next_batch: u64, next_entry: u64| {
        let top = ws::SavedState {
            version: 2,
            policy: s.unfinished().policy,
            next_batch,
            next_entry,
            batches: Vec::new(),
        };
        assert_eq!(s.resume(p, &top, ws::Started::RunAgain), Ok(Vec::new()));
    };
    let next = |s: &mut Sched| {
        let st = s.unfinished();
        (st.next_batch, st.next_entry)
    };

    // At the top: handing out M - 1 would bring both counters to M. Nothing is handed out.
    at(&mut s, M - 1, M - 1);
    for id in ["a", "b", "c", "d"] {
        assert_eq!(s.submit(id, "t", &[0]), Err(TooLarge), "submit {id}");
    }
    assert_eq!(next(&mut s), (M - 1, M - 1));
    assert_out(
        &s.approve(&[M - 1, M]),
        &[],
        &[],
        &[
            (InputKind::Approve, 0, InputErrorCode::UnknownEntry),
            (InputKind::Approve, 1, InputErrorCode::UnknownEntry),
        ],
        &[],
    );

    // Batch numbers run out first: M - 3 and M - 2 are handed out, M - 1 never.
    at(&mut s, M - 3, 1_000);
    assert_eq!(s.submit("a", "t", &[0]), Ok((M - 3, 1_000, 1)));
    assert_eq!(s.submit("b", "t", &[0]), Ok((M - 2, 1_001, 1)));
    assert_eq!(s.submit("c", "t", &[0]), Err(TooLarge));
    assert_eq!(next(&mut s), (M - 1, 1_002));
    assert_out(&s.approve(&[1_000, 1_001]), &[1_000, 1_001], &[], &[], &[]);
    assert_out(&s.ok(&[1_000, 1_001]), &[], &[], &[], &[M - 3, M - 2]);
    assert_eq!(s.submit("c", "t", &[0]), Err(TooLarge));

    // Entry numbers run out first: a batch may end at M - 1 exclusive, never at M.
    at(&mut s, 5, M - 4);
    assert_eq!(s.submit("f1", "f", &[2]), Ok((5, M - 4, 2)));
    assert_eq!(s.submit("g", "f", &[2]), Err(TooLarge), "would end at M");
    assert_eq!(s.submit("h", "f", &[3]), Err(TooLarge), "would wrap");
    assert_eq!(next(&mut s), (6, M - 2));
    assert_eq!(s.submit("a", "t", &[0]), Ok((6, M - 2, 1)));
    assert_eq!(s.submit("b", "t", &[0]), Err(TooLarge));
    assert_eq!(next(&mut s), (7, M - 1));
    // The instance keeps working: what was handed out runs and retires.
    assert_out(
        &s.approve(&[M - 4, M - 3, M - 2]),
        &[M - 4, M - 3, M - 2],
        &[],
        &[],
        &[],
    );
    assert_out(&s.ok(&[M - 4, M - 3, M - 2]), &[], &[], &[], &[5, 6]);
    assert_eq!(s.label(M - 1), None);
    assert_eq!(s.label(M), None);
}
