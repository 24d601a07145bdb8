//! The in-memory decision's cost per call, without the network: one hot
//! key, many keys, and two descriptors decided together.
//!
//! `cargo bench -p ratewise-server --bench decide`

use criterion::{criterion_group, criterion_main, Criterion};
use ratewise::Timestamp;
use ratewise_server::config::{compile_sources, LoadOptions};
use ratewise_server::rls::{Entry, RateLimitDescriptor, RateLimitRequest};
use ratewise_server::{Engine, EngineOptions};

const CONFIG: &str = "domain: bench
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000000 }
  - key: route
    rate_limit: { unit: second, requests_per_unit: 1000000000 }
";

fn request(pairs: &[(&str, String)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: pairs
            .iter()
            .map(|(k, v)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*k).into(),
                    value: v.clone(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

fn bench(c: &mut Criterion) {
    let rules = compile_sources(
        &[("bench.yaml".into(), CONFIG.into())],
        None,
        LoadOptions::default(),
    )
    .expect("the bench configuration loads");
    let engine = Engine::new(
        rules,
        EngineOptions {
            headers: ratewise_server::HeaderMode::Off,
            ..EngineOptions::default()
        },
    );
    let hot = request(&[("user", "hot".into())]);
    let mut t = 0u64;
    c.bench_function("decide/one-hot-key", |b| {
        b.iter(|| {
            t += 1;
            engine
                .decide_at(&hot, Timestamp::from_nanos(t))
                .expect("decided")
        })
    });
    let many: Vec<RateLimitRequest> = (0..10_000)
        .map(|i| request(&[("user", format!("u{i}"))]))
        .collect();
    let mut i = 0usize;
    c.bench_function("decide/10000-keys", |b| {
        b.iter(|| {
            i = (i + 1) % many.len();
            t += 1;
            engine
                .decide_at(&many[i], Timestamp::from_nanos(t))
                .expect("decided")
        })
    });
    let two = request(&[("user", "hot".into()), ("route", "/search".into())]);
    c.bench_function("decide/two-descriptors", |b| {
        b.iter(|| {
            t += 1;
            engine
                .decide_at(&two, Timestamp::from_nanos(t))
                .expect("decided")
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
