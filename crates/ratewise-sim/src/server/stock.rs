//! Float stocks of requests: taking one, the Heroku-style answer, and a
//! bucket integrated over spans of constant flow — the arithmetic the
//! float-state models share.

use ratewise_client::ServerHints;

use crate::server::model::Response;

/// Takes one request's worth from a float stock when at least one is
/// there; returns `true` (throttled) when not, leaving the stock as it was.
pub(crate) fn take_one(stock: &mut f64) -> bool {
    let throttled = *stock < 1.0;
    if !throttled {
        *stock -= 1.0;
    }
    throttled
}

/// A Heroku-style answer: `RateLimit-Remaining` only, the floor of what is
/// left after the decrement.
pub(crate) fn remaining_only(throttled: bool, left: f64) -> Response {
    Response {
        throttled,
        hints: ServerHints {
            // floor of a non-negative finite float; saturating cast by definition.
            remaining: Some(left.max(0.0).floor() as u64),
            ..ServerHints::default()
        },
        ..Response::default()
    }
}

/// A float token bucket integrated exactly over spans of constant net flow:
/// the arithmetic shared by the shared-capacity and autoscaling servers,
/// whose refill rates change over time (and, when shared, may turn
/// negative), which the core token bucket's fixed quota cannot express.
#[derive(Clone, Debug)]
pub(crate) struct VariableRateBucket {
    /// Tokens in the bucket.
    pub(crate) tokens: f64,
    /// Simulated seconds up to which the bucket has been integrated.
    pub(crate) at: f64,
    /// Tokens that flowed in since the start: the capacity offered.
    pub(crate) offered: f64,
}

impl VariableRateBucket {
    /// A bucket holding `tokens` at time zero.
    pub(crate) fn new(tokens: f64) -> Self {
        VariableRateBucket {
            tokens,
            at: 0.0,
            offered: tokens,
        }
    }

    /// Integrates from `self.at` to `to` (nothing when `to` is not later)
    /// at `net` tokens per second, holding the stock within `[0, cap]`;
    /// only inflow counts as offered.
    pub(crate) fn flow_to(&mut self, to: f64, net: f64, cap: f64) {
        let dt = to - self.at;
        if dt > 0.0 {
            self.offered += net.max(0.0) * dt;
            self.tokens = (self.tokens + net * dt).clamp(0.0, cap);
            self.at = to;
        }
    }
}
