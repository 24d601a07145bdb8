//! The layer, its shared breaker and the rules that classify a response.

use std::sync::Arc;

use ratewise::breaker::{BreakerConfig, CallResult, CircuitBreaker as Core, ConfigError, State};
use ratewise::{Clock, MonotonicClock};
use tower::Layer;

use super::service::CircuitBreaker;
use crate::observe::Health;
use crate::refusal::LocalRefusal;

/// Decides whether a response the service returned is a failure.
pub trait Classify<Res> {
    /// The result to record for `res` (an `Err` is always a failure).
    fn classify(&self, res: &Res) -> CallResult;
}

/// Only errors are failures: any response is a success.
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrorsOnly;

impl<Res> Classify<Res> for ErrorsOnly {
    fn classify(&self, _res: &Res) -> CallResult {
        CallResult::Success
    }
}

/// A `5xx` response is a failure, except one a ratewise layer wrote itself
/// ([`LocalRefusal`]), which is ignored; anything else is a success.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerErrors;

impl<B> Classify<http::Response<B>> for ServerErrors {
    fn classify(&self, res: &http::Response<B>) -> CallResult {
        if res.extensions().get::<LocalRefusal>().is_some() {
            CallResult::Ignored
        } else if res.status().is_server_error() {
            CallResult::Failure
        } else {
            CallResult::Success
        }
    }
}

impl<Res, F: Fn(&Res) -> CallResult> Classify<Res> for F {
    fn classify(&self, res: &Res) -> CallResult {
        self(res)
    }
}

/// What the layer's clones share.
pub(crate) struct Shared {
    pub(crate) breaker: Core,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) alert_above: f64,
}

/// A tower layer that opens a circuit breaker around the service; see the
/// [module docs](super). `Clone`: clones share one breaker.
pub struct CircuitBreakerLayer<C = ServerErrors> {
    shared: Arc<Shared>,
    classify: C,
}

impl<C: Clone> Clone for CircuitBreakerLayer<C> {
    fn clone(&self) -> Self {
        CircuitBreakerLayer {
            shared: Arc::clone(&self.shared),
            classify: self.classify.clone(),
        }
    }
}

impl CircuitBreakerLayer<ServerErrors> {
    /// A closed breaker deciding by `config`, on the production clock,
    /// counting errors and `5xx` responses as failures; or why `config`
    /// cannot work.
    pub fn new(config: BreakerConfig) -> Result<Self, ConfigError> {
        Ok(CircuitBreakerLayer {
            shared: Arc::new(Shared {
                breaker: Core::new(config)?,
                clock: Arc::new(MonotonicClock::new()),
                alert_above: crate::observe::DEFAULT_ALERT_RATIO,
            }),
            classify: ServerErrors,
        })
    }
}

impl<C> CircuitBreakerLayer<C> {
    fn rebuild(self, f: impl FnOnce(&mut Shared)) -> Self {
        // Only while building: no clone has the breaker yet.
        let mut shared = match Arc::try_unwrap(self.shared) {
            Ok(shared) => shared,
            Err(shared) => Shared {
                breaker: Core::new(*shared.breaker.config()).expect("a config already validated"),
                clock: Arc::clone(&shared.clock),
                alert_above: shared.alert_above,
            },
        };
        f(&mut shared);
        CircuitBreakerLayer {
            shared: Arc::new(shared),
            classify: self.classify,
        }
    }

    /// Reads the time from `clock` (tests use a manual one or
    /// `ratewise::TokioClock` under paused time). Call it while building:
    /// a layer already cloned gets a fresh breaker.
    pub fn clock(self, clock: impl Clock + 'static) -> Self {
        self.rebuild(|s| s.clock = Arc::new(clock))
    }

    /// The refusal ratio above which [`health`](Self::health) flags the
    /// breaker (default 0.5).
    pub fn alert_above(self, ratio: f64) -> Self {
        self.rebuild(|s| s.alert_above = ratio)
    }

    /// Classifies responses with `classify` instead (e.g. [`ErrorsOnly`],
    /// or a closure returning a [`CallResult`]).
    pub fn classify<D>(self, classify: D) -> CircuitBreakerLayer<D> {
        CircuitBreakerLayer {
            shared: self.shared,
            classify,
        }
    }

    /// Where the breaker stands now.
    pub fn state(&self) -> State {
        self.shared.breaker.state(self.shared.clock.now())
    }

    /// Calls let through and refused, and whether the refusal ratio is
    /// above the alert threshold.
    pub fn health(&self) -> Health {
        let c = self.shared.breaker.counts();
        Health::new(
            "circuit_breaker",
            c.admitted,
            c.refused,
            self.shared.alert_above,
        )
    }
}

impl<S, C: Clone> Layer<S> for CircuitBreakerLayer<C> {
    type Service = CircuitBreaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(inner, Arc::clone(&self.shared), self.classify.clone())
    }
}

/// Records a call's result unless it was already recorded: a future
/// dropped before its answer frees its probe as `Ignored`.
pub(crate) struct Pending {
    pub(crate) shared: Arc<Shared>,
    pub(crate) call: Option<ratewise::breaker::Call>,
}

impl Pending {
    pub(crate) fn finish(&mut self, result: CallResult) {
        if let Some(call) = self.call.take() {
            let now = self.shared.clock.now();
            self.shared.breaker.record(call, now, result);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.finish(CallResult::Ignored);
    }
}
