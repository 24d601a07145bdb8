//! Global quotas for data planes that decide locally: the Rate Limit Quota
//! Service (RLQS). Each data plane (Envoy's `rate_limit_quota` filter)
//! reports its usage per bucket; the service answers with its part of the
//! bucket's quota as a token bucket with a time to live. The parts are
//! leases ([`Allocator`], or the same rule on Redis across instances), so
//! they never add up to more than the quota.
//!
//! A bucket's `BucketId` is matched against the domain's descriptors as an
//! RLS descriptor is ([`crate::config`]). A data plane's demand is what it
//! reported (allowed + denied) over the time elapsed; its first report asks
//! for the whole quota. A bucket reported idle for `abandon_after` is
//! abandoned and its lease freed; a closed stream frees all of its leases.

mod allocator;
mod bucket;
pub mod envelope;
mod leases;
mod nudge;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratewise::time::{Clock, MonotonicClock};
use ratewise::Timestamp;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

pub use allocator::{fair_share, Allocator};

use crate::rlqs::{
    AbandonAction, Action, AssignmentStream, BlanketRule, BucketAction, BucketId, BucketQuotaUsage,
    QuotaAssignmentAction, RateLimitQuotaResponse, RateLimitQuotaService,
    RateLimitQuotaServiceServer, RateLimitQuotaUsageReports,
};
use crate::Engine;
use bucket::{blanket, limit_of, prost_duration, token_bucket, BucketLimit};
use leases::Leases;
use nudge::Nudges;

/// Settings of the quota service.
#[derive(Clone, Debug)]
pub struct QuotaSettings {
    /// How long an assignment holds (`assignment_time_to_live`, whole
    /// seconds: Envoy 1.40 reads only the seconds); make it at least twice
    /// the data planes' reporting interval (Envoy 1.40 reports every 5 s).
    /// A lease is held a little longer (1.5×), so a part is never given to
    /// another data plane while the first may still enforce it.
    pub assignment_ttl: Duration,
    /// A bucket reported with no requests for this long is abandoned.
    pub abandon_after: Duration,
    /// The longest a lease waits on Redis; past it the bucket gets no new
    /// assignment in this answer (the data plane keeps its current one
    /// until it expires).
    pub store_deadline: Duration,
    /// What the leases' keys and the instances' channel on Redis start with
    /// (the store's prefix, [`crate::redis_store::RedisSettings::prefix`]).
    pub redis_prefix: Arc<str>,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            assignment_ttl: Duration::from_secs(12),
            abandon_after: Duration::from_secs(30),
            store_deadline: Duration::from_millis(100),
            redis_prefix: crate::redis_store::DEFAULT_PREFIX.into(),
        }
    }
}

/// The RLQS service (cheap to clone: every clone shares the leases).
#[derive(Clone)]
pub struct QuotaService {
    engine: Arc<Engine>,
    leases: Arc<Leases>,
    clock: MonotonicClock,
    settings: QuotaSettings,
    instance: Arc<str>,
    streams: Arc<AtomicU64>,
    /// Leases decided here while the shared store cannot answer, each
    /// bucket's quota divided by the live instance count.
    fallback: Arc<std::sync::Mutex<Allocator>>,
    instances: Arc<dyn Fn() -> u32 + Send + Sync>,
    /// This instance's streams, so a subscription can have the holders of
    /// a bucket re-divide it at once.
    nudges: Nudges,
}

impl std::fmt::Debug for QuotaService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaService")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl QuotaService {
    /// A service dividing the quotas of `engine`'s rules, with the leases
    /// in this process.
    pub fn new(engine: Arc<Engine>, clock: MonotonicClock, settings: QuotaSettings) -> Self {
        let instance: Arc<str> = instance_name().into();
        QuotaService {
            engine,
            leases: Arc::new(Leases::memory(clock.clone())),
            clock,
            settings,
            nudges: Nudges::local(Arc::clone(&instance)),
            instance,
            streams: Arc::new(AtomicU64::new(0)),
            fallback: Arc::new(std::sync::Mutex::new(Allocator::default())),
            instances: Arc::new(|| 1),
        }
    }

    /// The same with the leases on Redis, shared by every instance. While
    /// Redis cannot answer, each bucket's parts come from this instance's
    /// share of its quota (the quota divided by `instances()`, the live
    /// instance count), and every such assignment is counted.
    pub fn on_redis(
        engine: Arc<Engine>,
        clock: MonotonicClock,
        conn: ratewise_redis::Connection,
        settings: QuotaSettings,
        instances: impl Fn() -> u32 + Send + Sync + 'static,
    ) -> Self {
        let deadline = settings.store_deadline;
        let prefix = Arc::clone(&settings.redis_prefix);
        let base = QuotaService::new(engine, clock, settings);
        QuotaService {
            nudges: base
                .nudges
                .clone()
                .relay_through(conn.clone(), deadline, &prefix),
            leases: Arc::new(Leases::Redis {
                conn,
                deadline,
                prefix,
            }),
            instances: Arc::new(instances),
            ..base
        }
    }

    /// Hears the other instances' nudges on the Redis `client` connects to
    /// (a single server; on a cluster, holders elsewhere give back at their
    /// next report). Returns once subscribed, or after a second if Redis
    /// does not answer (it keeps trying in the background).
    pub async fn listen_for_nudges(&self, client: redis::Client) {
        nudge::listen(
            client,
            self.nudges.clone(),
            nudge::channel(&self.settings.redis_prefix),
            Duration::from_secs(1),
        )
        .await;
    }

    /// The tonic service to add to a server.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<QuotaService> {
        RateLimitQuotaServiceServer::from_arc(Arc::new(self))
    }
}

fn instance_name() -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}-{started:x}", std::process::id())
}

/// One data plane's stream: its buckets and when each last saw traffic.
struct Session {
    client: String,
    number: u64,
    domain: Option<String>,
    buckets: HashMap<BucketId, Tracked>,
}

struct Tracked {
    lease: Option<String>,
    last_busy: Timestamp,
    /// The demand last reported (requests per second).
    wants: f64,
    /// The part last given (requests per second).
    gets: f64,
    /// The strategy last sent, so a re-division pushes only a change.
    sent: Option<crate::rlqs::RateLimitStrategy>,
}

impl QuotaService {
    async fn answer(
        &self,
        s: &mut Session,
        reports: RateLimitQuotaUsageReports,
    ) -> RateLimitQuotaResponse {
        if s.domain.is_none() && !reports.domain.is_empty() {
            s.domain = Some(reports.domain.clone());
        }
        let domain = s.domain.clone().unwrap_or_default();
        let usages = match reports.usages() {
            Ok(u) => u,
            Err(e) => {
                metrics::counter!("ratewise_server_quota_reports_invalid_total").increment(1);
                tracing::debug!(error = %e, "a usage report could not be read");
                Vec::new()
            }
        };
        let rules = self.engine.rules();
        let mut actions = Vec::with_capacity(usages.len());
        for usage in usages {
            if let Some(action) = self.decide(s, &rules, &domain, usage).await {
                actions.push(action);
            }
        }
        RateLimitQuotaResponse {
            bucket_action: actions,
        }
    }

    /// Ends a session's lease on `bucket`, shared and local.
    async fn release(&self, bucket: &str, s: &Session) {
        self.leases.release(bucket, &s.client, s.number).await;
        self.fallback
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(bucket, s.number);
    }

    /// The assignment's time to live in whole seconds (rounded up, at
    /// least 1).
    fn ttl(&self) -> Duration {
        let t = self.settings.assignment_ttl;
        Duration::from_secs(t.as_secs() + u64::from(t.subsec_nanos() > 0))
            .max(Duration::from_secs(1))
    }

    async fn decide(
        &self,
        s: &mut Session,
        rules: &crate::config::RuleSet,
        domain: &str,
        usage: BucketQuotaUsage,
    ) -> Option<BucketAction> {
        let id = usage.bucket_id.clone().filter(|b| !b.bucket.is_empty())?;
        let now = self.clock.now();
        let used = usage
            .num_requests_allowed
            .saturating_add(usage.num_requests_denied);
        let first = !s.buckets.contains_key(&id);
        let tracked = s.buckets.entry(id.clone()).or_insert(Tracked {
            lease: None,
            last_busy: now,
            wants: 0.0,
            gets: 0.0,
            sent: None,
        });
        if used > 0 {
            tracked.last_busy = now;
        } else if !first
            && now.saturating_duration_since(tracked.last_busy) >= self.settings.abandon_after
        {
            if let Some(lease) = s.buckets.remove(&id).and_then(|t| t.lease) {
                self.release(&lease, s).await;
            }
            metrics::counter!("ratewise_server_quota_abandoned_total").increment(1);
            return Some(BucketAction {
                bucket_id: Some(id),
                action: Some(Action::AbandonAction(AbandonAction {})),
            });
        }
        let strategy = match limit_of(rules, domain, &id) {
            BucketLimit::Unlimited => blanket(BlanketRule::AllowAll),
            BucketLimit::Blocked => blanket(BlanketRule::DenyAll),
            BucketLimit::Limited {
                key,
                rate_per_s,
                burst,
            } => {
                let elapsed = usage
                    .time_elapsed
                    .and_then(|d| Duration::try_from(d).ok())
                    .filter(|d| !d.is_zero());
                let wants = match elapsed {
                    Some(e) if !first => used as f64 / e.as_secs_f64(),
                    // A first report (a subscription) asks for the whole.
                    _ => rate_per_s,
                };
                let (strategy, gets) = self
                    .part(s, &id, key.clone(), rate_per_s, burst, wants)
                    .await;
                if first && gets + 1e-9 < wants {
                    // Others hold what this subscriber wants: they re-divide
                    // now rather than at their next report.
                    self.nudges.others(s.number, &key);
                }
                strategy
            }
        };
        if let Some(t) = s.buckets.get_mut(&id) {
            t.sent = Some(strategy.clone());
        }
        Some(self.assignment(id, strategy))
    }

    /// The action assigning `strategy` to bucket `id` for the time to live.
    fn assignment(&self, id: BucketId, strategy: crate::rlqs::RateLimitStrategy) -> BucketAction {
        BucketAction {
            bucket_id: Some(id),
            action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(prost_duration(self.ttl())),
                rate_limit_strategy: Some(strategy),
            })),
        }
    }
}

impl QuotaService {
    /// Leases `s` its part of the quota `rate_per_s` on `key` for the
    /// demand `wants`, and the token bucket enforcing it.
    async fn part(
        &self,
        s: &mut Session,
        id: &BucketId,
        key: String,
        rate_per_s: f64,
        burst: u64,
        wants: f64,
    ) -> (crate::rlqs::RateLimitStrategy, f64) {
        let lease_ttl = self.ttl().mul_f64(1.5);
        let gets = match self
            .leases
            .assign(&key, &s.client, s.number, wants, rate_per_s, lease_ttl)
            .await
        {
            Ok(gets) => gets,
            Err(e) => {
                // This instance's share of the quota, for as long as the
                // shared store is away.
                metrics::counter!("ratewise_server_degraded_decisions_total", "reason" => "quota_local_fallback").increment(1);
                tracing::debug!(error = %e, "the quota's parts come from this instance's share");
                let share = rate_per_s / f64::from((self.instances)().max(1));
                let now = self.clock.now();
                self.fallback
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .assign(&key, s.number, wants.min(share), share, lease_ttl, now)
            }
        };
        tracing::debug!(bucket = %key, client = %s.client, wants, gets, "quota assigned");
        if let Some(t) = s.buckets.get_mut(id) {
            t.lease = Some(key);
            t.wants = wants;
            t.gets = gets;
        }
        metrics::counter!("ratewise_server_quota_assignments_total").increment(1);
        (token_bucket(gets, rate_per_s, burst), gets)
    }

    /// Re-divides the lease `key` for `s`'s buckets on it, at their last
    /// demand: the assignments that changed (to push), and whether any part
    /// fell.
    async fn redivide(&self, s: &mut Session, key: &str) -> (Vec<BucketAction>, bool) {
        let domain = s.domain.clone().unwrap_or_default();
        let rules = self.engine.rules();
        let on_key: Vec<BucketId> = s
            .buckets
            .iter()
            .filter(|(_, t)| t.lease.as_deref() == Some(key))
            .map(|(id, _)| id.clone())
            .collect();
        let (mut actions, mut fell) = (Vec::new(), false);
        for id in on_key {
            let BucketLimit::Limited {
                key,
                rate_per_s,
                burst,
            } = limit_of(&rules, &domain, &id)
            else {
                continue;
            };
            let Some((wants, before, sent)) = s
                .buckets
                .get(&id)
                .map(|t| (t.wants, t.gets, t.sent.clone()))
            else {
                continue;
            };
            let (strategy, gets) = self.part(s, &id, key, rate_per_s, burst, wants).await;
            fell |= gets + 1e-9 < before;
            if sent.as_ref() != Some(&strategy) {
                metrics::counter!("ratewise_server_quota_pushes_total").increment(1);
                if let Some(t) = s.buckets.get_mut(&id) {
                    t.sent = Some(strategy.clone());
                }
                actions.push(self.assignment(id, strategy));
            }
        }
        (actions, fell)
    }
}

impl RateLimitQuotaService for QuotaService {
    async fn stream_rate_limit_quotas(
        &self,
        request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<tonic::Response<AssignmentStream>, tonic::Status> {
        let number = self.streams.fetch_add(1, Ordering::Relaxed);
        let mut session = Session {
            client: format!("{}/{number}", self.instance),
            number,
            domain: None,
            buckets: HashMap::new(),
        };
        let mut reports = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        // The service is shared by every stream; the task owns a handle.
        let this = self.clone();
        let mut nudges = this.nudges.register(number);
        tokio::spawn(async move {
            metrics::gauge!("ratewise_server_quota_streams").increment(1.0);
            loop {
                let next = tokio::select! {
                    next = reports.message() => next,
                    Some(nudge) = nudges.recv() => {
                        let (actions, fell) = this.redivide(&mut session, &nudge.key).await;
                        if fell && nudge.answer {
                            this.nudges.back(&nudge.from, &nudge.key);
                        }
                        if !actions.is_empty() {
                            let push = RateLimitQuotaResponse { bucket_action: actions };
                            if tx.send(Ok(push)).await.is_err() {
                                break;
                            }
                        }
                        continue;
                    }
                    () = tx.closed() => break,
                };
                match next {
                    Ok(Some(r)) => {
                        let answer = this.answer(&mut session, r).await;
                        if !answer.bucket_action.is_empty() && tx.send(Ok(answer)).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            for t in session.buckets.values() {
                if let Some(lease) = &t.lease {
                    this.release(lease, &session).await;
                }
            }
            this.nudges.unregister(session.number);
            metrics::gauge!("ratewise_server_quota_streams").decrement(1.0);
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
