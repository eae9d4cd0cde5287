//! Admission tickets through the component: a stale or repeated ticket touches no other
//! request, shutdown's reports are never admitted, abandon frees an undrained admission.
//! Needs `cargo xtask build-guest` first.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;

use common::{STOP_POLICY, Sched, assert_out, harness, hostile_strings};
use host_harness::{Instance, wit_admission as wa};
use wasmtime::component::ResourceAny;

use wa::Class::{Call, Control, Reentrant, Request};
use wa::ErrorCode as E;

/// One instance with one admission controller; every call fails the test on a trap.
struct Adm {
    inst: Instance,
    a: ResourceAny,
}

impl Adm {
    fn new(max_concurrent: u32, allow_parallel: bool) -> Self {
        let mut inst = harness().instance().expect("no trap");
        let iface = inst.exports.turnstile_scheduler_admission().admission();
        let config = wa::AdmissionConfig {
            max_concurrent,
            allow_parallel,
            tag: 0,
        };
        let a = iface
            .call_constructor(&mut inst.store, config)
            .expect("no trap");
        Self { inst, a }
    }

    fn begin(&mut self, id: &str, class: wa::Class, parent: Option<u64>) -> Result<u64, E> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_admission()
            .admission();
        let r = iface
            .call_begin(&mut self.inst.store, self.a, id, class, parent)
            .unwrap_or_else(|e| panic!("begin trapped: {e:#}"));
        r.map_err(|e| {
            assert!(!e.message.is_empty(), "{e:?}");
            e.code
        })
    }

    /// `begin` that must succeed.
    #[track_caller]
    fn ticket(&mut self, id: &str, class: wa::Class) -> u64 {
        self.begin(id, class, None)
            .unwrap_or_else(|e| panic!("begin {id}: {e:?}"))
    }

    fn end(&mut self, ticket: u64) -> Result<(), E> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_admission()
            .admission();
        let r = iface
            .call_end(&mut self.inst.store, self.a, ticket)
            .unwrap_or_else(|e| panic!("end trapped: {e:#}"));
        r.map_err(|e| e.code)
    }

    fn abandon(&mut self, ticket: u64) -> Result<(), E> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_admission()
            .admission();
        let r = iface
            .call_abandon(&mut self.inst.store, self.a, ticket)
            .unwrap_or_else(|e| panic!("abandon trapped: {e:#}"));
        r.map_err(|e| e.code)
    }

    fn shutdown(&mut self) -> (Vec<u64>, Vec<u64>) {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_admission()
            .admission();
        let r = iface
            .call_shutdown(&mut self.inst.store, self.a)
            .unwrap_or_else(|e| panic!("shutdown trapped: {e:#}"));
        (r.cancel, r.refused)
    }

    fn admitted(&mut self) -> Vec<u64> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_admission()
            .admission();
        iface
            .call_next_admissions(&mut self.inst.store, self.a)
            .unwrap_or_else(|e| panic!("next-admissions trapped: {e:#}"))
    }

    fn in_flight(&mut self) -> u32 {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_admission()
            .admission();
        iface
            .call_in_flight(&mut self.inst.store, self.a)
            .unwrap_or_else(|e| panic!("in-flight trapped: {e:#}"))
    }
}

#[test]
fn a_repeated_end_is_unknown_and_releases_nothing() {
    let mut a = Adm::new(1, false);
    let t1 = a.ticket("x", Call);
    assert_eq!(a.admitted(), [t1]);
    let t2 = a.ticket("y", Call);
    assert_eq!(a.admitted(), Vec::<u64>::new(), "one call at a time");
    assert_eq!(a.end(t1), Ok(()));
    assert_eq!(a.admitted(), [t2]);
    // t1 again: unknown, and y keeps its slot.
    assert_eq!(a.end(t1), Err(E::UnknownRequest));
    assert_eq!(a.abandon(t1), Err(E::UnknownRequest));
    assert_eq!(a.in_flight(), 1);
    let t3 = a.ticket("z", Call);
    assert_eq!(
        a.admitted(),
        Vec::<u64>::new(),
        "the stale end released y's slot"
    );
    assert_eq!(a.end(t2), Ok(()));
    assert_eq!(a.admitted(), [t3]);
    assert_eq!(a.end(t3), Ok(()));
    assert_eq!(a.in_flight(), 0);
}

#[test]
fn the_first_ticket_of_an_id_that_began_again_is_unknown() {
    let mut a = Adm::new(1, false);
    let first = a.ticket("x", Call);
    assert_eq!(a.admitted(), [first]);
    assert_eq!(a.end(first), Ok(()));
    let second = a.ticket("x", Call);
    assert_ne!(second, first, "a ticket was handed out twice");
    assert_eq!(a.admitted(), [second]);
    assert_eq!(a.end(first), Err(E::UnknownRequest));
    assert_eq!(a.abandon(first), Err(E::UnknownRequest));
    assert_eq!(a.in_flight(), 1);
    let waiting = a.ticket("w", Call);
    assert_eq!(
        a.admitted(),
        Vec::<u64>::new(),
        "the stale end released the new x"
    );
    // A stale ticket is no parent either.
    assert_eq!(
        a.begin("child", Reentrant, Some(first)),
        Err(E::InvalidParent)
    );
    assert_eq!(a.end(second), Ok(()));
    assert_eq!(a.admitted(), [waiting]);
    // Requests too: budget 2, a stale end of a reused id frees nothing.
    let mut b = Adm::new(2, true);
    let r1 = b.ticket("r", Request);
    assert_eq!(b.admitted(), [r1]);
    assert_eq!(b.end(r1), Ok(()));
    let r2 = b.ticket("r", Request);
    let o = b.ticket("o", Request);
    assert_eq!(b.admitted(), [r2, o]);
    assert_eq!(b.end(r1), Err(E::UnknownRequest));
    let q = b.ticket("q", Request);
    assert_eq!(
        b.admitted(),
        Vec::<u64>::new(),
        "the stale end freed budget"
    );
    assert_eq!(b.end(r2), Ok(()));
    assert_eq!(b.admitted(), [q]);
}

/// Shutdown reports drained requests in flight as `cancel` (each still needs its `end`), and
/// queued requests and undrained admissions as `refused` in arrival order (the host never
/// started those; their tickets retire). Nothing it reports is admitted afterwards.
#[test]
fn nothing_shutdown_reports_is_admitted_afterwards() {
    let mut a = Adm::new(2, false);
    let c1 = a.ticket("c1", Call);
    assert_eq!(a.admitted(), [c1]);
    // r1 is admitted but not drained; the rest wait.
    let r1 = a.ticket("r1", Request);
    let c2 = a.ticket("c2", Call);
    let k1 = a.ticket("k1", Control);
    let r2 = a.ticket("r2", Request);
    assert_eq!(a.in_flight(), 2);
    assert_eq!(a.shutdown(), (vec![c1], vec![r1, c2, k1, r2]));
    assert_eq!(
        a.admitted(),
        Vec::<u64>::new(),
        "admitted after shutdown reported it"
    );
    assert_eq!(a.begin("late", Request, None), Err(E::Shutdown));
    // Ending what was cancelled frees budget, and still nothing refused is admitted.
    assert_eq!(a.end(c1), Ok(()));
    assert_eq!(a.admitted(), Vec::<u64>::new());
    for t in [r1, c2, k1, r2] {
        assert_eq!(a.end(t), Err(E::UnknownRequest), "refused ticket {t}");
        assert_eq!(a.abandon(t), Err(E::UnknownRequest), "refused ticket {t}");
    }
    assert_eq!(a.end(c1), Err(E::UnknownRequest));
    assert_eq!(a.in_flight(), 0);
    assert_eq!(a.shutdown(), (Vec::new(), Vec::new()));
    assert_eq!(a.admitted(), Vec::<u64>::new());
}

#[test]
fn an_admission_inside_end_is_refused_by_shutdown_and_never_reported() {
    let mut a = Adm::new(1, false);
    let first = a.ticket("a", Call);
    assert_eq!(a.admitted(), [first]);
    let next = a.ticket("b", Call);
    assert_eq!(a.end(first), Ok(()));
    // `next` is admitted now, but the host has not drained it: it never started.
    assert_eq!(a.in_flight(), 1);
    assert_eq!(a.shutdown(), (Vec::new(), vec![next]));
    assert_eq!(
        a.admitted(),
        Vec::<u64>::new(),
        "refused, then reported admitted"
    );
    assert_eq!(a.end(next), Err(E::UnknownRequest));
    assert_eq!(a.in_flight(), 0);
}

#[test]
fn abandon_frees_an_admitted_but_undrained_request() {
    let mut a = Adm::new(1, false);
    let first = a.ticket("a", Call);
    assert_eq!(a.admitted(), [first]);
    let next = a.ticket("b", Call);
    assert_eq!(a.end(first), Ok(()));
    assert_eq!(a.in_flight(), 1);
    assert_eq!(a.abandon(next), Ok(()));
    assert_eq!(a.in_flight(), 0);
    assert_eq!(
        a.admitted(),
        Vec::<u64>::new(),
        "an abandoned request was reported admitted"
    );
    assert_eq!(a.abandon(next), Err(E::UnknownRequest));
    assert_eq!(a.end(next), Err(E::UnknownRequest));
    // Its slot is free: the next call is admitted at once.
    let c = a.ticket("c", Call);
    assert_eq!(a.admitted(), [c]);
    // A queued request abandoned: gone, it is never admitted.
    let d = a.ticket("d", Call);
    assert_eq!(a.end(d), Err(E::NotAdmitted));
    assert_eq!(a.abandon(d), Ok(()));
    assert_eq!(a.end(c), Ok(()));
    assert_eq!(a.admitted(), Vec::<u64>::new());
    assert_eq!(a.in_flight(), 0);
    // A drained admission is ended, not abandoned.
    let e = a.ticket("e", Call);
    assert_eq!(a.admitted(), [e]);
    assert_eq!(a.abandon(e), Err(E::NotQueued));
    assert_eq!(a.end(e), Ok(()));
}

#[test]
fn too_many_live_requests_is_an_error_not_a_trap() {
    let mut a = Adm::new(1, false);
    let mut tickets = Vec::with_capacity(100_000);
    for i in 0..100_000 {
        tickets.push(a.ticket(&format!("q{i}"), Request));
    }
    assert_eq!(a.admitted(), [tickets[0]]);
    assert_eq!(a.begin("one-more", Request, None), Err(E::TooMany));
    assert_eq!(a.abandon(tickets[99_999]), Ok(()));
    let last = a.ticket("one-more", Request);
    assert!(!tickets.contains(&last));
    assert_eq!(a.end(tickets[0]), Ok(()));
    assert_eq!(a.admitted(), [tickets[1]]);
}

/// Every admission function with hostile values: typed errors, never a trap.
#[test]
fn admission_survives_hostile_input() {
    let mut inst = harness().instance().expect("no trap");
    let adm = inst.exports.turnstile_scheduler_admission().admission();
    // A budget of u32::MAX with parallel calls: every valid request is admitted at once.
    let a = adm
        .call_constructor(
            &mut inst.store,
            wa::AdmissionConfig {
                max_concurrent: u32::MAX,
                allow_parallel: true,
                tag: 0,
            },
        )
        .expect("no trap");
    let mut seen = Vec::new();
    for id in hostile_strings() {
        let st = &mut inst.store;
        let begun = adm
            .call_begin(&mut *st, a, &id, Call, None)
            .expect("no trap");
        if id.is_empty() || id.len() > 256 {
            assert_eq!(begun.map_err(|e| e.code), Err(E::InvalidId), "{id:.20?}");
            continue;
        }
        let t = begun.unwrap_or_else(|e| panic!("begin {id:.20?}: {e:?}"));
        assert!(!seen.contains(&t), "ticket {t} handed out twice");
        seen.push(t);
        assert_eq!(adm.call_next_admissions(&mut *st, a).expect("no trap"), [t]);
        let again = adm.call_begin(&mut *st, a, &id, Request, None);
        assert_eq!(
            again.expect("no trap").map_err(|e| e.code),
            Err(E::DuplicateRequest)
        );
        for class in [Call, Request, Control] {
            let r = adm
                .call_begin(&mut *st, a, "child", class, Some(t))
                .expect("no trap");
            assert_eq!(r.map_err(|e| e.code), Err(E::InvalidParent), "{class:?}");
        }
        for parent in [None, Some(u64::MAX)] {
            let r = adm
                .call_begin(&mut *st, a, "child", Reentrant, parent)
                .expect("no trap");
            assert_eq!(r.map_err(|e| e.code), Err(E::InvalidParent), "{parent:?}");
        }
        let child = adm
            .call_begin(&mut *st, a, "child", Reentrant, Some(t))
            .expect("no trap")
            .unwrap_or_else(|e| panic!("re-entrant child of {t}: {e:?}"));
        assert!(!seen.contains(&child));
        seen.push(child);
        assert_eq!(
            adm.call_next_admissions(&mut *st, a).expect("no trap"),
            [child]
        );
        assert_eq!(
            adm.call_abandon(&mut *st, a, child)
                .expect("no trap")
                .map_err(|e| e.code),
            Err(E::NotQueued)
        );
        assert_eq!(adm.call_end(&mut *st, a, child).expect("no trap"), Ok(()));
        assert_eq!(adm.call_end(&mut *st, a, t).expect("no trap"), Ok(()));
        for stale in [t, child] {
            let end = adm.call_end(&mut *st, a, stale).expect("no trap");
            assert_eq!(end.map_err(|e| e.code), Err(E::UnknownRequest));
            let abandon = adm.call_abandon(&mut *st, a, stale).expect("no trap");
            assert_eq!(abandon.map_err(|e| e.code), Err(E::UnknownRequest));
        }
    }
    let never = seen.iter().max().copied().unwrap_or(0) + 1_000_000;
    for t in [u64::MAX, never] {
        let st = &mut inst.store;
        assert_eq!(
            adm.call_end(&mut *st, a, t)
                .expect("no trap")
                .map_err(|e| e.code),
            Err(E::UnknownRequest)
        );
        assert_eq!(
            adm.call_abandon(&mut *st, a, t)
                .expect("no trap")
                .map_err(|e| e.code),
            Err(E::UnknownRequest)
        );
    }
    assert_eq!(adm.call_in_flight(&mut inst.store, a).expect("no trap"), 0);

    // A budget of 0 (clamped to 1), calls one at a time.
    let b = adm
        .call_constructor(
            &mut inst.store,
            wa::AdmissionConfig {
                max_concurrent: 0,
                allow_parallel: false,
                tag: 0,
            },
        )
        .expect("no trap");
    let st = &mut inst.store;
    let first = adm
        .call_begin(&mut *st, b, "first", Call, None)
        .expect("no trap")
        .expect("admitted");
    let second = adm
        .call_begin(&mut *st, b, "second", Call, None)
        .expect("no trap")
        .expect("queued");
    assert_eq!(
        adm.call_next_admissions(&mut *st, b).expect("no trap"),
        [first]
    );
    assert_eq!(
        adm.call_end(&mut *st, b, second)
            .expect("no trap")
            .map_err(|e| e.code),
        Err(E::NotAdmitted)
    );
    assert_eq!(
        adm.call_abandon(&mut *st, b, first)
            .expect("no trap")
            .map_err(|e| e.code),
        Err(E::NotQueued)
    );
    let deadlock = adm.call_begin(&mut *st, b, "child", Reentrant, Some(first));
    assert_eq!(
        deadlock.expect("no trap").map_err(|e| e.code),
        Err(E::WouldDeadlock)
    );
    let report = adm.call_shutdown(&mut *st, b).expect("no trap");
    assert_eq!((report.cancel, report.refused), (vec![first], vec![second]));
    let late = adm
        .call_begin(&mut *st, b, "late", Call, None)
        .expect("no trap");
    assert_eq!(late.map_err(|e| e.code), Err(E::Shutdown));
    assert_eq!(adm.call_in_flight(&mut *st, b).expect("no trap"), 1);
    assert_eq!(adm.call_end(&mut *st, b, first).expect("no trap"), Ok(()));
    assert_eq!(adm.call_in_flight(&mut *st, b).expect("no trap"), 0);
    assert_eq!(
        adm.call_next_admissions(&mut *st, b).expect("no trap"),
        Vec::<u64>::new()
    );
    // The same instance still schedules.
    let mut s = Sched::in_instance(inst, STOP_POLICY);
    assert_eq!(s.submit("a\nb\nc", "f\nf\nf", &[0, 0, 0]), Ok((1, 1, 3)));
    assert_out(&s.approve(&[1, 2, 3]), &[1, 2], &[], &[], &[]);
}

/// Two controllers with different tags never take each other's tickets, and the method table
/// is the component's.
#[test]
fn tags_keep_controllers_apart_and_methods_have_their_class() {
    let mut inst = harness().instance().expect("no trap");
    let iface = inst.exports.turnstile_scheduler_admission();
    let adm = iface.admission();
    let config = |tag| wa::AdmissionConfig {
        max_concurrent: 4,
        allow_parallel: true,
        tag,
    };
    let a = adm
        .call_constructor(&mut inst.store, config(7))
        .expect("no trap");
    let b = adm
        .call_constructor(&mut inst.store, config(8))
        .expect("no trap");
    let ta = adm
        .call_begin(&mut inst.store, a, "x", Call, None)
        .expect("no trap")
        .expect("admitted");
    let tb = adm
        .call_begin(&mut inst.store, b, "x", Call, None)
        .expect("no trap")
        .expect("admitted");
    assert_ne!(ta, tb, "two controllers hand out different tickets");
    let err = adm
        .call_end(&mut inst.store, b, ta)
        .expect("no trap")
        .expect_err("a's ticket is unknown to b");
    assert_eq!(err.code, E::UnknownRequest);
    assert!(
        adm.call_end(&mut inst.store, a, ta)
            .expect("no trap")
            .is_ok()
    );
    for (method, class) in [
        ("tools/call", Call),
        ("ping", Control),
        ("resources/read", Request),
        ("some/new-method", Request),
    ] {
        assert_eq!(
            iface
                .call_class_of_method(&mut inst.store, method)
                .expect("no trap"),
            class,
            "{method}"
        );
    }
}
