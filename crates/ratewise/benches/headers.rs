//! The check that produces rate-limit headers, next to its fair peer:
//! governor's check with `StateInformationMiddleware` (which returns the
//! snapshot a header writer needs), on the same open quota, same run.
//!
//! * `decision only`: ratewise's full `Decision` vs governor's snapshot;
//! * `headers written`: the same, plus the values formatted by
//!   `ratewise::response_headers` on the stack (the draft's `RateLimit-Policy` and
//!   `RateLimit` for ratewise; limit and remaining for governor, the
//!   `x-ratelimit-*` pair tower_governor sends);
//! * `RateLimit written`: ratewise writing only the per-decision `RateLimit`
//!   header, as a server does that renders its never-changing
//!   `RateLimit-Policy` once (`ratewise-tower` does).
//!
//! For ratios on a busy machine, `cargo bench -p ratewise --bench check_ab`
//! runs the same rows as interleaved trials timed by CPU time.
//!
//! `cargo bench -p ratewise --bench headers`

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{criterion_group, criterion_main, Criterion};
use governor::middleware::StateInformationMiddleware;
use ratewise::response_headers::{HeaderBuf, HeaderStyle, PolicyInfo};
use ratewise::{Gcra, Quota, RateLimiter};

fn headers(c: &mut Criterion) {
    let q = Quota::per_second(1_000_000_000).expect("valid quota");
    let gov = governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(1_000_000_000).expect("non-zero"),
    ))
    .with_middleware::<StateInformationMiddleware>();
    let gcra = Gcra::new(q);
    let policy = PolicyInfo::from_quota("default", &q);

    let mut g = c.benchmark_group("headers/1-thread");
    g.bench_function("governor+StateInformation (snapshot)", |b| {
        b.iter(|| black_box(gov.check()))
    });
    g.bench_function("Gcra (full Decision)", |b| {
        b.iter(|| black_box(gcra.check(1)))
    });
    g.bench_function("governor+StateInformation, headers written", |b| {
        b.iter(|| {
            if let Ok(s) = gov.check() {
                let mut limit = HeaderBuf::<24>::new();
                let mut remaining = HeaderBuf::<24>::new();
                let _ = limit.push_u64(u64::from(s.quota().burst_size().get()));
                let _ = remaining.push_u64(u64::from(s.remaining_burst_capacity()));
                black_box((limit.as_bytes().len(), remaining.as_bytes().len()));
            }
        })
    });
    g.bench_function("Gcra, headers written (draft)", |b| {
        b.iter(|| {
            if let Ok(d) = gcra.check(1) {
                let _ = d.write_headers(&policy, HeaderStyle::DRAFT, |name, value| {
                    black_box((name, value));
                });
            }
        })
    });
    g.bench_function("Gcra, RateLimit written (policy pre-rendered)", |b| {
        b.iter(|| {
            if let Ok(d) = gcra.check(1) {
                let mut state = HeaderBuf::<64>::new();
                let _ = state.push_decision("default", &d);
                black_box(state.as_bytes().len());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, headers);
criterion_main!(benches);
