//! The layer, its shared breaker and the rules that classify a response.

use std::sync::{Arc, OnceLock};

use metrics::{Counter, Gauge};
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
    /// The metrics label.
    dependency: Arc<str>,
    handles: OnceLock<Handles>,
}

/// The breaker's metric handles, registered on first use.
struct Handles {
    success: Counter,
    failure: Counter,
    refused: Counter,
    opened: Counter,
    state: Gauge,
}

/// The label of a breaker not given a dependency name.
const UNNAMED: &str = "default";

impl Shared {
    fn new(breaker: Core, clock: Arc<dyn Clock>, alert_above: f64, dependency: Arc<str>) -> Self {
        Shared {
            breaker,
            clock,
            alert_above,
            dependency,
            handles: OnceLock::new(),
        }
    }

    fn handles(&self) -> &Handles {
        self.handles.get_or_init(|| {
            let d = self.dependency.to_string();
            let calls = |result: &'static str| {
                metrics::counter!("ratewise_breaker_calls_total", "dependency" => d.clone(), "result" => result)
            };
            Handles {
                success: calls("success"),
                failure: calls("failure"),
                refused: metrics::counter!("ratewise_breaker_refused_total", "dependency" => d.clone()),
                opened: metrics::counter!("ratewise_breaker_opened_total", "dependency" => d.clone()),
                state: metrics::gauge!("ratewise_breaker_state", "dependency" => d),
            }
        })
    }

    /// Counts a call refused while open (the gauge reads open, or
    /// half-open with its probes out).
    pub(crate) fn note_refused(&self, now: ratewise::Timestamp) {
        let h = self.handles();
        h.refused.increment(1);
        h.state.set(state_value(self.breaker.state(now)));
    }
}

/// The gauge's reading of a state: 0 closed, 1 half-open, 2 open.
fn state_value(state: State) -> f64 {
    match state {
        State::Closed => 0.0,
        State::HalfOpen => 1.0,
        State::Open => 2.0,
    }
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
            shared: Arc::new(Shared::new(
                Core::new(config)?,
                Arc::new(MonotonicClock::new()),
                crate::observe::DEFAULT_ALERT_RATIO,
                Arc::from(UNNAMED),
            )),
            classify: ServerErrors,
        })
    }
}

impl<C> CircuitBreakerLayer<C> {
    fn rebuild(self, f: impl FnOnce(&mut Shared)) -> Self {
        // Only while building: no clone has the breaker yet.
        let mut shared = match Arc::try_unwrap(self.shared) {
            Ok(shared) => shared,
            Err(shared) => Shared::new(
                Core::new(*shared.breaker.config()).expect("a config already validated"),
                Arc::clone(&shared.clock),
                shared.alert_above,
                Arc::clone(&shared.dependency),
            ),
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

    /// Names the dependency behind the breaker: the `dependency` label of
    /// its metrics (default `default`). Call it while building, as
    /// [`clock`](Self::clock).
    pub fn dependency(self, name: &str) -> Self {
        self.rebuild(|s| s.dependency = Arc::from(name))
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
            let moved = self.shared.breaker.record(call, now, result);
            let h = self.shared.handles();
            match result {
                CallResult::Success => h.success.increment(1),
                CallResult::Failure => h.failure.increment(1),
                CallResult::Ignored => {}
            }
            if let Some(state) = moved {
                h.state.set(state_value(state));
                if state == State::Open {
                    h.opened.increment(1);
                }
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.finish(CallResult::Ignored);
    }
}
