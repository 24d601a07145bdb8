//! The client `ThrottleLayer`, around a hyper-util client, against
//! rate-limited servers this project did not write, on 127.0.0.1: nginx's
//! `limit_req` (429 with `burst=10 nodelay`, a leaky bucket, no rate
//! headers) and Envoy's local rate limit filter (a token bucket, 429, no
//! headers). For 1, 4 and 16 tasks sharing a fixed number of calls: zero
//! failed calls, refusals ≤ 3 % of the requests sent, a time ≤ 1.15× the
//! least the server's limit allows. (The reqwest crate's `real_servers`
//! test runs more variants, with a naive client beside it.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_client::{AsyncThrottle, ThrottleConfig};
use ratewise_tower::ThrottleLayer;
use test_servers::{Envoy, EnvoyLimit, Nginx, NginxLimit};
use tower::{ServiceBuilder, ServiceExt};

const MAX_REFUSED: f64 = 0.03;
const MAX_RATIO: f64 = 1.15;

/// `calls` calls to `url` by `tasks` tasks through the layer, stopped at
/// 4× `allowed`; returns a miss, if any.
async fn run(
    server: &str,
    url: String,
    tasks: u64,
    calls: u64,
    allowed: Duration,
) -> Option<String> {
    let attempts = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let (a, r) = (Arc::clone(&attempts), Arc::clone(&refused));
    let throttle = AsyncThrottle::new(ThrottleConfig::default()).expect("default config");
    let client = ServiceBuilder::new()
        .layer(ThrottleLayer::per_authority(throttle))
        // Below the throttle: every attempt.
        .map_response(move |resp: Response<hyper::body::Incoming>| {
            a.fetch_add(1, Ordering::Relaxed);
            if resp.status() == 429 {
                r.fetch_add(1, Ordering::Relaxed);
            }
            resp
        })
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let next = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (client, next, ok, failed, url) = (
            client.clone(),
            Arc::clone(&next),
            Arc::clone(&ok),
            Arc::clone(&failed),
            url.clone(),
        );
        set.spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < calls {
                let req = Request::get(&url)
                    .body(Full::new(Bytes::new()))
                    .expect("a request");
                let good = match client.clone().oneshot(req).await {
                    Ok(resp) => {
                        resp.status().is_success() && resp.into_body().collect().await.is_ok()
                    }
                    Err(_) => false,
                };
                if good { &ok } else { &failed }.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let all = async {
        while let Some(t) = set.join_next().await {
            t.expect("task");
        }
    };
    let finished = tokio::time::timeout(allowed * 4, all).await.is_ok();
    set.abort_all();
    let elapsed = start.elapsed().as_secs_f64();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let (attempts, refused) = (
        attempts.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    let ratio = elapsed / allowed.as_secs_f64();
    let share = refused as f64 / attempts.max(1) as f64;
    println!(
        "| {server} | {tasks} | ThrottleLayer | {elapsed:.2} s | {:.2} s | {ratio:.2}× | {refused} / {attempts} ({:.1} %) | {failed} |",
        allowed.as_secs_f64(),
        share * 100.0
    );
    assert_eq!(failed, 0, "{server}, {tasks} tasks: a call failed");
    if finished {
        assert_eq!(ok, calls);
    }
    (!finished || ratio > MAX_RATIO || share > MAX_REFUSED).then(|| {
        format!(
            "{server}, {tasks} tasks: {ratio:.2}× the time allowed, {:.1} % refused, {} calls unfinished",
            share * 100.0,
            calls - ok - failed
        )
    })
}

#[ignore = "target not met yet: the default throttle misses 1.15× / 3 % here (figures in benches/README.md, Clients against real rate-limited servers); run with --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttle_layer_against_nginx_limit_req() {
    let limit = NginxLimit::per_second(50).burst(10).nodelay().status(429);
    let nginx = Nginx::start(&limit).unwrap_or_else(|e| panic!("{e}"));
    const CALLS: u64 = 100;
    // The first request and the burst at once, then one per 20 ms.
    let allowed = Duration::from_secs_f64((CALLS - 11) as f64 / 50.0);
    let mut misses = vec![];
    for (i, tasks) in [1, 4, 16].into_iter().enumerate() {
        let server = "nginx 429 burst=10 nodelay";
        misses.extend(run(server, nginx.url(i), tasks, CALLS, allowed).await);
    }
    assert!(misses.is_empty(), "{misses:#?}\n{}", nginx.log());
}

#[ignore = "target not met yet: the default throttle misses 1.15× / 3 % here (figures in benches/README.md, Clients against real rate-limited servers); run with --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttle_layer_against_envoys_local_rate_limit() {
    let limit = EnvoyLimit {
        max_tokens: 10,
        tokens_per_fill: 5,
        fill_interval: Duration::from_millis(50),
        headers: false,
    };
    let envoy = Envoy::start(&limit, 3).unwrap_or_else(|e| panic!("{e}"));
    const CALLS: u64 = 150;
    let allowed =
        Duration::from_secs_f64((CALLS - u64::from(limit.max_tokens)) as f64 / limit.rate_per_s());
    let mut misses = vec![];
    for (i, tasks) in [1, 4, 16].into_iter().enumerate() {
        misses.extend(run("envoy 429", envoy.url(i), tasks, CALLS, allowed).await);
    }
    assert!(misses.is_empty(), "{misses:#?}\n{}", envoy.log());
}
