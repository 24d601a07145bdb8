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
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use ratewise::{KeyedLimiter, Quota};

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

/// This thread's on-CPU nanoseconds, if the system reports them.
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
}

/// Returns (wall rate, cpu rate) in checks per second over all threads.
fn run<F: Fn(&u64) -> bool + Sync>(threads: u64, iters: u64, check: &F) -> (f64, f64) {
    let start = Instant::now();
    let cpu: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let keys = key_order(t);
                    let c0 = cpu_ns();
                    let w0 = Instant::now();
                    let mut admitted = 0u64;
                    for i in 0..iters {
                        let key = &keys[(i % keys.len() as u64) as usize];
                        admitted += u64::from(check(key));
                    }
                    black_box(admitted);
                    let wall_ns = w0.elapsed().as_nanos() as u64;
                    // Without scheduler accounting, fall back to wall time.
                    match (c0, cpu_ns()) {
                        (Some(a), Some(b)) if b > a => b - a,
                        _ => wall_ns.max(1),
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu_rate: f64 = cpu.iter().map(|&c| iters as f64 / (c as f64 / 1e9)).sum();
    ((threads * iters) as f64 / wall, cpu_rate)
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
    let trials: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(7)
        .max(1);
    let iters = 3_000_000;
    for threads in [1u64, 2] {
        let mut rows: Vec<[(f64, f64); 4]> = Vec::new();
        for _ in 0..trials {
            let a = run(threads, iters, &|k| {
                ours.check(k, 1).map(|d| d.allowed).unwrap_or(false)
            });
            let b = run(threads, iters, &|k| theirs.check_key(k).is_ok());
            let c = run(threads, iters, &|k| {
                ours_sip.check(k, 1).map(|d| d.allowed).unwrap_or(false)
            });
            let d = run(threads, iters, &|k| theirs_fold.check_key(k).is_ok());
            rows.push([a, b, c, d]);
        }
        let med = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[0], v[v.len() - 1])
        };
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
