//! Turning a response into a [`Signal`]: was this attempt throttled?
//!
//! [`Signal::Throttled`] for: `429`; `503` with `Retry-After` or
//! `x-amz-retry-after`; Google's `403` with a `rateLimitExceeded`-style
//! reason; GitHub's `403` with `retry-after`, zero remaining or a
//! rate-limit message, and its GraphQL `RATE_LIMITED`; gRPC
//! `RESOURCE_EXHAUSTED`; AWS throttling codes (`ThrottlingException`,
//! `SlowDown`, …); anything your own predicate recognises. Everything else
//! follows the status class: other 5xx → `ServerError`, 2xx/3xx → `Success`,
//! other 4xx → `Failure`. The functions take a status, a [`HeaderSource`]
//! and an optional body, so they work with any HTTP stack;
//! [`Classifier::outcome`] adds the parsed
//! [`ServerHints`](super::ServerHints) to make an [`Outcome`]. No input
//! panics: bodies are scanned in linear time by a tolerant tokenizer, and
//! only where a rule needs them.
//!
//! ```
//! use ratewise_client::classify::classify;
//! use ratewise_client::Signal;
//!
//! let body = br#"{"error":{"errors":[{"domain":"usageLimits","reason":"userRateLimitExceeded"}],"code":403}}"#;
//! let no_headers: [(&str, &str); 0] = [];
//! assert_eq!(classify(403, &no_headers, Some(body)), Signal::Throttled);
//! assert_eq!(classify(403, &no_headers, Some(br#"{"message":"Forbidden"}"#)), Signal::Failure);
//! assert_eq!(classify(503, &[("Retry-After", "10")], None), Signal::Throttled);
//! assert_eq!(classify(503, &no_headers, None), Signal::ServerError);
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use super::headers::{self, parse_hints, trim, HeaderSource};
use super::{Outcome, Signal};

/// The AWS error codes that mean "throttled", as both botocore and the Rust
/// SDK list them.
pub const AWS_THROTTLING_CODES: [&str; 14] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// The AWS error codes the SDKs treat as transient server failures
/// (classified as [`Signal::ServerError`], whatever the HTTP status).
pub const AWS_TRANSIENT_CODES: [&str; 2] = ["RequestTimeout", "RequestTimeoutException"];

/// Google API error reasons that mean "throttled" (JSON `error.errors[].reason`
/// in the v1 format, `error.details[].reason` in the `google.rpc` format).
pub const GOOGLE_RATE_LIMIT_REASONS: [&str; 3] = [
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
];

/// What a classifier sees of a response: everything a user predicate may
/// inspect.
#[derive(Clone, Copy)]
pub struct ResponseView<'a> {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers (and trailers, for gRPC, if the caller merged
    /// them).
    pub headers: &'a dyn HeaderSource,
    /// The body, or the part of it the caller buffered, if any.
    pub body: Option<&'a [u8]>,
}

impl fmt::Debug for ResponseView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseView")
            .field("status", &self.status)
            .field("body_len", &self.body.map(<[u8]>::len))
            .finish_non_exhaustive()
    }
}

type Predicate = Arc<dyn Fn(&ResponseView<'_>) -> bool + Send + Sync>;

/// A response classifier: the built-in recognisers (each can be switched
/// off) plus an optional user predicate for APIs they do not know.
///
/// Cheap to clone and shareable between tasks (`Send + Sync`).
///
/// ```
/// use ratewise_client::classify::Classifier;
/// use ratewise_client::Signal;
///
/// // An API that says "slow down" with a 400 and a custom header.
/// let classifier = Classifier::new()
///     .with_throttle_predicate(|r| r.status == 400 && r.headers.header("x-slow-down").is_some());
/// assert_eq!(classifier.classify(400, &[("X-Slow-Down", "1")], None), Signal::Throttled);
/// assert_eq!(classifier.classify(400, &[("Other", "1")], None), Signal::Failure);
/// ```
#[derive(Clone)]
pub struct Classifier {
    google: bool,
    github: bool,
    github_graphql: bool,
    aws: bool,
    grpc: bool,
    predicate: Option<Predicate>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::new()
    }
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classifier")
            .field("google", &self.google)
            .field("github", &self.github)
            .field("github_graphql", &self.github_graphql)
            .field("aws", &self.aws)
            .field("grpc", &self.grpc)
            .field("predicate", &self.predicate.is_some())
            .finish()
    }
}

impl Classifier {
    /// A classifier with every built-in recogniser on and no user predicate.
    pub fn new() -> Self {
        Classifier {
            google: true,
            github: true,
            github_graphql: true,
            aws: true,
            grpc: true,
            predicate: None,
        }
    }

    /// Adds a predicate that marks further responses as throttled. It is
    /// asked for every response that is not a `429`, before the other
    /// rules; returning `false` leaves the decision to the built-in rules. A second call replaces the first
    /// predicate.
    pub fn with_throttle_predicate<F>(mut self, predicate: F) -> Self
    where
        F: Fn(&ResponseView<'_>) -> bool + Send + Sync + 'static,
    {
        self.predicate = Some(Arc::new(predicate));
        self
    }

    /// Switches the Google recogniser (rate-limit reasons in a 403 body) on
    /// or off.
    pub fn google(mut self, on: bool) -> Self {
        self.google = on;
        self
    }

    /// Switches the GitHub recogniser (403 secondary and primary limits) on
    /// or off.
    pub fn github(mut self, on: bool) -> Self {
        self.github = on;
        self
    }

    /// Switches the GitHub GraphQL recogniser (a `200` whose body carries an
    /// error of type `RATE_LIMITED`) on or off. It is the only rule that
    /// reads success bodies; switch it off for APIs whose data may contain
    /// that exact pair.
    pub fn github_graphql(mut self, on: bool) -> Self {
        self.github_graphql = on;
        self
    }

    /// Switches the AWS error-code recogniser on or off.
    pub fn aws(mut self, on: bool) -> Self {
        self.aws = on;
        self
    }

    /// Switches the gRPC `grpc-status` recogniser on or off.
    pub fn grpc(mut self, on: bool) -> Self {
        self.grpc = on;
        self
    }

    /// Classifies one response; see the [module docs](self) for the rules
    /// and their order.
    pub fn classify<H: HeaderSource + ?Sized>(
        &self,
        status: u16,
        headers: &H,
        body: Option<&[u8]>,
    ) -> Signal {
        let view = ResponseView {
            status,
            headers: &headers,
            body,
        };
        self.classify_view(&view)
    }

    /// [`classify`](Self::classify) on a prepared [`ResponseView`].
    pub fn classify_view(&self, r: &ResponseView<'_>) -> Signal {
        if r.status == 429 || self.predicate.as_ref().is_some_and(|p| p(r)) {
            return Signal::Throttled;
        }
        if self.grpc {
            match r.headers.header("grpc-status").and_then(grpc_signal) {
                Some(Signal::Throttled) => return Signal::Throttled,
                // gRPC answers with HTTP 200 and puts its verdict in
                // `grpc-status`; on other statuses the HTTP code is the
                // more reliable one (a proxy answered).
                Some(signal) if (200..=299).contains(&r.status) => return signal,
                _ => {}
            }
        }
        if self.aws && r.status >= 400 {
            if let Some(signal) = aws_signal(r) {
                return signal;
            }
        }
        match r.status {
            503 if carries_retry_after(r.headers) => Signal::Throttled,
            403 if (self.google && google_rate_limited(r.body))
                || (self.github && github_rate_limited(r)) =>
            {
                Signal::Throttled
            }
            500..=599 => Signal::ServerError,
            200..=299 if self.github_graphql && graphql_rate_limited(r.body) => Signal::Throttled,
            200..=399 => Signal::Success,
            _ => Signal::Failure,
        }
    }

    /// Classifies one response and reads its [`ServerHints`](super::ServerHints)
    /// (see [`parse_hints`]); `now` is the current wall-clock time, used only
    /// to turn HTTP-dates and epoch resets into waits.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use ratewise_client::classify::Classifier;
    /// use ratewise_client::Signal;
    ///
    /// let outcome = Classifier::new().outcome(
    ///     429,
    ///     &[("Retry-After", "3"), ("RateLimit-Remaining", "0")],
    ///     None,
    ///     SystemTime::now(),
    /// );
    /// assert_eq!(outcome.signal, Signal::Throttled);
    /// assert_eq!(outcome.hints.retry_after, Some(Duration::from_secs(3)));
    /// assert_eq!(outcome.hints.remaining, Some(0));
    /// ```
    pub fn outcome<H: HeaderSource + ?Sized>(
        &self,
        status: u16,
        headers: &H,
        body: Option<&[u8]>,
        now: SystemTime,
    ) -> Outcome {
        Outcome {
            signal: self.classify(status, headers, body),
            hints: parse_hints(headers, now),
        }
    }
}

/// Classifies a response with the default [`Classifier`].
pub fn classify<H: HeaderSource + ?Sized>(status: u16, headers: &H, body: Option<&[u8]>) -> Signal {
    Classifier::new().classify(status, headers, body)
}

/// Classifies a response and reads its hints with the default [`Classifier`].
pub fn outcome<H: HeaderSource + ?Sized>(
    status: u16,
    headers: &H,
    body: Option<&[u8]>,
    now: SystemTime,
) -> Outcome {
    Classifier::new().outcome(status, headers, body, now)
}

/// gRPC status codes (numeric, or the canonical name some proxies write) to
/// signals. `OK` returns `None` so the HTTP status decides.
fn grpc_signal(value: &[u8]) -> Option<Signal> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    let v = trim(value);
    let code = headers::parse_u64(v).or_else(|| {
        NAMES
            .iter()
            .position(|n| v.eq_ignore_ascii_case(n.as_bytes()))
            .and_then(|i| u64::try_from(i).ok())
    })?;
    Some(match code {
        0 => return None,
        8 => Signal::Throttled,
        4 => Signal::Timeout,
        2 | 13 | 14 | 15 => Signal::ServerError,
        _ => Signal::Failure,
    })
}

fn carries_retry_after(h: &dyn HeaderSource) -> bool {
    h.header("retry-after")
        .is_some_and(|v| headers::parse_retry_after(v).is_some())
        || h.header("x-amz-retry-after")
            .is_some_and(|v| headers::parse_u64(v).is_some())
}

/// The AWS error code of a response, checked against the throttling and
/// transient lists. `None` when there is no code or it is in neither list.
fn aws_signal(r: &ResponseView<'_>) -> Option<Signal> {
    let verdict = |code: &[u8]| -> Option<Signal> {
        let code = aws_code_name(code);
        if AWS_THROTTLING_CODES.iter().any(|c| c.as_bytes() == code) {
            Some(Signal::Throttled)
        } else if AWS_TRANSIENT_CODES.iter().any(|c| c.as_bytes() == code) {
            Some(Signal::ServerError)
        } else {
            None
        }
    };
    if let Some(signal) = r.headers.header("x-amzn-errortype").and_then(verdict) {
        return Some(signal);
    }
    let body = r.body?;
    scan::json_pairs(body)
        .filter(|(k, _)| matches!(*k, b"__type" | b"code" | b"Code"))
        .find_map(|(_, v)| verdict(v))
        .or_else(|| scan::xml_elements(body, b"Code").find_map(verdict))
}

/// `com.amazonaws.dynamodb.v20120810#ThrottlingException` and
/// `ThrottlingException:http://internal.amazon.com/...` both name
/// `ThrottlingException`.
fn aws_code_name(raw: &[u8]) -> &[u8] {
    let after_hash = match raw.iter().rposition(|&b| b == b'#') {
        Some(i) => raw.get(i + 1..).unwrap_or_default(),
        None => raw,
    };
    let before_colon = match after_hash.iter().position(|&b| b == b':') {
        Some(i) => after_hash.get(..i).unwrap_or_default(),
        None => after_hash,
    };
    trim(before_colon)
}

fn google_rate_limited(body: Option<&[u8]>) -> bool {
    body.is_some_and(|b| {
        scan::json_pairs(b).any(|(k, v)| match k {
            b"reason" => GOOGLE_RATE_LIMIT_REASONS.iter().any(|r| r.as_bytes() == v),
            b"status" => v == b"RESOURCE_EXHAUSTED",
            _ => false,
        })
    })
}

/// GitHub's 403s: a secondary limit (with `retry-after`, or the message), or
/// the primary limit exhausted (`x-ratelimit-remaining: 0`, or the same from
/// any other rate-limit header family).
fn github_rate_limited(r: &ResponseView<'_>) -> bool {
    const MESSAGES: [&[u8]; 3] = [
        b"secondary rate limit",
        b"rate limit exceeded",
        b"abuse detection",
    ];
    r.headers
        .header("retry-after")
        .is_some_and(|v| !trim(v).is_empty())
        // Any header family that reports nothing left; the wall-clock time
        // does not affect `remaining`.
        || parse_hints(r.headers, SystemTime::UNIX_EPOCH).remaining == Some(0)
        || r.body.is_some_and(|b| {
            MESSAGES
                .iter()
                .any(|m| scan::contains_ignore_ascii_case(b, m))
        })
}

fn graphql_rate_limited(body: Option<&[u8]>) -> bool {
    body.is_some_and(|b| scan::json_pairs(b).any(|(k, v)| k == b"type" && v == b"RATE_LIMITED"))
}

#[cfg(feature = "http")]
mod http_support {
    use std::time::SystemTime;

    use super::{Classifier, Outcome, Signal};

    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    impl Classifier {
        /// Classifies an `http` status and header map (for example the
        /// `Parts` of a response whose body is still streaming), with the
        /// body if the caller buffered it.
        pub fn classify_http(
            &self,
            status: http::StatusCode,
            headers: &http::HeaderMap,
            body: Option<&[u8]>,
        ) -> Signal {
            self.classify(status.as_u16(), headers, body)
        }

        /// Classifies a buffered `http::Response`, body included.
        ///
        /// ```
        /// use ratewise_client::classify::Classifier;
        /// use ratewise_client::Signal;
        ///
        /// let response = http::Response::builder()
        ///     .status(400)
        ///     .header("x-amzn-ErrorType", "ThrottlingException:http://internal.amazon.com/coral/")
        ///     .body(Vec::new())?;
        /// assert_eq!(Classifier::new().classify_response(&response), Signal::Throttled);
        /// # Ok::<(), http::Error>(())
        /// ```
        pub fn classify_response<B: AsRef<[u8]>>(&self, response: &http::Response<B>) -> Signal {
            self.classify(
                response.status().as_u16(),
                response.headers(),
                Some(response.body().as_ref()),
            )
        }

        /// Classifies an `http::Response` from its status and headers only,
        /// whatever its body type.
        pub fn classify_response_head<B>(&self, response: &http::Response<B>) -> Signal {
            self.classify(response.status().as_u16(), response.headers(), None)
        }

        /// [`outcome`](Classifier::outcome) on a buffered `http::Response`.
        pub fn outcome_response<B: AsRef<[u8]>>(
            &self,
            response: &http::Response<B>,
            now: SystemTime,
        ) -> Outcome {
            self.outcome(
                response.status().as_u16(),
                response.headers(),
                Some(response.body().as_ref()),
                now,
            )
        }

        /// [`outcome`](Classifier::outcome) on an `http::Response`'s status
        /// and headers only, whatever its body type.
        pub fn outcome_response_head<B>(
            &self,
            response: &http::Response<B>,
            now: SystemTime,
        ) -> Outcome {
            self.outcome(response.status().as_u16(), response.headers(), None, now)
        }
    }

    /// Classifies a `(&StatusCode, &HeaderMap)` pair with the default
    /// [`Classifier`].
    pub fn classify_parts(status: &http::StatusCode, headers: &http::HeaderMap) -> Signal {
        Classifier::new().classify_http(*status, headers, None)
    }

    /// Classifies a `(&StatusCode, &HeaderMap)` pair and reads its hints
    /// with the default [`Classifier`]; `now` is the wall-clock time.
    pub fn outcome_parts(
        status: &http::StatusCode,
        headers: &http::HeaderMap,
        now: SystemTime,
    ) -> Outcome {
        Classifier::new().outcome(status.as_u16(), headers, None, now)
    }
}

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use http_support::{classify_parts, outcome_parts};

/// Tolerant, non-recursive scanners over untrusted bodies.
mod scan {
    #[derive(Clone, Copy)]
    enum Tok<'a> {
        Str(&'a [u8]),
        Colon,
        Other,
    }

    struct Tokens<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl<'a> Iterator for Tokens<'a> {
        type Item = Tok<'a>;

        fn next(&mut self) -> Option<Tok<'a>> {
            while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.i = self.i.saturating_add(1);
            }
            let b = *self.s.get(self.i)?;
            match b {
                b'"' => {
                    let start = self.i.saturating_add(1);
                    let mut j = start;
                    while let Some(&c) = self.s.get(j) {
                        match c {
                            b'\\' => j = j.saturating_add(2),
                            b'"' => break,
                            _ => j = j.saturating_add(1),
                        }
                    }
                    let end = j.min(self.s.len());
                    self.i = j.saturating_add(1);
                    Some(Tok::Str(self.s.get(start..end).unwrap_or_default()))
                }
                b':' => {
                    self.i = self.i.saturating_add(1);
                    Some(Tok::Colon)
                }
                _ => {
                    self.i = self.i.saturating_add(1);
                    Some(Tok::Other)
                }
            }
        }
    }

    /// Every `"key": "value"` pair whose value is a string, anywhere in the
    /// document, as raw (still escaped) bytes. Not a validator: invalid or
    /// truncated JSON yields whatever pairs are recognisable.
    pub(super) fn json_pairs(body: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut tokens = Tokens { s: body, i: 0 };
        let mut prev: [Option<Tok<'_>>; 2] = [None, None];
        std::iter::from_fn(move || loop {
            let t = tokens.next()?;
            let pair = match (prev[0], prev[1], t) {
                (Some(Tok::Str(k)), Some(Tok::Colon), Tok::Str(v)) => Some((k, v)),
                _ => None,
            };
            prev = [prev[1], Some(t)];
            if pair.is_some() {
                return pair;
            }
        })
    }

    /// The text of every `<name>…</name>` element (no attributes, no
    /// nesting): enough for AWS's XML error bodies.
    pub(super) fn xml_elements<'a>(
        body: &'a [u8],
        name: &'static [u8],
    ) -> impl Iterator<Item = &'a [u8]> {
        let mut rest = body;
        std::iter::from_fn(move || {
            let open = find_tag(rest, b"<", name)?;
            let after_open = rest.get(open..)?;
            let close = find_tag(after_open, b"</", name).map_or(after_open.len(), |c| {
                c.saturating_sub(name.len().saturating_add(3))
            });
            let text = after_open.get(..close).unwrap_or_default();
            rest = after_open.get(close..).unwrap_or_default();
            Some(text)
        })
    }

    /// Index just past `<name>` (or `</name>`) in `hay`. The tag is matched
    /// piecewise in place, so scanning a body allocates nothing.
    fn find_tag(hay: &[u8], lead: &[u8], name: &[u8]) -> Option<usize> {
        // At least one byte (the `>`), so `windows` gets a non-zero size.
        let len = lead.len().saturating_add(name.len()).saturating_add(1);
        hay.windows(len)
            .position(|w| {
                w.strip_prefix(lead)
                    .and_then(|rest| rest.strip_prefix(name))
                    .is_some_and(|rest| rest == b">")
            })
            .map(|i| i.saturating_add(len))
    }

    /// Whether `hay` contains `needle`, ignoring ASCII case.
    pub(super) fn contains_ignore_ascii_case(hay: &[u8], needle: &[u8]) -> bool {
        needle.is_empty()
            || hay
                .windows(needle.len())
                .any(|w| w.eq_ignore_ascii_case(needle))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn json_pairs_handle_escapes_nesting_and_truncation() {
            let body = br#"{"a": "x\"y", "n": 1, "o": {"b" : "c"}, "arr": ["d", "e"], "t": "tr"#;
            let pairs: Vec<_> = json_pairs(body).collect();
            assert_eq!(
                pairs,
                vec![(&b"a"[..], &br#"x\"y"#[..]), (b"b", b"c"), (b"t", b"tr"),]
            );
            assert_eq!(json_pairs(b"\"\\").count(), 0);
            assert_eq!(json_pairs(b"").count(), 0);
        }

        #[test]
        fn xml_elements_find_every_code() {
            let body = b"<Error><Code>A</Code><Code>B</Code><Code>unterminated";
            let codes: Vec<_> = xml_elements(body, b"Code").collect();
            assert_eq!(codes, vec![&b"A"[..], b"B", b"unterminated"]);
            assert_eq!(xml_elements(b"<Code", b"Code").count(), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerHints;
    use std::time::{Duration, UNIX_EPOCH};

    const NONE: [(&str, &str); 0] = [];

    #[test]
    fn status_classes() {
        assert_eq!(classify(200, &NONE, None), Signal::Success);
        assert_eq!(classify(204, &NONE, None), Signal::Success);
        assert_eq!(classify(304, &NONE, None), Signal::Success);
        assert_eq!(classify(400, &NONE, None), Signal::Failure);
        assert_eq!(classify(403, &NONE, None), Signal::Failure);
        assert_eq!(classify(404, &NONE, None), Signal::Failure);
        assert_eq!(classify(429, &NONE, None), Signal::Throttled);
        assert_eq!(classify(500, &NONE, None), Signal::ServerError);
        assert_eq!(classify(502, &NONE, None), Signal::ServerError);
        assert_eq!(classify(503, &NONE, None), Signal::ServerError);
        assert_eq!(classify(504, &NONE, None), Signal::ServerError);
        assert_eq!(classify(101, &NONE, None), Signal::Failure);
        assert_eq!(classify(0, &NONE, None), Signal::Failure);
        assert_eq!(classify(700, &NONE, None), Signal::Failure);
    }

    #[test]
    fn service_unavailable_is_throttled_only_with_a_valid_retry_after() {
        assert_eq!(
            classify(503, &[("Retry-After", "120")], None),
            Signal::Throttled
        );
        assert_eq!(
            classify(
                503,
                &[("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")],
                None
            ),
            Signal::Throttled
        );
        assert_eq!(
            classify(503, &[("x-amz-retry-after", "250")], None),
            Signal::Throttled
        );
        assert_eq!(
            classify(503, &[("Retry-After", "whenever")], None),
            Signal::ServerError
        );
    }

    #[test]
    fn google_403_reasons() {
        let v1 = br#"{
 "error": {
  "errors": [
   {
    "domain": "usageLimits",
    "reason": "rateLimitExceeded",
    "message": "Rate Limit Exceeded"
   }
  ],
  "code": 403,
  "message": "Rate Limit Exceeded"
 }
}"#;
        assert_eq!(classify(403, &NONE, Some(v1)), Signal::Throttled);
        let user = br#"{"error":{"errors":[{"domain":"usageLimits","reason":"userRateLimitExceeded","message":"User Rate Limit Exceeded"}],"code":403,"message":"User Rate Limit Exceeded"}}"#;
        assert_eq!(classify(403, &NONE, Some(user)), Signal::Throttled);
        let rpc = br#"{"error":{"code":403,"message":"Quota exceeded","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com"}]}}"#;
        assert_eq!(classify(403, &NONE, Some(rpc)), Signal::Throttled);
        let exhausted = br#"{"error":{"code":403,"status":"RESOURCE_EXHAUSTED"}}"#;
        assert_eq!(classify(403, &NONE, Some(exhausted)), Signal::Throttled);
        // Other Google 403 reasons are real refusals.
        let denied = br#"{"error":{"errors":[{"domain":"global","reason":"insufficientPermissions"}],"code":403}}"#;
        assert_eq!(classify(403, &NONE, Some(denied)), Signal::Failure);
        let daily = br#"{"error":{"errors":[{"domain":"usageLimits","reason":"dailyLimitExceeded"}],"code":403}}"#;
        assert_eq!(classify(403, &NONE, Some(daily)), Signal::Failure);
        // The recogniser can be switched off. (`user` would still match the
        // GitHub recogniser's "rate limit exceeded" message; `rpc` does not.)
        assert_eq!(
            Classifier::new()
                .google(false)
                .classify(403, &NONE, Some(rpc)),
            Signal::Failure
        );
    }

    #[test]
    fn github_secondary_and_primary_limits() {
        assert_eq!(
            classify(403, &[("retry-after", "60")], None),
            Signal::Throttled
        );
        let primary = [
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000000"),
        ];
        assert_eq!(classify(403, &primary, None), Signal::Throttled);
        let plenty = [
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4999"),
        ];
        assert_eq!(classify(403, &plenty, None), Signal::Failure);
        assert_eq!(
            classify(403, &[("RateLimit-Remaining", "0")], None),
            Signal::Throttled
        );
        assert_eq!(
            classify(403, &[("RateLimit", r#""d";r=0;t=9"#)], None),
            Signal::Throttled
        );
        let secondary = br#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/resources-in-the-rest-api#secondary-rate-limits"}"#;
        assert_eq!(classify(403, &NONE, Some(secondary)), Signal::Throttled);
        let primary_body = br#"{"message":"API rate limit exceeded for 192.0.2.1. (But here's the good news: Authenticated requests get a higher rate limit.)"}"#;
        assert_eq!(classify(403, &NONE, Some(primary_body)), Signal::Throttled);
        let forbidden = br#"{"message":"Resource not accessible by integration"}"#;
        assert_eq!(classify(403, &NONE, Some(forbidden)), Signal::Failure);
        assert_eq!(
            Classifier::new()
                .github(false)
                .classify(403, &primary, Some(secondary)),
            Signal::Failure
        );
    }

    #[test]
    fn github_graphql_rate_limited_200() {
        let body = br#"{"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded for user ID 1."}]}"#;
        assert_eq!(classify(200, &NONE, Some(body)), Signal::Throttled);
        let ok = br#"{"data":{"viewer":{"login":"octocat"}}}"#;
        assert_eq!(classify(200, &NONE, Some(ok)), Signal::Success);
        assert_eq!(
            Classifier::new()
                .github_graphql(false)
                .classify(200, &NONE, Some(body)),
            Signal::Success
        );
    }

    #[test]
    fn grpc_status() {
        assert_eq!(
            classify(200, &[("grpc-status", "8")], None),
            Signal::Throttled
        );
        assert_eq!(
            classify(200, &[("grpc-status", "RESOURCE_EXHAUSTED")], None),
            Signal::Throttled
        );
        assert_eq!(
            classify(429, &[("grpc-status", "resource_exhausted")], None),
            Signal::Throttled
        );
        assert_eq!(
            classify(200, &[("grpc-status", "0")], None),
            Signal::Success
        );
        assert_eq!(
            classify(200, &[("grpc-status", "14")], None),
            Signal::ServerError
        );
        assert_eq!(
            classify(200, &[("grpc-status", "4")], None),
            Signal::Timeout
        );
        assert_eq!(
            classify(200, &[("grpc-status", "5")], None),
            Signal::Failure
        );
        // Outside 2xx a proxy answered: the HTTP status decides, except that
        // RESOURCE_EXHAUSTED is always a throttle.
        assert_eq!(
            classify(429, &[("grpc-status", "5")], None),
            Signal::Throttled
        );
        assert_eq!(
            classify(502, &[("grpc-status", "0")], None),
            Signal::ServerError
        );
        assert_eq!(
            classify(404, &[("grpc-status", "14")], None),
            Signal::Failure
        );
        assert_eq!(
            classify(502, &[("grpc-status", "8")], None),
            Signal::Throttled
        );
        // Garbage falls back to the HTTP status.
        assert_eq!(
            classify(200, &[("grpc-status", "x")], None),
            Signal::Success
        );
        assert_eq!(
            Classifier::new()
                .grpc(false)
                .classify(200, &[("grpc-status", "8")], None),
            Signal::Success
        );
    }

    #[test]
    fn every_aws_throttling_code_from_every_place() {
        for code in AWS_THROTTLING_CODES {
            let header = [(
                "x-amzn-ErrorType",
                format!("{code}:http://internal.amazon.com/coral/com.amazon.coral.service/"),
            )];
            assert_eq!(classify(400, &header, None), Signal::Throttled, "{code}");
            let json = format!(
                r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"slow down"}}"#
            );
            assert_eq!(
                classify(400, &NONE, Some(json.as_bytes())),
                Signal::Throttled,
                "{code}"
            );
            let rest_json = format!(r#"{{"code":"{code}","message":"slow down"}}"#);
            assert_eq!(
                classify(400, &NONE, Some(rest_json.as_bytes())),
                Signal::Throttled,
                "{code}"
            );
            let xml = format!(
                "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>Rate exceeded</Message></Error></ErrorResponse>"
            );
            assert_eq!(
                classify(400, &NONE, Some(xml.as_bytes())),
                Signal::Throttled,
                "{code}"
            );
        }
        // S3's SlowDown comes as a 503 without Retry-After.
        let s3 = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        assert_eq!(classify(503, &NONE, Some(s3)), Signal::Throttled);
        // Transient codes are server errors even on a 400.
        let timeout = br#"{"__type":"RequestTimeoutException"}"#;
        assert_eq!(classify(400, &NONE, Some(timeout)), Signal::ServerError);
        // Other codes leave the status to decide.
        let denied = br#"{"__type":"AccessDeniedException"}"#;
        assert_eq!(classify(400, &NONE, Some(denied)), Signal::Failure);
        // Success bodies are not read for AWS codes.
        let data = br#"{"code":"Throttling"}"#;
        assert_eq!(classify(200, &NONE, Some(data)), Signal::Success);
        assert_eq!(
            Classifier::new()
                .aws(false)
                .classify(400, &NONE, Some(timeout)),
            Signal::Failure
        );
    }

    #[test]
    fn classifier_is_shareable_between_tasks() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>(_: &T) {}
        let c = Classifier::new().with_throttle_predicate(|r| r.status == 418);
        assert_send_sync(&c);
        let for_task = c.clone();
        let handle = std::thread::spawn(move || for_task.classify(418, &NONE, None));
        assert_eq!(handle.join().ok(), Some(Signal::Throttled));
    }

    #[test]
    fn user_predicate_is_consulted_first() {
        let c = Classifier::new().with_throttle_predicate(|r| {
            r.body.is_some_and(|b| b.windows(5).any(|w| w == b"quota"))
        });
        assert_eq!(
            c.classify(402, &NONE, Some(b"quota gone")),
            Signal::Throttled
        );
        assert_eq!(c.classify(402, &NONE, Some(b"pay up")), Signal::Failure);
        assert_eq!(c.classify(500, &NONE, None), Signal::ServerError);
        let shared = c.clone();
        assert!(format!("{shared:?}").contains("predicate: true"));
    }

    #[test]
    fn outcome_bundles_signal_and_hints() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let h = [
            ("Retry-After", "5"),
            ("RateLimit-Policy", r#""default";q=100;w=60"#),
            ("RateLimit", r#""default";r=0;t=5"#),
        ];
        let o = outcome(429, &h, None, now);
        assert_eq!(o.signal, Signal::Throttled);
        assert_eq!(
            o.hints,
            ServerHints {
                retry_after: Some(Duration::from_secs(5)),
                remaining: Some(0),
                limit: Some(100),
                reset_after: Some(Duration::from_secs(5)),
                no_retry: false,
                policy: Some((100, Duration::from_secs(60))),
            }
        );
    }

    #[cfg(feature = "http")]
    #[test]
    fn http_crate_conveniences() -> Result<(), http::Error> {
        let c = Classifier::new();
        let r = http::Response::builder()
            .status(403)
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", "1700000060")
            .body(b"{}".to_vec())?;
        assert_eq!(c.classify_response(&r), Signal::Throttled);
        assert_eq!(c.classify_response_head(&r), Signal::Throttled);
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let o = c.outcome_response(&r, now);
        assert_eq!(o.signal, Signal::Throttled);
        assert_eq!(o.hints.remaining, Some(0));
        assert_eq!(o.hints.reset_after, Some(Duration::from_secs(60)));
        assert_eq!(c.outcome_response_head(&r, now), o);
        assert_eq!(classify_parts(&r.status(), r.headers()), Signal::Throttled);
        assert_eq!(outcome_parts(&r.status(), r.headers(), now), o);
        let ok = http::Response::builder().status(200).body(())?;
        assert_eq!(c.classify_response_head(&ok), Signal::Success);
        assert_eq!(
            c.classify_http(http::StatusCode::SERVICE_UNAVAILABLE, ok.headers(), None),
            Signal::ServerError
        );
        Ok(())
    }
}
