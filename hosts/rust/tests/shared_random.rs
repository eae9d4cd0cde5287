//! Seeded random runs of several `SharedKeys` on one memory store (tokio's paused clock):
//! acquires that are withdrawn at random moments (racing their grants), permits released,
//! abandoned or dropped, a client closed mid-run, the store down now and then (shorter or
//! longer than a renewal period). Checked from the outside: live permits (neither given back
//! nor lost) never exceed the limit, so nothing is granted twice when the store comes back;
//! grants go out in arrival order; every wait ends; and the store ends empty. `TURNSTILE_SEED=N` replays one seed, `TURNSTILE_SEEDS=N` runs seeds 1 ..= N (40).
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod shared_util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared_util::{DAY, Flaky, Mode, keys, memory, run_until, within};
use turnstile::clock::Clock;
use turnstile::shared::{AcquireTerms, SharedError, SharedKeys, Store};

/// xorshift64*: enough randomness for a schedule, reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

const LIMIT: usize = 2;

async fn run(seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store.clone(), clock.clone());
    let shared: Arc<dyn Store> = flaky.clone();
    let clients: Vec<SharedKeys> = (0..3)
        .map(|i| keys(shared.clone(), clock.clone(), &format!("c{i}"), 3000))
        .collect();
    let live = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let client = clients[rng.below(3) as usize].clone();
        let give_up_ms = (rng.below(3) == 0).then(|| rng.below(400));
        let hold_ms = if rng.below(4) == 0 {
            rng.below(6000)
        } else {
            rng.below(200)
        };
        let how = rng.below(3);
        let (live, most, grants) = (live.clone(), most.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            let acquire = client.acquire("k", AcquireTerms::new(LIMIT as u32));
            let permit = match give_up_ms {
                Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), acquire).await {
                    Ok(permit) => permit,
                    Err(_) => return, // withdrawn
                },
                None => acquire.await,
            };
            let permit = match permit {
                Ok(permit) => permit,
                Err(SharedError::Closed | SharedError::StoreUnavailable { .. }) => return,
                Err(e) => panic!("seed {seed}: {e:?}"),
            };
            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            grants.lock().unwrap().push((permit.grant(), permit.seq()));
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(hold_ms)) => {}
                _ = permit.lost() => {}
            }
            live.fetch_sub(1, Ordering::SeqCst);
            match how {
                0 => permit.release().await,
                1 => permit.abandon().await,
                _ => drop(permit),
            }
        }));
        tokio::time::sleep(Duration::from_millis(rng.below(30))).await;
        // Now and then the store goes down, shorter or longer than a renewal period.
        if rng.below(20) == 0 {
            flaky.set(Mode::Down);
            tokio::time::sleep(Duration::from_millis(rng.below(4000))).await;
            flaky.set(Mode::Up);
        }
    }
    let closing = rng.below(2) == 0;
    if closing {
        clients[0].close().await;
    }
    for t in tasks {
        within(120_000, t).await.unwrap();
    }
    assert!(
        most.load(Ordering::SeqCst) <= LIMIT,
        "seed {seed}: over the limit"
    );
    // A key the store forgot (no ticket left) starts its counts again at 1: each such epoch
    // begins after every earlier grant was given back, so it is split off by its grant 1.
    let grants = grants.lock().unwrap().clone();
    let mut epochs: Vec<Vec<(u64, u64)>> = Vec::new();
    for g in grants {
        match epochs.last_mut() {
            Some(epoch) if g.0 != 1 => epoch.push(g),
            _ => epochs.push(vec![g]),
        }
    }
    for mut epoch in epochs {
        epoch.sort_unstable();
        let in_order = epoch.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        assert!(
            in_order,
            "seed {seed}: grants out of arrival order: {epoch:?}"
        );
    }
    for c in &clients {
        c.close().await;
    }
    // Give-backs the store missed while down end with their leases; a ticket given up while
    // waiting may still be granted at the store before its lease ends, for one more lease.
    run_until(&clock, clock.now_ms() + 6001).await;
    let left = store.inspect("k").await.unwrap();
    assert!(
        left.held.is_empty() && left.waiting.is_empty(),
        "seed {seed}: left at the store: {left:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn random_withdrawals_releases_and_drops_never_exceed_the_limit_and_every_wait_ends() {
    let seeds: Vec<u64> = match std::env::var("TURNSTILE_SEED") {
        Ok(seed) => vec![seed.parse().unwrap()],
        Err(_) => {
            let count = std::env::var("TURNSTILE_SEEDS").map_or(40, |n| n.parse().unwrap());
            (1..=count).collect()
        }
    };
    for seed in seeds {
        run(seed).await;
    }
}
