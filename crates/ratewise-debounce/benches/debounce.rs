//! Cost of one call on the hot path: a value offered while one is already
//! pending (the common case in a burst). Run briefly with
//! `cargo bench -p ratewise-debounce --bench debounce`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ratewise::Timestamp;
use ratewise_debounce::{
    CoalesceConfig, CoalesceCore, DebounceConfig, DebounceCore, EventThrottleConfig,
    EventThrottleCore,
};

fn cores(c: &mut Criterion) {
    let mut g = c.benchmark_group("core");
    let mut d = DebounceCore::new(DebounceConfig::new(Duration::from_millis(100)));
    let mut now = 0u64;
    g.bench_function("DebounceCore::call", |b| {
        b.iter(|| {
            now += 1;
            black_box(d.call(Timestamp::from_nanos(now), black_box(now)))
        })
    });
    let mut t = EventThrottleCore::new(EventThrottleConfig::new(Duration::from_secs(3600)));
    g.bench_function("EventThrottleCore::call", |b| {
        b.iter(|| {
            now += 1;
            black_box(t.call(Timestamp::from_nanos(now), black_box(now)))
        })
    });
    let config = CoalesceConfig::new(Duration::from_secs(3600), 64).expect("valid");
    let mut co = CoalesceCore::new(config);
    let mut out = Vec::with_capacity(4);
    g.bench_function("CoalesceCore::push (batch of 64)", |b| {
        b.iter(|| {
            now += 1;
            co.push(
                Timestamp::from_nanos(now),
                black_box(now % 8),
                now,
                &mut out,
            );
            out.clear();
        })
    });
    g.finish();
}

#[cfg(feature = "tokio")]
fn drivers(c: &mut Criterion) {
    use ratewise_debounce::{Debouncer, EventThrottle};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let mut g = c.benchmark_group("driver");
    let d = Debouncer::new(DebounceConfig::new(Duration::from_secs(3600)), |_: u64| {
        std::future::ready(())
    })
    .expect("inside a runtime");
    let mut i = 0u64;
    g.bench_function("Debouncer::call", |b| {
        b.iter(|| {
            i += 1;
            d.call(black_box(i))
        })
    });
    let t = EventThrottle::new(
        EventThrottleConfig::new(Duration::from_secs(3600)),
        |_: u64| std::future::ready(()),
    )
    .expect("inside a runtime");
    g.bench_function("EventThrottle::call", |b| {
        b.iter(|| {
            i += 1;
            t.call(black_box(i))
        })
    });
    g.finish();
}

#[cfg(not(feature = "tokio"))]
fn drivers(_: &mut Criterion) {}

criterion_group!(benches, cores, drivers);
criterion_main!(benches);
