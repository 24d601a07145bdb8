//! A rate-limited demo service:
//!
//! ```sh
//! cargo run --release -p ratewise-tower --example server -- --port 3000 [--demo-traffic]
//! ```
//!
//! * `/api/hello` — limited per IP (`ip-burst`: 150/s) and per API key
//!   (`x-api-key`; `key-burst` 10/s and `key-daily` 10 000/day, or
//!   `paid-burst` 100/s for keys starting with `paid-`); no key → 401;
//! * `/metrics` — Prometheus text; `/status` — JSON; `/` — a live chart of
//!   admitted vs refused requests per policy.
//!
//! `--demo-traffic` sends the service some traffic of its own (keys `alice`
//! at 15/s, `bob` at 5/s, `paid-carol` at 40/s) so the chart moves.

#[path = "app.rs"]
mod app;

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

fn args() -> Result<(u16, bool), String> {
    let mut port = 3000;
    let mut demo = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--port" => {
                let v = it.next().ok_or("--port needs a value")?;
                port = v.parse().map_err(|e| format!("--port {v}: {e}"))?;
            }
            "--demo-traffic" => demo = true,
            "-h" | "--help" => {
                return Err("usage: server [--port N] [--demo-traffic]".into());
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok((port, demo))
}

async fn demo_traffic(addr: SocketAddr) {
    use http_body_util::Empty;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for (key, per_second) in [("alice", 15u64), ("bob", 5), ("paid-carol", 40)] {
        let client = client.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1000 / per_second));
            loop {
                tick.tick().await;
                let req = http::Request::get(format!("http://{addr}/api/hello"))
                    .header("x-api-key", key)
                    .body(Empty::new())
                    .expect("a valid request");
                let _ = client.request(req).await;
            }
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (port, demo) = args().map_err(|e| {
        eprintln!("{e}");
        e
    })?;
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let (router, state) = app::build(Some(prometheus))?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}/  (metrics: /metrics, status: /status)");
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            state.record_sample();
        }
    });
    if demo {
        demo_traffic(addr).await;
    }
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
