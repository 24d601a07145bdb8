//! [`RateLimitLayer`], its builder, the [`RateLimit`] service and its
//! future, and the [`RateLimitHandle`] for runtime control.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use ratewise::backend::{AsyncKeyedLimiter, BackendDecision, DecisionSource};
use ratewise::response_headers::{self, HeaderStyle, PolicyInfo};
use ratewise::{Clock, MonotonicClock, Quota, Timestamp};
use tower::{Layer, Service};

use crate::body::ReplyBody;
use crate::key::Scope;
use crate::key::{FoundKey, Key, KeyRef, KeySource, MissingKey, RequestInfo};
use crate::observe::{
    BackendStatus, Health, LayerMetrics, PolicyStatus, RecentCounts, SetStatus, Status, WarnGate,
};
use crate::policy::{Policy, PolicyRuntime, PolicySet, Refusal};
use crate::problem;
use crate::verdict::{PolicyState, ReadyHeaders, Verdict, MAX_POLICIES};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type CostFn = Arc<dyn Fn(&RequestInfo<'_>) -> u64 + Send + Sync>;
type BypassFn = Arc<dyn Fn(&RequestInfo<'_>) -> bool + Send + Sync>;
type TierFn = Arc<dyn Fn(&RequestInfo<'_>) -> Option<&'static str> + Send + Sync>;
type BackendFuture = Pin<Box<dyn Future<Output = Result<BackendDecision, BoxError>> + Send>>;

/// Why a layer could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A set has no policy: add one with `.policy(…)`.
    #[error("policy set {set:?} has no policy: add one with .policy(...)")]
    NoPolicies {
        /// The set's name.
        set: String,
    },
    /// More policies in one set than a verdict holds.
    #[error(
        "policy set {set:?} has {count} policies; at most {MAX_POLICIES} are checked together"
    )]
    TooManyPolicies {
        /// The set's name.
        set: String,
        /// How many it has.
        count: usize,
    },
    /// Two policies of one set, or two sets, share a name.
    #[error("the name {name:?} is used twice; policy names must be unique within a set, set names across the layer")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// A name cannot be written as a structured-field String.
    #[error("policy name {name:?} cannot appear in RateLimit headers: {source}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        #[source]
        source: response_headers::HeaderWriteError,
    },
    /// Routes and tiers are decided in memory; an async backend serves a
    /// single policy.
    #[error("an async backend serves one policy for every request; routes and tiers need in-memory policies")]
    BackendWithSets,
}

/// What to do when an async backend returns an error rather than a
/// decision (backends that apply their own failure policy answer with a
/// degraded decision instead, which the layer follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendFailure {
    /// Admit the request (fail open; the default, as Stripe recommends).
    #[default]
    Admit,
    /// Refuse it with `503 Service Unavailable`.
    Refuse,
}

/// Which requests a route policy set applies to.
#[derive(Clone, Debug, Default)]
pub struct Route {
    method: Option<Method>,
    prefix: String,
}

impl Route {
    /// Requests whose path starts with `prefix`, any method.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        Route {
            method: None,
            prefix: prefix.into(),
        }
    }

    /// Only requests with `method`.
    pub fn method(mut self, method: Method) -> Self {
        self.method = Some(method);
        self
    }

    fn matches(&self, info: &RequestInfo<'_>) -> bool {
        self.method.as_ref().is_none_or(|m| m == info.method)
            && info.uri.path().starts_with(&self.prefix)
    }
}

trait DynBackend: Send + Sync {
    fn check(&self, key: Key, n: u64) -> BackendFuture;
    fn kind(&self) -> &'static str;
}

struct Backend<L>(Arc<L>);

impl<L: AsyncKeyedLimiter<Key> + 'static> DynBackend for Backend<L> {
    fn check(&self, key: Key, n: u64) -> BackendFuture {
        let limiter = self.0.clone();
        Box::pin(async move {
            limiter
                .check(&key, n)
                .await
                .map_err(|e| Box::new(e) as BoxError)
        })
    }
    fn kind(&self) -> &'static str {
        std::any::type_name::<L>()
    }
}

/// A backend keyed by bytes (such as the Redis limiters, which take any
/// `AsRef<[u8]>` key): each [`Key`] is sent as its `Display` form
/// (`ip:192.0.2.0`, `text:…`, `n:42`, `global`, `anonymous`).
struct BytesBackend<L>(Arc<L>);

impl<L: AsyncKeyedLimiter<[u8]> + 'static> DynBackend for BytesBackend<L> {
    fn check(&self, key: Key, n: u64) -> BackendFuture {
        let limiter = self.0.clone();
        Box::pin(async move {
            let bytes = key.to_string();
            limiter
                .check(bytes.as_bytes(), n)
                .await
                .map_err(|e| Box::new(e) as BoxError)
        })
    }
    fn kind(&self) -> &'static str {
        std::any::type_name::<L>()
    }
}

/// Builds a [`RateLimitLayer`]; see [`RateLimitLayer::builder`].
#[must_use]
pub struct RateLimitLayerBuilder {
    key: KeySource,
    missing: MissingKey,
    policies: Vec<Policy>,
    routes: Vec<(Route, String, Vec<Policy>)>,
    tiers: Vec<(&'static str, Vec<Policy>)>,
    tier_of: Option<TierFn>,
    cost: Option<CostFn>,
    bypass: Option<BypassFn>,
    clock: Arc<dyn Clock>,
    style: HeaderStyle,
    on_admitted: bool,
    shadow: bool,
    backend: Option<(Box<dyn DynBackend>, String, Quota)>,
    on_error: BackendFailure,
    warn_interval: Duration,
    alert_above: f64,
    recent_window: Duration,
}

impl std::fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("key", &self.key)
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayerBuilder {
    /// Where each request's key comes from (default: [`KeySource::peer_ip`]).
    pub fn key(mut self, key: KeySource) -> Self {
        self.key = key;
        self
    }

    /// What a request without a key gets (default: the shared
    /// [`Key::Anonymous`] bucket).
    pub fn missing_key(mut self, missing: MissingKey) -> Self {
        self.missing = missing;
        self
    }

    /// Adds a policy to the default set; every policy of a set is checked
    /// at once (a [`ratewise::Hierarchy`]: a refusal charges none of them).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Requests matching `route` are checked against `policies` (a set
    /// named `name`) instead of the default set. Routes are tried in the
    /// order added.
    pub fn route(
        mut self,
        route: Route,
        name: impl Into<String>,
        policies: impl IntoIterator<Item = Policy>,
    ) -> Self {
        self.routes
            .push((route, name.into(), policies.into_iter().collect()));
        self
    }

    /// Requests that [`tier_by`](Self::tier_by) puts in tier `name` are
    /// checked against `policies` (a free and a paid quota, say).
    pub fn tier(mut self, name: &'static str, policies: impl IntoIterator<Item = Policy>) -> Self {
        self.tiers.push((name, policies.into_iter().collect()));
        self
    }

    /// Chooses a request's tier; `None` or an unknown tier means the
    /// default set.
    pub fn tier_by(
        mut self,
        f: impl Fn(&RequestInfo<'_>) -> Option<&'static str> + Send + Sync + 'static,
    ) -> Self {
        self.tier_of = Some(Arc::new(f));
        self
    }

    /// The weight of each request (default 1). A weight of 0 passes
    /// without being checked; a weight larger than a policy's burst can
    /// never pass and is answered `400 Bad Request` (nothing is charged).
    pub fn cost(mut self, f: impl Fn(&RequestInfo<'_>) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Some(Arc::new(f));
        self
    }

    /// Requests for which `f` is true are never checked (health checks,
    /// an allowlist).
    pub fn bypass(mut self, f: impl Fn(&RequestInfo<'_>) -> bool + Send + Sync + 'static) -> Self {
        self.bypass = Some(Arc::new(f));
        self
    }

    /// The clock the in-memory policies are told (default: the production
    /// [`MonotonicClock`]); tests pass a [`ratewise::ManualClock`]. A
    /// [`ratewise::CoarseClock`] makes each read one atomic load at the
    /// price of a lag of up to its resolution (stricter, never looser);
    /// `ratewise_decision_seconds`, measured on this clock, then reads
    /// mostly zero.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Which header forms are written (default: the draft's current form,
    /// [`HeaderStyle::DRAFT`]). `Retry-After` is always sent with a 429.
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.style = style;
        self
    }

    /// Whether admitted responses carry the headers too (default `true`).
    pub fn headers_on_admitted(mut self, yes: bool) -> Self {
        self.on_admitted = yes;
        self
    }

    /// Starts in shadow mode: decisions are made and counted, refusals are
    /// never sent (switch at run time with [`RateLimitHandle::set_shadow`]).
    /// A request shadow mode lets through is not charged, and no rate-limit
    /// headers are sent while it is on, so clients see nothing of a limit
    /// being dark-launched.
    pub fn shadow(mut self, yes: bool) -> Self {
        self.shadow = yes;
        self
    }

    /// Decides every request with `limiter` — in memory, or a shared store
    /// such as Redis — instead of in-memory policies: one policy named
    /// `name` whose quota `quota` is what `RateLimit-Policy` advertises.
    pub fn backend<L>(mut self, name: impl Into<String>, quota: Quota, limiter: L) -> Self
    where
        L: AsyncKeyedLimiter<Key> + 'static,
    {
        self.backend = Some((Box::new(Backend(Arc::new(limiter))), name.into(), quota));
        self
    }

    /// [`backend`](Self::backend) for a limiter keyed by bytes — the Redis
    /// limiters (`RedisLimiter`, `TwoTierLimiter`) implement
    /// `AsyncKeyedLimiter<[u8]>` — so moving a service from memory to Redis
    /// is this one call. Each key is sent as its `Display` form
    /// (`ip:192.0.2.0`, `text:…`).
    pub fn backend_bytes<L>(mut self, name: impl Into<String>, quota: Quota, limiter: L) -> Self
    where
        L: AsyncKeyedLimiter<[u8]> + 'static,
    {
        self.backend = Some((
            Box::new(BytesBackend(Arc::new(limiter))),
            name.into(),
            quota,
        ));
        self
    }

    /// What to do when the backend answers with an error.
    pub fn on_backend_error(mut self, policy: BackendFailure) -> Self {
        self.on_error = policy;
        self
    }

    /// At most one refusal warning is logged per `interval` (default 1 s);
    /// the warning says how many were held back.
    pub fn warn_interval(mut self, interval: Duration) -> Self {
        self.warn_interval = interval;
        self
    }

    /// The refusal ratio above which the [status](RateLimitHandle::status)
    /// flags a policy (`alert: true`; default 0.5, see
    /// [`observe::Health`](crate::observe::Health)).
    pub fn refusal_alert(mut self, ratio: f64) -> Self {
        self.alert_above = ratio;
        self
    }

    /// The window the status's recent figures cover (default 60 s; see
    /// [`PolicyStatus::recent`](crate::observe::PolicyStatus::recent)).
    pub fn recent_window(mut self, window: Duration) -> Self {
        self.recent_window = window;
        self
    }

    /// Builds the layer.
    ///
    /// # Errors
    /// [`BuildError`] for an empty or oversized set, a duplicate or
    /// unwritable name, or routes/tiers with an async backend.
    pub fn build(self) -> Result<RateLimitLayer, BuildError> {
        let mut sets = Vec::new();
        let mut routes = Vec::new();
        let mut tiers = Vec::new();
        let backend = match self.backend {
            Some((backend, name, quota)) => {
                if !self.routes.is_empty() || !self.tiers.is_empty() || !self.policies.is_empty() {
                    return Err(BuildError::BackendWithSets);
                }
                check_name(&name)?;
                let runtime = PolicyRuntime::new(name.into(), Scope::PerKey, quota, None);
                sets.push(PolicySet::remote("default".into(), Arc::new(runtime)));
                Some(backend)
            }
            None => {
                sets.push(checked_set("default", self.policies)?);
                for (route, name, policies) in self.routes {
                    routes.push((route, sets.len()));
                    sets.push(checked_set(&name, policies)?);
                }
                for (name, policies) in self.tiers {
                    tiers.push((name, sets.len()));
                    sets.push(checked_set(name, policies)?);
                }
                None
            }
        };
        let mut names: Vec<&str> = sets.iter().map(|s| &*s.name).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(BuildError::DuplicateName {
                name: w[0].to_string(),
            });
        }
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                key: self.key,
                missing: self.missing,
                sets,
                routes,
                tiers,
                tier_of: self.tier_of,
                cost: self.cost,
                bypass: self.bypass,
                clock: self.clock,
                style: self.style,
                on_admitted: self.on_admitted,
                enabled: AtomicBool::new(true),
                shadow: AtomicBool::new(self.shadow),
                backend,
                on_error: self.on_error,
                backend_healthy: AtomicBool::new(true),
                degraded: AtomicU64::new(0),
                metrics: LayerMetrics::default(),
                warn: WarnGate::new(self.warn_interval),
                alert_above: self.alert_above,
                recent: RecentCounts::new(self.recent_window),
            }),
        })
    }
}

/// Longest policy name, in bytes (so eight policies always fit a header).
pub const MAX_NAME_LEN: usize = 64;

fn check_name(name: &str) -> Result<(), BuildError> {
    if name.len() > MAX_NAME_LEN {
        return Err(BuildError::InvalidName {
            name: name.to_string(),
            source: response_headers::HeaderWriteError::Overflow {
                capacity: MAX_NAME_LEN,
            },
        });
    }
    let mut b = response_headers::HeaderBuf::<256>::new();
    b.push_policy(&PolicyInfo {
        name,
        quota: u64::MAX,
        window: Duration::MAX,
    })
    .map_err(|source| BuildError::InvalidName {
        name: name.to_string(),
        source,
    })
}

fn checked_set(name: &str, policies: Vec<Policy>) -> Result<PolicySet, BuildError> {
    if policies.is_empty() {
        return Err(BuildError::NoPolicies { set: name.into() });
    }
    if policies.len() > MAX_POLICIES {
        return Err(BuildError::TooManyPolicies {
            set: name.into(),
            count: policies.len(),
        });
    }
    let mut names: Vec<&str> = policies.iter().map(Policy::name).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(BuildError::DuplicateName {
            name: w[0].to_string(),
        });
    }
    for n in &names {
        check_name(n)?;
    }
    Ok(PolicySet::memory(name.into(), policies))
}

pub(crate) struct Shared {
    key: KeySource,
    missing: MissingKey,
    sets: Vec<PolicySet>,
    routes: Vec<(Route, usize)>,
    tiers: Vec<(&'static str, usize)>,
    tier_of: Option<TierFn>,
    cost: Option<CostFn>,
    bypass: Option<BypassFn>,
    clock: Arc<dyn Clock>,
    style: HeaderStyle,
    on_admitted: bool,
    enabled: AtomicBool,
    shadow: AtomicBool,
    backend: Option<Box<dyn DynBackend>>,
    on_error: BackendFailure,
    backend_healthy: AtomicBool,
    degraded: AtomicU64,
    metrics: LayerMetrics,
    warn: WarnGate,
    alert_above: f64,
    recent: RecentCounts,
}

thread_local! {
    static DECISIONS: Cell<u32> = const { Cell::new(0) };
}

impl Shared {
    fn select(&self, info: &RequestInfo<'_>) -> usize {
        if let Some((_, i)) = self.routes.iter().find(|(r, _)| r.matches(info)) {
            return *i;
        }
        if let Some(tier) = self.tier_of.as_ref().and_then(|f| f(info)) {
            if let Some((_, i)) = self.tiers.iter().find(|(n, _)| *n == tier) {
                return *i;
            }
        }
        0
    }

    /// Counts the verdict, logs a refusal (rate-limited), and returns
    /// whether the request goes on (admitted, or refused in shadow mode).
    fn record(&self, set: &PolicySet, v: &Verdict, key: KeyRef<'_>, now: Timestamp) -> bool {
        let shadow = self.shadow.load(Ordering::Relaxed);
        if v.allowed {
            for p in &set.policies {
                p.admitted.add(1);
                p.metrics.get().admitted.increment(1);
            }
            for (i, p) in set.shadows.iter().enumerate() {
                if v.shadow_refused & (1 << i) == 0 {
                    p.admitted.add(1);
                    p.metrics.get().admitted.increment(1);
                } else {
                    p.shadow_refused.add(1);
                    p.metrics.get().shadow_refused.increment(1);
                }
            }
        } else {
            for s in v.states().iter().filter(|s| s.violated) {
                let p = &set.policies[usize::from(s.index)];
                if shadow {
                    p.shadow_refused.add(1);
                    p.metrics.get().shadow_refused.increment(1);
                } else {
                    p.refused.add(1);
                    p.metrics.get().refused.increment(1);
                }
            }
            if let Some(held_back) = self.warn.admit(now.as_nanos()) {
                let violated = v
                    .states()
                    .iter()
                    .find(|s| s.violated)
                    .map_or("", |s| &*set.policies[usize::from(s.index)].name);
                tracing::warn!(
                    %key,
                    policy = violated,
                    retry_after_ms = v.retry_after.map_or(0, |d| d.as_millis() as u64),
                    shadow,
                    held_back,
                    "rate limit refused a request"
                );
            }
        }
        let tick = DECISIONS.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n
        });
        if tick % 1024 == 0 {
            self.refresh_key_gauges();
        }
        v.allowed || shadow
    }

    /// Records the time since `since` (on the layer's clock) in the
    /// decision-latency histogram.
    fn record_latency(&self, since: Timestamp) {
        let ns = self.clock.now().as_nanos().saturating_sub(since.as_nanos());
        self.metrics.get().latency.record(ns as f64 * 1e-9);
    }

    fn refresh_key_gauges(&self) {
        for p in self.sets.iter().flat_map(|s| s.all_policies()) {
            if let Some(store) = &p.store {
                p.metrics.get().keys.set(store.keys() as f64);
            }
        }
    }

    fn note_source(&self, source: DecisionSource) {
        let healthy = !source.is_degraded();
        if !healthy {
            self.degraded.fetch_add(1, Ordering::Relaxed);
            LayerMetrics::degraded(source);
        }
        if self.backend_healthy.swap(healthy, Ordering::Relaxed) != healthy {
            self.metrics
                .get()
                .backend_healthy
                .set(if healthy { 1.0 } else { 0.0 });
        }
    }

    fn note_error(&self) {
        self.degraded.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("ratewise_degraded_total", "source" => "error").increment(1);
        if self.backend_healthy.swap(false, Ordering::Relaxed) {
            self.metrics.get().backend_healthy.set(0.0);
        }
    }

    fn refusal(&self, set: &PolicySet, v: &Verdict, grpc: bool) -> Response<Bytes> {
        let mut res =
            problem::quota_exceeded(grpc, set.violated(v), v.retry_after, || set.refusal_body(v));
        v.write_headers(set, self.style, res.headers_mut());
        res
    }

    fn status(&self) -> Status {
        self.refresh_key_gauges();
        let counts: Vec<(u64, u64)> = self
            .sets
            .iter()
            .flat_map(|s| s.all_policies())
            .map(|p| (p.admitted.sum(), p.refused.sum()))
            .collect();
        let (recent_for, before) = self.recent.baseline(self.clock.now(), &counts);
        let mut at = counts.iter().zip(before.iter());
        Status {
            enabled: self.enabled.load(Ordering::Relaxed),
            shadow: self.shadow.load(Ordering::Relaxed),
            sets: self
                .sets
                .iter()
                .map(|s| SetStatus {
                    name: s.name.to_string(),
                    policies: s
                        .all_policies()
                        .map(|p| {
                            let q = p.quota();
                            let (&(admitted, refused), &then) =
                                at.next().unwrap_or((&(0, 0), &(0, 0)));
                            let health =
                                Health::new("rate_limit", admitted, refused, self.alert_above);
                            let earlier =
                                Health::new("rate_limit", then.0, then.1, self.alert_above);
                            PolicyStatus {
                                name: p.name.to_string(),
                                scope: p.scope,
                                quota: q.burst(),
                                window_secs: q.window().as_secs_f64(),
                                keys_tracked: p.store.as_ref().map(|s| s.keys()),
                                admitted,
                                refused,
                                shadow_refused: p.shadow_refused.sum(),
                                shadow: s.shadows.iter().any(|x| Arc::ptr_eq(x, p)),
                                refusal_ratio: health.refusal_ratio,
                                alert: health.alert,
                                recent: health.since(&earlier),
                                recent_secs: recent_for.as_secs_f64(),
                            }
                        })
                        .collect(),
                })
                .collect(),
            backend: BackendStatus {
                kind: self
                    .backend
                    .as_ref()
                    .map_or("memory", |b| b.kind())
                    .to_string(),
                healthy: self.backend_healthy.load(Ordering::Relaxed),
                degraded_decisions: self.degraded.load(Ordering::Relaxed),
            },
        }
    }
}

/// A tower [`Layer`] that rate-limits requests; see the [crate docs](crate).
///
/// `Clone` is one reference-count increment, and every clone — and every
/// service it makes — shares the same limiters, counters and switches.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field(
                "sets",
                &self.shared.sets.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A builder: key from the peer address, no policies yet, the real
    /// clock, the draft's headers on every response.
    pub fn builder() -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            key: KeySource::peer_ip(),
            missing: MissingKey::Anonymous,
            policies: Vec::new(),
            routes: Vec::new(),
            tiers: Vec::new(),
            tier_of: None,
            cost: None,
            bypass: None,
            clock: Arc::new(MonotonicClock::new()),
            style: HeaderStyle::DRAFT,
            on_admitted: true,
            shadow: false,
            backend: None,
            on_error: BackendFailure::Admit,
            warn_interval: Duration::from_secs(1),
            alert_above: crate::observe::DEFAULT_ALERT_RATIO,
            recent_window: crate::observe::DEFAULT_RECENT_WINDOW,
        }
    }

    /// A handle for run-time control and status (shares the layer's state).
    pub fn handle(&self) -> RateLimitHandle {
        RateLimitHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// Why a quota could not be changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no policy {policy:?} in set {set:?}")]
pub struct UnknownPolicy {
    /// The set asked for.
    pub set: String,
    /// The policy asked for.
    pub policy: String,
}

/// Run-time control of a layer: the kill switch, shadow mode, quotas, and
/// the status snapshot. Cheap to clone; shares the layer's state.
#[derive(Clone)]
pub struct RateLimitHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RateLimitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitHandle").finish_non_exhaustive()
    }
}

impl RateLimitHandle {
    /// The kill switch: `false` lets every request through unchecked (and
    /// counted as `ratewise_bypassed_total{reason="disabled"}`).
    pub fn set_enabled(&self, enabled: bool) {
        self.shared.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether the layer checks requests.
    pub fn is_enabled(&self) -> bool {
        self.shared.enabled.load(Ordering::Relaxed)
    }

    /// Shadow mode: decide and count, never refuse.
    pub fn set_shadow(&self, shadow: bool) {
        self.shared.shadow.store(shadow, Ordering::Relaxed);
    }

    /// Whether shadow mode is on.
    pub fn is_shadow(&self) -> bool {
        self.shared.shadow.load(Ordering::Relaxed)
    }

    /// Replaces the quota of policy `policy` in the default set, at once and
    /// without a restart: each key keeps its free units (capped at the new
    /// burst) and `RateLimit-Policy` advertises the new quota.
    ///
    /// # Errors
    /// [`UnknownPolicy`].
    pub fn set_quota(&self, policy: &str, quota: Quota) -> Result<(), UnknownPolicy> {
        self.set_quota_in("default", policy, quota)
    }

    /// [`set_quota`](Self::set_quota) for a route's or tier's set.
    ///
    /// # Errors
    /// [`UnknownPolicy`].
    pub fn set_quota_in(&self, set: &str, policy: &str, quota: Quota) -> Result<(), UnknownPolicy> {
        let unknown = || UnknownPolicy {
            set: set.into(),
            policy: policy.into(),
        };
        let s = self
            .shared
            .sets
            .iter()
            .find(|s| &*s.name == set)
            .ok_or_else(unknown)?;
        let p = s
            .all_policies()
            .find(|p| &*p.name == policy)
            .ok_or_else(unknown)?;
        if let Some(store) = &p.store {
            store.set_quota_at(quota, self.shared.clock.now());
        }
        *p.quota
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = quota;
        s.refresh_policy_header();
        Ok(())
    }

    /// A snapshot of every policy's counters and the backend's health,
    /// serialisable to JSON.
    pub fn status(&self) -> Status {
        self.shared.status()
    }
}

/// The service [`RateLimitLayer`] wraps around `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

impl<S> RateLimit<S> {
    /// A handle on the shared state.
    pub fn handle(&self) -> RateLimitHandle {
        RateLimitHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    ResB: ReplyBody,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // Borrowed, not cloned: only the async-backend path's future needs
        // the shared state after `call` returns.
        let shared = &*self.shared;
        let info = RequestInfo::new(&req);
        // Whether to answer in gRPC's form is asked only where the layer
        // answers itself: an admitted request never needs it.
        let grpc = || problem::is_grpc(info.headers);
        if !shared.enabled.load(Ordering::Relaxed) {
            shared.metrics.get().bypass_disabled.increment(1);
            return ResponseFuture::inner(self.inner.call(req), None);
        }
        if shared.bypass.as_ref().is_some_and(|f| f(&info)) {
            shared.metrics.get().bypass_predicate.increment(1);
            return ResponseFuture::inner(self.inner.call(req), None);
        }
        let cost = shared.cost.as_ref().map_or(1, |f| f(&info));
        if cost == 0 {
            return ResponseFuture::inner(self.inner.call(req), None);
        }
        let found = match shared.key.find(&info) {
            Some(k) => k,
            None => match shared.missing {
                MissingKey::Anonymous => FoundKey::Borrowed(KeyRef::Anonymous),
                MissingKey::Reject(status) => {
                    return ResponseFuture::done(problem::simple(
                        status,
                        "the request carries no rate-limit key",
                    ));
                }
            },
        };
        let set_index = shared.select(&info);
        if let Some(backend) = &shared.backend {
            let start = quanta::Instant::now();
            let key = found.into_key();
            let decision = backend.check(key.clone(), cost);
            // The backend answers later, when the request is gone.
            let grpc = grpc();
            let clone = self.inner.clone();
            let inner = std::mem::replace(&mut self.inner, clone);
            return ResponseFuture {
                state: State::Deciding {
                    pending: Box::new(Pending {
                        decision,
                        inner: Some(inner),
                        req: Some(req),
                        key: Some(key),
                        start,
                        grpc,
                        shared: self.shared.clone(),
                    }),
                },
            };
        }
        let key = found.get();
        let set = &shared.sets[set_index];
        let now = shared.clock.now();
        let span = tracing::debug_span!("ratewise_decision", set = %set.name, %key, cost);
        let _entered = span.enter();
        let mut verdict = Verdict::empty();
        match set.decide(key, cost, now, &mut verdict) {
            Ok(()) => {}
            Err(Refusal::Invalid(i, e)) => {
                let name = set.policies.get(i).map_or("", |p| &*p.name);
                tracing::debug!(policy = name, error = %e, "request can never be admitted");
                return ResponseFuture::done(problem::simple_for(
                    grpc(),
                    StatusCode::BAD_REQUEST,
                    &format!("policy \"{name}\" can never admit this request: {e}"),
                ));
            }
            Err(Refusal::NotInMemory) => {}
        }
        let proceed = shared.record(set, &verdict, key, now);
        tracing::debug!(allowed = verdict.allowed, proceed, "decided");
        drop(_entered);
        if proceed {
            let show = shared.on_admitted && !shared.shadow.load(Ordering::Relaxed);
            let headers = show.then(|| verdict.render(set, shared.style));
            // Measured on the layer's clock, read once more: the decision
            // already read it, so this costs one clock read, not two.
            shared.record_latency(now);
            ResponseFuture::inner(self.inner.call(req), headers)
        } else {
            shared.record_latency(now);
            let res = shared.refusal(set, &verdict, grpc());
            ResponseFuture::done(res)
        }
    }
}

pin_project! {
    /// The future of [`RateLimit`]'s response.
    pub struct ResponseFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S, ReqB>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        // Boxed: the request and a service clone are large, and only the
        // async-backend path needs them; in-memory futures stay small.
        Deciding {
            pending: Box<Pending<S, ReqB>>,
        },
        Inner {
            #[pin]
            fut: S::Future,
            headers: Option<ReadyHeaders>,
        },
        Done {
            response: Option<Response<Bytes>>,
        },
    }
}

/// What the async-backend path holds while the backend decides.
struct Pending<S, ReqB> {
    decision: BackendFuture,
    inner: Option<S>,
    req: Option<Request<ReqB>>,
    key: Option<Key>,
    start: quanta::Instant,
    grpc: bool,
    shared: Arc<Shared>,
}

impl<S, ReqB> ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    fn inner(fut: S::Future, headers: Option<ReadyHeaders>) -> Self {
        ResponseFuture {
            state: State::Inner { fut, headers },
        }
    }

    fn done(response: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Done {
                response: Some(response),
            },
        }
    }
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: ReplyBody,
{
    type Output = Result<Response<ResB>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let this = self.as_mut().project();
            let next = match this.state.project() {
                StateProj::Inner { fut, headers } => {
                    let mut res = ready!(fut.poll(cx))?;
                    if let Some(h) = headers.take() {
                        h.apply(res.headers_mut());
                    }
                    return Poll::Ready(Ok(res));
                }
                StateProj::Done { response } => {
                    let res = response.take().unwrap_or_else(|| {
                        problem::simple(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "polled after completion",
                        )
                    });
                    return Poll::Ready(Ok(res.map(ResB::from_bytes)));
                }
                StateProj::Deciding { pending } => {
                    let Pending {
                        decision,
                        inner,
                        req,
                        key,
                        start,
                        grpc,
                        shared,
                    } = &mut **pending;
                    let shared: &Shared = shared;
                    let grpc = *grpc;
                    let outcome = ready!(decision.as_mut().poll(cx));
                    let (Some(mut svc), Some(request), Some(key)) =
                        (inner.take(), req.take(), key.take())
                    else {
                        return Poll::Ready(Ok(problem::simple(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "polled after completion",
                        )
                        .map(ResB::from_bytes)));
                    };
                    let set = &shared.sets[0];
                    let now = shared.clock.now();
                    let next = match outcome {
                        Ok(bd) => {
                            shared.note_source(bd.source);
                            let d = bd.decision;
                            let mut v = Verdict::empty();
                            v.allowed = d.allowed;
                            v.retry_after = d.retry_after.filter(|_| !d.allowed);
                            v.source = bd.source;
                            v.push(PolicyState::from_decision(0, &d, !d.allowed));
                            let proceed = shared.record(set, &v, key.as_key_ref(), now);
                            tracing::debug!(%key, allowed = v.allowed, source = bd.source.as_str(), "decided");
                            if proceed {
                                let show =
                                    shared.on_admitted && !shared.shadow.load(Ordering::Relaxed);
                                State::Inner {
                                    fut: svc.call(request),
                                    headers: show.then(|| v.render(set, shared.style)),
                                }
                            } else {
                                State::Done {
                                    response: Some(shared.refusal(set, &v, grpc)),
                                }
                            }
                        }
                        Err(e) => {
                            shared.note_error();
                            tracing::warn!(%key, error = %e, "rate-limit backend failed");
                            match shared.on_error {
                                BackendFailure::Admit => State::Inner {
                                    fut: svc.call(request),
                                    headers: None,
                                },
                                BackendFailure::Refuse => {
                                    let mut res = problem::simple(
                                        StatusCode::SERVICE_UNAVAILABLE,
                                        "the rate limiter's store is unavailable",
                                    );
                                    res.headers_mut().insert(
                                        http::header::RETRY_AFTER,
                                        HeaderValue::from_static("1"),
                                    );
                                    State::Done {
                                        response: Some(res),
                                    }
                                }
                            }
                        }
                    };
                    shared
                        .metrics
                        .get()
                        .latency
                        .record(start.elapsed().as_secs_f64());
                    next
                }
            };
            self.as_mut().project().state.set(next);
        }
    }
}
