//! A token bucket shared with background tenants whose load varies.

use ratewise::Timestamp;
use ratewise_client::{secs_to_duration, ServerHints};
use serde::Deserialize;

use crate::server::model::{Response, ServerModel};
use crate::server::stock::{take_one, VariableRateBucket};

/// One step of background tenant load.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackgroundLoad {
    /// When this load starts, in simulated seconds.
    pub at_s: f64,
    /// Requests per second the other tenants consume from then on.
    pub rate_per_s: f64,
}

/// A token bucket refilled at the API's full rate, drained continuously by
/// background tenants at a rate that changes over time; our clients get what
/// is left. The bucket is integrated exactly across load changes.
#[derive(Clone, Debug)]
pub struct SharedServer {
    rate: f64,
    burst: f64,
    background: Vec<BackgroundLoad>,
    bucket: VariableRateBucket,
}

impl SharedServer {
    /// A shared API of `rate` per second and `burst` tokens, starting full.
    pub fn new(rate: f64, burst: f64, background: Vec<BackgroundLoad>) -> Self {
        SharedServer {
            rate,
            burst,
            background,
            bucket: VariableRateBucket::new(burst),
        }
    }

    fn load_at(&self, t: f64) -> f64 {
        self.background
            .iter()
            .take_while(|b| b.at_s <= t)
            .last()
            .map_or(0.0, |b| b.rate_per_s)
    }

    fn advance(&mut self, t: f64) {
        while self.bucket.at < t {
            let at = self.bucket.at;
            let next_change = self
                .background
                .iter()
                .map(|b| b.at_s)
                .find(|&a| a > at)
                .unwrap_or(f64::INFINITY)
                .min(t);
            let net = self.rate - self.load_at(at);
            self.bucket.flow_to(next_change, net, self.burst);
        }
    }
}

impl ServerModel for SharedServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        self.advance(now.as_secs_f64());
        let throttled = take_one(&mut self.bucket.tokens);
        let net = self.rate - self.load_at(self.bucket.at);
        let retry_after =
            (throttled && net > 0.0).then(|| secs_to_duration((1.0 - self.bucket.tokens) / net));
        Response {
            throttled,
            hints: ServerHints {
                retry_after,
                ..ServerHints::default()
            },
            ..Response::default()
        }
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.advance(now.as_secs_f64());
        self.bucket.tokens
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        self.advance(end.as_secs_f64());
        self.bucket.offered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: f64) -> Timestamp {
        Timestamp::from_secs_f64(s)
    }

    #[test]
    fn shared_server_gives_clients_what_background_leaves() {
        let bg = vec![BackgroundLoad {
            at_s: 10.0,
            rate_per_s: 3.0,
        }];
        let mut s = SharedServer::new(4.0, 4.0, bg);
        // Drain the burst.
        for _ in 0..4 {
            assert!(!s.handle(t(0.0)).throttled);
        }
        assert!(s.handle(t(0.0)).throttled);
        // Before the background load: 4/s for us.
        assert!((s.remaining(t(0.5)) - 2.0).abs() < 1e-9);
        // After it starts, only 1/s is left: from empty at 10 s, 2 tokens at 12 s.
        for _ in 0..4 {
            let _ = s.handle(t(10.0));
        }
        assert!((s.remaining(t(12.0)) - 2.0).abs() < 1e-9);
    }
}
