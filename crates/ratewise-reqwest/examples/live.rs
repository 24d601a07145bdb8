//! A client against a local limited server, with a live summary.
//!
//! `cargo run -p ratewise-reqwest --example live`
//!
//! Starts an axum server on 127.0.0.1 limited by a ratewise token bucket
//! (20/s, burst 5, headers from `Decision::headers`), then 10 tasks make 20
//! calls each through `reqwest` and the middleware. Every half second it
//! prints the calls done, the 429s seen and the partition's pacing rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::get;
use axum::Router;
use ratewise::{Quota, RateLimiter, TokenBucket};
use ratewise_client::{AsyncThrottle, ThrottleConfig};
use ratewise_reqwest::ThrottleMiddleware;

async fn limited(State(bucket): State<Arc<TokenBucket>>) -> (StatusCode, HeaderMap) {
    let mut headers = HeaderMap::new();
    let Ok(d) = bucket.check(1) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, headers);
    };
    for (name, value) in d.headers() {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
    let status = if d.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    (status, headers)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bucket = Arc::new(TokenBucket::new(Quota::per_second(20)?.with_burst(5)?));
    let app = Router::new().route("/", get(limited)).with_state(bucket);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let throttle = AsyncThrottle::new(ThrottleConfig::default())?;
    let middleware = ThrottleMiddleware::per_host(throttle.clone());
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build();
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (client, url, done) = (client.clone(), url.clone(), Arc::clone(&done));
            tokio::spawn(async move {
                for _ in 0..20 {
                    if client.get(&url).send().await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while done.load(Ordering::Relaxed) < 200 {
        tick.tick().await;
        let m = throttle.metrics();
        println!(
            "{:>5.1} s  calls {:>3}/200  429s {:>3}  rate {}",
            start.elapsed().as_secs_f64(),
            done.load(Ordering::Relaxed),
            m.throttled,
            m.current_rate
                .map_or_else(|| "unpaced".to_owned(), |r| format!("{r:.1}/s")),
        );
    }
    for t in tasks {
        t.await?;
    }
    println!(
        "done: 200 calls in {:.1} s (the server's 20/s allows {:.2} s)",
        start.elapsed().as_secs_f64(),
        (200.0 - 5.0) / 20.0
    );
    Ok(())
}
