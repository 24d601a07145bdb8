//! [`Verdict`]: the decision for one request against every policy of its
//! set, held inline (no allocation), and how it becomes headers.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use ratewise::backend::DecisionSource;
use ratewise::response_headers::{self, HeaderBuf, HeaderStyle};
use ratewise::Decision;

/// The most policies one request can be checked against: a verdict holds
/// their states inline, so deciding allocates nothing (and a set's shadow
/// refusals fit one byte of bits).
pub const MAX_POLICIES: usize = 8;

/// What rendering a verdict's headers needs from the policy set it was
/// decided against: the set's `RateLimit-Policy` value and each policy's
/// name by position.
pub(crate) trait PolicyNames {
    /// The set's `RateLimit-Policy` header value.
    fn policy_header(&self) -> HeaderValue;
    /// The name of the set's policy at `index` (empty if there is none).
    fn policy_name(&self, index: u8) -> &str;
}

/// One policy's state after a decision: what `RateLimit` says about it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyState {
    /// The policy's position in its set.
    pub index: u8,
    /// Whether this policy refused the request.
    pub violated: bool,
    /// The policy's limit (burst).
    pub limit: u64,
    /// `r`: units left.
    pub remaining: u64,
    /// `t`: whole seconds until quota is available again (see
    /// [`response_headers::reset_param`]).
    pub reset_secs: u64,
    /// Time until the policy is back at full capacity.
    pub reset_after: Duration,
}

impl PolicyState {
    pub(crate) fn from_decision(index: usize, d: &Decision, violated: bool) -> Self {
        PolicyState {
            // A set holds at most MAX_POLICIES (8) policies.
            index: index as u8,
            violated,
            limit: d.limit,
            remaining: d.remaining,
            reset_secs: response_headers::reset_param(d),
            reset_after: d.reset_after,
        }
    }
}

/// The decision for one request against every policy of its set.
#[derive(Clone, Copy, Debug)]
pub struct Verdict {
    /// Whether every policy admitted the request.
    pub allowed: bool,
    /// On refusal, how long until the request would pass.
    pub retry_after: Option<Duration>,
    /// Who decided (degraded sources are counted in metrics).
    pub source: DecisionSource,
    /// Bit `i`: the set's shadow policy `i` would have refused.
    pub(crate) shadow_refused: u8,
    states: [PolicyState; MAX_POLICIES],
    len: usize,
}

impl Verdict {
    pub(crate) fn empty() -> Self {
        Verdict {
            allowed: true,
            retry_after: None,
            source: DecisionSource::Backend,
            shadow_refused: 0,
            states: [PolicyState::default(); MAX_POLICIES],
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, s: PolicyState) {
        if self.len < MAX_POLICIES {
            self.states[self.len] = s;
            self.len += 1;
        }
    }

    /// Each policy's state, in the set's order.
    pub fn states(&self) -> &[PolicyState] {
        &self.states[..self.len]
    }

    /// The state the legacy three-field headers describe: the violated
    /// policy with the longest wait, or (admitted) the one with the fewest
    /// units left.
    pub fn most_constraining(&self) -> Option<&PolicyState> {
        let s = self.states();
        if self.allowed {
            s.iter()
                .min_by_key(|p| (p.remaining, std::cmp::Reverse(p.reset_secs)))
        } else {
            s.iter()
                .filter(|p| p.violated)
                .max_by_key(|p| p.reset_secs)
                .or_else(|| s.first())
        }
    }

    /// Renders this verdict's headers: `RateLimit-Policy` and `RateLimit`
    /// for every policy of the set (style `draft`) and the legacy trios for
    /// the [most constraining](Verdict::most_constraining) policy. The
    /// values are formatted on the stack by [`ratewise::response_headers`];
    /// `http` copies each once. An admitted request's future carries the
    /// result until the response exists, so it is kept small (two values
    /// inline, the opt-in legacy trio boxed): a large future is copied
    /// with `memcpy` at every layer of the server that moves it.
    pub(crate) fn render(&self, set: &impl PolicyNames, style: HeaderStyle) -> ReadyHeaders {
        let mut out = ReadyHeaders {
            policy: None,
            state: None,
            trio: None,
        };
        if style.draft && self.len > 0 {
            out.policy = Some(set.policy_header());
            // A small buffer for the common case (a few short names); the
            // large one only when that overflows.
            let mut small = HeaderBuf::<128>::new(); // one policy always fits
            out.state = if self.write_limits(set, &mut small).is_ok() {
                HeaderValue::from_bytes(small.as_bytes()).ok()
            } else {
                let mut large = HeaderBuf::<4096>::new();
                // Names are at most 64 bytes (checked at build time): 8 fit.
                let _ = self.write_limits(set, &mut large);
                HeaderValue::from_bytes(large.as_bytes()).ok()
            };
        }
        if style.legacy || style.x_prefixed {
            out.trio = self.most_constraining().map(|s| {
                Box::new(Trio {
                    decision: Decision {
                        allowed: !s.violated,
                        limit: s.limit,
                        remaining: s.remaining,
                        reset_after: s.reset_after,
                        retry_after: None,
                        delay: Duration::ZERO,
                    },
                    style,
                })
            });
        }
        out
    }

    /// Writes this verdict's headers into `headers` (see
    /// [`Verdict::render`]), and `Retry-After` on a refusal.
    pub(crate) fn write_headers(
        &self,
        set: &impl PolicyNames,
        style: HeaderStyle,
        headers: &mut HeaderMap,
    ) {
        self.render(set, style).apply(headers);
        if let Some(retry) = self.retry_after.filter(|_| !self.allowed) {
            response_headers::write_retry_after(retry, |_, v| {
                insert(headers, &http::header::RETRY_AFTER, v)
            });
        }
    }
}

/// A verdict's headers, rendered and waiting for the response.
pub(crate) struct ReadyHeaders {
    policy: Option<HeaderValue>,
    state: Option<HeaderValue>,
    trio: Option<Box<Trio>>,
}

/// The legacy three-field headers' evidence, and which forms to write.
struct Trio {
    decision: Decision,
    style: HeaderStyle,
}

impl ReadyHeaders {
    /// Inserts the headers into a response's map.
    pub(crate) fn apply(self, headers: &mut HeaderMap) {
        if let Some(v) = self.policy {
            headers.insert(RATELIMIT_POLICY.clone(), v);
        }
        if let Some(v) = self.state {
            headers.insert(RATELIMIT.clone(), v);
        }
        if let Some(trio) = self.trio {
            let mut emit = |name: &'static str, value: &[u8]| {
                insert(headers, &HeaderName::from_static(name), value)
            };
            if trio.style.legacy {
                response_headers::write_trio(
                    response_headers::LEGACY_NAMES,
                    &trio.decision,
                    &mut emit,
                );
            }
            if trio.style.x_prefixed {
                response_headers::write_trio(response_headers::X_NAMES, &trio.decision, &mut emit);
            }
        }
    }
}

impl Verdict {
    fn write_limits<const N: usize>(
        &self,
        set: &impl PolicyNames,
        buf: &mut HeaderBuf<N>,
    ) -> Result<(), response_headers::HeaderWriteError> {
        for s in self.states() {
            let name = set.policy_name(s.index);
            buf.push_limit(name, s.remaining, Duration::from_secs(s.reset_secs))?;
        }
        Ok(())
    }
}

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static(response_headers::RATELIMIT_POLICY);
static RATELIMIT: HeaderName = HeaderName::from_static(response_headers::RATELIMIT);

fn insert(headers: &mut HeaderMap, name: &HeaderName, value: &[u8]) {
    if let Ok(v) = HeaderValue::from_bytes(value) {
        headers.insert(name.clone(), v);
    }
}
