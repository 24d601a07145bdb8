//! The decision: match a request's descriptors to rules, decide them all
//! together (a request refused by one descriptor charges none), and answer
//! with a status per descriptor. Sans-IO: the caller passes `now`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use ratewise::keyed::KeyedError;
use ratewise::{CheckError, Decision, Quota, Timestamp};

use crate::charge::{
    quota_refuses, refused_before_counting, refused_verdict, Charge, RuleRef, Verdict,
};
use crate::config::{AlgorithmName, Limit, Matched, ReportedLimit, Rule, RuleSet};
use crate::counters::Counters;
use crate::response::{self, HeaderMode};
use crate::rls::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse, Unit};
use crate::telemetry::{RuleMetrics, ServiceMetrics};

/// A request the service will not decide, with a message for the caller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// `domain` is empty.
    #[error("the request's domain is empty")]
    EmptyDomain,
    /// No descriptors.
    #[error("the request has no descriptors")]
    NoDescriptors,
    /// More descriptors than allowed.
    #[error("the request has {count} descriptors; this service takes at most {max}")]
    TooManyDescriptors {
        /// Descriptors sent.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A descriptor with more entries than allowed.
    #[error("descriptor {index} has {count} entries; this service takes at most {max}")]
    TooManyEntries {
        /// The descriptor's position.
        index: usize,
        /// Entries sent.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A `limit` override that cannot be a limit.
    #[error("descriptor {index} overrides the limit with unit {unit}, which has no length")]
    BadOverride {
        /// The descriptor's position.
        index: usize,
        /// The unit number sent.
        unit: i32,
    },
    /// More distinct `limit` overrides than the service keeps counters for.
    #[error("more than {max} distinct limit overrides are in use; the service keeps no more")]
    TooManyOverrides {
        /// The most kept.
        max: usize,
    },
}

/// Settings of an [`Engine`].
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// Which rate-limit headers to ask Envoy to add.
    pub headers: HeaderMode,
    /// Whether responses name the matched and refusing rules in
    /// `dynamic_metadata` (for Envoy's access logs; off by default, as in
    /// envoyproxy/ratelimit, since it costs a few allocations per call).
    pub dynamic_metadata: bool,
    /// The most descriptors one request may carry.
    pub max_descriptors: usize,
    /// The most entries one descriptor may carry.
    pub max_entries: usize,
    /// The most distinct `limit` overrides kept (each is a set of counters).
    pub max_overrides: usize,
    /// The most distinct descriptor values one override keeps counters for.
    pub max_keys_per_rule: usize,
    /// Nanoseconds to add to `now` for rules with fixed windows, so that
    /// their windows align with the Unix epoch (as envoyproxy/ratelimit's
    /// do) while the other algorithms count from the process's start.
    pub epoch_offset: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            headers: HeaderMode::Ietf,
            dynamic_metadata: false,
            max_descriptors: 64,
            max_entries: 32,
            max_overrides: 1_024,
            max_keys_per_rule: 1_000_000,
            epoch_offset: Duration::ZERO,
        }
    }
}

/// The in-memory decision engine: the rules (swappable at run time) and
/// their counters.
///
/// ```
/// use ratewise::Timestamp;
/// use ratewise_server::config::{compile_sources, LoadOptions};
/// use ratewise_server::rls::{Code, Entry, RateLimitDescriptor, RateLimitRequest};
/// use ratewise_server::{Engine, EngineOptions};
///
/// let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 2 }\n";
/// let rules = compile_sources(&[("edge.yaml".into(), yaml.into())], None, LoadOptions::default())?;
/// let engine = Engine::new(rules, EngineOptions::default());
/// let request = RateLimitRequest {
///     domain: "edge".into(),
///     descriptors: vec![RateLimitDescriptor {
///         entries: vec![Entry { key: "user".into(), value: "alice".into() }],
///         ..Default::default()
///     }],
///     hits_addend: 0,
/// };
/// let now = Timestamp::from_nanos(1_000);
/// assert_eq!(engine.decide_at(&request, now)?.overall_code(), Code::Ok);
/// assert_eq!(engine.decide_at(&request, now)?.overall_code(), Code::Ok);
/// let third = engine.decide_at(&request, now)?;
/// assert_eq!(third.overall_code(), Code::OverLimit);
/// assert_eq!(third.statuses[0].limit_remaining, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Engine {
    rules: ArcSwap<RuleSet>,
    options: EngineOptions,
    commit: Mutex<()>,
    overrides: Mutex<HashMap<OverrideKey, Arc<Rule>>>,
    metrics: ServiceMetrics,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// A request matched to its rules, ready to be decided by a store.
pub(crate) struct Plan<'a> {
    pub(crate) charges: Vec<Charge<'a>>,
    /// The domain's failure policy, if it sets one.
    pub(crate) failure: Option<crate::config::FailureMode>,
}

/// An override's identity: domain, requests per unit, unit.
type OverrideKey = (Box<str>, u32, Unit);

impl Engine {
    /// An engine deciding by `rules`.
    pub fn new(rules: RuleSet, options: EngineOptions) -> Engine {
        Engine {
            rules: ArcSwap::from_pointee(rules),
            options,
            commit: Mutex::new(()),
            overrides: Mutex::new(HashMap::new()),
            metrics: ServiceMetrics::new(),
        }
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Replaces the rules atomically: a call in flight finishes on the old
    /// rules, the next one uses the new.
    pub fn swap_rules(&self, rules: RuleSet) {
        self.rules.store(Arc::new(rules));
    }

    /// The engine's settings.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Decides `request` at `now` (nanoseconds on the caller's monotonic
    /// clock) with the in-memory counters.
    ///
    /// # Errors
    /// [`RequestError`] for a request that cannot be decided; nothing is
    /// charged then.
    pub fn decide_at(
        &self,
        request: &RateLimitRequest,
        now: Timestamp,
    ) -> Result<RateLimitResponse, RequestError> {
        let rules = self.rules.load();
        let mut plan = self.plan(&rules, request, now)?;
        self.decide_charges(&mut plan.charges);
        Ok(self.finish(request, &plan))
    }

    /// Matches `request` to the rules: the charges to decide. Charges that
    /// need no counter (unlimited, blocked) are decided already.
    pub(crate) fn plan<'a>(
        &self,
        rules: &'a RuleSet,
        request: &RateLimitRequest,
        now: Timestamp,
    ) -> Result<Plan<'a>, RequestError> {
        if let Err(e) = self.validate(request) {
            self.metrics.requests_invalid.increment(1);
            return Err(e);
        }
        let Some(domain) = rules.domain(&request.domain) else {
            self.metrics.unknown_domain.increment(1);
            tracing::debug!(domain = %request.domain, "unknown domain: every descriptor is unmatched");
            return Ok(Plan {
                charges: Vec::new(),
                failure: None,
            });
        };
        let mut charges = Vec::new();
        let mut matched = Vec::new();
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let hits = hits_of(request, descriptor);
            if let Some(limit) = &descriptor.limit {
                let rule = self
                    .override_rule(&request.domain, i, limit.requests_per_unit, limit.unit)
                    .inspect_err(|_| self.metrics.requests_invalid.increment(1))?;
                let key = override_key(&descriptor.entries);
                charges.push(self.charge(i, RuleRef::Owned(rule), key, hits, now));
                continue;
            }
            matched.clear();
            domain.matches(&descriptor.entries, &mut matched);
            for Matched { rule, key } in matched.drain(..) {
                charges.push(self.charge(i, RuleRef::Borrowed(rule), key, hits, now));
            }
        }
        apply_replaces(&mut charges);
        for c in charges.iter_mut() {
            c.verdict = match &c.rule.limit {
                Limit::Unlimited => Some(Verdict::unlimited(c.descriptor)),
                Limit::Blocked { reported } => {
                    Some(Verdict::blocked(c.descriptor, &c.rule, *reported))
                }
                Limit::Limited { .. } => None,
            };
        }
        Ok(Plan {
            charges,
            failure: domain.failure,
        })
    }

    /// Records the plan's outcome and builds the response.
    pub(crate) fn finish(&self, request: &RateLimitRequest, plan: &Plan<'_>) -> RateLimitResponse {
        for c in &plan.charges {
            if let Some(v) = &c.verdict {
                v.record(&c.rule.metrics, c.rule.shadow);
            }
        }
        let answer = response::build(
            request,
            &plan.charges,
            self.options.headers,
            self.options.dynamic_metadata,
        );
        if answer.overall_code == crate::rls::Code::OverLimit as i32 {
            self.metrics.requests_over.increment(1);
        } else {
            self.metrics.requests_ok.increment(1);
        }
        answer
    }

    fn charge<'a>(
        &self,
        descriptor: usize,
        rule: RuleRef<'a>,
        key: Box<str>,
        hits: u64,
        now: Timestamp,
    ) -> Charge<'a> {
        let now = match rule.limit {
            Limit::Limited {
                algorithm: AlgorithmName::FixedWindow,
                ..
            } => now.saturating_add(self.options.epoch_offset),
            _ => now,
        };
        rule.metrics.sample.offer(&key);
        Charge {
            descriptor,
            rule,
            key,
            hits,
            now,
            verdict: None,
            reservation: None,
        }
    }

    fn validate(&self, request: &RateLimitRequest) -> Result<(), RequestError> {
        if request.domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(RequestError::NoDescriptors);
        }
        let max = self.options.max_descriptors;
        if request.descriptors.len() > max {
            return Err(RequestError::TooManyDescriptors {
                count: request.descriptors.len(),
                max,
            });
        }
        let max = self.options.max_entries;
        for (index, d) in request.descriptors.iter().enumerate() {
            if d.entries.len() > max {
                return Err(RequestError::TooManyEntries {
                    index,
                    count: d.entries.len(),
                    max,
                });
            }
            if let Some(o) = &d.limit {
                let known = Unit::try_from(o.unit).ok().and_then(Unit::duration);
                if known.is_none() {
                    return Err(RequestError::BadOverride {
                        index,
                        unit: o.unit,
                    });
                }
            }
        }
        Ok(())
    }

    fn override_rule(
        &self,
        domain: &str,
        index: usize,
        requests_per_unit: u32,
        unit: i32,
    ) -> Result<Arc<Rule>, RequestError> {
        let unit = Unit::try_from(unit).map_err(|_| RequestError::BadOverride { index, unit })?;
        let period = unit.duration().ok_or(RequestError::BadOverride {
            index,
            unit: unit as i32,
        })?;
        let mut map = self
            .overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(rule) = map.get(&(Box::from(domain), requests_per_unit, unit)) {
            return Ok(Arc::clone(rule));
        }
        if map.len() >= self.options.max_overrides {
            return Err(RequestError::TooManyOverrides {
                max: self.options.max_overrides,
            });
        }
        let reported = ReportedLimit {
            requests_per_unit,
            unit,
        };
        let name: Arc<str> = format!(
            "override_{requests_per_unit}_per_{}",
            unit.name().to_lowercase()
        )
        .into();
        let limit = match Quota::per(u64::from(requests_per_unit), period) {
            Ok(quota) if requests_per_unit > 0 => Limit::Limited {
                quota,
                algorithm: AlgorithmName::Gcra,
                reported,
            },
            _ => Limit::Blocked { reported },
        };
        let counters = match &limit {
            Limit::Limited { quota, .. } => Some(Arc::new(Counters::new(
                *quota,
                AlgorithmName::Gcra,
                self.options.max_keys_per_rule,
            ))),
            _ => None,
        };
        let rule = Arc::new(Rule {
            policy_item: crate::config::policy_item(&name, &limit),
            path: format!("{domain}#{name}").into(),
            metrics: RuleMetrics::new(domain, &name),
            name,
            domain: domain.into(),
            limit,
            shadow: false,
            quota: false,
            replaces: Vec::new(),
            counters,
        });
        map.insert(
            (Box::from(domain), requests_per_unit, unit),
            Arc::clone(&rule),
        );
        Ok(rule)
    }

    /// Decides every charge: all enforcing charges pass or none is made.
    fn decide_charges(&self, charges: &mut [Charge]) {
        let counted = charges.iter().filter(|c| c.verdict.is_none()).count();
        let blocked = refused_before_counting(charges);
        if counted == 1 && !blocked {
            // One counter: its own check is atomic.
            let c = charges
                .iter_mut()
                .find(|c| c.verdict.is_none())
                .expect("one counted charge");
            let decision = if c.hits == 0 {
                look_for(c, 1)
            } else {
                let counters = c.counters().expect("limited rules have counters");
                match counters.check_at(&c.key, c.hits, c.now) {
                    Ok(d) => Ok(d),
                    Err(e) => refusal(c, e),
                }
            };
            c.verdict = Some(Verdict::counted(
                c.descriptor,
                &c.rule,
                decision,
                c.rule.shadow,
            ));
        } else {
            self.decide_together(charges, blocked);
        }
    }

    fn decide_together(&self, charges: &mut [Charge], blocked: bool) {
        // Phase 1: look at every counter; nothing is written.
        let mut refused = blocked;
        for c in charges.iter_mut().filter(|c| c.verdict.is_none()) {
            let d = look_for(c, c.hits.max(1));
            if c.enforcing() && !d.as_ref().is_ok_and(|d| d.allowed) {
                refused = true;
            }
            c.verdict = Some(Verdict::counted(c.descriptor, &c.rule, d, c.rule.shadow));
        }
        refused = refused || quota_refuses(charges, refused_verdict);
        if refused {
            for v in charges.iter_mut().filter_map(|c| c.verdict.as_mut()) {
                v.uncharged = true;
            }
            return;
        }
        // Phase 2: reserve, all or nothing, under one lock so that the
        // reservation cancelled is always the latest on its counter.
        let _guard = self.commit.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failed = None;
        for (i, c) in charges.iter_mut().enumerate() {
            let counted = matches!(c.rule.limit, Limit::Limited { .. });
            let would_pass = c.verdict.as_ref().is_some_and(|v| v.allowed);
            if !counted || c.hits == 0 || !would_pass {
                continue;
            }
            let counters = c.counters().expect("limited rules have counters");
            match counters.reserve_now(&c.key, c.hits, c.now) {
                Ok(r) => c.reservation = Some(r),
                Err(e) if c.enforcing() => {
                    let d = refusal(c, e);
                    c.verdict = Some(Verdict::counted(c.descriptor, &c.rule, d, false));
                    failed = Some(i);
                    break;
                }
                Err(_) => {
                    // A shadow or quota-mode rule that filled up since
                    // phase 1: it is not charged, and its refusal is
                    // counted (a quota-mode one shows OVER_LIMIT).
                    let d = look_for(c, c.hits);
                    let shadow = c.rule.shadow;
                    c.verdict = Some(Verdict::counted(c.descriptor, &c.rule, d, shadow));
                }
            }
        }
        if failed.is_none() {
            // Every charge was made: report each counter as it now stands.
            for c in charges.iter_mut().filter(|c| c.reservation.is_some()) {
                let after = look_for(c, 1);
                if let (Ok(after), Some(v)) = (after, c.verdict.as_mut()) {
                    v.set_evidence(&after);
                }
            }
        }
        if let Some(failed) = failed {
            for c in charges[..failed].iter_mut().rev() {
                if let (Some(r), Some(counters)) =
                    (c.reservation.take(), c.rule.counters.as_deref())
                {
                    counters.cancel_at(&c.key, r, c.now);
                }
            }
            // The statuses of the others stay what phase 1 saw, uncharged.
            for c in charges.iter_mut() {
                if let Some(v) = c.verdict.as_mut() {
                    v.uncharged = true;
                }
            }
        }
    }
}

/// What the counter says of `n` more units, without charging. A charge of
/// `hits` 0 reports whether one more unit would pass now, and the units
/// available now.
fn look_for(c: &Charge, n: u64) -> Result<Decision, CheckError> {
    // A peek reports the counter as it stands (remaining before the
    // request) and whether `n` more would pass.
    let counters = c.counters().expect("limited rules have counters");
    counters.peek_at(&c.key, if c.hits == 0 { 1 } else { n }, c.now)
}

/// The decision for a charge its counter refused with `e`.
fn refusal(c: &Charge, e: KeyedError) -> Result<Decision, CheckError> {
    match e {
        KeyedError::Check(e) => Err(e),
        KeyedError::WouldWaitTooLong { wait, .. } => refused_with(c, wait),
        KeyedError::Full { retry_after, .. } => {
            metrics::counter!("ratewise_server_degraded_decisions_total", "reason" => "keys_full")
                .increment(1);
            refused_with(c, retry_after)
        }
        other => refused_with(c, other_wait(&other)),
    }
}

/// A refusal of a kind this version does not know: wait one emission
/// interval of the rule, the shortest time in which anything can change.
fn other_wait(_e: &KeyedError) -> Duration {
    Duration::from_secs(1)
}

fn refused_with(c: &Charge, wait: Duration) -> Result<Decision, CheckError> {
    let counters = c.counters().expect("limited rules have counters");
    let mut d = counters.peek_at(&c.key, 1, c.now).unwrap_or(Decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        reset_after: wait,
        retry_after: Some(wait),
        delay: Duration::ZERO,
    });
    d.allowed = false;
    d.remaining = 0;
    d.retry_after = Some(d.retry_after.unwrap_or(wait).max(wait));
    Ok(d)
}

/// Units to charge a descriptor: its own `hits_addend` if set (0 looks),
/// otherwise the request's, at least 1.
fn hits_of(request: &RateLimitRequest, descriptor: &RateLimitDescriptor) -> u64 {
    match descriptor.hits_addend {
        Some(h) => h.value,
        None => u64::from(request.hits_addend.max(1)),
    }
}

/// The counter key of an override: every entry, as written.
fn override_key(entries: &[crate::rls::Entry]) -> Box<str> {
    let mut key = String::new();
    for e in entries {
        if !key.is_empty() {
            key.push('\u{1f}');
        }
        key.push_str(&e.key);
        key.push('=');
        key.push_str(&e.value);
    }
    key.into_boxed_str()
}

/// Drops the charges of rules that another matched rule replaces.
fn apply_replaces(charges: &mut Vec<Charge>) {
    if charges.iter().all(|c| c.rule.replaces.is_empty()) {
        return;
    }
    let replaced: Vec<Arc<str>> = charges
        .iter()
        .flat_map(|c| c.rule.replaces.iter().cloned())
        .collect();
    charges.retain(|c| !replaced.iter().any(|r| *r == c.rule.name));
}

impl Verdict {
    fn record(&self, metrics: &RuleMetrics, shadow: bool) {
        if self.shadow_refusal {
            metrics.record_shadow_refusal();
        }
        // A charge not made because another refused the request is not a
        // decision of its rule.
        if self.counts && !(self.uncharged && self.allowed) {
            metrics.record(self.allowed || shadow);
            if self.near_limit && !self.uncharged {
                metrics.near_limit.increment(1);
            }
        }
    }
}
