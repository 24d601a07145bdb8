//! Heroku's fake server: a continuously refilled float token bucket.

use ratewise::Timestamp;

use crate::server::model::{Response, ServerModel};
use crate::server::stock::{remaining_only, take_one};

/// Heroku's fake server, as the open-source `rate_throttle_client` gem's
/// simulator implements it: a continuously refilled token bucket
/// with float state, lazily started clock, and the "no advance while full"
/// quirk. `RateLimit-Remaining` (floor, after the decrement) is sent on both
/// 200 and 429.
#[derive(Clone, Debug)]
pub struct HerokuBucket {
    max: f64,
    rate: f64,
    starting: f64,
    limit_left: f64,
    last_request: Option<Timestamp>,
    first_request: Option<Timestamp>,
}

impl HerokuBucket {
    /// A bucket of `max` tokens refilled at `rate` per second, holding
    /// `starting` tokens until the first request.
    pub fn new(max: f64, rate: f64, starting: f64) -> Self {
        HerokuBucket {
            max,
            rate,
            starting,
            limit_left: starting,
            last_request: None,
            first_request: None,
        }
    }

    /// The stock at `now` after refilling since `last`, capped at `max`.
    fn refilled(&self, last: Timestamp, now: Timestamp) -> f64 {
        let dt = now.saturating_duration_since(last).as_secs_f64();
        (self.limit_left + dt * self.rate).min(self.max)
    }
}

impl ServerModel for HerokuBucket {
    fn handle(&mut self, now: Timestamp) -> Response {
        let last = *self.last_request.get_or_insert(now);
        self.first_request.get_or_insert(now);
        if self.limit_left < self.max {
            self.last_request = Some(now);
            self.limit_left = self.refilled(last, now);
        }
        let throttled = take_one(&mut self.limit_left);
        // Heroku's fake server sends `RateLimit-Remaining` only.
        remaining_only(throttled, self.limit_left)
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        match self.last_request {
            Some(last) if self.limit_left < self.max => self.refilled(last, now),
            _ => self.limit_left,
        }
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        let from = self.first_request.unwrap_or(end);
        self.starting + end.saturating_duration_since(from).as_secs_f64() * self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::decrease_only::DecreaseOnly;

    fn t(s: f64) -> Timestamp {
        Timestamp::from_secs_f64(s)
    }

    #[test]
    fn heroku_family_sends_remaining_only() {
        let mut bucket = HerokuBucket::new(4500.0, 1.25, 0.0);
        let r = bucket.handle(t(0.0));
        assert_eq!(
            (r.hints.remaining, r.hints.limit, r.hints.reset_after),
            (Some(0), None, None)
        );
        let mut stock = DecreaseOnly::new(10.0);
        let r = stock.handle(t(0.0));
        assert_eq!(
            (r.hints.remaining, r.hints.limit, r.hints.reset_after),
            (Some(9), None, None)
        );
    }

    #[test]
    fn heroku_bucket_starts_empty_and_refills_from_first_request() {
        let mut b = HerokuBucket::new(4500.0, 1.25, 0.0);
        // The clock starts at the first request, however late it is.
        let r = b.handle(t(100.0));
        assert!(r.throttled);
        assert_eq!(r.hints.remaining, Some(0));
        // 0.8 s later exactly one token has accrued.
        let r = b.handle(t(100.8));
        assert!(!r.throttled);
        assert_eq!(r.hints.remaining, Some(0));
        let r = b.handle(t(100.8));
        assert!(r.throttled);
        // 8 s later: 10 tokens; remaining is floor after the decrement.
        let r = b.handle(t(108.8));
        assert!(!r.throttled);
        assert_eq!(r.hints.remaining, Some(9));
    }

    #[test]
    fn heroku_bucket_caps_at_max_and_keeps_stale_timestamp_while_full() {
        let mut b = HerokuBucket::new(10.0, 1.0, 10.0);
        // Full: last_request is set at the first request but not advanced.
        let r = b.handle(t(0.0));
        assert_eq!(r.hints.remaining, Some(9));
        let r = b.handle(t(5.0));
        // refilled 5 s (capped at 10), then decremented.
        assert_eq!(r.hints.remaining, Some(9));
    }
}
