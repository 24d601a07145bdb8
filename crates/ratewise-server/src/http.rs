//! The HTTP face: `POST /json` (the RLS request and response in protobuf's
//! JSON mapping, as envoyproxy/ratelimit serves them: 200 when OK, 429 when
//! over the limit), `/healthcheck`, `/metrics` (Prometheus), `/status`,
//! `/rules`, `/history`, and `/`, a live page of decisions per rule.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};

use crate::grpc::{DecideError, RateLimiter};
use crate::history::{History, Sample};
use crate::rls::{self, Code, RateLimitResponse, Unit};

/// What the HTTP routes read.
#[derive(Clone)]
pub struct HttpState {
    /// The decision service.
    pub limiter: RateLimiter,
    /// Renders `/metrics`; `None` answers 404 there.
    pub prometheus: Option<PrometheusHandle>,
    /// The configuration's reload history.
    pub reloads: Arc<ReloadStatus>,
    /// Decisions per rule over the last minutes.
    pub history: Arc<History>,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState").finish_non_exhaustive()
    }
}

/// How the configuration's loads went.
#[derive(Debug, Default)]
pub struct ReloadStatus {
    /// Successful loads, the first included.
    pub ok: AtomicU64,
    /// Failed reloads (the previous rules stayed).
    pub failed: AtomicU64,
    /// The message of the latest failure, until a load succeeds.
    pub last_error: Mutex<Option<String>>,
    /// Seconds since the Unix epoch of the latest successful load.
    pub last_ok_unix: AtomicU64,
}

impl ReloadStatus {
    /// Records a successful load.
    pub fn record_ok(&self) {
        self.ok.fetch_add(1, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_ok_unix.store(now, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Records a failed reload.
    pub fn record_failed(&self, message: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(message);
    }
}

/// The HTTP routes.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/json", post(json))
        .route("/healthcheck", get(|| async { "OK" }))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/rules", get(rules))
        .route("/history", get(history))
        .route("/", get(page))
        .with_state(state)
}

/// `RateLimitRequest` in protobuf's JSON mapping.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hits_addend")]
    hits_addend: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hits_addend")]
    hits_addend: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JsonOverride {
    #[serde(alias = "requests_per_unit")]
    requests_per_unit: u32,
    unit: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse {
    overall_code: &'static str,
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    limit_remaining: u32,
    duration_until_reset: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    requests_per_unit: u32,
    unit: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
}

#[derive(Debug, Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

fn code_name(code: i32) -> &'static str {
    match Code::try_from(code) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// A protobuf `Duration` in its JSON form: seconds with up to nine
/// fractional digits and an `s`.
fn duration_json(d: Option<&prost_types::Duration>) -> String {
    let Some(d) = d else { return "0s".into() };
    if d.nanos == 0 {
        format!("{}s", d.seconds)
    } else {
        let frac = format!("{:09}", d.nanos);
        format!("{}.{}s", d.seconds, frac.trim_end_matches('0'))
    }
}

fn to_json(r: &RateLimitResponse) -> JsonResponse {
    JsonResponse {
        overall_code: code_name(r.overall_code),
        statuses: r
            .statuses
            .iter()
            .map(|s| JsonStatus {
                code: code_name(s.code),
                current_limit: s.current_limit.as_ref().map(|l| JsonLimit {
                    requests_per_unit: l.requests_per_unit,
                    unit: Unit::try_from(l.unit).unwrap_or(Unit::Unknown).name(),
                    name: l.name.clone(),
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: duration_json(s.duration_until_reset.as_ref()),
            })
            .collect(),
        response_headers_to_add: r
            .response_headers_to_add
            .iter()
            .map(|h| JsonHeader {
                key: h.key.clone(),
                value: h.value.clone(),
            })
            .collect(),
    }
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message).into_response()
}

async fn json(State(state): State<HttpState>, body: axum::body::Bytes) -> Response {
    let parsed: JsonRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("invalid request: {e}\n")),
    };
    let mut descriptors = Vec::with_capacity(parsed.descriptors.len());
    for (i, d) in parsed.descriptors.into_iter().enumerate() {
        let limit = match d.limit {
            Some(o) => match Unit::from_name(&o.unit) {
                Some(unit) => Some(rls::RateLimitOverride {
                    requests_per_unit: o.requests_per_unit,
                    unit: unit as i32,
                }),
                None => {
                    return bad_request(format!(
                        "invalid request: descriptor {i} has an unknown limit unit `{}`\n",
                        o.unit
                    ))
                }
            },
            None => None,
        };
        descriptors.push(rls::RateLimitDescriptor {
            entries: d
                .entries
                .into_iter()
                .map(|e| rls::Entry {
                    key: e.key,
                    value: e.value,
                })
                .collect(),
            limit,
            hits_addend: d.hits_addend.map(|value| rls::UInt64Value { value }),
        });
    }
    let request = rls::RateLimitRequest {
        domain: parsed.domain,
        descriptors,
        hits_addend: parsed.hits_addend,
    };
    match state.limiter.decide(&request).await {
        Ok(answer) => {
            let status = if answer.overall_code == Code::OverLimit as i32 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, Json(to_json(&answer))).into_response()
        }
        Err(DecideError::Request(e)) => bad_request(format!("invalid request: {e}\n")),
        Err(DecideError::Unavailable(e)) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
        }
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    match &state.prometheus {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are not enabled\n").into_response(),
    }
}

#[derive(Serialize)]
struct StatusReport {
    config: ConfigReport,
    store: StoreReport,
    rules: Vec<RuleReport>,
}

#[derive(Serialize)]
struct ConfigReport {
    sources: Vec<String>,
    loads_ok: u64,
    reloads_failed: u64,
    last_load_unix: u64,
    last_error: Option<String>,
}

#[derive(Serialize)]
struct StoreReport {
    kind: &'static str,
    healthy: bool,
    /// Instances sharing the quotas, as heartbeats on Redis last said.
    #[serde(skip_serializing_if = "Option::is_none")]
    instances: Option<u32>,
}

#[derive(Serialize)]
struct RuleReport {
    domain: String,
    name: String,
    path: String,
    limit: String,
    algorithm: Option<&'static str>,
    shadow: bool,
    quota_mode: bool,
    keys: usize,
    ok: u64,
    over_limit: u64,
    shadow_refusals: u64,
}

async fn status(State(state): State<HttpState>) -> Json<StatusReport> {
    let engine_rules = state.limiter.engine().rules();
    let mut rules: Vec<RuleReport> = engine_rules
        .rules()
        .map(|r| {
            let (ok, over_limit, shadow_refusals) = r.totals().snapshot();
            RuleReport {
                domain: r.domain.to_string(),
                name: r.name.to_string(),
                path: r.path.to_string(),
                limit: r.describe_limit(),
                algorithm: r.algorithm().map(|a| a.as_str()),
                shadow: r.shadow,
                quota_mode: r.quota,
                keys: r.keys(),
                ok,
                over_limit,
                shadow_refusals,
            }
        })
        .collect();
    rules.sort_by(|a, b| a.path.cmp(&b.path));
    let reloads = &state.reloads;
    Json(StatusReport {
        config: ConfigReport {
            sources: engine_rules.sources.clone(),
            loads_ok: reloads.ok.load(Ordering::Relaxed),
            reloads_failed: reloads.failed.load(Ordering::Relaxed),
            last_load_unix: reloads.last_ok_unix.load(Ordering::Relaxed),
            last_error: reloads
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        },
        store: StoreReport {
            kind: if state.limiter.is_shared() {
                "redis"
            } else {
                "memory"
            },
            healthy: true,
            instances: state.limiter.redis().map(|r| r.instances()),
        },
        rules,
    })
}

async fn rules(State(state): State<HttpState>) -> String {
    let set = state.limiter.engine().rules();
    let mut lines: Vec<String> = set
        .rules()
        .map(|r| {
            let mut line = format!("{} (name `{}`, {} keys)", r.describe(), r.name, r.keys());
            for (key, live) in r.sample_keys() {
                let state = if live { "live" } else { "expired" };
                line.push_str(&format!("\n    {key} ({state})"));
            }
            line
        })
        .collect();
    lines.sort();
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The live page: self-contained (no external scripts, styles or fonts).
pub const PAGE: &str = include_str!("page.html");

async fn page() -> axum::response::Html<&'static str> {
    axum::response::Html(PAGE)
}

async fn history(State(state): State<HttpState>) -> Json<Vec<Sample>> {
    Json(state.history.samples())
}
