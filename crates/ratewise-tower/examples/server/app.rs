//! The demo service, shared by `main.rs` and the Chromium test: per-IP and
//! per-API-key limits, `/metrics`, `/status`, and a live page at `/`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{Html, IntoResponse, Json};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use ratewise::Quota;
use ratewise_tower::observe::Status;
use ratewise_tower::{KeySource, MissingKey, Policy, RateLimitHandle, RateLimitLayer};
use serde::Serialize;

/// One sample of every policy's totals: (ms since start, [(layer/policy,
/// admitted, refused)]).
type Sample = (u64, Vec<(String, u64, u64)>);

/// How many samples `/status` keeps (one a second: ten minutes).
const HISTORY: usize = 600;

/// The demo's shared state.
#[derive(Clone)]
pub struct Demo {
    /// The per-IP layer's handle.
    pub ip: RateLimitHandle,
    /// The per-API-key layer's handle.
    pub api: RateLimitHandle,
    prometheus: Option<PrometheusHandle>,
    started: Instant,
    history: Arc<Mutex<VecDeque<Sample>>>,
}

#[derive(Serialize)]
struct StatusBody {
    layers: Vec<(String, Status)>,
    history: Vec<Sample>,
}

impl Demo {
    fn sample(&self) -> Sample {
        let mut totals = Vec::new();
        for (layer, handle) in [("ip", &self.ip), ("api", &self.api)] {
            for set in handle.status().sets {
                for p in set.policies {
                    totals.push((format!("{layer}/{}", p.name), p.admitted, p.refused));
                }
            }
        }
        (self.started.elapsed().as_millis() as u64, totals)
    }

    /// Records one sample of the totals (call once a second).
    pub fn record_sample(&self) {
        let s = self.sample();
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(s);
    }
}

/// Builds the router and its handles. `prometheus` renders `/metrics`.
pub fn build(
    prometheus: Option<PrometheusHandle>,
) -> Result<(Router, Demo), Box<dyn std::error::Error>> {
    let unlimited = |path: &str| matches!(path, "/" | "/status" | "/metrics");
    let ip = RateLimitLayer::builder()
        .key(KeySource::peer_ip())
        .policy(Policy::per_key(
            "ip-burst",
            Quota::per(150, Duration::from_secs(1))?,
        ))
        .bypass(move |info| unlimited(info.uri.path()))
        .build()?;
    let api = RateLimitLayer::builder()
        .key(KeySource::header(HeaderName::from_static("x-api-key")))
        .missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
        .policy(Policy::per_key(
            "key-burst",
            Quota::per(10, Duration::from_secs(1))?,
        ))
        .policy(Policy::per_key(
            "key-daily",
            Quota::per(10_000, Duration::from_secs(86_400))?,
        ))
        .tier(
            "paid",
            [Policy::per_key(
                "paid-burst",
                Quota::per(100, Duration::from_secs(1))?,
            )],
        )
        .tier_by(|info| {
            let key = info.headers.get("x-api-key")?.as_bytes();
            key.starts_with(b"paid-").then_some("paid")
        })
        .build()?;
    let demo = Demo {
        ip: ip.handle(),
        api: api.handle(),
        prometheus,
        started: Instant::now(),
        history: Arc::new(Mutex::new(VecDeque::with_capacity(HISTORY))),
    };
    let api_routes = Router::new()
        .route("/hello", get(|| async { "hello\n" }))
        .layer(api);
    let router = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .nest("/api", api_routes)
        .layer(ip)
        .with_state(demo.clone());
    Ok((router, demo))
}

async fn status(State(demo): State<Demo>) -> Json<StatusBody> {
    let mut history: Vec<Sample> = demo
        .history
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect();
    history.push(demo.sample());
    Json(StatusBody {
        layers: vec![
            ("ip".into(), demo.ip.status()),
            ("api".into(), demo.api.status()),
        ],
        history,
    })
}

async fn metrics(State(demo): State<Demo>) -> impl IntoResponse {
    match &demo.prometheus {
        Some(p) => {
            p.run_upkeep();
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                p.render(),
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "no metrics recorder\n").into_response(),
    }
}

/// The live page: no external assets; polls `/status` once a second and
/// draws admitted vs refused requests per second for each policy.
pub const PAGE: &str = r##"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ratewise-tower demo</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}
.chart{display:inline-block;margin:0 1em 1em 0}.chart h3{margin:.2em 0;font-size:13px}
.admitted{stroke:#2a7;fill:none;stroke-width:1.5}.refused{stroke:#d33;fill:none;stroke-width:1.5}
.legend span{margin-right:1em}.a{color:#2a7}.r{color:#d33}
</style></head>
<body data-rendered="0">
<h1>ratewise-tower demo</h1>
<p>Try <code>curl -i localhost:<span id="port"></span>/api/hello -H 'x-api-key: alice'</code> a few times.
<span class="legend"><span class="a">&#9632; admitted/s</span><span class="r">&#9632; refused/s</span></span></p>
<table id="totals"><thead><tr><th>policy</th><th>admitted</th><th>refused</th><th>shadow-refused</th><th>keys</th></tr></thead><tbody></tbody></table>
<div id="charts"></div>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = tag === "svg" || tag === "polyline" || tag === "line" || tag === "text"
    ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function rates(history, name) {
  const out = [];
  for (let i = 1; i < history.length; i++) {
    const [t0, s0] = history[i - 1], [t1, s1] = history[i];
    const a = s0.find(x => x[0] === name), b = s1.find(x => x[0] === name);
    if (!a || !b || t1 <= t0) continue;
    const dt = (t1 - t0) / 1000;
    out.push([t1, (b[1] - a[1]) / dt, (b[2] - a[2]) / dt]);
  }
  return out;
}
function chart(name, history) {
  const W = 360, H = 120, pts = rates(history, name);
  const box = el("div", {class: "chart", "data-policy": name});
  box.appendChild(el("h3", {}, name));
  const svg = el("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img"});
  svg.appendChild(el("line", {x1: 0, y1: H - 1, x2: W, y2: H - 1, stroke: "#999"}));
  const tMax = history.length ? history[history.length - 1][0] : 0, span = 300000;
  const yMax = Math.max(1, ...pts.map(p => Math.max(p[1], p[2])));
  for (const [cls, idx] of [["admitted", 1], ["refused", 2]]) {
    const coords = pts.filter(p => p[0] >= tMax - span)
      .map(p => `${(W * (1 - (tMax - p[0]) / span)).toFixed(1)},${(H - 2 - (H - 10) * p[idx] / yMax).toFixed(1)}`);
    svg.appendChild(el("polyline", {class: cls, "data-points": coords.length, points: coords.join(" ")}));
  }
  svg.appendChild(el("text", {x: 4, y: 12, "font-size": 10}, `max ${yMax.toFixed(1)}/s, last 5 min`));
  box.appendChild(svg);
  return box;
}
async function tick() {
  let s;
  try { s = await (await fetch("/status")).json(); } catch (e) { return; }
  const body = document.querySelector("#totals tbody");
  body.replaceChildren();
  const charts = document.getElementById("charts");
  charts.replaceChildren();
  let n = 0;
  for (const [layer, st] of s.layers) for (const set of st.sets) for (const p of set.policies) {
    const name = `${layer}/${p.name}`;
    const tr = el("tr", {"data-policy": name});
    tr.appendChild(el("td", {}, name));
    tr.appendChild(el("td", {class: "admitted"}, String(p.admitted)));
    tr.appendChild(el("td", {class: "refused"}, String(p.refused)));
    tr.appendChild(el("td", {}, String(p.shadow_refused)));
    tr.appendChild(el("td", {}, p.keys_tracked === null ? "-" : String(p.keys_tracked)));
    body.appendChild(tr);
    charts.appendChild(chart(name, s.history));
    n++;
  }
  document.body.setAttribute("data-rendered", String(n));
}
document.getElementById("port").textContent = location.port || "80";
tick();
setInterval(tick, 1000);
</script>
</body></html>
"##;
