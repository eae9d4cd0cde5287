//! Admission scenarios through one `check`: a script of inputs in the case-file spelling, and the
//! trace it must produce. Tickets are shown as request ids: `ID` is the ticket of the latest
//! `begin` of ID, `ID@N` of its N-th; an id that never began is a ticket nobody has.
//!
//! Script lines: `serial N` / `parallel N` (first line: the config), `begin ID CLASS [PARENT]`,
//! `end ID`, `abandon ID`, `shutdown`; `hold LINE` runs LINE without draining
//! `next_admissions` afterwards. Trace lines: the input, then `: admit ...`, `: error CODE` or
//! `: cancel ... refused ...` when there is something to show.

use std::collections::HashMap;

use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

#[track_caller]
fn check(script: &str, expect: &str) {
    let mut lines = script.lines().map(str::trim).filter(|l| !l.is_empty());
    let config = lines.next().unwrap_or_default();
    let (mode, budget) = config.split_once(' ').unwrap_or_default();
    let mut admission = Admission::new(AdmissionConfig {
        max_concurrent: budget.parse().unwrap_or_default(),
        allow_parallel: mode == "parallel",
    });
    let mut names = Names::default();
    let mut trace = Vec::new();
    for line in lines {
        let (hold, input) = match line.strip_prefix("hold ") {
            Some(input) => (true, input),
            None => (false, line),
        };
        let words: Vec<&str> = input.split_whitespace().collect();
        let shown = match words.as_slice() {
            ["begin", id, class, parent @ ..] => {
                let class = match *class {
                    "call" => Class::Call,
                    "request" => Class::Request,
                    "control" => Class::Control,
                    _ => Class::Reentrant,
                };
                let parent = parent.first().map(|p| names.ticket(p));
                match admission.begin(id, class, parent) {
                    Ok(ticket) => {
                        names.began(id, ticket);
                        String::new()
                    }
                    Err(e) => format!("error {}", e.code.as_str()),
                }
            }
            ["end", id] => match admission.end(names.ticket(id)) {
                Ok(()) => String::new(),
                Err(e) => format!("error {}", e.code.as_str()),
            },
            ["abandon", id] => match admission.abandon(names.ticket(id)) {
                Ok(()) => String::new(),
                Err(e) => format!("error {}", e.code.as_str()),
            },
            ["shutdown"] => {
                let report = admission.shutdown();
                format!(
                    "cancel [{}] refused [{}]",
                    names.show(&report.cancel),
                    names.show(&report.refused)
                )
            }
            _ => panic!("bad script line {line:?}"),
        };
        let admitted = if hold {
            Vec::new()
        } else {
            admission.next_admissions()
        };
        let mut parts = vec![line.to_owned()];
        if !admitted.is_empty() {
            parts.push(format!("admit {}", names.show(&admitted)));
        }
        if !shown.is_empty() {
            parts.push(shown);
        }
        trace.push(parts.join(": "));
        assert!(admission.in_flight() <= admission.budget());
    }
    let expect: Vec<&str> = expect
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(trace, expect, "\ngot:\n{}\n", trace.join("\n"));
}

#[derive(Default)]
struct Names {
    tickets: HashMap<String, Vec<Ticket>>,
    names: HashMap<Ticket, (String, usize)>,
}

impl Names {
    fn began(&mut self, id: &str, ticket: Ticket) {
        let tickets = self.tickets.entry(id.to_owned()).or_default();
        tickets.push(ticket);
        self.names.insert(ticket, (id.to_owned(), tickets.len()));
    }

    fn ticket(&self, name: &str) -> Ticket {
        let (id, nth) = match name.split_once('@') {
            Some((id, n)) => (id, n.parse::<usize>().ok()),
            None => (name, None),
        };
        let tickets = self.tickets.get(id);
        let ticket = match nth {
            Some(n) => tickets.and_then(|t| t.get(n.wrapping_sub(1))),
            None => tickets.and_then(|t| t.last()),
        };
        ticket.copied().unwrap_or(Ticket(u64::MAX))
    }

    fn show(&self, tickets: &[Ticket]) -> String {
        let shown: Vec<String> = tickets
            .iter()
            .map(|t| {
                let (id, n) = &self.names[t];
                if self.tickets[id].len() == *n {
                    id.clone()
                } else {
                    format!("{id}@{n}")
                }
            })
            .collect();
        shown.join(" ")
    }
}

#[test]
fn calls_are_serialized_first_come_first_served() {
    check(
        "serial 4
        begin c1 call
        begin c2 call
        begin c3 call
        begin q1 request
        end c1
        end c2",
        "begin c1 call: admit c1
        begin c2 call
        begin c3 call
        begin q1 request: admit q1
        end c1: admit c2
        end c2: admit c3",
    );
}

#[test]
fn parallel_calls_and_control_one_at_a_time() {
    check(
        "parallel 3
        begin k1 control
        begin k2 control
        begin c1 call
        begin c2 call
        begin c3 call
        end k1
        end c1",
        "begin k1 control: admit k1
        begin k2 control
        begin c1 call: admit c1
        begin c2 call: admit c2
        begin c3 call
        end k1: admit k2
        end c1: admit c3",
    );
}

/// 0.1 keyed `end` by id: the stale second `end` released the new request and admitted `c2`.
#[test]
fn a_stale_ticket_after_id_reuse_touches_nothing() {
    check(
        "serial 2
        begin c1 call
        end c1
        begin c1 call
        begin c2 call
        end c1@1
        abandon c1@1
        end c1
        end c1",
        "begin c1 call: admit c1
        end c1
        begin c1 call: admit c1
        begin c2 call
        end c1@1: error unknown-request
        abandon c1@1: error unknown-request
        end c1: admit c2
        end c1: error unknown-request",
    );
}

#[test]
fn tickets_are_never_reused_and_name_live_ids() {
    let mut a = Admission::new(AdmissionConfig {
        max_concurrent: 1,
        allow_parallel: false,
    });
    let first = a.begin("x", Class::Call, None).unwrap();
    assert_eq!(a.id(first), Some("x"));
    a.end(first).unwrap();
    assert_eq!(a.id(first), None);
    let second = a.begin("x", Class::Call, None).unwrap();
    assert!(second > first);
    assert_eq!(a.id(second), Some("x"));
    assert_eq!(a.id(Ticket(u64::MAX)), None);
}

/// 0.1 listed the undrained `q2` in `cancel` and still handed it out afterwards.
#[test]
fn shutdown_refuses_undrained_admissions_and_admits_nothing_after() {
    check(
        "serial 3
        begin c1 call
        begin c2 call
        begin q1 request
        hold begin q2 request
        shutdown
        end c1
        end q2
        abandon q1
        end q1
        begin q3 request
        shutdown",
        "begin c1 call: admit c1
        begin c2 call
        begin q1 request: admit q1
        hold begin q2 request
        shutdown: cancel [c1 q1] refused [c2 q2]
        end c1
        end q2: error unknown-request
        abandon q1: error not-queued
        end q1
        begin q3 request: error shutdown
        shutdown: cancel [] refused []",
    );
}

/// 0.1 let `r1`, whose parent had ended, skip the serializer: `c2` ran next to it.
#[test]
fn an_orphaned_reentrant_call_is_serialized_like_a_call() {
    check(
        "serial 3
        begin c1 call
        begin q1 request
        begin q2 request
        begin r1 reentrant c1
        begin c2 call
        end c1
        end q1
        end r1",
        "begin c1 call: admit c1
        begin q1 request: admit q1
        begin q2 request: admit q2
        begin r1 reentrant c1
        begin c2 call
        end c1: admit r1
        end q1
        end r1: admit c2",
    );
}

/// Siblings fill the budget together; would-deadlock is still the unbroken line above the
/// parent holding the whole budget. `a1` and `b1` wait for the budget, not refused: `ra` or
/// `rb` may end without a nested call. If both wait on theirs, only a deadline helps (`end rb`
/// below); `b1` then still descends from `c1`, in flight, and skips the serializer.
#[test]
fn sibling_reentrant_calls_share_the_budget_and_would_deadlock_is_the_line() {
    check(
        "serial 2
        begin c1 call
        begin ra reentrant c1
        begin a1 reentrant ra
        begin rb reentrant c1",
        "begin c1 call: admit c1
        begin ra reentrant c1: admit ra
        begin a1 reentrant ra: error would-deadlock
        begin rb reentrant c1",
    );
    check(
        "serial 3
        begin c1 call
        begin ra reentrant c1
        begin rb reentrant c1
        begin a1 reentrant ra
        begin b1 reentrant rb
        end rb
        end a1",
        "begin c1 call: admit c1
        begin ra reentrant c1: admit ra
        begin rb reentrant c1: admit rb
        begin a1 reentrant ra
        begin b1 reentrant rb
        end rb: admit a1
        end a1: admit b1",
    );
}

/// 0.2 serialized siblings: `rb` waited for `ra`. Now they run side by side; `rc`, over the
/// budget, is orphaned when `c1` ends and then waits for the serializer like `c2`, which waits
/// for every tool call in flight, re-entrant calls whose parent ended included.
#[test]
fn sibling_reentrant_calls_skip_the_serializer_until_orphaned() {
    check(
        "serial 3
        begin c1 call
        begin ra reentrant c1
        begin rb reentrant c1
        begin rc reentrant c1
        end c1
        begin c2 call
        end ra
        end rb
        end rc",
        "begin c1 call: admit c1
        begin ra reentrant c1: admit ra
        begin rb reentrant c1: admit rb
        begin rc reentrant c1
        end c1
        begin c2 call
        end ra
        end rb: admit rc
        end rc: admit c2",
    );
}

/// `rb` (orphaned when `c1` ended) waits for the serializer; `ra` waits for `a1`, which
/// arrived after `rb`: strict FIFO among re-entrant calls would deadlock here.
#[test]
fn an_orphan_waiting_for_the_serializer_does_not_block_a_nested_call() {
    check(
        "serial 4
        begin c1 call
        begin ra reentrant c1
        begin q1 request
        begin q2 request
        begin rb reentrant c1
        end c1
        begin q3 request
        begin a1 reentrant ra
        end q1
        end a1
        end ra",
        "begin c1 call: admit c1
        begin ra reentrant c1: admit ra
        begin q1 request: admit q1
        begin q2 request: admit q2
        begin rb reentrant c1
        end c1
        begin q3 request: admit q3
        begin a1 reentrant ra
        end q1: admit a1
        end a1
        end ra: admit rb",
    );
}

/// When `ra` ends, `rx` and `ry` (waiting below it) move below `c1`, still skipping the
/// serializer; once `c1` ends too, they are roots and `c2` waits for both.
#[test]
fn waiters_below_an_ended_call_move_to_its_nearest_ancestor() {
    check(
        "serial 5
        begin c1 call
        begin ra reentrant c1
        begin q1 request
        begin q2 request
        begin q3 request
        begin rx reentrant ra
        begin ry reentrant ra
        begin c2 call
        end ra
        end q1
        end c1
        end rx
        end ry",
        "begin c1 call: admit c1
        begin ra reentrant c1: admit ra
        begin q1 request: admit q1
        begin q2 request: admit q2
        begin q3 request: admit q3
        begin rx reentrant ra
        begin ry reentrant ra
        begin c2 call
        end ra: admit rx
        end q1: admit ry
        end c1
        end rx
        end ry: admit c2",
    );
}

#[test]
fn a_reentrant_call_under_a_live_ancestor_runs_beside_it_after_its_parent_ended() {
    // `r2`'s parent `r1` ended, but `c1` is still in flight and is `r2`'s ancestor.
    check(
        "serial 3
        begin c1 call
        begin r1 reentrant c1
        begin q1 request
        begin r2 reentrant r1
        end r1
        begin c2 call
        end q1",
        "begin c1 call: admit c1
        begin r1 reentrant c1: admit r1
        begin q1 request: admit q1
        begin r2 reentrant r1
        end r1: admit r2
        begin c2 call
        end q1",
    );
}

#[test]
fn would_deadlock_counts_the_unbroken_line_of_waiting_calls() {
    check(
        "serial 3
        begin c1 call
        begin r1 reentrant c1
        begin r2 reentrant r1
        begin r3 reentrant r2
        end r1
        begin r3 reentrant r2
        begin r4 reentrant r3
        begin r5 reentrant r2
        end c1",
        "begin c1 call: admit c1
        begin r1 reentrant c1: admit r1
        begin r2 reentrant r1: admit r2
        begin r3 reentrant r2: error would-deadlock
        end r1
        begin r3 reentrant r2: admit r3
        begin r4 reentrant r3
        begin r5 reentrant r2
        end c1: admit r4",
    );
}

#[test]
fn would_deadlock_with_parallel_calls() {
    check(
        "parallel 3
        begin c1 call
        begin r1 reentrant c1
        begin c2 call
        begin r2 reentrant r1
        begin q1 request
        end c2
        begin r3 reentrant r2
        end r1
        begin r3 reentrant r2
        end q1",
        "begin c1 call: admit c1
        begin r1 reentrant c1: admit r1
        begin c2 call: admit c2
        begin r2 reentrant r1
        begin q1 request
        end c2: admit r2
        begin r3 reentrant r2: error would-deadlock
        end r1: admit q1
        begin r3 reentrant r2
        end q1: admit r3",
    );
}

#[test]
fn a_parent_is_a_tool_call_in_flight() {
    check(
        "serial 1
        begin c1 call
        begin c2 call
        begin q1 request
        begin r1 reentrant
        begin r1 reentrant c2
        begin r1 reentrant q1
        begin r1 reentrant nobody
        begin q2 request c1
        begin k1 control c1
        end c1
        begin r1 reentrant c1
        begin r1 reentrant c2",
        "begin c1 call: admit c1
        begin c2 call
        begin q1 request
        begin r1 reentrant: error invalid-parent
        begin r1 reentrant c2: error invalid-parent
        begin r1 reentrant q1: error invalid-parent
        begin r1 reentrant nobody: error invalid-parent
        begin q2 request c1: error invalid-parent
        begin k1 control c1: error invalid-parent
        end c1: admit c2
        begin r1 reentrant c1: error invalid-parent
        begin r1 reentrant c2: error would-deadlock",
    );
}

/// 0.1 refused to abandon an admitted request (`not-queued`), so its place was never returned.
#[test]
fn abandoning_an_undrained_admission_returns_its_place() {
    check(
        "serial 1
        begin c1 call
        begin c2 call
        begin q1 request
        hold end c1
        abandon c2
        abandon q1
        end c2
        end q1",
        "begin c1 call: admit c1
        begin c2 call
        begin q1 request
        hold end c1
        abandon c2: admit q1
        abandon q1: error not-queued
        end c2: error unknown-request
        end q1",
    );
}

/// An undrained parent may be named (it is in flight); abandoning it leaves its child in flight,
/// still serialized.
#[test]
fn abandoning_an_undrained_parent_leaves_its_child_serialized() {
    check(
        "serial 3
        hold begin c1 call
        hold begin r1 reentrant c1
        hold begin c2 call
        abandon c1
        end r1",
        "hold begin c1 call
        hold begin r1 reentrant c1
        hold begin c2 call
        abandon c1: admit r1
        end r1: admit c2",
    );
}

#[test]
fn an_undrained_admission_may_be_ended_and_is_not_reported() {
    check(
        "serial 2
        hold begin q1 request
        hold begin q2 request
        end q1
        end q2",
        "hold begin q1 request
        hold begin q2 request
        end q1: admit q2
        end q2",
    );
}

#[test]
fn ending_a_queued_request_is_not_admitted() {
    check(
        "serial 1
        begin c1 call
        begin c2 call
        end c2
        abandon c1
        end c1",
        "begin c1 call: admit c1
        begin c2 call
        end c2: error not-admitted
        abandon c1: error not-queued
        end c1: admit c2",
    );
}

#[test]
fn ids_are_unique_among_live_requests_and_bounded() {
    let long = "x".repeat(NAME_BYTES_MAX);
    let too_long = "x".repeat(NAME_BYTES_MAX + 1);
    let mut a = Admission::new(AdmissionConfig {
        max_concurrent: 0,
        allow_parallel: false,
    });
    assert_eq!(a.budget(), 1);
    let code = |r: Result<Ticket, BeginError>| r.err().map(|e| e.code);
    assert_eq!(
        code(a.begin("", Class::Request, None)),
        Some(BeginErrorCode::InvalidId)
    );
    assert_eq!(
        code(a.begin(&too_long, Class::Request, None)),
        Some(BeginErrorCode::InvalidId)
    );
    assert_eq!(code(a.begin(&long, Class::Request, None)), None);
    assert_eq!(
        code(a.begin(&long, Class::Call, None)),
        Some(BeginErrorCode::DuplicateRequest)
    );
}

#[test]
fn at_most_requests_max_are_live() {
    let mut a = Admission::new(AdmissionConfig {
        max_concurrent: 2,
        allow_parallel: true,
    });
    let mut last = None;
    for i in 0..REQUESTS_MAX {
        last = Some(a.begin(&format!("q{i}"), Class::Request, None).unwrap());
    }
    let err = a.begin("one-more", Class::Request, None).unwrap_err();
    assert_eq!(err.code, BeginErrorCode::TooMany);
    assert_eq!(a.next_admissions().len(), 2);
    a.abandon(last.unwrap()).unwrap();
    a.begin("one-more", Class::Request, None).unwrap();
}

#[test]
fn errors_are_spelled_like_the_wit_and_read_well() {
    let begin = [
        (BeginErrorCode::Shutdown, "shutdown"),
        (BeginErrorCode::DuplicateRequest, "duplicate-request"),
        (BeginErrorCode::InvalidId, "invalid-id"),
        (BeginErrorCode::InvalidParent, "invalid-parent"),
        (BeginErrorCode::WouldDeadlock, "would-deadlock"),
        (BeginErrorCode::TooMany, "too-many"),
    ];
    for (code, text) in begin {
        assert_eq!(code.as_str(), text);
    }
    assert_eq!(EndErrorCode::UnknownRequest.as_str(), "unknown-request");
    assert_eq!(EndErrorCode::NotAdmitted.as_str(), "not-admitted");
    assert_eq!(AbandonErrorCode::UnknownRequest.as_str(), "unknown-request");
    assert_eq!(AbandonErrorCode::NotQueued.as_str(), "not-queued");

    let mut a = Admission::new(AdmissionConfig {
        max_concurrent: 1,
        allow_parallel: false,
    });
    let c1 = a.begin("c1", Class::Call, None).unwrap();
    let messages = [
        a.begin("c1", Class::Call, None).unwrap_err().to_string(),
        a.begin("r1", Class::Reentrant, Some(c1))
            .unwrap_err()
            .to_string(),
        a.end(Ticket(99)).unwrap_err().to_string(),
    ];
    assert!(messages[0].starts_with("duplicate-request: request \"c1\""));
    assert!(messages[1].starts_with("would-deadlock: "));
    assert_eq!(
        messages[2],
        "unknown-request: ticket 99 was not handed out by this controller"
    );
    for m in &messages {
        assert!(!m.ends_with('.') && m.chars().next().is_some_and(char::is_lowercase));
    }
    let err: &dyn std::error::Error = &a.end(Ticket(99)).unwrap_err();
    assert!(err.source().is_none());
}

#[test]
fn a_mistake_changes_nothing() {
    check(
        "serial 2
        begin c1 call
        begin q1 request
        begin r1 reentrant c1
        begin c1 call
        end zz
        abandon c1
        end q1",
        "begin c1 call: admit c1
        begin q1 request: admit q1
        begin r1 reentrant c1
        begin c1 call: error duplicate-request
        end zz: error unknown-request
        abandon c1: error not-queued
        end q1: admit r1",
    );
}

#[test]
fn methods_not_in_the_table_are_requests_compared_exactly() {
    for method in [
        "",
        "Tools/call",
        "tools/call ",
        " tools/call",
        "tools/Call",
        "tools/call/",
        "tools",
        "PING",
        "logging/setlevel",
        "resources/templates",
        "notifications/cancelled",
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        "some/future-method",
    ] {
        assert_eq!(class_of_method(method), Class::Request, "{method:?}");
    }
}

#[test]
fn each_mcp_method_has_its_class() {
    let table = [
        ("tools/call", Class::Call),
        ("resources/read", Class::Request),
        ("prompts/get", Class::Request),
        ("completion/complete", Class::Request),
        ("initialize", Class::Control),
        ("ping", Class::Control),
        ("tools/list", Class::Control),
        ("prompts/list", Class::Control),
        ("resources/list", Class::Control),
        ("resources/templates/list", Class::Control),
        ("resources/subscribe", Class::Control),
        ("resources/unsubscribe", Class::Control),
        ("logging/setLevel", Class::Control),
    ];
    for (method, class) in table {
        assert_eq!(class_of_method(method), class, "{method:?}");
        assert_ne!(class_of_method(method), Class::Reentrant);
    }
}

/// 0.2 numbered every controller's tickets 1, 2, 3...: `b` ended its own `q1` when handed
/// `a`'s ticket, and took `a`'s call as a parent.
#[test]
fn another_controllers_ticket_is_unknown_and_touches_nothing() {
    let config = AdmissionConfig {
        max_concurrent: 1,
        allow_parallel: false,
    };
    let mut a = Admission::with_tag(config, 0x5eed_0001);
    let mut b = Admission::with_tag(config, 0x5eed_0002);
    let a1 = a.begin("c1", Class::Call, None).unwrap();
    let b1 = b.begin("q1", Class::Request, None).unwrap();
    let b2 = b.begin("c1", Class::Call, None).unwrap();
    assert_eq!(a.next_admissions(), [a1]);
    assert_eq!(b.next_admissions(), [b1]);
    let end = b.end(a1).unwrap_err();
    assert_eq!(end.code, EndErrorCode::UnknownRequest);
    assert_eq!(
        end.message,
        format!("ticket {} was not handed out by this controller", a1.0)
    );
    let abandon = b.abandon(a1).unwrap_err();
    assert_eq!(abandon.code, AbandonErrorCode::UnknownRequest);
    let parent = b.begin("r1", Class::Reentrant, Some(a1)).unwrap_err();
    assert_eq!(parent.code, BeginErrorCode::InvalidParent);
    assert!(parent.message.contains("not handed out by this controller"));
    assert_eq!(b.id(a1), None);
    // Nothing changed in `b`: `q1` is still in flight, `c1` still queued.
    assert_eq!(
        (b.in_flight(), b.id(b1), b.id(b2)),
        (1, Some("q1"), Some("c1"))
    );
    assert!(b.next_admissions().is_empty());
    b.end(b1).unwrap();
    assert_eq!(b.next_admissions(), [b2]);
    // And the other way round.
    assert_eq!(a.end(b2).unwrap_err().code, EndErrorCode::UnknownRequest);
    a.end(a1).unwrap();
}

#[test]
fn a_ticket_not_yet_handed_out_is_unknown_not_stale() {
    let mut a = Admission::with_tag(
        AdmissionConfig {
            max_concurrent: 1,
            allow_parallel: false,
        },
        7,
    );
    let first = a.begin("c1", Class::Call, None).unwrap();
    let next = Ticket(first.0 + 1);
    let before = Ticket(first.0 - 1);
    for t in [next, before, Ticket(0), Ticket(u64::MAX)] {
        let e = a.end(t).unwrap_err();
        assert_eq!(e.code, EndErrorCode::UnknownRequest);
        assert!(
            e.message.ends_with("was not handed out by this controller"),
            "{e}"
        );
    }
    a.end(first).unwrap();
    let stale = a.end(first).unwrap_err();
    assert_eq!(stale.code, EndErrorCode::UnknownRequest);
    assert_eq!(
        stale.message,
        format!("no live request has ticket {}", first.0)
    );
}

#[test]
fn tagged_tickets_ascend_never_repeat_and_differ_between_tags() {
    let config = AdmissionConfig {
        max_concurrent: 2,
        allow_parallel: true,
    };
    // Tag 0 numbers 1, 2, 3... (tests and case files); nearby tags land far apart.
    let mut seen = std::collections::HashSet::new();
    for tag in [0, 1, 2, 3, u64::MAX, u64::MAX - 1, 1 << 63] {
        let mut a = Admission::with_tag(config, tag);
        let mut last = None;
        for i in 0..100 {
            let t = a.begin(&format!("q{i}"), Class::Request, None).unwrap();
            a.abandon(t).unwrap();
            assert!(
                last.is_none_or(|l| t > l),
                "tag {tag}: {t:?} after {last:?}"
            );
            assert!(seen.insert(t), "tag {tag}: {t:?} handed out twice");
            last = Some(t);
        }
        if tag == 0 {
            assert_eq!(a.begin("x", Class::Call, None).unwrap(), Ticket(101));
        }
    }
    let untagged = Admission::new(config)
        .begin("x", Class::Call, None)
        .unwrap();
    assert_eq!(untagged, Ticket(1));
}
