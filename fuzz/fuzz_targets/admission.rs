//! Arbitrary event sequences against admission: begins of every class with and without
//! parents, ends, abandons, shutdowns. Nothing may panic, and the bounds hold after each step.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile_engine::admission::{Admission, AdmissionConfig, Class};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let budget = u32::from(first % 4);
    let mut a = Admission::new(AdmissionConfig { max_concurrent: budget, allow_parallel: first & 4 != 0 });
    let classes = [Class::Call, Class::Request, Class::Control, Class::Reentrant];
    for pair in rest.chunks(2) {
        let (op, arg) = (pair[0], *pair.get(1).unwrap_or(&0));
        let id = format!("r{}", arg % 10);
        let parent = format!("r{}", arg / 10 % 10);
        match op % 6 {
            0 | 1 => drop(a.begin(&id, classes[usize::from(op / 6 % 4)], (op & 0x80 != 0).then_some(parent.as_str()))),
            2 | 3 => drop(a.end(&id)),
            4 => drop(a.abandon(&id)),
            _ => drop(a.shutdown()),
        }
        let _ = a.next_admissions();
        assert!(a.in_flight() <= budget.max(1));
    }
});
