//! Results that cross in parts: a round of more than 65536 actions (`releases.more`) and an
//! export of more than one part (`unfinished(part)`), so that no result copies more than a few
//! MiB out of the component (wasmtime-py's dynamic API traps past 128 MiB). Needs
//! `cargo xtask build-guest` first.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;

use common::Sched;
use host_harness::wit_scheduler as ws;

const POLICY: &str = "\
[conversation.tools.run]
concurrency = 0
fan_out = true
";

const PART_MAX: usize = 1 << 16;
const OPERATIONS: u32 = 100_000;

fn raw_next_releases(s: &mut Sched, now: Option<u64>) -> ws::Releases {
    let iface = s.inst.exports.turnstile_scheduler_scheduler().scheduler();
    iface
        .call_next_releases(&mut s.inst.store, s.s, now)
        .expect("no trap")
}

fn raw_unfinished(s: &mut Sched, part: u32) -> Result<ws::SavedPart, ws::UnfinishedError> {
    let iface = s.inst.exports.turnstile_scheduler_scheduler().scheduler();
    iface
        .call_unfinished(&mut s.inst.store, s.s, part)
        .expect("no trap")
}

/// `n` fan-out calls of 100000 operations, each approved and started.
fn started(n: u32) -> Sched {
    let mut s = Sched::new(POLICY);
    for k in 0..n {
        let (_, first, count) = s
            .submit(&format!("fan-{k}"), "run", &[OPERATIONS])
            .expect("submitted");
        let refused = s.on_events(&[ws::Event::Approve(
            (first..first + u64::from(count)).collect(),
        )]);
        assert!(refused.is_empty());
        let out = s.next_releases(Some(0));
        assert_eq!(out.start.len(), OPERATIONS as usize);
    }
    s
}

#[test]
fn a_round_of_more_than_a_part_crosses_in_parts_in_order() {
    let mut s = Sched::new(POLICY);
    let _ = raw_next_releases(&mut s, Some(10));
    let (_, first, count) = s.submit("fan", "run", &[OPERATIONS]).expect("submitted");
    s.on_events(&[ws::Event::Approve(
        (first..first + u64::from(count)).collect(),
    )]);
    // A clock that goes back: refused, in the first part only.
    let one = raw_next_releases(&mut s, Some(5));
    assert!(one.refused.is_some());
    assert!(one.more && one.wake_at.is_none());
    assert_eq!(one.start.len(), PART_MAX);
    assert_eq!(one.start[0], first);
    // The next call continues the round, whatever its `now` (even an earlier one).
    let two = raw_next_releases(&mut s, Some(1));
    assert!(two.refused.is_none(), "{:?}", two.refused);
    assert!(!two.more);
    assert_eq!(two.start.len(), OPERATIONS as usize - PART_MAX);
    assert_eq!(two.start[0], first + PART_MAX as u64);
    // The round is over: the next call is a new round at its own `now`.
    let three = raw_next_releases(&mut s, Some(1));
    assert!(three.refused.is_some(), "a new round reads its now");
    assert!(three.start.is_empty() && !three.more);
}

#[test]
fn an_input_between_parts_applies_and_the_last_part_wakes_the_host_at_once() {
    // A plain call on a key of limit 1 runs; then a fan-out of 100000 operations is released
    // in two parts. Between them the plain call ends: that applies at once, the second part
    // still hands out the round as decided, and its wake-at is the clock, so the host's next
    // call runs a round that sees the freed slot.
    let mut s = Sched::new(
        "[conversation.tools.one]\nconcurrency = 1\n[conversation.tools.run]\nconcurrency = 0\nfan_out = true\n",
    );
    let (_, a, _) = s.submit("a", "one", &[]).expect("submitted");
    let (_, b, _) = s.submit("b", "one", &[]).expect("submitted");
    s.on_events(&[ws::Event::Approve(vec![a, b])]);
    assert_eq!(s.next_releases(Some(7)).start, vec![a]);
    let (_, first, count) = s.submit("fan", "run", &[OPERATIONS]).expect("submitted");
    s.on_events(&[ws::Event::Approve(
        (first..first + u64::from(count)).collect(),
    )]);
    let one = raw_next_releases(&mut s, Some(7));
    assert!(one.more);
    let ended = ws::Ends {
        ok: vec![a],
        failed: Vec::new(),
        rate_limited: Vec::new(),
    };
    assert!(
        s.on_ended(&ended).is_empty(),
        "an end between parts applies at once"
    );
    let two = raw_next_releases(&mut s, Some(9));
    assert!(!two.more);
    assert_eq!(
        two.start.len(),
        OPERATIONS as usize - PART_MAX,
        "the round as decided"
    );
    assert!(!two.start.contains(&b));
    assert_eq!(
        two.wake_at,
        Some(7),
        "the clock as last given: call again now"
    );
    assert_eq!(raw_next_releases(&mut s, Some(9)).start, vec![b]);
}

#[test]
fn a_round_in_parts_keeps_the_lists_order_across_parts() {
    // 100000 operations on a key of limit 1: one runs, the rest wait; a cancel aborts the one
    // and settles the rest, in one round of 100001 actions.
    let mut s = Sched::new("[conversation.tools.one]\nconcurrency = 1\nfan_out = true\n");
    let (batch, first, count) = s.submit("fan", "one", &[OPERATIONS]).expect("submitted");
    s.on_events(&[ws::Event::Approve(
        (first..first + u64::from(count)).collect(),
    )]);
    assert_eq!(s.next_releases(Some(0)).start, vec![first]);
    s.on_events(&[ws::Event::Cancel(batch)]);
    let one = raw_next_releases(&mut s, Some(1));
    assert_eq!(one.abort.len(), 1, "abort first");
    assert_eq!(one.settled.len(), PART_MAX - 1);
    assert!(one.more && one.wake_at.is_none());
    let two = raw_next_releases(&mut s, Some(1));
    assert!(two.abort.is_empty());
    assert_eq!(two.settled.len(), OPERATIONS as usize - PART_MAX);
    assert_eq!(two.settled[0].entry, one.settled[PART_MAX - 2].entry + 1);
    assert!(!two.more);
    // The aborted one ends: the batch retires.
    let ended = ws::Ends {
        ok: Vec::new(),
        failed: vec![first],
        rate_limited: Vec::new(),
    };
    assert!(s.on_ended(&ended).is_empty());
    assert_eq!(s.next_releases(Some(2)).retired, vec![batch]);
}

#[test]
fn an_export_of_more_than_a_part_joins_to_the_state_and_resumes() {
    let mut s = started(3);
    let one = raw_unfinished(&mut s, 0).expect("part 0");
    assert_eq!(one.parts, 3, "a call of 100000 entries to a part");
    let joined = s.unfinished();
    let entries: usize = joined
        .batches
        .iter()
        .flat_map(|b| &b.calls)
        .map(|c| c.entries.len())
        .sum();
    assert_eq!(entries, 3 * OPERATIONS as usize);
    assert_eq!(joined.batches.len(), 3);
    // Resumed as interrupted: every entry settled, over parts of a round.
    let policy = s.policy;
    s.resume(policy, &joined, ws::Started::Interrupt)
        .expect("resumed");
    let out = s.next_releases(Some(0));
    assert_eq!(out.settled.len(), 3 * OPERATIONS as usize);
    assert_eq!(out.retired.len(), 3);
}

#[test]
fn a_later_part_after_a_change_is_stale_and_past_the_last_is_out_of_range() {
    let mut s = started(2);
    // No part 0 yet.
    let e = raw_unfinished(&mut s, 1).expect_err("no export");
    assert_eq!(e.code, ws::UnfinishedErrorCode::Stale);
    assert_eq!(raw_unfinished(&mut s, 0).expect("part 0").parts, 2);
    assert!(raw_unfinished(&mut s, 1).is_ok());
    assert!(
        raw_unfinished(&mut s, 1).is_ok(),
        "a part may be asked again"
    );
    let e = raw_unfinished(&mut s, 2).expect_err("past the end");
    assert_eq!(e.code, ws::UnfinishedErrorCode::OutOfRange);
    assert!(e.message.contains("0 to 1"), "{}", e.message);
    // Queries leave the export; a change ends it.
    let _ = s.label(1);
    assert!(raw_unfinished(&mut s, 1).is_ok());
    let _ = s.next_releases(Some(1));
    let e = raw_unfinished(&mut s, 1).expect_err("changed");
    assert_eq!(e.code, ws::UnfinishedErrorCode::Stale);
    assert!(
        raw_unfinished(&mut s, 0).is_ok(),
        "part 0 takes a fresh export"
    );
}

#[test]
fn a_batch_of_more_than_a_part_is_inspected_in_parts_from_an_offset() {
    let mut s = Sched::new(POLICY);
    let (batch, ..) = s
        .submit("a\nb", "run\nrun", &[OPERATIONS, OPERATIONS])
        .expect("submitted");
    let mut raw = |offset: u32| {
        let iface = s.inst.exports.turnstile_scheduler_scheduler().scheduler();
        iface
            .call_inspect(&mut s.inst.store, s.s, batch, offset)
            .expect("no trap")
            .expect("live")
    };
    assert_eq!(raw(0).len(), PART_MAX);
    let second = raw(PART_MAX as u32);
    assert_eq!(second.len(), PART_MAX);
    assert_eq!(second[0].label, format!("a#{PART_MAX}"));
    assert_eq!(raw(2 * PART_MAX as u32).len(), PART_MAX);
    assert_eq!(
        raw(3 * PART_MAX as u32).len(),
        2 * OPERATIONS as usize - 3 * PART_MAX
    );
    assert!(raw(2 * OPERATIONS).is_empty(), "past the last entry");
    assert!(raw(u32::MAX).is_empty());
    let all = s.inspect(batch).expect("live");
    assert_eq!(all.len(), 2 * OPERATIONS as usize);
    assert_eq!(all[OPERATIONS as usize].label, "b#0");
}
