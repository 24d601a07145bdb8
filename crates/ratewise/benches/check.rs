//! Cost of one `check` for every algorithm, next to `governor` on the same
//! quota in the same run, plus the floor (one clock read + one uncontended
//! CAS) and the clocks; GCRA also on the coarse clock, next to governor on
//! its own upkeep clock.
//!
//! `cargo bench -p ratewise --bench check`

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use ratewise::{
    Clock, CoarseClock, FixedWindow, Gcra, LeakyMeter, LeakyQueue, MonotonicClock, Quota,
    RateLimiter, SlidingWindowCounter, SlidingWindowLog, StdClock, TokenBucket,
};

/// A quota that always admits: the cost measured is the admit path.
fn open_quota() -> Quota {
    Quota::per_second(1_000_000_000).expect("valid quota")
}

/// The same quota for governor: 10⁹ per second, burst 10⁹.
fn governor_open() -> governor::DefaultDirectRateLimiter {
    governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(1_000_000_000).expect("non-zero"),
    ))
}

/// The six other algorithms on the same open quota. The sliding log gets a
/// smaller burst: with an open quota it would otherwise hold a billion entries.
fn others() -> Vec<(&'static str, Box<dyn RateLimiter>)> {
    let q = open_quota();
    let log_quota = Quota::per(1_000_000, Duration::from_millis(1)).expect("valid quota");
    vec![
        ("TokenBucket", Box::new(TokenBucket::new(q))),
        ("LeakyMeter", Box::new(LeakyMeter::new(q))),
        ("LeakyQueue", Box::new(LeakyQueue::new(q))),
        ("FixedWindow", Box::new(FixedWindow::new(q))),
        (
            "SlidingWindowCounter",
            Box::new(SlidingWindowCounter::new(q)),
        ),
        (
            "SlidingWindowLog",
            Box::new(SlidingWindowLog::new(log_quota)),
        ),
    ]
}

fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock");
    let quanta = MonotonicClock::new();
    let std_clock = StdClock::new();
    g.bench_function("std::time::Instant::now", |b| {
        b.iter(|| black_box(Instant::now()))
    });
    g.bench_function("StdClock::now", |b| b.iter(|| black_box(std_clock.now())));
    g.bench_function("MonotonicClock::now (quanta)", |b| {
        b.iter(|| black_box(quanta.now()))
    });
    let coarse = CoarseClock::new(Duration::from_millis(1)).expect("a coarse clock");
    g.bench_function("CoarseClock::now (1 ms)", |b| {
        b.iter(|| black_box(coarse.now()))
    });
    g.finish();
}

fn floor(c: &mut Criterion) {
    let clock = MonotonicClock::new();
    let word = AtomicU64::new(0);
    c.bench_function("floor/clock+cas", |b| {
        b.iter(|| {
            let now = clock.now().as_nanos();
            let old = word.load(Ordering::Acquire);
            black_box(word.compare_exchange(old, now, Ordering::AcqRel, Ordering::Acquire))
        })
    });
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("check/1-thread");
    let gov = governor_open();
    g.bench_function("governor", |b| b.iter(|| black_box(gov.check().is_ok())));
    // What a caller that branches on the answer pays: unused evidence is
    // optimised away once `check` is inlined.
    let gcra = Gcra::new(open_quota());
    g.bench_function("Gcra", |b| {
        b.iter(|| black_box(gcra.check(1).is_ok_and(|d| d.allowed)))
    });
    // What a server that writes rate-limit headers pays: the values it
    // writes, read from each limiter's evidence. governor's evidence is its
    // `StateInformationMiddleware` snapshot (limit and remaining; it has no
    // reset), whose remaining capacity is computed when asked.
    g.bench_function("Gcra (header values)", |b| {
        b.iter(|| match gcra.check(1) {
            Ok(d) => black_box((d.allowed, d.limit, d.remaining, d.reset_after)).0,
            Err(_) => false,
        })
    });
    // The same values as governor's snapshot gives, no more: the row to
    // hold against its row below. The reset (`t`, which governor cannot
    // tell) is the difference between this row and the one above.
    g.bench_function("Gcra (limit, remaining)", |b| {
        b.iter(|| match gcra.check(1) {
            Ok(d) => black_box((d.allowed, d.limit, d.remaining)).0,
            Err(_) => false,
        })
    });
    let gov_info = governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(1_000_000_000).expect("non-zero"),
    ))
    .with_middleware::<governor::middleware::StateInformationMiddleware>();
    g.bench_function("governor (StateInformation, header values)", |b| {
        b.iter(|| match gov_info.check() {
            Ok(s) => black_box((true, s.quota().burst_size(), s.remaining_burst_capacity())).0,
            Err(_) => false,
        })
    });
    // Both on a clock an upkeep thread refreshes every millisecond (one
    // atomic load a read): ratewise's `CoarseClock` and governor's
    // `QuantaUpkeepClock`, the same trade-off on each side.
    let coarse = Gcra::with_clock(
        open_quota(),
        CoarseClock::new(Duration::from_millis(1)).expect("a coarse clock"),
    );
    g.bench_function("Gcra (coarse clock)", |b| {
        b.iter(|| black_box(coarse.check(1).is_ok_and(|d| d.allowed)))
    });
    g.bench_function("Gcra (coarse clock, header values)", |b| {
        b.iter(|| match coarse.check(1) {
            Ok(d) => black_box((d.allowed, d.limit, d.remaining, d.reset_after)).0,
            Err(_) => false,
        })
    });
    // quanta runs one upkeep thread per process: one clock, cloned.
    let upkeep_clock = governor::clock::QuantaUpkeepClock::from_interval(Duration::from_millis(1))
        .expect("quanta's upkeep thread");
    let gov_upkeep = governor::RateLimiter::direct_with_clock(
        governor::Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero")),
        upkeep_clock.clone(),
    );
    g.bench_function("governor (QuantaUpkeepClock)", |b| {
        b.iter(|| black_box(gov_upkeep.check().is_ok()))
    });
    let gov_upkeep_info = governor::RateLimiter::direct_with_clock(
        governor::Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero")),
        upkeep_clock,
    )
    .with_middleware::<governor::middleware::StateInformationMiddleware>();
    g.bench_function(
        "governor (QuantaUpkeepClock, StateInformation, header values)",
        |b| {
            b.iter(|| match gov_upkeep_info.check() {
                Ok(s) => black_box((true, s.quota().burst_size(), s.remaining_burst_capacity())).0,
                Err(_) => false,
            })
        },
    );
    // The whole return value moved as is (see `benches/check_ab.rs` for why
    // this row is not the header path's cost).
    g.bench_function("Gcra (full Decision)", |b| {
        b.iter(|| black_box(gcra.check(1)))
    });
    for (name, l) in others() {
        g.bench_function(name, |b| {
            b.iter(|| black_box(l.check(1).is_ok_and(|d| d.allowed)))
        });
    }
    g.finish();

    // The deny path: an exhausted one-per-hour quota.
    let mut g = c.benchmark_group("deny/1-thread");
    let gov = governor::RateLimiter::direct(governor::Quota::per_hour(
        NonZeroU32::new(1).expect("non-zero"),
    ));
    let _ = gov.check();
    g.bench_function("governor", |b| b.iter(|| black_box(gov.check().is_ok())));
    let gcra = Gcra::new(Quota::per_hour(1).expect("valid"));
    let _ = gcra.check(1);
    g.bench_function("Gcra", |b| {
        b.iter(|| black_box(gcra.check(1).is_ok_and(|d| d.allowed)))
    });
    g.finish();
}

/// Runs `op` on `threads` threads at once, each `iters` times, and returns
/// the wall time: the per-check latency under contention.
fn contended<F: Fn() + Send + Sync + 'static>(threads: usize, iters: u64, op: Arc<F>) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (op, barrier) = (Arc::clone(&op), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..iters {
                    op();
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("bench thread");
    }
    start.elapsed()
}

/// Benchmarks `op` run on two threads at once.
fn bench_two_threads<F: Fn() + Send + Sync + 'static>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    op: F,
) {
    let op = Arc::new(op);
    g.bench_function(name, |b| {
        b.iter_custom(|iters| contended(2, iters, Arc::clone(&op)))
    });
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("check/2-threads");
    let gov = governor_open();
    bench_two_threads(&mut g, "governor", move || {
        black_box(gov.check().is_ok());
    });
    let gcra = Gcra::new(open_quota());
    bench_two_threads(&mut g, "Gcra", move || {
        black_box(gcra.check(1).is_ok_and(|d| d.allowed));
    });
    for (name, l) in others() {
        bench_two_threads(&mut g, name, move || {
            black_box(l.check(1).is_ok_and(|d| d.allowed));
        });
    }
    g.finish();
}

criterion_group!(benches, clocks, floor, single_thread, two_threads);
criterion_main!(benches);
