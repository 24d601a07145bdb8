//! The keyed comparison of `benches/keyed.rs` as interleaved A/B trials,
//! for machines too busy for criterion's wall-clock numbers.
//!
//! Each trial runs the four limiters (ratewise and governor, each with its
//! default hasher and with the other's) one after another, 3 million
//! checks per thread, on 1 and then 2 threads; it prints the median rate
//! and the median, lowest and highest ratio over the trials. Rates are
//! given twice: by wall clock, and by each thread's on-CPU time as the
//! scheduler accounts it (Linux; time a thread spent preempted by other
//! processes is left out, so a shared machine distorts it less).
//!
//! ```text
//! cargo bench -p ratewise --bench keyed_ab -- 9    # 9 trials (default 7)
//! ```
use std::num::NonZeroU32;

use ratewise::{KeyedLimiter, Quota};

#[path = "support/ab.rs"]
mod ab;

const HOT_KEYS_DEFAULT: u64 = 10_000;

/// The number of hot keys: 10 000, or `RATEWISE_HOT_KEYS` (to see how the
/// comparison moves as the table outgrows the caches).
fn hot_keys() -> u64 {
    std::env::var("RATEWISE_HOT_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(HOT_KEYS_DEFAULT)
}

fn key_order(thread: u64) -> Vec<u64> {
    let hot = hot_keys();
    (0..hot)
        .map(|i| (i * 7_919 + thread * 104_729) % hot)
        .collect()
}

fn main() {
    let q = Quota::per_second(1000).expect("valid quota");
    let ours = KeyedLimiter::<u64>::builder(q).max_keys(100_000).build();
    let ours_sip = KeyedLimiter::<u64>::builder(q)
        .max_keys(100_000)
        .hasher(std::collections::hash_map::RandomState::new())
        .build();
    let gq = governor::Quota::per_second(NonZeroU32::new(1000).expect("non-zero"));
    let theirs = governor::RateLimiter::dashmap(gq);
    let theirs_fold =
        governor::RateLimiter::dashmap_with_hasher(gq, foldhash::fast::RandomState::default());
    for k in 0..hot_keys() {
        let _ = ours.check(&k, 1);
        let _ = ours_sip.check(&k, 1);
        let _ = theirs.check_key(&k);
        let _ = theirs_fold.check_key(&k);
    }
    // `cargo bench` passes `--bench`; the first numeric argument is the
    // number of trials.
    let trials = ab::trials(7);
    let iters = 3_000_000;
    let orders: Vec<Vec<u64>> = (0..2).map(key_order).collect();
    let key = |t: u64, i: u64| {
        let keys = &orders[t as usize];
        &keys[(i % keys.len() as u64) as usize]
    };
    for threads in [1u64, 2] {
        let mut rows: Vec<[(f64, f64); 4]> = Vec::new();
        for _ in 0..trials {
            let a = ab::run(threads, iters, &|t, i| {
                ours.check(key(t, i), 1).map(|d| d.allowed).unwrap_or(false)
            });
            let b = ab::run(threads, iters, &|t, i| theirs.check_key(key(t, i)).is_ok());
            let c = ab::run(threads, iters, &|t, i| {
                ours_sip
                    .check(key(t, i), 1)
                    .map(|d| d.allowed)
                    .unwrap_or(false)
            });
            let d = ab::run(threads, iters, &|t, i| {
                theirs_fold.check_key(key(t, i)).is_ok()
            });
            rows.push([a, b, c, d]);
        }
        let med = ab::spread;
        for (label, pick) in [("wall", 0usize), ("cpu", 1)] {
            let g = |r: &[(f64, f64); 4], i: usize| if pick == 0 { r[i].0 } else { r[i].1 };
            let rate = |i: usize| med(rows.iter().map(|r| g(r, i) / 1e6).collect());
            let ratio = |i: usize, j: usize| med(rows.iter().map(|r| g(r, i) / g(r, j)).collect());
            println!(
                "{threads} thr {label}: M/s ours {:.1} gov {:.1} ours_sip {:.1} gov_fold {:.1} | defaults {:.2} (min {:.2} max {:.2}) | sip-sip {:.2} ({:.2}-{:.2}) | fold-fold {:.2} ({:.2}-{:.2})",
                rate(0).0, rate(1).0, rate(2).0, rate(3).0,
                ratio(0, 1).0, ratio(0, 1).1, ratio(0, 1).2,
                ratio(2, 1).0, ratio(2, 1).1, ratio(2, 1).2,
                ratio(0, 3).0, ratio(0, 3).1, ratio(0, 3).2,
            );
        }
    }
}
