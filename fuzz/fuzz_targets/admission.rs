//! Arbitrary event sequences against admission: begins of every class with and without parents,
//! ends, abandons (drained or not), shutdowns, with live, stale and never-issued tickets.
//! Nothing may panic (the engine's debug assertions included), and after each step the budget
//! holds, no ticket is handed out or drained twice, and nothing a shutdown reported is drained.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use turnstile_engine::admission::{Admission, AdmissionConfig, Class, Ticket};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let budget = u32::from(first % 4);
    let mut a = Admission::new(AdmissionConfig {
        max_concurrent: budget,
        allow_parallel: first & 4 != 0,
    });
    let classes = [
        Class::Call,
        Class::Request,
        Class::Control,
        Class::Reentrant,
    ];
    // Every ticket handed out, so that inputs can name live and stale ones alike.
    let mut issued: Vec<Ticket> = Vec::new();
    let mut drained: HashSet<Ticket> = HashSet::new();
    let mut reported: HashSet<Ticket> = HashSet::new();
    let pick = |issued: &[Ticket], arg: u8| -> Ticket {
        match issued.len() {
            0 => Ticket(u64::from(arg)),
            n if arg == u8::MAX => Ticket(u64::MAX - u64::from(arg % 2) * n as u64),
            n => issued[usize::from(arg) % n],
        }
    };
    for pair in rest.chunks(2) {
        let (op, arg) = (pair[0], *pair.get(1).unwrap_or(&0));
        match op % 7 {
            0 | 1 => {
                let id = format!("r{}", arg % 10);
                let class = classes[usize::from(op / 7 % 4)];
                let parent = (op & 0x80 != 0).then(|| pick(&issued, arg / 10));
                if let Ok(ticket) = a.begin(&id, class, parent) {
                    assert!(!issued.contains(&ticket), "ticket handed out twice");
                    assert_eq!(a.id(ticket), Some(id.as_str()));
                    issued.push(ticket);
                }
            }
            2 | 3 => drop(a.end(pick(&issued, arg))),
            4 => drop(a.abandon(pick(&issued, arg))),
            5 => {
                let report = a.shutdown();
                reported.extend(report.cancel.iter().chain(&report.refused));
            }
            // Leave admissions undrained for a step, so abandon and shutdown see them.
            _ => continue,
        }
        for ticket in a.next_admissions() {
            assert!(drained.insert(ticket), "ticket drained twice");
            assert!(
                !reported.contains(&ticket),
                "drained after shutdown reported it"
            );
        }
        assert!(a.in_flight() <= a.budget());
        assert_eq!(a.budget(), budget.max(1));
    }
});
