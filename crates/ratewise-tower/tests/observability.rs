//! Metrics and tracing through the global recorder and subscriber (one test
//! in this binary, so nothing else touches them).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{serve, HttpClient};
use http::StatusCode;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use ratewise::{ManualClock, Quota};
use ratewise_tower::{KeySource, Policy, RateLimitLayer};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A metric: name, labels, value.
type Sample = (String, Vec<(String, String)>, DebugValue);

#[derive(Default)]
struct Counts {
    warns: AtomicUsize,
    decision_spans: AtomicUsize,
}

struct Counting(Arc<Counts>);

impl Subscriber for Counting {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        if span.metadata().name() == "ratewise_decision" {
            self.0.decision_spans.fetch_add(1, Ordering::Relaxed);
        }
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            self.0.warns.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn value(snapshot: &[Sample], name: &str, label: (&str, &str)) -> Option<String> {
    snapshot
        .iter()
        .find(|(n, labels, _)| {
            n == name && labels.iter().any(|(k, v)| k == label.0 && v == label.1)
        })
        .map(|(_, _, v)| format!("{v:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_histogram_gauge_spans_and_a_rate_limited_warning() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let counts = Arc::new(Counts::default());
    tracing::subscriber::set_global_default(Counting(counts.clone())).unwrap();

    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .key(KeySource::Global)
        .policy(Policy::per_key("burst", Quota::per_second(3).unwrap()))
        .policy(Policy::global("global", Quota::per_second(100).unwrap()))
        .clock(clock.clone())
        .build()
        .unwrap();
    let handle = layer.handle();
    let client = HttpClient::new(
        serve(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
        .await,
    );

    let mut refused = 0;
    for _ in 0..53 {
        if client.get("/", &[]).await.status == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        }
    }
    assert_eq!(refused, 50);
    // 50 refusals in one instant: one warning.
    assert_eq!(counts.warns.load(Ordering::Relaxed), 1);
    // One second refills two units, not three: 1/3 s rounds up to
    // 333 333 334 ns (rates round towards safety).
    clock.advance(Duration::from_secs(1));
    for _ in 0..4 {
        client.get("/", &[]).await;
    }
    assert_eq!(counts.warns.load(Ordering::Relaxed), 2);
    assert_eq!(counts.decision_spans.load(Ordering::Relaxed), 57);
    let _ = handle.status(); // refreshes the keys gauge

    let snapshot: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(ck, _, _, v)| {
            let key = ck.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect::<Vec<_>>();
            (key.name().to_string(), labels, v)
        })
        .collect();
    assert_eq!(
        value(&snapshot, "ratewise_admitted_total", ("policy", "burst")),
        Some("Counter(5)".to_string())
    );
    assert_eq!(
        value(&snapshot, "ratewise_admitted_total", ("policy", "global")),
        Some("Counter(5)".to_string())
    );
    assert_eq!(
        value(&snapshot, "ratewise_refused_total", ("policy", "burst")),
        Some("Counter(52)".to_string())
    );
    assert_eq!(
        value(&snapshot, "ratewise_refused_total", ("policy", "global")),
        Some("Counter(0)".to_string())
    );
    assert_eq!(
        value(&snapshot, "ratewise_keys_tracked", ("policy", "burst")),
        Some("Gauge(1.0)".to_string())
    );
    let latency = snapshot
        .iter()
        .find(|(n, _, _)| n == "ratewise_decision_seconds")
        .map(|(_, _, v)| v);
    match latency {
        Some(DebugValue::Histogram(samples)) => assert_eq!(samples.len(), 57),
        other => panic!("latency histogram: {other:?}"),
    }
}
