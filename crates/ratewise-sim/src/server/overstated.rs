//! A server whose rate-limit headers over-state its quota: a core limiter
//! admits requests, and the headers describe a larger quota than it
//! enforces.

use ratewise::{RateLimiter, Timestamp};
use ratewise_client::ServerHints;
use serde::Deserialize;

use crate::server::model::{Response, ServerModel};

/// How the headers inflate the quota the limiter really has.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Overstatement {
    /// `RateLimit-Limit` is the burst × factor and `RateLimit-Remaining`
    /// counts the extra requests as if they were always left: the headers
    /// never say the quota is spent, even on a refusal (a gateway that
    /// reports a documented quota above the one a backend enforces).
    #[default]
    Offset,
    /// Both the limit and the remaining count are multiplied by the factor:
    /// the headers reach 0 when the quota does, but promise `factor` times
    /// what is left (a node of a cluster reporting the cluster's quota).
    Scaled,
}

/// A core limiter as the server, answering with `RateLimit-Limit`,
/// `-Remaining`, `-Reset` and (optionally) `Retry-After` that describe a
/// quota `factor` times larger than the one it enforces.
pub struct OverstatedServer {
    limiter: Box<dyn RateLimiter>,
    start_full: bool,
    factor: f64,
    how: Overstatement,
    retry_after: bool,
}

impl OverstatedServer {
    /// Wraps `limiter` (full at the start when `start_full`); its headers
    /// over-state the quota by `factor` (at least 1) in the manner `how`,
    /// and a refusal carries the limiter's exact `Retry-After` when
    /// `retry_after`.
    pub fn new(
        limiter: Box<dyn RateLimiter>,
        start_full: bool,
        factor: f64,
        how: Overstatement,
        retry_after: bool,
    ) -> Self {
        OverstatedServer {
            limiter,
            start_full,
            factor,
            how,
            retry_after,
        }
    }

    /// What the headers claim: (limit, remaining) for a real pair.
    fn advertised(&self, limit: u64, remaining: u64) -> (u64, u64) {
        let adv_limit = (limit as f64 * self.factor).ceil() as u64;
        let adv_remaining = match self.how {
            Overstatement::Offset => remaining + adv_limit.saturating_sub(limit),
            Overstatement::Scaled => (remaining as f64 * self.factor).floor() as u64,
        };
        (adv_limit, adv_remaining.min(adv_limit))
    }
}

impl ServerModel for OverstatedServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        match self.limiter.check_at(1, now) {
            Ok(d) => {
                let (limit, remaining) = self.advertised(d.limit, d.remaining);
                Response {
                    throttled: !d.allowed,
                    hints: ServerHints {
                        remaining: Some(remaining),
                        limit: Some(limit),
                        retry_after: d.retry_after.filter(|_| self.retry_after),
                        reset_after: Some(d.reset_after),
                        ..ServerHints::default()
                    },
                    delay: d.delay,
                    wire: None,
                }
            }
            // Weight 1 never exceeds a burst of at least 1.
            Err(_) => Response {
                throttled: true,
                ..Response::default()
            },
        }
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.limiter
            .peek_at(1, now)
            .map_or(0.0, |d| d.remaining as f64)
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        let q = self.limiter.quota();
        let initial = if self.start_full {
            q.burst() as f64
        } else {
            0.0
        };
        initial + end.as_secs_f64() * q.rate_per_second()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::limiter::{core_limiter, LimiterAlgorithm};
    use ratewise::Quota;

    #[test]
    fn headers_promise_more_than_the_limiter_admits() {
        let q = Quota::per_second(2).unwrap().with_burst(4).unwrap();
        let limiter = core_limiter(LimiterAlgorithm::TokenBucket, q, true);
        let mut s = OverstatedServer::new(limiter, true, 2.0, Overstatement::Offset, true);
        let t = Timestamp::from_nanos(1);
        let mut refused = None;
        for _ in 0..5 {
            let r = s.handle(t);
            assert_eq!(r.hints.limit, Some(8));
            assert!(r.hints.remaining.unwrap() >= 4, "{:?}", r.hints);
            if r.throttled {
                refused = Some(r);
            }
        }
        let r = refused.expect("the fifth request at once is refused");
        assert_eq!(r.hints.remaining, Some(4));
        assert!(r.hints.retry_after.is_some());

        let limiter = core_limiter(LimiterAlgorithm::TokenBucket, q, true);
        let mut s = OverstatedServer::new(limiter, true, 3.0, Overstatement::Scaled, false);
        let first = s.handle(t);
        assert_eq!(
            (first.hints.limit, first.hints.remaining),
            (Some(12), Some(9))
        );
        for _ in 0..3 {
            s.handle(t);
        }
        let refused = s.handle(t);
        assert!(refused.throttled);
        assert_eq!(refused.hints.remaining, Some(0));
        assert_eq!(refused.hints.retry_after, None);
    }
}
