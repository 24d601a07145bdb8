//! The adaptive concurrency layer in front of a real axum server whose
//! handler waits on a dependency that serves 5 requests at a time (a
//! semaphore), on tokio's paused clock: latency stays bounded and the
//! excess is refused with 503 + Retry-After instead of queueing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{serve, HttpClient};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use ratewise::concurrency::Gradient2;
use ratewise::TokioClock;
use ratewise_tower::concurrency::ConcurrencyLimitLayer;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// A handler whose dependency serves 5 at a time, 20 ms each.
fn app(layer: Option<ConcurrencyLimitLayer<Gradient2>>) -> Router {
    let dependency = Arc::new(Semaphore::new(5));
    let router = Router::new().route(
        "/",
        get(move || {
            let dependency = Arc::clone(&dependency);
            async move {
                let _slot = dependency.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                "ok"
            }
        }),
    );
    match layer {
        Some(l) => router.layer(l),
        None => router,
    }
}

/// Fires `n` requests at once and returns (status, latency, retry-after).
async fn burst(client: &HttpClient, n: usize) -> Vec<(StatusCode, Duration, Option<String>)> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let req = Request::get(client.url("/"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                let res = client.raw().request(req).await.unwrap();
                let status = res.status();
                let retry = res
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                let _ = res.into_body().collect().await.unwrap();
                (status, start.elapsed(), retry)
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn latency_stays_bounded_and_the_excess_is_refused() {
    // Without the layer, 60 requests at once queue on the dependency: the
    // last waits 12 rounds of 20 ms.
    let plain = HttpClient::new(serve(app(None)).await);
    let replies = burst(&plain, 60).await;
    assert!(replies.iter().all(|r| r.0 == StatusCode::OK));
    let worst_plain = replies.iter().map(|r| r.1).max().unwrap();
    assert!(worst_plain >= Duration::from_millis(240), "{worst_plain:?}");

    // With it (Gradient2 from 10 in flight, at least 5): what is admitted
    // waits at most a couple of rounds; the rest is refused at once.
    let layer = ConcurrencyLimitLayer::new(Gradient2::new(10, 5, 50)).clock(TokioClock::new());
    let limited = HttpClient::new(serve(app(Some(layer.clone()))).await);
    let mut worst = Duration::ZERO;
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..5 {
        for (status, latency, retry) in burst(&limited, 60).await {
            match status {
                StatusCode::OK => {
                    ok += 1;
                    worst = worst.max(latency);
                }
                StatusCode::SERVICE_UNAVAILABLE => {
                    refused += 1;
                    assert_eq!(retry.as_deref(), Some("1"));
                    assert!(latency < Duration::from_millis(5), "refused at once");
                }
                other => panic!("unexpected {other}"),
            }
        }
    }
    assert!(ok >= 50, "{ok} admitted");
    assert!(refused > 0);
    let bound = Duration::from_millis(20 * (layer.limit().max(10) as u64 / 5 + 2));
    assert!(worst <= bound, "worst {worst:?}, bound {bound:?}");
    assert!(worst < worst_plain / 2);
    assert_eq!(layer.inflight(), 0);
}
