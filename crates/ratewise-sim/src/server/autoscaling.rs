//! Provisioned capacity that scales up after sustained load, with a delay.

use ratewise::Timestamp;

use crate::server::model::{Response, ServerModel};
use crate::server::stock::{take_one, VariableRateBucket};

/// Provisioned capacity with delayed scale-up. Every `evaluation_s` the
/// consumed rate is compared with `target_utilization × provisioned`; after
/// `sustained_periods` consecutive periods at or above target, the
/// provisioned rate becomes `consumed / target` (capped at the maximum)
/// `scale_delay_s` later. Unused capacity accumulates up to `burst_s`
/// seconds' worth. Throttled requests consume nothing and do not count as
/// consumption, as with DynamoDB's consumed-capacity metric.
#[derive(Clone, Debug)]
pub struct AutoscalingServer {
    rate: f64,
    max_rate: f64,
    burst_s: f64,
    target: f64,
    period: f64,
    sustained: u32,
    delay: f64,
    bucket: VariableRateBucket,
    period_start: f64,
    consumed_in_period: f64,
    hot_periods: u32,
    pending: Option<(f64, f64)>,
}

impl AutoscalingServer {
    /// See the type's documentation for the meaning of each parameter.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rate: f64,
        max_rate: f64,
        burst_s: f64,
        target: f64,
        period: f64,
        sustained: u32,
        delay: f64,
    ) -> Self {
        AutoscalingServer {
            rate,
            max_rate,
            burst_s,
            target,
            period,
            sustained: sustained.max(1),
            delay,
            bucket: VariableRateBucket::new(0.0),
            period_start: 0.0,
            consumed_in_period: 0.0,
            hot_periods: 0,
            pending: None,
        }
    }

    /// The provisioned rate now in force.
    pub fn provisioned(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, to: f64) {
        let cap = (self.rate * self.burst_s).max(1.0);
        self.bucket.flow_to(to, self.rate, cap);
    }

    fn advance(&mut self, t: f64) {
        loop {
            let period_end = self.period_start + self.period;
            let scale_at = self.pending.map_or(f64::INFINITY, |p| p.0);
            let next = period_end.min(scale_at);
            if next > t {
                break;
            }
            self.refill(next);
            if scale_at <= period_end {
                if let Some((_, new_rate)) = self.pending.take() {
                    self.rate = new_rate.max(self.rate);
                }
                continue;
            }
            let consumed_rate = self.consumed_in_period / self.period;
            if consumed_rate >= self.target * self.rate {
                self.hot_periods += 1;
            } else {
                self.hot_periods = 0;
            }
            if self.hot_periods >= self.sustained
                && self.pending.is_none()
                && self.rate < self.max_rate
            {
                let wanted = (consumed_rate / self.target).min(self.max_rate);
                if wanted > self.rate {
                    self.pending = Some((period_end + self.delay, wanted));
                }
                self.hot_periods = 0;
            }
            self.period_start = period_end;
            self.consumed_in_period = 0.0;
        }
        self.refill(t);
    }
}

impl ServerModel for AutoscalingServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        self.advance(now.as_secs_f64());
        let throttled = take_one(&mut self.bucket.tokens);
        if !throttled {
            self.consumed_in_period += 1.0;
        }
        // This model sends no hints.
        Response {
            throttled,
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
    fn autoscaling_raises_capacity_after_sustained_load_and_delay() {
        let mut s = AutoscalingServer::new(10.0, 100.0, 1.0, 0.7, 60.0, 2, 120.0);
        // Saturate: 20 requests per second for 10 minutes.
        let mut granted_late = 0;
        for i in 0..12_000 {
            let now = t(f64::from(i) * 0.05);
            let r = s.handle(now);
            if now.as_secs_f64() > 400.0 && !r.throttled {
                granted_late += 1;
            }
        }
        // Hot for 2 periods (120 s), +120 s delay: scaled at 240 s to 10/0.7.
        assert!(s.provisioned() > 10.0, "provisioned {}", s.provisioned());
        assert!(granted_late > 200 * 10);
    }
}
