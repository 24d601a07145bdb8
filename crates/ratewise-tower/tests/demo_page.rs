//! The demo server's live page (`examples/server`), rendered by headless
//! Chromium against the running server: the page fetches `/status`, draws
//! one chart per policy, and its totals equal the layer's own.
//!
//! When `/usr/bin/chromium` is missing the page is checked structurally
//! only — except under CI (`CI` set), where the test fails instead.

#[path = "../../ratewise-sim/tests/support/chromium.rs"]
mod chromium;
mod common;

#[path = "../examples/server/app.rs"]
#[allow(dead_code)]
mod app;

use common::{serve, HttpClient};
use http::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_renders_the_layers_totals_in_chromium() {
    // Self-contained: no external scripts, styles or images.
    for bad in ["src=", "href=", "@import", "url("] {
        assert!(!app::PAGE.contains(bad), "external reference: {bad}");
    }
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

    if !chromium::available() {
        return;
    }
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
