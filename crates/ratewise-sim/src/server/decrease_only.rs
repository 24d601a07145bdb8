//! The gem's decrease-only server: a fixed stock that never refills.

use ratewise::Timestamp;

use crate::server::model::{Response, ServerModel};
use crate::server::stock::{remaining_only, take_one};

/// The decrease-only server of the gem's "time to clear" benchmark: a
/// fixed stock, no refill.
#[derive(Clone, Debug)]
pub struct DecreaseOnly {
    starting: f64,
    limit_left: f64,
}

impl DecreaseOnly {
    /// A server that grants `starting` requests in total.
    pub fn new(starting: f64) -> Self {
        DecreaseOnly {
            starting,
            limit_left: starting,
        }
    }
}

impl ServerModel for DecreaseOnly {
    fn handle(&mut self, _now: Timestamp) -> Response {
        let throttled = take_one(&mut self.limit_left);
        // Same headers as the Heroku bucket: remaining only.
        remaining_only(throttled, self.limit_left)
    }

    fn remaining(&mut self, _now: Timestamp) -> f64 {
        self.limit_left
    }

    fn offered(&mut self, _end: Timestamp) -> f64 {
        self.starting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: f64) -> Timestamp {
        Timestamp::from_secs_f64(s)
    }

    #[test]
    fn decrease_only_counts_down_and_never_refills() {
        let mut s = DecreaseOnly::new(3.0);
        let got: Vec<_> = (0..5)
            .map(|i| s.handle(t(f64::from(i) * 1000.0)))
            .map(|r| (r.throttled, r.hints.remaining))
            .collect();
        assert_eq!(
            got,
            vec![
                (false, Some(2)),
                (false, Some(1)),
                (false, Some(0)),
                (true, Some(0)),
                (true, Some(0))
            ]
        );
    }
}
