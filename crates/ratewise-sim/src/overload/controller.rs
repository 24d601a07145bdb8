//! The admission controllers the server-side simulator compares, and one
//! object the event loop drives whichever it is.

use std::time::Duration;

use ratewise::concurrency::{
    Aimd, Completion, ConcurrencyLimiter, EnvoyGradient, Fixed, Gradient2, Knee, LimitAlgorithm,
    Permit, Priority, Vegas,
};
use ratewise::Timestamp;

use crate::overload::scenario::OverloadScenario;

/// The admission controller under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// No admission control: every request is queued.
    None,
    /// A fixed limit tuned for the initial capacity: the workers plus a
    /// quarter of them queued.
    FixedTuned,
    /// Netflix AIMD, defaults (20 to 200, ×0.9), with the client timeout as
    /// its timeout.
    Aimd,
    /// Netflix Vegas, defaults.
    Vegas,
    /// Netflix Gradient2, defaults (with ratewise's fixes).
    Gradient2,
    /// Envoy's gradient controller, defaults.
    Envoy,
    /// ratewise's own controller ([`Knee`]), defaults, with the client
    /// timeout as its timeout: the recommended one.
    Knee,
}

impl Controller {
    /// Every controller, in table order.
    pub const ALL: [Controller; 7] = [
        Controller::None,
        Controller::FixedTuned,
        Controller::Aimd,
        Controller::Vegas,
        Controller::Gradient2,
        Controller::Envoy,
        Controller::Knee,
    ];

    /// The controller ratewise recommends, marked in every report.
    pub const DEFAULT: Controller = Controller::Knee;

    /// Its name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Controller::None => "none",
            Controller::FixedTuned => "fixed",
            Controller::Aimd => "aimd",
            Controller::Vegas => "vegas",
            Controller::Gradient2 => "gradient2",
            Controller::Envoy => "envoy",
            Controller::Knee => "knee",
        }
    }
}

/// A controller as one object the event loop can drive.
pub(crate) enum Limiter {
    None,
    Fixed(ConcurrencyLimiter<Fixed>),
    Aimd(ConcurrencyLimiter<Aimd>),
    Vegas(ConcurrencyLimiter<Vegas>),
    Gradient2(ConcurrencyLimiter<Gradient2>),
    Envoy(ConcurrencyLimiter<EnvoyGradient>),
    Knee(ConcurrencyLimiter<Knee>),
}

impl Limiter {
    pub(crate) fn new(c: Controller, s: &OverloadScenario, seed: u64) -> Self {
        let timeout = Duration::from_millis(s.timeout_ms);
        match c {
            Controller::None => Limiter::None,
            Controller::FixedTuned => {
                Limiter::Fixed(ConcurrencyLimiter::new(Fixed(s.workers + s.workers / 4)))
            }
            Controller::Aimd => Limiter::Aimd(ConcurrencyLimiter::new(
                Aimd::default().with_timeout(timeout),
            )),
            Controller::Vegas => {
                Limiter::Vegas(ConcurrencyLimiter::new(Vegas::new(20, 1000, seed)))
            }
            Controller::Gradient2 => Limiter::Gradient2(ConcurrencyLimiter::new(
                Gradient2::default().with_timeout(timeout),
            )),
            Controller::Envoy => Limiter::Envoy(ConcurrencyLimiter::new(EnvoyGradient::new(seed))),
            Controller::Knee => Limiter::Knee(ConcurrencyLimiter::new(
                Knee::default().with_timeout(timeout),
            )),
        }
    }

    /// A permit, `Some(None)` when there is no controller, `None` if refused.
    pub(crate) fn acquire(&self, now: Timestamp, priority: Priority) -> Option<Option<Permit>> {
        fn one<A: LimitAlgorithm + 'static>(
            l: &ConcurrencyLimiter<A>,
            now: Timestamp,
            priority: Priority,
        ) -> Option<Option<Permit>> {
            l.try_acquire_as(now, priority).map(Some)
        }
        match self {
            Limiter::None => Some(None),
            Limiter::Fixed(l) => one(l, now, priority),
            Limiter::Aimd(l) => one(l, now, priority),
            Limiter::Vegas(l) => one(l, now, priority),
            Limiter::Gradient2(l) => one(l, now, priority),
            Limiter::Envoy(l) => one(l, now, priority),
            Limiter::Knee(l) => one(l, now, priority),
        }
    }

    pub(crate) fn complete(&self, p: Permit, now: Timestamp, c: Completion) {
        match self {
            Limiter::None => {}
            Limiter::Fixed(l) => l.complete(p, now, c),
            Limiter::Aimd(l) => l.complete(p, now, c),
            Limiter::Vegas(l) => l.complete(p, now, c),
            Limiter::Gradient2(l) => l.complete(p, now, c),
            Limiter::Envoy(l) => l.complete(p, now, c),
            Limiter::Knee(l) => l.complete(p, now, c),
        }
    }

    pub(crate) fn limit(&self) -> f64 {
        match self {
            Limiter::None => f64::NAN,
            Limiter::Fixed(l) => l.limit() as f64,
            Limiter::Aimd(l) => l.limit() as f64,
            Limiter::Vegas(l) => l.limit() as f64,
            Limiter::Gradient2(l) => l.limit() as f64,
            Limiter::Envoy(l) => l.limit() as f64,
            Limiter::Knee(l) => l.limit() as f64,
        }
    }
}
