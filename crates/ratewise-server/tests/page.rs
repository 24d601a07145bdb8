//! The live page at `/`, rendered by headless Chromium against the running
//! binary: it draws decisions per rule with real axes, and shows the store
//! and the last reload. Without `chromium` the rendering test is reported
//! ignored (the build script says how to install it); under CI it runs and
//! fails instead.

#[path = "../../ratewise-sim/tests/support/chromium.rs"]
mod chromium;
mod support;

use std::time::Duration;

use support::*;

const CONFIG: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3, name: per_user }
  - key: route
    rate_limit: { unit: minute, requests_per_unit: 100, name: per_route }
";

#[test]
fn the_live_page_is_self_contained() {
    for external in ["src=", "href=", "@import", "url("] {
        assert!(
            !ratewise_server::http::PAGE.contains(external),
            "external reference: {external}"
        );
    }
}

#[cfg_attr(
    ratewise_no_chromium,
    ignore = "needs chromium (apt-get install chromium)"
)]
#[test]
fn the_live_page_draws_decisions_per_rule_in_chromium() {
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &["--sample-interval", "100ms"]);
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"eve"}]}]}"#;
    let codes: Vec<u16> = (0..5)
        .map(|_| http_post(server.http, "/json", body).0)
        .collect();
    assert_eq!(codes, vec![200, 200, 200, 429, 429]);
    wait_until(Duration::from_secs(10), "three samples", || {
        let (_, _, h) = http_get(server.http, "/history", &[]);
        h.matches("unix_ms").count() >= 3
    });
    let (status, _, page) = http_get(server.http, "/", &[]);
    assert_eq!(status, 200);
    assert!(page.contains("<title>ratewise-server</title>"));

    let dom = chromium::dump_dom(
        &format!("http://{}/", server.http),
        &["--virtual-time-budget=3000"],
    );
    assert!(
        dom.contains("data-rendered=\"yes\""),
        "the page did not render:\n{dom}"
    );
    assert!(dom.contains("data-rules=\"2\""), "{dom}");
    assert_eq!(dom.matches("class=\"ok-line\"").count(), 2, "{dom}");
    assert_eq!(dom.matches("class=\"over-line\"").count(), 2, "{dom}");
    assert!(
        dom.contains("decisions / s") && dom.contains("time (UTC)"),
        "axis labels"
    );
    assert!(
        dom.contains("edge/per_user") && dom.contains("edge/per_route"),
        "legend"
    );
    assert!(dom.contains("memory — healthy"), "store health");
    assert!(dom.contains("1 ok, 0 failed"), "the last reload");
    // The table's totals are the service's own.
    assert!(
        dom.contains("<tr data-rule=\"edge/per_user\"><td>edge/per_user</td><td>0.05/s, burst 3 (gcra)</td><td>3</td><td>2</td>"),
        "{dom}"
    );
}
