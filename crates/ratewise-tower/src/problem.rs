//! RFC 9457 `application/problem+json` bodies for the layer's own
//! responses.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use ratewise::response_headers::QUOTA_EXCEEDED_TYPE;
use serde::{Deserialize, Serialize};

/// The `application/problem+json` media type.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem document as the layer writes it (and as clients can
/// read it back).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The problem type URI: the draft's `…#quota-exceeded` for a 429, or
    /// `about:blank`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What happened to this request.
    pub detail: String,
    /// The policies that refused the request (draft problem-type member).
    #[serde(
        rename = "violated-policies",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub violated_policies: Vec<String>,
}

fn respond(status: StatusCode, problem: &Problem) -> Response<Bytes> {
    let body = serde_json::to_vec(problem).unwrap_or_default();
    let mut res = Response::new(Bytes::from(body));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    res
}

/// Whether a request is a gRPC call (`content-type: application/grpc…`):
/// its refusals are gRPC statuses rather than HTTP errors.
pub(crate) fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC status code for one of the layer's HTTP answers.
const fn grpc_code(status: StatusCode) -> u16 {
    match status.as_u16() {
        429 => 8,  // RESOURCE_EXHAUSTED
        401 => 16, // UNAUTHENTICATED
        400 => 3,  // INVALID_ARGUMENT
        503 => 14, // UNAVAILABLE
        _ => 2,    // UNKNOWN
    }
}

/// A trailers-only gRPC error (HTTP 200, `grpc-status`, `grpc-message`),
/// with the retry delay as `grpc-retry-pushback-ms` (gRFC A6), rounded up
/// to whole milliseconds.
pub(crate) fn grpc(status: StatusCode, message: &str, retry: Option<Duration>) -> Response<Bytes> {
    let mut res = Response::new(Bytes::new());
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(grpc_code(status)));
    // grpc-message is percent-encoded; keep to unreserved printable ASCII.
    let message: String = message
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '%' || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&message) {
        h.insert("grpc-message", v);
    }
    if let Some(retry) = retry {
        let ms = retry.as_nanos().div_ceil(1_000_000);
        h.insert(
            "grpc-retry-pushback-ms",
            HeaderValue::from(u64::try_from(ms).unwrap_or(u64::MAX)),
        );
    }
    res
}

/// The draft's quota-exceeded problem naming `violated` policies, as JSON.
///
/// It names no wait (the `Retry-After` and `RateLimit` headers carry it),
/// so a policy set renders the body for each single policy once
/// (`PolicySet::refusal_body`) and a refusal clones it: under a flood of
/// refused requests, refusing costs no more than admitting.
pub(crate) fn quota_exceeded_body(violated: &[&str]) -> Bytes {
    let detail = match violated {
        [one] => format!("quota exceeded for policy {one}; Retry-After says when to try again"),
        many => format!(
            "quota exceeded for policies {}; Retry-After says when to try again",
            many.join(", ")
        ),
    };
    let problem = Problem {
        kind: QUOTA_EXCEEDED_TYPE.to_string(),
        title: "Request cannot be satisfied as assigned quota has been exceeded".to_string(),
        status: 429,
        detail,
        violated_policies: violated.iter().map(|s| s.to_string()).collect(),
    };
    Bytes::from(serde_json::to_vec(&problem).unwrap_or_default())
}

/// `429 Too Many Requests` with the draft's quota-exceeded problem (`body`,
/// as [`quota_exceeded_body`] renders it for the `violated` policies), or
/// for a gRPC call `RESOURCE_EXHAUSTED` naming them, with the retry delay.
pub(crate) fn quota_exceeded<'a>(
    grpc_call: bool,
    violated: impl Iterator<Item = &'a str>,
    retry_after: Option<Duration>,
    body: impl FnOnce() -> Bytes,
) -> Response<Bytes> {
    if grpc_call {
        let violated: Vec<&str> = violated.collect();
        return grpc(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("quota exceeded for policy {}", violated.join(", ")),
            retry_after,
        );
    }
    let mut res = Response::new(body());
    *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    res
}

/// Any other status, `about:blank` (or its gRPC status for a gRPC call).
pub(crate) fn simple_for(grpc_call: bool, status: StatusCode, detail: &str) -> Response<Bytes> {
    if grpc_call {
        grpc(status, detail, None)
    } else {
        simple(status, detail)
    }
}

/// Any other status, `about:blank`.
pub(crate) fn simple(status: StatusCode, detail: &str) -> Response<Bytes> {
    let problem = Problem {
        kind: "about:blank".to_string(),
        title: status.canonical_reason().unwrap_or("Error").to_string(),
        status: status.as_u16(),
        detail: detail.to_string(),
        violated_policies: Vec::new(),
    };
    respond(status, &problem)
}
