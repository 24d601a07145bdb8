//! RFC 9457 `application/problem+json` bodies for the layer's own
//! responses.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use ratewise::headers_out::{retry_after_secs, QUOTA_EXCEEDED_TYPE};
use serde::{Deserialize, Serialize};

use crate::policy::PolicySet;
use crate::verdict::Verdict;

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

/// `429 Too Many Requests` with the draft's quota-exceeded problem.
pub(crate) fn quota_exceeded(set: &PolicySet, v: &Verdict) -> Response<Bytes> {
    let violated: Vec<String> = v
        .states()
        .iter()
        .filter(|s| s.violated)
        .filter_map(|s| set.policies.get(s.index).map(|p| p.name.to_string()))
        .collect();
    let wait = v.retry_after.map_or(1, retry_after_secs);
    let problem = Problem {
        kind: QUOTA_EXCEEDED_TYPE.to_string(),
        title: "Request cannot be satisfied as assigned quota has been exceeded".to_string(),
        status: 429,
        detail: format!(
            "quota exceeded for policy {}; retry in {wait} s",
            violated.join(", ")
        ),
        violated_policies: violated,
    };
    respond(StatusCode::TOO_MANY_REQUESTS, &problem)
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
