//! Keyed limiters head to head: ratewise's `KeyedLimiter` (sharded hash
//! tables behind spin locks, GCRA per key, key cap with eviction) against
//! `governor`'s keyed limiter on its `DashMapStateStore`, in the same run.
//!
//! 10 000 hot keys, visited in a scattered order; one request per check; the
//! same quota (1000 per second, burst 1000) and the same kind of clock
//! (`quanta`) on both sides; 1 and 2 threads. Throughput is reported as
//! checks per second over all threads.
//!
//! The libraries' defaults differ in the hasher (ratewise: `foldhash`,
//! seeded per limiter; governor: SipHash `RandomState`), so each library is
//! also run with the other's hasher, giving two like-for-like pairs:
//!
//! | pair            | ratewise                  | governor                    |
//! |-----------------|---------------------------|-----------------------------|
//! | defaults        | `ratewise_keyed`          | `governor_dashmap`          |
//! | both SipHash    | `ratewise_keyed_siphash`  | `governor_dashmap`          |
//! | both foldhash   | `ratewise_keyed`          | `governor_dashmap_foldhash` |
//!
//! ```text
//! cargo bench -p ratewise --bench keyed
//! ```

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ratewise::{KeyedLimiter, Quota};

const HOT_KEYS: u64 = 10_000;

/// A scattered visiting order over the hot keys, different per thread.
fn key_order(thread: u64) -> Vec<u64> {
    (0..HOT_KEYS)
        .map(|i| (i * 7_919 + thread * 104_729) % HOT_KEYS)
        .collect()
}

fn run_threads<F: Fn(&u64) -> bool + Sync>(threads: u64, iters: u64, check: &F) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let keys = key_order(t);
                let mut admitted = 0u64;
                for i in 0..iters {
                    let key = &keys[(i % HOT_KEYS) as usize];
                    admitted += u64::from(check(key));
                }
                black_box(admitted);
            });
        }
    });
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let ours = KeyedLimiter::<u64>::builder(Quota::per_second(1000).expect("valid quota"))
        .max_keys(100_000)
        .build();
    let theirs = governor::RateLimiter::dashmap(governor::Quota::per_second(
        NonZeroU32::new(1000).expect("non-zero"),
    ));
    let ours_sip = KeyedLimiter::<u64>::builder(Quota::per_second(1000).expect("valid quota"))
        .max_keys(100_000)
        .hasher(std::collections::hash_map::RandomState::new())
        .build();
    let theirs_fold = governor::RateLimiter::dashmap_with_hasher(
        governor::Quota::per_second(NonZeroU32::new(1000).expect("non-zero")),
        foldhash::fast::RandomState::default(),
    );
    // Warm every table with every hot key.
    for k in 0..HOT_KEYS {
        let _ = ours.check(&k, 1);
        let _ = theirs.check_key(&k);
        let _ = ours_sip.check(&k, 1);
        let _ = theirs_fold.check_key(&k);
    }

    for threads in [1u64, 2] {
        let mut g = c.benchmark_group(format!("keyed_10k_hot_keys/{threads}_threads"));
        g.throughput(Throughput::Elements(threads));
        g.bench_function("ratewise_keyed", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| {
                    ours.check(k, 1).map(|d| d.allowed).unwrap_or(false)
                })
            })
        });
        g.bench_function("governor_dashmap", |b| {
            b.iter_custom(|iters| run_threads(threads, iters, &|k| theirs.check_key(k).is_ok()))
        });
        g.bench_function("ratewise_keyed_siphash", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| {
                    ours_sip.check(k, 1).map(|d| d.allowed).unwrap_or(false)
                })
            })
        });
        g.bench_function("governor_dashmap_foldhash", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| theirs_fold.check_key(k).is_ok())
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
