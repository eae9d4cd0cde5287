//! `step` through the component: one mistake among good inputs punishes nobody, and a retired
//! batch's numbers stay unknown forever while its call ids are reused. Needs
//! `cargo xtask build-guest` first.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;

use common::InputErrorCode as C;
use common::InputKind as K;
use common::{HostSettle, HostSettlement, Inputs, Sched, assert_out, none};
use host_harness::wit_scheduler as ws;

/// Keys `j` and `k` of limit 1; tool `u` is unconfigured (unbounded).
const KEYS: &str =
    "[conversation.tools.j]\nconcurrency = 1\n\n[conversation.tools.k]\nconcurrency = 1\n";

/// Batch A (1): a1 ended ok (1), a2 running on `j` (2), a3 approved behind it (3).
/// Batch B (2): b1 running on `k` (4), b2 approved waiting for `k` (5).
fn two_batches() -> Sched {
    let mut s = Sched::new(KEYS);
    assert_eq!(s.submit("a1\na2\na3", "u\nj\nj", &[0, 0, 0]), Ok((1, 1, 3)));
    assert_eq!(s.submit("b1\nb2", "k\nk", &[0, 0]), Ok((2, 4, 2)));
    assert_out(&s.approve(&[1, 2, 3]), &[1, 2], &[], &[], &[]);
    assert_out(&s.ok(&[1]), &[], &[], &[], &[]);
    assert_out(&s.approve(&[4, 5]), &[4], &[], &[], &[]);
    s
}

/// After the mixed step: A is untouched, b1 ended, b2 runs; then everything finishes normally.
fn finish(s: &mut Sched, b1: &str) {
    assert_eq!(
        s.states(1).unwrap(),
        ["a1 ended-ok", "a2 running", "a3 approved"]
    );
    assert_eq!(
        s.states(2).unwrap(),
        [format!("b1 {b1}"), "b2 running".to_owned()]
    );
    assert_out(&s.ok(&[2]), &[3], &[], &[], &[]);
    assert_out(&s.ok(&[3, 5]), &[], &[], &[], &[1, 2]);
}

#[test]
fn an_end_that_already_happened_does_not_block_another_batch() {
    let mut s = two_batches();
    let out = s.ok(&[1, 4]);
    assert_out(&out, &[5], &[], &[(K::Ok, 0, C::AlreadyEnded)], &[]);
    assert!(out.errors[0].message.contains("a1"), "{:?}", out.errors[0]);
    finish(&mut s, "ended-ok");
}

#[test]
fn an_end_of_an_entry_not_running_does_not_block_another_batch() {
    let mut s = two_batches();
    let out = s.step(&Inputs {
        ok: vec![4],
        failed: vec![3],
        ..none()
    });
    assert_out(&out, &[5], &[], &[(K::Failed, 0, C::NotRunning)], &[]);
    assert!(out.errors[0].message.contains("a3"), "{:?}", out.errors[0]);
    finish(&mut s, "ended-ok");
}

#[test]
fn an_end_of_an_unknown_entry_does_not_block_another_batch() {
    let mut s = two_batches();
    let out = s.step(&Inputs {
        failed: vec![4, u64::MAX, 6, 0],
        ..none()
    });
    assert_out(
        &out,
        &[5],
        &[],
        &[
            (K::Failed, 1, C::UnknownEntry),
            (K::Failed, 2, C::UnknownEntry),
            (K::Failed, 3, C::UnknownEntry),
        ],
        &[],
    );
    finish(&mut s, "ended-failed");
}

#[test]
fn every_kind_of_mistake_in_one_step_leaves_the_good_inputs_applied() {
    let mut s = two_batches();
    // C (3): one plain call, pending; its approval opens it next to a repeated approval of A's.
    assert_eq!(s.submit("c1", "u", &[0]), Ok((3, 6, 1)));
    assert_eq!(s.submit("d1", "u", &[0]), Ok((4, 7, 1)));
    let out = s.step(&Inputs {
        approve: vec![3, 6],
        settle: vec![HostSettlement {
            entry: 1,
            how: HostSettle::Rejected,
        }],
        ask: vec![3, 2],
        answer: vec![4],
        ok: vec![1, 4, 3],
        failed: vec![u64::MAX],
        cancel: vec![1_000, 4, 4],
        ..none()
    });
    assert_out(
        &out,
        &[5, 6],
        &[(7, ws::Reason::Cancelled)],
        &[
            (K::Approve, 0, C::AlreadyDecided),
            (K::Settle, 0, C::AlreadyDecided),
            (K::Ask, 0, C::NotRunning),
            (K::Answer, 0, C::NotAsking),
            (K::Ok, 0, C::AlreadyEnded),
            (K::Ok, 2, C::NotRunning),
            (K::Failed, 0, C::UnknownEntry),
            (K::Cancel, 0, C::UnknownBatch),
            (K::Cancel, 2, C::BatchCancelled),
        ],
        &[4],
    );
    // a2 asked (index 1 of `ask`) and keeps its slot; answered, it runs on.
    assert_eq!(
        s.states(1).unwrap(),
        ["a1 ended-ok", "a2 asking", "a3 approved"]
    );
    let out = s.step(&Inputs {
        answer: vec![2],
        ok: vec![6],
        ..none()
    });
    assert_out(&out, &[], &[], &[], &[3]);
    finish(&mut s, "ended-ok");
}

/// A retired batch's numbers are unknown forever, even once its call ids name new entries;
/// 10,000 batches reusing four ids leave nothing behind and stop growing memory.
#[test]
fn stale_numbers_never_name_new_entries() {
    let mut s = Sched::new(KEYS);
    let ids = "call_0\ncall_1\ncall_2\ncall_3";
    let tools = "k\nu\nk\nu";
    let mut previous: Option<(u64, u64)> = None;
    let mut peak_early = 0;
    for n in 0..10_000u64 {
        let (batch, first) = (n + 1, 4 * n + 1);
        assert_eq!(s.submit(ids, tools, &[0, 0, 0, 0]), Ok((batch, first, 4)));
        let new: Vec<u64> = (first..first + 4).collect();
        // The previous batch's numbers, next to the new batch's approvals: all unknown, and
        // none of them ends a new entry.
        let stale: Vec<u64> = previous.map_or(Vec::new(), |(_, f)| (f..f + 4).collect());
        let out = s.step(&Inputs {
            approve: new.clone(),
            ok: stale.clone(),
            cancel: previous.map_or(Vec::new(), |(b, _)| vec![b]),
            ..none()
        });
        let mut expected: Vec<(K, u32, C)> = (0..stale.len() as u32)
            .map(|i| (K::Ok, i, C::UnknownEntry))
            .collect();
        if previous.is_some() {
            expected.push((K::Cancel, 0, C::UnknownBatch));
        }
        assert_out(&out, &[first, first + 1, first + 3], &[], &expected, &[]);
        if let Some((b, f)) = previous {
            assert_eq!(s.label(f), None, "stale entry {f}");
            assert_eq!(s.inspect(b), None, "stale batch {b}");
        }
        assert_eq!(s.label(first + 2).as_deref(), Some("call_2"));
        assert_out(
            &s.ok(&[first, first + 1, first + 3]),
            &[first + 2],
            &[],
            &[],
            &[],
        );
        assert_out(&s.ok(&[first + 2]), &[], &[], &[], &[batch]);
        previous = Some((batch, first));
        if n == 500 {
            peak_early = s.inst.store.data().memory_peak();
        }
    }
    let state = s.unfinished();
    assert_eq!(state.batches.len(), 0);
    assert_eq!((state.next_batch, state.next_entry), (10_001, 40_001));
    for stale in [0, 1, 2, 3, 4, 20_001, 40_000, 40_001] {
        assert_eq!(s.label(stale), None);
    }
    let out = s.approve(&[0, 1, 20_001, 40_000, 40_001]);
    assert_out(
        &out,
        &[],
        &[],
        &[
            (K::Approve, 0, C::UnknownEntry),
            (K::Approve, 1, C::UnknownEntry),
            (K::Approve, 2, C::UnknownEntry),
            (K::Approve, 3, C::UnknownEntry),
            (K::Approve, 4, C::UnknownEntry),
        ],
        &[],
    );
    let peak = s.inst.store.data().memory_peak();
    assert!(
        peak_early > 0,
        "the limiter saw no growth at all: the oracle is blind"
    );
    assert_eq!(
        peak, peak_early,
        "linear memory grew from {peak_early} to {peak} bytes between batch 500 and 10,000"
    );
}
