//! The middleware's `ratewise_client_*` metrics, on a `DebuggingRecorder`
//! installed for the test's thread (a `current_thread` runtime, so the
//! middleware records there): a server on 127.0.0.1 answers the first call
//! 429 with `Retry-After: 1`, then 200.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use ratewise_client::exchange::names;
use ratewise_client::{AsyncThrottle, ThrottleConfig};
use ratewise_reqwest::ThrottleMiddleware;

#[tokio::test]
async fn a_429_then_a_success_is_counted_timed_and_gauged() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);

    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let app = Router::new().route(
        "/",
        get(move || {
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")])
                } else {
                    (StatusCode::OK, [("retry-after", "0")])
                }
            }
        }),
    );
    // Bound before spawning: the listener accepts from here on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let throttle = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::per_host(throttle))
        .build();
    let response = client.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    let partition = format!("127.0.0.1:{}", addr.port());
    let snapshot = snapshotter.snapshot().into_vec();
    let value = |name: &str| {
        snapshot
            .iter()
            .find(|(ck, _, _, _)| {
                ck.key().name() == name
                    && ck
                        .key()
                        .labels()
                        .any(|l| l.key() == names::PARTITION && l.value() == partition)
            })
            .map(|(_, _, _, v)| v)
    };
    assert_eq!(value(names::ATTEMPTS), Some(&DebugValue::Counter(2)));
    assert_eq!(value(names::THROTTLED), Some(&DebugValue::Counter(1)));
    assert_eq!(value(names::RETRIES), Some(&DebugValue::Counter(1)));
    assert_eq!(value(names::REFUSED), None);
    match value(names::WAIT_SECONDS) {
        Some(DebugValue::Histogram(waits)) => {
            let waits: Vec<f64> = waits.iter().map(|w| w.into_inner()).collect();
            assert_eq!(waits.len(), 2, "{waits:?}");
            assert_eq!(waits[0], 0.0, "the first attempt goes at once");
            assert!(
                waits[1] >= Duration::from_secs(1).as_secs_f64(),
                "the retry waited its Retry-After: {waits:?}"
            );
        }
        other => panic!("wait histogram: {other:?}"),
    }
    assert!(matches!(value(names::RATE), Some(DebugValue::Gauge(_))));
}
