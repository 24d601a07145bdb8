//! The demo server's live page (`examples/server`), rendered by headless
//! Chromium against the running server: the page fetches `/status`, draws
//! one chart per policy, and its totals equal the layer's own.
//!
//! The page's structure and the traffic are checked without a browser; the
//! rendering test needs `chromium` and is reported ignored without it (see
//! the shared `support/chromium.rs`).

#[path = "../../ratewise-sim/tests/support/chromium.rs"]
mod chromium;
mod common;

#[path = "../examples/server/app.rs"]
#[allow(dead_code)]
mod app;

use common::{serve, HttpClient};
use http::StatusCode;

#[test]
fn the_live_page_is_self_contained() {
    // No external scripts, styles or images.
    for bad in ["src=", "href=", "@import", "url("] {
        assert!(!app::PAGE.contains(bad), "external reference: {bad}");
    }
}

/// The demo server, serving, after traffic that made the key-burst policy
/// refuse and the paid tier admit; the page's sample taken.
async fn demo_after_traffic() -> (std::net::SocketAddr, app::Demo) {
    let (router, demo) = app::build(None).unwrap();
    let addr = serve(router).await;
    let client = HttpClient::new(addr);
    assert_eq!(
        client.get("/api/hello", &[]).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Until the per-key burst refuses (10 per second; bounded).
    let mut refused = false;
    for _ in 0..1_000 {
        if client
            .get("/api/hello", &[("x-api-key", "alice")])
            .await
            .status
            == StatusCode::TOO_MANY_REQUESTS
        {
            refused = true;
            break;
        }
    }
    assert!(refused, "the key-burst policy never refused");
    assert_eq!(
        client
            .get("/api/hello", &[("x-api-key", "paid-carol")])
            .await
            .status,
        StatusCode::OK
    );
    demo.record_sample();
    (addr, demo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_refuses_the_key_burst_and_admits_the_paid_tier() {
    let (_, demo) = demo_after_traffic().await;
    let api = demo.api.status();
    assert!(api.sets[0].policies[0].refused >= 1);
    assert!(api.sets[1].policies[0].admitted >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ratewise_no_chromium,
    ignore = "needs chromium (apt-get install chromium)"
)]
async fn the_live_page_renders_the_layers_totals_in_chromium() {
    let (addr, demo) = demo_after_traffic().await;
    let url = format!("http://{addr}/");
    let dom = tokio::task::spawn_blocking(move || {
        chromium::dump_dom(&url, &["--virtual-time-budget=3000"])
    })
    .await
    .unwrap();
    // ip-burst; key-burst and key-daily; the paid tier's paid-burst.
    assert!(
        dom.contains("data-rendered=\"4\""),
        "the page did not render 4 policies:\n{dom}"
    );
    assert_eq!(dom.matches("<svg").count(), 4);
    assert_eq!(dom.matches("class=\"admitted\" data-points").count(), 4);
    assert_eq!(dom.matches("class=\"refused\" data-points").count(), 4);
    // The totals on the page are the layer's own.
    let api = demo.api.status();
    let burst = &api.sets[0].policies[0];
    assert_eq!(burst.name, "key-burst");
    assert!(burst.refused >= 1);
    let row = format!(
        "<tr data-policy=\"api/key-burst\"><td>api/key-burst</td><td class=\"admitted\">{}</td><td class=\"refused\">{}</td>",
        burst.admitted, burst.refused
    );
    assert!(dom.contains(&row), "no row {row} in:\n{dom}");
    let paid = &api.sets[1].policies[0];
    let row = format!(
        "<tr data-policy=\"api/paid-burst\"><td>api/paid-burst</td><td class=\"admitted\">{}</td>",
        paid.admitted
    );
    assert!(dom.contains(&row), "no row {row} in:\n{dom}");
}
