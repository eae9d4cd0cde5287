//! Arbitrary event sequences against the scheduler: every byte pair is an event on a small
//! world of calls (some fan-out, some keyed, one unconfigured tool). Nothing may panic; the
//! engine's debug assertions (running <= limit, paired counters) are on in fuzz builds; and
//! once the bytes run out, approving and ending everything must leave nothing unfinished.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile_engine::config::{self, Layer};
use turnstile_engine::schedule::{BatchId, Call, HostSettle, Outcome, Scheduler, State};

const CONFIG: &str = "[conversation.tools.a]\nconcurrency = { key = \"k\", limit = 2 }\nfan_out = { on_error = \"stop\" }\n\
[conversation.tools.b]\nconcurrency = { key = \"k\", limit = 2 }\n[conversation.tools.c]\nconcurrency = 1\nfan_out = true\n";

fn label(n: u8) -> String {
    let call = n % 8;
    match n / 8 % 4 {
        0 => format!("c{call}"),
        op => format!("c{call}#{}", op - 1),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(policy) = config::resolve(&[Layer::new("fuzz", CONFIG)]) else { return };
    let mut s = Scheduler::new(policy.clone());
    let tools = ["a", "b", "c", "ghost"];
    for pair in data.chunks(2) {
        let (op, arg) = (pair[0], *pair.get(1).unwrap_or(&0));
        match op % 10 {
            0 => {
                let calls: Vec<Call> = (0..1 + arg % 4)
                    .map(|i| {
                        let id = format!("c{}", (arg / 4).wrapping_add(i) % 8);
                        let tool = tools[usize::from(arg.wrapping_add(i) % 4)];
                        if i % 2 == 0 { Call::plain(id, tool) } else { Call::fan_out(id, tool, u32::from(arg % 3)) }
                    })
                    .collect();
                let _ = s.submit_batch(&calls);
            }
            1 => drop(s.approve(&label(arg))),
            2 => drop(s.settle(&label(arg), [HostSettle::Rejected, HostSettle::Skipped, HostSettle::Failed][usize::from(arg % 3)])),
            3 => drop(s.begin_question(&label(arg))),
            4 => drop(s.end_question(&label(arg))),
            5 | 6 => drop(s.on_ended(&label(arg), if op % 2 == 0 { Outcome::Ok } else { Outcome::Failed })),
            7 => drop(s.cancel_batch(BatchId(u32::from(arg % 5)))),
            8 => {
                let unfinished = s.unfinished();
                s = Scheduler::new(policy.clone());
                for (_, calls) in &unfinished {
                    assert!(s.submit_batch(calls).is_ok(), "a restart must resubmit");
                }
            }
            _ => drop(s.inspect(BatchId(u32::from(arg % 5)))),
        }
        let _ = s.next_releases();
    }
    // Liveness: approve everything, end everything, until nothing moves.
    for _ in 0..1000 {
        let mut moved = false;
        let mut b = 1;
        while let Ok(statuses) = s.inspect(BatchId(b)) {
            for st in statuses {
                match st.state {
                    State::Pending => moved |= s.approve(&st.label).is_ok(),
                    State::Running | State::Asking => moved |= s.on_ended(&st.label, Outcome::Ok).is_ok(),
                    _ => {}
                }
            }
            b += 1;
        }
        let _ = s.next_releases();
        if !moved {
            break;
        }
    }
    for (_, calls) in s.unfinished() {
        assert!(calls.is_empty(), "unfinished after the drain: {calls:?}");
    }
});
