//! Metrics through the global recorder (one test in this binary, so
//! nothing else touches it): decisions by outcome, degraded decisions by
//! source, errors by kind, the breaker gauge, call latency and batch size,
//! each labelled with the limiter's key prefix.

mod common;

use std::time::{Duration, Instant};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use ratewise::backend::DecisionSource;
use ratewise::Quota;
use ratewise_redis::{connect, Algorithm, FailurePolicy, Options, RedisLimiter, ResilienceConfig};

/// A metric: name, labels, value.
type Sample = (String, Vec<(String, String)>, DebugValue);

fn value<'a>(
    snapshot: &'a [Sample],
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a DebugValue> {
    snapshot
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, v)| v)
}

fn counter(snapshot: &[Sample], name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(snapshot, name, labels) {
        Some(DebugValue::Counter(c)) => *c,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn gauge(snapshot: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    match value(snapshot, name, labels) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn histogram(snapshot: &[Sample], name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    match value(snapshot, name, labels) {
        Some(DebugValue::Histogram(h)) => h.iter().map(|x| x.into_inner()).collect(),
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

/// Snapshots report counters and histograms since the previous snapshot.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn decisions_degradations_errors_breaker_and_latency_are_measured() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let snap = || -> Vec<Sample> {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(ck, _, _, v)| {
                let key = ck.key();
                let labels = key
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect();
                (key.name().to_string(), labels, v)
            })
            .collect()
    };
    let server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    let options = |prefix: &str, threshold: u32| Options {
        prefix: prefix.to_owned(),
        policy: FailurePolicy::FailClosed,
        resilience: ResilienceConfig {
            timeout: Duration::from_secs(5),
            failure_threshold: threshold,
            cool_down: Duration::from_millis(20),
        },
        ..Options::default()
    };
    let conn = rt.block_on(connect(&server.url())).unwrap();
    let quota = Quota::per(3, Duration::from_secs(3600)).unwrap();
    let l = RedisLimiter::with_options(conn, quota, Algorithm::Gcra, options("m:", 2)).unwrap();
    let lbl = ("limiter", "m:");

    // 5 checks one by one: 3 admitted, 2 refused, 5 round trips.
    rt.block_on(async {
        for _ in 0..5 {
            l.check("k", 1).await.unwrap();
        }
    });
    // 10 concurrent checks for one key: batched.
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let l = l.clone();
            set.spawn(async move { l.check("batch", 1).await.unwrap() });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    });
    let s = snap();
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_decisions_total",
            &[lbl, ("outcome", "admitted")]
        ),
        6
    );
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_decisions_total",
            &[lbl, ("outcome", "refused")]
        ),
        9
    );
    let trips = l.stats().round_trips;
    assert!(
        trips < 15,
        "the concurrent checks were not batched: {trips} round trips"
    );
    let sizes = histogram(&s, "ratewise_redis_batch_requests", &[lbl]);
    assert_eq!(sizes.len() as u64, trips);
    assert_eq!(sizes.iter().sum::<f64>(), 15.0);
    let latency = histogram(&s, "ratewise_redis_call_seconds", &[lbl]);
    assert_eq!(latency.len() as u64, trips);
    assert!(latency.iter().all(|&x| x > 0.0 && x < 5.0), "{latency:?}");

    // A key of the wrong type: Redis errors, fail-closed decisions, and
    // after 2 in a row the breaker opens; the next check is short-circuited.
    common::wrong_type(&server, l.redis_key("typed"));
    rt.block_on(async {
        for _ in 0..3 {
            let d = l.check("typed", 1).await.unwrap();
            assert_eq!(d.source, DecisionSource::FailClosed);
        }
    });
    let s = snap();
    assert_eq!(
        counter(&s, "ratewise_redis_errors_total", &[lbl, ("kind", "redis")]),
        2
    );
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_errors_total",
            &[lbl, ("kind", "circuit_open")]
        ),
        1
    );
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_degraded_total",
            &[lbl, ("source", "fail_closed")]
        ),
        3
    );
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_decisions_total",
            &[lbl, ("outcome", "refused")]
        ),
        3
    );
    assert_eq!(gauge(&s, "ratewise_redis_breaker_open", &[lbl]), 1.0);

    // After the cool-down a probe on a good key succeeds: the breaker
    // closes, and the gauge says so.
    let t = Instant::now();
    rt.block_on(async {
        while l.check("good", 1).await.unwrap().source != DecisionSource::Backend {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the breaker never closed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let s = snap();
    assert_eq!(gauge(&s, "ratewise_redis_breaker_open", &[lbl]), 0.0);
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_degraded_total",
            &[lbl, ("source", "fail_open")]
        ),
        0
    );

    // A timeout is counted as one (a paused server answers nothing).
    let conn = rt.block_on(connect(&server.url())).unwrap();
    let slow = RedisLimiter::with_options(
        conn,
        quota,
        Algorithm::Gcra,
        Options {
            resilience: ResilienceConfig {
                timeout: Duration::from_millis(50),
                ..ResilienceConfig::default()
            },
            ..options("slow:", 5)
        },
    )
    .unwrap();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(300)
        .arg("WRITE")
        .query::<()>(&mut server.sync())
        .unwrap();
    let d = rt.block_on(slow.check("k", 1)).unwrap();
    assert_eq!(d.source, DecisionSource::FailClosed);
    let s = snap();
    let slow_lbl = ("limiter", "slow:");
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_errors_total",
            &[slow_lbl, ("kind", "timeout")]
        ),
        1
    );
    assert_eq!(
        counter(
            &s,
            "ratewise_redis_degraded_total",
            &[slow_lbl, ("source", "fail_closed")]
        ),
        1
    );
}
