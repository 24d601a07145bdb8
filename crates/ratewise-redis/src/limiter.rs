//! [`RedisLimiter`]: one quota per key, held in Redis, decided by a Lua
//! script in one round trip.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use ratewise::backend::{AsyncKeyedLimiter, BackendDecision};
use ratewise::Quota;
use redis::Script;

use crate::batch::{BatchKey, Batcher, Joined, Msg, Request};
use crate::core::{micros, now_arg, validate_key, Core, MicroQuota};
use crate::error::Error;
use crate::policy::{Failure, FailurePolicy, Resilience, ResilienceConfig, StatsSnapshot};

/// One request's answer, as a batch delivers it.
type Answer = Result<Timed, Error>;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const SINGLE: &str = include_str!("lua/single.lua");
const BATCH: &str = include_str!("lua/batch.lua");
const BATCH_END: &str = include_str!("lua/batch_end.lua");
/// GCRA's decision, shared by its single and batch scripts.
const GCRA_DECIDE: &str = include_str!("lua/gcra_decide.lua");
const GCRA: &str = concat!(
    include_str!("lua/gcra_decide.lua"),
    "\n",
    include_str!("lua/gcra.lua")
);

/// The algorithm a [`RedisLimiter`] runs on Redis. Each is the Redis form of
/// the core limiter of the same name and answers with the same
/// [`Decision`](ratewise::Decision) evidence; see the crate docs' table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm: one string per key (the default).
    #[default]
    Gcra,
    /// Token bucket: a two-field hash per key; decides exactly as GCRA.
    TokenBucket,
    /// Fixed window of `burst × interval`: a two-field hash per key.
    FixedWindow,
    /// Sliding-window counter: a three-field hash per key.
    SlidingWindowCounter,
    /// Sliding-window log: a sorted set of up to `burst` members per key.
    SlidingWindowLog,
}

impl Algorithm {
    /// Every algorithm, in the crate docs' order.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowCounter,
        Algorithm::SlidingWindowLog,
    ];

    /// A short lowercase name: `gcra`, `token-bucket`, `fixed-window`,
    /// `sliding-window-counter`, `sliding-window-log`.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::SlidingWindowCounter => "sliding-window-counter",
            Algorithm::SlidingWindowLog => "sliding-window-log",
        }
    }

    /// The algorithm named `name` (see [`Algorithm::name`]).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The algorithm's decision, as Lua statements that read `key`, `e`,
    /// `b`, `n`, `peek`, `slack` and `now` and end in a `return`.
    fn body(self) -> (&'static str, &'static str) {
        const WINDOW_END: &str = include_str!("lua/window_end.lua");
        match self {
            Algorithm::Gcra => (GCRA, ""),
            Algorithm::TokenBucket => (include_str!("lua/token_bucket.lua"), ""),
            Algorithm::FixedWindow => (include_str!("lua/fixed_window.lua"), WINDOW_END),
            Algorithm::SlidingWindowCounter => {
                (include_str!("lua/sliding_window_counter.lua"), WINDOW_END)
            }
            Algorithm::SlidingWindowLog => (include_str!("lua/sliding_window_log.lua"), WINDOW_END),
        }
    }

    /// The Lua source of this algorithm's script.
    pub fn script_source(self) -> String {
        let (body, end) = self.body();
        format!("{PRELUDE}\n{SINGLE}\n{body}\n{end}")
    }

    /// The Lua source of this algorithm's batch script: the same decision
    /// as [`Algorithm::script_source`], wrapped in a function and applied
    /// to each request of a batch in turn, on the request's own key among
    /// the batch's (see the crate docs' "Batching"); GCRA's reads and
    /// writes each key once per batch.
    pub fn batch_script_source(self) -> String {
        if self == Algorithm::Gcra {
            // The same decisions, with the key read and written once.
            return format!(
                "{PRELUDE}\n{GCRA_DECIDE}\n{}",
                include_str!("lua/gcra_batch.lua")
            );
        }
        let (body, end) = self.body();
        format!("{PRELUDE}\n{BATCH}\n{body}\n{end}\n{BATCH_END}")
    }

    fn index(self) -> usize {
        Algorithm::ALL
            .iter()
            .position(|&a| a == self)
            .unwrap_or_default()
    }

    pub(crate) fn script(self) -> &'static Script {
        static SCRIPTS: [OnceLock<Script>; 5] = [const { OnceLock::new() }; 5];
        SCRIPTS[self.index()].get_or_init(|| Script::new(&self.script_source()))
    }

    pub(crate) fn batch_script(self) -> &'static Script {
        static SCRIPTS: [OnceLock<Script>; 5] = [const { OnceLock::new() }; 5];
        SCRIPTS[self.index()].get_or_init(|| Script::new(&self.batch_script_source()))
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Options for a [`RedisLimiter`] or a [`MultiLimiter`](crate::MultiLimiter).
#[derive(Clone, Debug)]
pub struct Options {
    /// Prepended to every key (default `ratewise:`). It must not contain
    /// `{` or `}`, so that a hash tag in the caller's key decides the
    /// Redis Cluster slot. Limiters with different algorithms must not
    /// share keys: each stores its own Redis type, and a key of another
    /// type makes Redis answer `WRONGTYPE` (handled by the failure policy,
    /// counted in `redis_errors`). Give each limiter its own prefix.
    pub prefix: String,
    /// What to answer when Redis cannot (default [`FailurePolicy::FailOpen`]).
    pub policy: FailurePolicy,
    /// Command timeout and circuit breaker.
    pub resilience: ResilienceConfig,
    /// Added to every key's time to live (default zero). Keys expire on
    /// Redis's clock; a caller passing its own `now` (`check_at`) whose
    /// clock may run slower than Redis's sets a slack so that keys never
    /// expire before their state is back to a fresh key's.
    pub expiry_slack: Duration,
    /// The most requests decided by one script call (default 128; 1 turns
    /// batching off). While a call is in flight, further requests under the
    /// same quota (for any key on a single server, for the same key on a
    /// Cluster) wait in process and then go together, decided in arrival
    /// order exactly as one by one; see the crate docs' "Batching".
    pub max_batch: usize,
    /// The most batch calls in flight at once for one group (default 2): with
    /// two, the next batch is on its way while the previous one's answers
    /// are delivered. Calls of one limiter share its connection, so Redis
    /// decides them in the order they were sent.
    pub batches_in_flight: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: "ratewise:".to_owned(),
            policy: FailurePolicy::FailOpen,
            resilience: ResilienceConfig::default(),
            expiry_slack: Duration::ZERO,
            max_batch: 128,
            batches_in_flight: 2,
        }
    }
}

impl Options {
    pub(crate) fn into_core(self, conn: impl Into<crate::Connection>) -> Result<Core, Error> {
        if self.prefix.contains(['{', '}']) {
            return Err(Error::InvalidPrefix {
                prefix: self.prefix,
            });
        }
        Ok(Core {
            conn: conn.into(),
            res: Resilience::new(self.resilience, self.prefix.clone()),
            prefix: self.prefix.into_bytes(),
            slack_ms: u64::try_from(self.expiry_slack.as_millis()).unwrap_or(u64::MAX),
            policy: self.policy,
        })
    }
}

/// A decision and the time it was made at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timed {
    /// The decision.
    pub decision: BackendDecision,
    /// The time the script used — Redis's clock (since the UNIX epoch) or
    /// the caller's explicit `now`, to the microsecond; `None` when the
    /// failure policy decided.
    pub redis_time: Option<Duration>,
}

impl Timed {
    fn untimed(decision: BackendDecision) -> Timed {
        Timed {
            decision,
            redis_time: None,
        }
    }
}

/// A keyed rate limiter whose state lives in Redis: every process sharing
/// the Redis server shares each key's quota.
///
/// Cloning is cheap and shares everything (connection, counters, breaker).
/// See the [crate docs](crate) for an example, the algorithms and the
/// failure policies.
#[derive(Clone, Debug)]
pub struct RedisLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    core: Core,
    algorithm: Algorithm,
    batcher: Option<Arc<Batcher<Answer>>>,
    quota: RwLock<MicroQuota>,
    has_overrides: AtomicBool,
    overrides: RwLock<HashMap<Vec<u8>, MicroQuota>>,
}

impl RedisLimiter {
    /// A GCRA limiter with the default [`Options`].
    pub fn new(conn: impl Into<crate::Connection>, quota: Quota) -> Result<RedisLimiter, Error> {
        RedisLimiter::with_options(conn, quota, Algorithm::Gcra, Options::default())
    }

    /// A limiter running `algorithm` with `options`.
    pub fn with_options(
        conn: impl Into<crate::Connection>,
        quota: Quota,
        algorithm: Algorithm,
        options: Options,
    ) -> Result<RedisLimiter, Error> {
        let quota = MicroQuota::new(quota, algorithm == Algorithm::SlidingWindowCounter)?;
        let batcher = (options.max_batch > 1)
            .then(|| Batcher::new(options.max_batch, options.batches_in_flight));
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                core: options.into_core(conn)?,
                algorithm,
                batcher,
                quota: RwLock::new(quota),
                has_overrides: AtomicBool::new(false),
                overrides: RwLock::new(HashMap::new()),
            }),
        })
    }

    /// The algorithm this limiter runs.
    pub fn algorithm(&self) -> Algorithm {
        self.inner.algorithm
    }

    /// The default quota.
    pub fn quota(&self) -> Quota {
        self.inner
            .quota
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .quota
    }

    /// The quota in force for `key`: its override, or the default.
    pub fn key_quota(&self, key: impl AsRef<[u8]>) -> Quota {
        self.micro_quota(key.as_ref()).quota
    }

    fn counter(&self) -> bool {
        self.inner.algorithm == Algorithm::SlidingWindowCounter
    }

    /// Replaces the default quota; the next call uses it (the parameters
    /// travel with every call, nothing in Redis is rewritten).
    pub fn set_quota(&self, quota: Quota) -> Result<(), Error> {
        let q = MicroQuota::new(quota, self.counter())?;
        *self
            .inner
            .quota
            .write()
            .unwrap_or_else(PoisonError::into_inner) = q;
        Ok(())
    }

    /// Gives `key` its own quota, from its next call on.
    pub fn set_key_quota(&self, key: impl AsRef<[u8]>, quota: Quota) -> Result<(), Error> {
        let key = key.as_ref();
        validate_key(key)?;
        let q = MicroQuota::new(quota, self.counter())?;
        let mut map = self
            .inner
            .overrides
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        map.insert(key.to_vec(), q);
        self.inner.has_overrides.store(true, Ordering::Release);
        Ok(())
    }

    /// Returns `key` to the default quota.
    pub fn clear_key_quota(&self, key: impl AsRef<[u8]>) {
        let mut map = self
            .inner
            .overrides
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        map.remove(key.as_ref());
        self.inner
            .has_overrides
            .store(!map.is_empty(), Ordering::Release);
    }

    fn micro_quota(&self, key: &[u8]) -> MicroQuota {
        if self.inner.has_overrides.load(Ordering::Acquire) {
            let map = self
                .inner
                .overrides
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(q) = map.get(key) {
                return *q;
            }
        }
        *self
            .inner
            .quota
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits `n` units for `key` on Redis's clock, consuming them; a
    /// refusal consumes (and writes) nothing. When Redis cannot answer, the
    /// failure policy does, and the decision's `source` says so.
    pub async fn check(&self, key: impl AsRef<[u8]>, n: u64) -> Result<BackendDecision, Error> {
        self.decide(key.as_ref(), n, None, false, None).await
    }

    /// What [`RedisLimiter::check`] would answer; writes nothing.
    pub async fn peek(&self, key: impl AsRef<[u8]>, n: u64) -> Result<BackendDecision, Error> {
        self.decide(key.as_ref(), n, None, true, None).await
    }

    /// [`RedisLimiter::check`] at the caller's time `now` (a duration since
    /// an origin the caller keeps fixed, such as the UNIX epoch; at most
    /// about 142 years). Windows are aligned to that origin. For tests and
    /// for callers that own the clock; do not mix with Redis-clock calls on
    /// the same keys.
    pub async fn check_at(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        now: Duration,
    ) -> Result<BackendDecision, Error> {
        self.decide(key.as_ref(), n, Some(now), false, None).await
    }

    /// [`RedisLimiter::peek`] at the caller's time `now`.
    pub async fn peek_at(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        now: Duration,
    ) -> Result<BackendDecision, Error> {
        self.decide(key.as_ref(), n, Some(now), true, None).await
    }

    /// [`RedisLimiter::check`] with a quota for this call only (it wins over
    /// the key's override and the default).
    pub async fn check_with_quota(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        quota: Quota,
    ) -> Result<BackendDecision, Error> {
        let q = MicroQuota::new(quota, self.counter())?;
        self.decide(key.as_ref(), n, None, false, Some(q)).await
    }

    /// Forgets `key`'s state: its next request finds a full quota. Returns
    /// the Redis error if Redis cannot be reached (no policy applies).
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<(), Error> {
        let key = key.as_ref();
        validate_key(key)?;
        let core = &self.inner.core;
        let full = core.full_key(key);
        let mut conn = core.conn.clone();
        let mut cmd = redis::cmd("DEL");
        cmd.arg(full);
        core.res
            .run(cmd.query_async::<i64>(&mut conn))
            .await
            .map(drop)
            .map_err(Error::from)
    }

    /// Decision counts by source, Redis failures, breaker openings.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.core.res.stats.snapshot()
    }

    /// The key this limiter stores `key` under in Redis (prefix + key).
    pub fn redis_key(&self, key: impl AsRef<[u8]>) -> Vec<u8> {
        self.inner.core.full_key(key.as_ref())
    }

    /// [`RedisLimiter::check`], also returning the Redis time the script
    /// decided at (for audits, and for checking the quota bound against
    /// Redis's own clock).
    pub async fn check_timed(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Timed, Error> {
        self.decide_timed(key.as_ref(), n, None, false, None).await
    }

    async fn decide(
        &self,
        key: &[u8],
        n: u64,
        now: Option<Duration>,
        peek: bool,
        quota: Option<MicroQuota>,
    ) -> Result<BackendDecision, Error> {
        self.decide_timed(key, n, now, peek, quota)
            .await
            .map(|t| t.decision)
    }

    async fn decide_timed(
        &self,
        key: &[u8],
        n: u64,
        now: Option<Duration>,
        peek: bool,
        quota: Option<MicroQuota>,
    ) -> Result<Timed, Error> {
        validate_key(key)?;
        let q = quota.unwrap_or_else(|| self.micro_quota(key));
        q.validate_weight(n)?;
        let req = Request {
            key: Arc::from(key),
            n,
            peek,
            now: now_arg(now)?,
        };
        let Some(batcher) = &self.inner.batcher else {
            return self.call(q, &req, &[]).await.0;
        };
        // One script call must stay within a Cluster slot: there a batch
        // is one key's; on a single server, any keys under this quota.
        let group = match &self.inner.core.conn {
            crate::Connection::Cluster(_) => key.to_vec(),
            crate::Connection::Single(_) => Vec::new(),
        };
        let bk = BatchKey {
            group,
            emission_us: q.emission_us,
            burst: q.burst,
        };
        let mut joined = batcher.join(&bk, req.clone());
        loop {
            match joined {
                Joined::Lead(mut lead) => {
                    let others = lead.others();
                    let (own, others) = self.call(q, lead.own(), &others).await;
                    return lead.finish(own, others);
                }
                Joined::Wait(rx) => match rx.await {
                    Ok(Msg::Done(answer)) => return answer,
                    Ok(Msg::Lead(lead)) => joined = Joined::Lead(lead),
                    // The answer's sender went away unanswered (a leader
                    // panicked): queue again.
                    Err(_) => joined = batcher.join(&bk, req.clone()),
                },
            }
        }
    }

    /// One script call deciding `first`, then `rest` (all under `q`), in
    /// order: the single script for one request, the batch script for
    /// several (their distinct keys as its KEYS). Returns `first`'s answer
    /// and the others', in order; when Redis gives no answer, the failure
    /// policy answers each request, and when it refuses one key of a batch
    /// (e.g. `WRONGTYPE`), that key's requests.
    async fn call(
        &self,
        q: MicroQuota,
        first: &Request,
        rest: &[Request],
    ) -> (Answer, Vec<Answer>) {
        let core = &self.inner.core;
        let algorithm = self.inner.algorithm;
        let reqs = || std::iter::once(first).chain(rest);
        let count = rest.len() + 1;
        // The batch's distinct keys, in order of first request, and each
        // request's 1-based index among them.
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut index: Vec<usize> = Vec::with_capacity(count);
        let mut inv;
        if rest.is_empty() {
            let r = first;
            keys.push(&r.key);
            index.push(1);
            inv = algorithm.script().prepare_invoke();
            inv.key(core.full_key(&r.key))
                .arg(r.now)
                .arg(q.emission_us)
                .arg(q.burst)
                .arg(r.n)
                .arg(u8::from(r.peek))
                .arg(core.slack_ms);
        } else {
            let mut seen: HashMap<&[u8], usize> = HashMap::with_capacity(count);
            for r in reqs() {
                let next = seen.len() + 1;
                let i = *seen.entry(&r.key).or_insert_with(|| {
                    keys.push(&r.key);
                    next
                });
                index.push(i);
            }
            inv = algorithm.batch_script().prepare_invoke();
            let server_clock = if reqs().any(|r| r.now < 0) { -1 } else { 0 };
            for k in &keys {
                inv.key(core.full_key(k));
            }
            // The requests in one argument: four little-endian doubles
            // each (n, peek, now, key index; batch.lua).
            let mut packed = Vec::with_capacity(32 * count);
            for (r, i) in reqs().zip(&index) {
                for v in [
                    r.n as f64,
                    f64::from(u8::from(r.peek)),
                    r.now as f64,
                    *i as f64,
                ] {
                    packed.extend_from_slice(&v.to_le_bytes());
                }
            }
            inv.arg(server_clock)
                .arg(q.emission_us)
                .arg(q.burst)
                .arg(core.slack_ms)
                .arg(packed);
        }
        let mut conn = core.conn.clone();
        let reply = if rest.is_empty() {
            core.res.run(inv.invoke_async::<Vec<i64>>(&mut conn)).await
        } else {
            core.res
                .run_batch(inv.invoke_async::<Vec<u8>>(&mut conn), count)
                .await
                .map(|bytes| decode_doubles(&bytes))
        };
        let outcome = match reply {
            Ok(v) if v.len() == 5 * count => Ok(v),
            Ok(v) => Err(Failure::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "a ratewise script answered with the wrong number of values",
                format!("{v:?}"),
            )))),
            Err(f) => Err(f),
        };
        // A key the batch script could not read or write: counted once per
        // key, as its own call's error would have been.
        let mut refused_keys: Vec<usize> = Vec::new();
        let mut answer = |i: usize, r: &Request| match &outcome {
            Ok(v) if v[5 * i] == REFUSED_KEY => {
                if !refused_keys.contains(&index[i]) {
                    refused_keys.push(index[i]);
                    core.res.count_redis_error();
                }
                let e = redis::RedisError::from((
                    redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                    "Redis refused this key (it holds another type, or the script failed on it)",
                ));
                core.degrade(&r.key, r.n, r.peek, q.burst, Failure::Redis(e))
                    .map(Timed::untimed)
            }
            Ok(v) => {
                let c = &v[5 * i..5 * i + 5];
                core.count_backend(c[0] == 1);
                Ok(Timed {
                    decision: BackendDecision::from_backend(q.decision(c)),
                    redis_time: Some(micros(c[4])),
                })
            }
            Err(f) => core
                .degrade(&r.key, r.n, r.peek, q.burst, f.clone())
                .map(Timed::untimed),
        };
        let own = answer(0, first);
        let others: Vec<Answer> = rest
            .iter()
            .enumerate()
            .map(|(i, r)| answer(i + 1, r))
            .collect();
        if let Ok(v) = &outcome {
            // Back from an outage: charge what the local share admitted
            // meanwhile, at most what Redis has left, so the refill Redis saw
            // during the outage is not admitted twice.
            for (k, key) in keys.iter().enumerate() {
                let Some(owed) = core.owed(key) else {
                    continue;
                };
                // What Redis has left after the key's last request.
                let Some(last) = (0..count)
                    .rev()
                    .find(|&i| index[i] == k + 1 && v[5 * i] != REFUSED_KEY)
                else {
                    continue;
                };
                let left = q.decision(&v[5 * last..5 * last + 5]).remaining;
                let charge = owed.min(left);
                if charge > 0 {
                    let mut inv = algorithm.script().prepare_invoke();
                    inv.key(core.full_key(key))
                        .arg(first.now)
                        .arg(q.emission_us)
                        .arg(q.burst)
                        .arg(charge)
                        .arg(0u8)
                        .arg(core.slack_ms);
                    // Best effort: a failure leaves the debt unpaid (the
                    // limit then errs by that much); the answers stand.
                    let _ = core.res.run(inv.invoke_async::<Vec<i64>>(&mut conn)).await;
                }
            }
        }
        (own, others)
    }
}

/// What a batch script answers as `allowed` for a request whose key Redis
/// refused.
const REFUSED_KEY: i64 = -1;

/// A batch script's answer: little-endian doubles, each an integer below
/// 2^53 (so exact); a length that is not a whole number of doubles yields
/// no values (then the caller's count check fails).
fn decode_doubles(bytes: &[u8]) -> Vec<i64> {
    if bytes.len() % 8 != 0 {
        return Vec::new();
    }
    bytes
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            f64::from_le_bytes(b) as i64
        })
        .collect()
}

impl<K: AsRef<[u8]> + ?Sized + Sync> AsyncKeyedLimiter<K> for RedisLimiter {
    type Error = Error;

    fn check(
        &self,
        key: &K,
        n: u64,
    ) -> impl Future<Output = Result<BackendDecision, Error>> + Send {
        self.decide(key.as_ref(), n, None, false, None)
    }

    fn peek(&self, key: &K, n: u64) -> impl Future<Output = Result<BackendDecision, Error>> + Send {
        self.decide(key.as_ref(), n, None, true, None)
    }
}
