//! Named limits ([`Policy`]) and the in-memory engine that checks a set of
//! them at once through the core's [`Hierarchy`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use ratewise::hierarchy::{Hierarchy, Level};
use ratewise::keyed::{KeyState, KeyedError, KeyedLimiter, NoClock};
use ratewise::limiter::Reservation;
use ratewise::striped::StripedCounter;
use ratewise::{CheckError, Decision, Gcra, Quota, RateLimiter, Timestamp};

use crate::interned;
use crate::key::{Key, KeyRef, Scope};
use crate::verdict::{PolicyNames, PolicyState, Verdict};

/// A named limit: its quota and whether each key gets its own.
///
/// ```
/// use std::time::Duration;
/// use ratewise::Quota;
/// use ratewise_tower::Policy;
///
/// let burst = Policy::per_key("burst", Quota::per(100, Duration::from_secs(10))?);
/// let daily = Policy::per_key("daily", Quota::per(10_000, Duration::from_secs(86_400))?);
/// let everyone = Policy::global("global", Quota::per_second(5_000)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Policy {
    pub(crate) name: Arc<str>,
    pub(crate) quota: Quota,
    pub(crate) store: Arc<dyn PolicyStore>,
    pub(crate) scope: Scope,
    pub(crate) shadow: bool,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("quota", &self.quota)
            .field("scope", &self.scope)
            .field("shadow", &self.shadow)
            .finish()
    }
}

/// Default cap on keys tracked per policy; see [`Policy::per_key_with`].
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

impl Policy {
    /// One GCRA per key, at most [`DEFAULT_MAX_KEYS`] keys.
    ///
    /// Keys are told apart by a 64-bit keyed hash (SipHash-1-3 under a
    /// random key per policy), which keeps each key's entry to one 64-byte
    /// cache line with nothing behind a pointer: 75 bytes per key in the
    /// table instead of 148 and a text key's allocation, and one cache
    /// line per check where a table kept by key touches three.
    /// Two keys with equal hashes would share one quota (never more than
    /// one key's quota between them); among a million keys the odds of any
    /// such pair are about 3 in 10⁸. [`Policy::per_key_with`] keeps the
    /// keys themselves.
    pub fn per_key(name: impl Into<Arc<str>>, quota: Quota) -> Self {
        Policy {
            name: name.into(),
            quota,
            // Why a hash: kept by key, an entry holds a `Key` (24 bytes)
            // beside the 48-byte GCRA state, so it takes two cache lines
            // (128 bytes with its alignment) and a text key sits in its own
            // allocation: a check past the processor's caches touches
            // three lines. Kept by hash, it is one line, and with many keys
            // under load those misses are most of a check's cost.
            store: Arc::new(KeyedStore {
                limiter: KeyedLimiter::<u64>::builder(quota)
                    .max_keys(DEFAULT_MAX_KEYS)
                    // Four shards per CPU, not the core's 64: behind a
                    // server a check is a small part of each request, so
                    // two threads rarely want one shard at once, while the
                    // HTTP stack between checks evicts the locks of a
                    // large shard array from the caches (one more miss
                    // per request, measured with `perf` under `wrk`).
                    .shards(4 * std::thread::available_parallelism().map_or(4, usize::from))
                    .clock(NoClock)
                    .hasher(AlreadyHashed)
                    .build(),
                key_of: std::collections::hash_map::RandomState::new(),
            }),
            scope: Scope::PerKey,
            shadow: false,
        }
    }

    /// One limiter per key, from a keyed limiter you built: any algorithm
    /// (`.limiter(TokenBucket::new)`), your key cap, your shard count. Its
    /// clock is not read (the layer tells it the time). It is kept by the
    /// keys themselves (no hashing, see [`Policy::per_key`]).
    pub fn per_key_with<L, C>(
        name: impl Into<Arc<str>>,
        quota: Quota,
        limiter: KeyedLimiter<Key, L, C>,
    ) -> Self
    where
        L: KeyState + 'static,
        C: ratewise::Clock + 'static,
        KeyedLimiter<Key, L, C>: Send + Sync,
    {
        Policy {
            name: name.into(),
            quota,
            store: Arc::new(KeyedStore {
                limiter,
                key_of: ByKey,
            }),
            scope: Scope::PerKey,
            shadow: false,
        }
    }

    /// One GCRA for every request, whatever its key.
    pub fn global(name: impl Into<Arc<str>>, quota: Quota) -> Self {
        Self::global_with(name, quota, Gcra::with_clock(quota, NoClock))
    }

    /// One limiter of any algorithm for every request.
    pub fn global_with(
        name: impl Into<Arc<str>>,
        quota: Quota,
        limiter: impl RateLimiter + 'static,
    ) -> Self {
        Policy {
            name: name.into(),
            quota,
            store: Arc::new(GlobalStore(limiter)),
            scope: Scope::Global,
            shadow: false,
        }
    }

    /// Dark-launches this policy: it is evaluated for every request the
    /// other policies of its set admit, and its would-be refusals are
    /// counted (`shadow_refused`), but it never refuses, is not advertised
    /// in the headers, and is charged only when it would have admitted —
    /// so its state is what enforcing it would have produced.
    pub fn shadow(mut self) -> Self {
        self.shadow = true;
        self
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the policy is [dark-launched](Policy::shadow).
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }
}

/// What the engine needs of a policy's limiter.
pub(crate) trait PolicyStore: Send + Sync {
    fn check_at(&self, key: KeyRef<'_>, n: u64, now: Timestamp) -> Result<Decision, CheckError>;
    fn peek_at(&self, key: KeyRef<'_>, n: u64, now: Timestamp) -> Result<Decision, CheckError>;
    fn reserve_now(
        &self,
        key: KeyRef<'_>,
        n: u64,
        now: Timestamp,
    ) -> Result<Reservation, KeyedError>;
    fn cancel_at(&self, key: KeyRef<'_>, r: Reservation, now: Timestamp);
    fn set_quota_at(&self, quota: Quota, now: Timestamp);
    fn keys(&self) -> usize;
}

/// A keyed limiter and how it knows a request's key: by the key itself
/// ([`Policy::per_key_with`]) or by a keyed hash of it ([`Policy::per_key`]).
struct KeyedStore<K, L, C, M, S = ratewise::keyed::DefaultHashBuilder> {
    limiter: KeyedLimiter<K, L, C, S>,
    key_of: M,
}

/// The table hasher of a store kept by hash: its keys are already SipHash
/// outputs under a secret key, uniform and out of a client's reach, so each
/// is its own hash (hashing it again would only repeat the work).
#[derive(Clone, Copy, Debug, Default)]
struct AlreadyHashed;

impl std::hash::BuildHasher for AlreadyHashed {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

/// [`AlreadyHashed`]'s hasher: a `u64` key is the hash.
struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    // Only `u64` keys are hashed with it; any other input still hashes
    // (folded in byte by byte), just not for free.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}

/// How a [`KeyedStore`] turns a request's key into its table's key.
trait KeyOf<K>: Send + Sync {
    fn key_of(&self, key: KeyRef<'_>) -> K;
}

/// Kept by the key itself: made here, once per request.
struct ByKey;

impl KeyOf<Key> for ByKey {
    fn key_of(&self, key: KeyRef<'_>) -> Key {
        key.to_key()
    }
}

/// Kept by a 64-bit SipHash-1-3 of the key under a random 128-bit key:
/// see [`Policy::per_key`] for why, and what a collision would cost.
impl KeyOf<u64> for std::collections::hash_map::RandomState {
    fn key_of(&self, key: KeyRef<'_>) -> u64 {
        std::hash::BuildHasher::hash_one(self, key)
    }
}

impl<K, L, C, M, S> PolicyStore for KeyedStore<K, L, C, M, S>
where
    K: std::hash::Hash + Eq + Clone,
    L: KeyState,
    C: ratewise::Clock,
    M: KeyOf<K>,
    S: std::hash::BuildHasher + Clone,
    KeyedLimiter<K, L, C, S>: Send + Sync,
{
    fn check_at(&self, key: KeyRef<'_>, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        keyed_check(&self.limiter, &self.key_of.key_of(key), n, now)
    }
    fn peek_at(&self, key: KeyRef<'_>, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.limiter.peek_at(&self.key_of.key_of(key), n, now)
    }
    fn reserve_now(
        &self,
        key: KeyRef<'_>,
        n: u64,
        now: Timestamp,
    ) -> Result<Reservation, KeyedError> {
        self.limiter
            .reserve_within_at(&self.key_of.key_of(key), n, now, Duration::ZERO)
    }
    fn cancel_at(&self, key: KeyRef<'_>, r: Reservation, now: Timestamp) {
        let _ = self.limiter.cancel_at(&self.key_of.key_of(key), r, now);
    }
    fn set_quota_at(&self, quota: Quota, _now: Timestamp) {
        self.limiter.set_default_quota(quota);
    }
    fn keys(&self) -> usize {
        self.limiter.len()
    }
}

/// A keyed check as the engine wants it: a full key table is a refusal
/// with its wait, not an error.
fn keyed_check<K, L, C, S>(
    limiter: &KeyedLimiter<K, L, C, S>,
    key: &K,
    n: u64,
    now: Timestamp,
) -> Result<Decision, CheckError>
where
    K: std::hash::Hash + Eq + Clone,
    L: KeyState,
    C: ratewise::Clock,
    S: std::hash::BuildHasher + Clone,
{
    match limiter.check_at(key, n, now) {
        Ok(d) => Ok(d),
        Err(KeyedError::Check(e)) => Err(e),
        // The key table is full of keys still in use (the new key waits
        // until one frees up; a partly used key is never evicted), or any
        // other refusal the keyed limiter reports.
        Err(e) => {
            let wait = match e {
                KeyedError::Full { retry_after, .. } => retry_after,
                KeyedError::WouldWaitTooLong { wait, .. } => wait,
                _ => Duration::from_secs(1),
            };
            Ok(Decision {
                allowed: false,
                limit: limiter.default_quota().burst(),
                remaining: 0,
                reset_after: wait,
                retry_after: Some(wait),
                delay: Duration::ZERO,
            })
        }
    }
}

struct GlobalStore<L>(L);

impl<L: RateLimiter> PolicyStore for GlobalStore<L> {
    fn check_at(&self, _key: KeyRef<'_>, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.0.check_at(n, now)
    }
    fn peek_at(&self, _key: KeyRef<'_>, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.0.peek_at(n, now)
    }
    fn reserve_now(
        &self,
        _key: KeyRef<'_>,
        n: u64,
        now: Timestamp,
    ) -> Result<Reservation, KeyedError> {
        Ok(self.0.reserve_within_at(n, now, Duration::ZERO)?)
    }
    fn cancel_at(&self, _key: KeyRef<'_>, r: Reservation, now: Timestamp) {
        let _ = self.0.cancel_at(r, now);
    }
    fn set_quota_at(&self, quota: Quota, now: Timestamp) {
        self.0.set_quota_at(quota, now);
    }
    fn keys(&self) -> usize {
        1
    }
}

/// A policy's store as a hierarchy level (the hierarchy owns levels; the
/// engine keeps a second handle for peeks, quota changes and key counts).
struct SharedLevel(Arc<dyn PolicyStore>);

impl Level<Key> for SharedLevel {
    fn peek_at(&self, req: &Key, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.0.peek_at(req.as_key_ref(), n, now)
    }
    fn reserve_now(&self, req: &Key, n: u64, now: Timestamp) -> Result<Reservation, KeyedError> {
        self.0.reserve_now(req.as_key_ref(), n, now)
    }
    fn cancel_at(&self, req: &Key, reservation: Reservation, now: Timestamp) {
        self.0.cancel_at(req.as_key_ref(), reservation, now)
    }
}

/// Per-policy counters and metric handles.
pub(crate) struct PolicyRuntime {
    pub(crate) name: Arc<str>,
    pub(crate) scope: Scope,
    pub(crate) quota: RwLock<Quota>,
    pub(crate) store: Option<Arc<dyn PolicyStore>>,
    pub(crate) admitted: StripedCounter,
    pub(crate) refused: StripedCounter,
    pub(crate) shadow_refused: StripedCounter,
    pub(crate) metrics: crate::observe::PolicyMetrics,
}

impl PolicyRuntime {
    pub(crate) fn new(
        name: Arc<str>,
        scope: Scope,
        quota: Quota,
        store: Option<Arc<dyn PolicyStore>>,
    ) -> Self {
        PolicyRuntime {
            metrics: crate::observe::PolicyMetrics::new(&name),
            name,
            scope,
            quota: RwLock::new(quota),
            store,
            // A stripe per core: admissions, and under a flood refusals
            // (or shadow refusals), are counted on every request, and a
            // stripe shared by two busy cores is a line they take turns at.
            admitted: StripedCounter::new(),
            refused: StripedCounter::new(),
            shadow_refused: StripedCounter::new(),
        }
    }

    pub(crate) fn quota(&self) -> Quota {
        *self.quota.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A set's `RateLimit-Policy` value: interned while the interning bounds
/// allow ([`crate::interned`]), else held behind a lock.
struct PolicyHeader {
    /// The value's interned slot, or [`NO_SLOT`].
    slot: AtomicUsize,
    /// The value itself, always current; read only when `slot` is
    /// [`NO_SLOT`].
    fallback: RwLock<HeaderValue>,
}

/// No interned slot: read the fallback.
const NO_SLOT: usize = usize::MAX;

/// The policies one request is checked against, with the `RateLimit-Policy`
/// value they always produce.
pub(crate) struct PolicySet {
    pub(crate) name: Arc<str>,
    /// The enforced policies, in checking order (a verdict's indexes).
    pub(crate) policies: Vec<Arc<PolicyRuntime>>,
    /// Dark-launched policies: evaluated after an admission, never refuse.
    pub(crate) shadows: Vec<Arc<PolicyRuntime>>,
    /// `None` for sets decided by an asynchronous backend.
    hierarchy: Option<Hierarchy<Key>>,
    policy_header: PolicyHeader,
    /// The refusal body when policy `i` alone refused, rendered once
    /// (interned: see [`crate::interned`]).
    refusal_bodies: Vec<Bytes>,
}

impl PolicyNames for PolicySet {
    #[inline]
    fn policy_header(&self) -> HeaderValue {
        PolicySet::policy_header(self)
    }

    #[inline]
    fn policy_name(&self, index: u8) -> &str {
        self.policies
            .get(usize::from(index))
            .map_or("", |p| &p.name)
    }
}

impl PolicySet {
    /// A set of in-memory policies.
    pub(crate) fn memory(name: Arc<str>, policies: Vec<Policy>) -> Self {
        let mut hierarchy = Hierarchy::new();
        let mut runtimes = Vec::with_capacity(policies.len());
        let mut shadows = Vec::new();
        for p in policies {
            if !p.shadow {
                hierarchy = hierarchy.level(p.name.clone(), SharedLevel(p.store.clone()));
            }
            let runtime = Arc::new(PolicyRuntime::new(p.name, p.scope, p.quota, Some(p.store)));
            if p.shadow {
                shadows.push(runtime);
            } else {
                runtimes.push(runtime);
            }
        }
        let mut set = Self::with(name, runtimes, Some(hierarchy));
        set.shadows = shadows;
        set
    }

    /// A set whose one policy is decided elsewhere (an async backend).
    pub(crate) fn remote(name: Arc<str>, policy: Arc<PolicyRuntime>) -> Self {
        Self::with(name, vec![policy], None)
    }

    fn with(
        name: Arc<str>,
        policies: Vec<Arc<PolicyRuntime>>,
        hierarchy: Option<Hierarchy<Key>>,
    ) -> Self {
        let refusal_bodies = policies
            .iter()
            .map(|p| {
                let body = crate::problem::quota_exceeded_body(&[&p.name]);
                interned::intern_bytes(&body).unwrap_or(body)
            })
            .collect();
        let set = PolicySet {
            name,
            policies,
            shadows: Vec::new(),
            hierarchy,
            policy_header: PolicyHeader {
                slot: AtomicUsize::new(NO_SLOT),
                fallback: RwLock::new(HeaderValue::from_static("")),
            },
            refusal_bodies,
        };
        set.refresh_policy_header();
        set
    }

    /// Re-renders `RateLimit-Policy` after a quota change.
    pub(crate) fn refresh_policy_header(&self) {
        // Held while rendering: refreshes after concurrent quota changes
        // publish in the order they read the quotas.
        let mut fallback = self
            .policy_header
            .fallback
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut buf = ratewise::response_headers::HeaderBuf::<4096>::new();
        for p in &self.policies {
            let q = p.quota();
            // Names are validated when the layer is built.
            let _ = buf.push_policy(&ratewise::response_headers::PolicyInfo::from_quota(
                &p.name, &q,
            ));
        }
        *fallback = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(buf.as_bytes()))
            .unwrap_or_else(|_| HeaderValue::from_static(""));
        let slot = interned::intern_header(buf.as_bytes()).unwrap_or(NO_SLOT);
        self.policy_header.slot.store(slot, Ordering::Release);
    }

    /// `RateLimit-Policy`: the interned value (no allocation, no atomic
    /// read-modify-write), or past the interning bounds a reference-counted
    /// copy.
    #[inline]
    pub(crate) fn policy_header(&self) -> HeaderValue {
        let slot = self.policy_header.slot.load(Ordering::Acquire);
        interned::header(slot).unwrap_or_else(|| {
            self.policy_header
                .fallback
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    /// The names of the policies that refused `v`.
    pub(crate) fn violated<'a>(&'a self, v: &'a Verdict) -> impl Iterator<Item = &'a str> {
        v.states()
            .iter()
            .filter(|s| s.violated)
            .filter_map(|s| self.policies.get(usize::from(s.index)))
            .map(|p| &*p.name)
    }

    /// The problem body refusing `v`: a clone of the one rendered for its
    /// policy when one policy refused (no allocation), else rendered now.
    pub(crate) fn refusal_body(&self, v: &Verdict) -> Bytes {
        let mut violated = v.states().iter().filter(|s| s.violated);
        if let (Some(only), None) = (violated.next(), violated.next()) {
            if let Some(body) = self.refusal_bodies.get(usize::from(only.index)) {
                return body.clone();
            }
        }
        crate::problem::quota_exceeded_body(&self.violated(v).collect::<Vec<_>>())
    }

    /// Every policy of the set, enforced then shadow.
    pub(crate) fn all_policies(&self) -> impl Iterator<Item = &Arc<PolicyRuntime>> {
        self.policies.iter().chain(&self.shadows)
    }

    /// Decides `key` with weight `n` at `now`, in memory, into `v` (which
    /// must be [`Verdict::empty`]); then, if admitted, evaluates the shadow
    /// policies (bit `i` of `shadow_refused` set when shadow policy `i`
    /// would have refused).
    ///
    /// The caller owns the verdict and this fills it in place: a verdict
    /// holds room for every policy of a set, so returning it by value
    /// copied several hundred bytes per request, twice.
    pub(crate) fn decide(
        &self,
        key: KeyRef<'_>,
        n: u64,
        now: Timestamp,
        v: &mut Verdict,
    ) -> Result<(), Refusal> {
        self.decide_enforced(key, n, now, v)?;
        if v.allowed {
            for (i, p) in self.shadows.iter().enumerate() {
                let Some(store) = &p.store else { continue };
                // A shadow policy that can never take this request counts
                // as a would-be refusal too.
                if !store.check_at(key, n, now).is_ok_and(|d| d.allowed) {
                    v.shadow_refused |= 1 << i;
                }
            }
        }
        Ok(())
    }

    fn decide_enforced(
        &self,
        key: KeyRef<'_>,
        n: u64,
        now: Timestamp,
        v: &mut Verdict,
    ) -> Result<(), Refusal> {
        let Some(h) = &self.hierarchy else {
            return Err(Refusal::NotInMemory);
        };
        if self.policies.is_empty() {
            return Ok(());
        }
        if let [only] = self.policies.as_slice() {
            // One policy: one check, its decision is the whole evidence.
            let store = only.store.as_ref().ok_or(Refusal::NotInMemory)?;
            let d = store
                .check_at(key, n, now)
                .map_err(|e| Refusal::Invalid(0, e))?;
            v.allowed = d.allowed;
            v.push(PolicyState::from_decision(0, &d, !d.allowed));
            v.retry_after = d.retry_after.filter(|_| !d.allowed);
            return Ok(());
        }
        // Several policies: the hierarchy keeps the key while it reserves
        // at each level.
        let hd = h
            .check_at(&key.to_key(), n, now)
            .map_err(|e| Refusal::Invalid(e.index, e.source))?;
        v.allowed = hd.allowed;
        v.retry_after = hd.retry_after.filter(|_| !hd.allowed);
        for (i, p) in self.policies.iter().enumerate() {
            let Some(store) = &p.store else { continue };
            // Each level's state after the decision (a look, no write).
            let d = store
                .peek_at(key, n, now)
                .map_err(|e| Refusal::Invalid(i, e))?;
            let violated = !hd.allowed && (!d.allowed || hd.refused_level == Some(i));
            let d = if hd.allowed {
                Decision {
                    allowed: true,
                    retry_after: None,
                    ..d
                }
            } else {
                d
            };
            v.push(PolicyState::from_decision(i, &d, violated));
        }
        Ok(())
    }
}

/// Why the engine gave no verdict.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Policy `i` can never admit this request (e.g. its cost exceeds the
    /// burst).
    Invalid(usize, CheckError),
    /// The set is decided by an async backend.
    NotInMemory,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn hashed_keys_keep_each_key_to_its_own_quota() {
        let policy = Policy::per_key("k", Quota::per_second(2).unwrap());
        let store = &policy.store;
        let keys = [
            Key::text("alice"),
            Key::text("bob"),
            Key::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            Key::Number(7),
            // Same characters as a text key, another kind of key.
            Key::text("7"),
            Key::Global,
            Key::Anonymous,
        ];
        for key in &keys {
            for _ in 0..2 {
                assert!(
                    store.check_at(key.as_key_ref(), 1, at(0)).unwrap().allowed,
                    "{key}"
                );
            }
            let third = store.check_at(key.as_key_ref(), 1, at(0)).unwrap();
            assert!(!third.allowed, "{key}: its own quota, spent");
            assert_eq!(third.retry_after, Some(Duration::from_millis(500)));
        }
        assert_eq!(store.keys(), keys.len());
        // A peek agrees with the checks, and a reservation is kept by the
        // same key.
        assert!(
            !store
                .peek_at(keys[0].as_key_ref(), 1, at(0))
                .unwrap()
                .allowed
        );
        assert!(
            store
                .peek_at(keys[0].as_key_ref(), 1, at(500))
                .unwrap()
                .allowed
        );
        let r = store.reserve_now(keys[0].as_key_ref(), 1, at(500)).unwrap();
        assert!(
            !store
                .check_at(keys[0].as_key_ref(), 1, at(500))
                .unwrap()
                .allowed
        );
        store.cancel_at(keys[0].as_key_ref(), r, at(500));
        assert!(
            store
                .check_at(keys[0].as_key_ref(), 1, at(500))
                .unwrap()
                .allowed
        );
    }

    /// `RateLimit-Policy` follows a quota change, interned or not.
    #[test]
    fn the_policy_header_is_current_on_both_paths() {
        for interning in [true, false] {
            crate::interned::tests::OFF.with(|off| off.set(!interning));
            let set = PolicySet::memory(
                "default".into(),
                vec![Policy::per_key("burst", Quota::per_second(7).unwrap())],
            );
            let interned = set.policy_header.slot.load(Ordering::Relaxed) != NO_SLOT;
            assert_eq!(interned, interning);
            assert_eq!(set.policy_header().as_bytes(), b"\"burst\";q=7;w=1");
            *set.policies[0].quota.write().unwrap() = Quota::per_second(9).unwrap();
            set.refresh_policy_header();
            assert_eq!(set.policy_header().as_bytes(), b"\"burst\";q=9;w=1");
            // The refusal body is the same either way.
            let mut v = Verdict::empty();
            v.allowed = false;
            v.push(PolicyState {
                violated: true,
                ..PolicyState::default()
            });
            let body: serde_json::Value = serde_json::from_slice(&set.refusal_body(&v)).unwrap();
            assert_eq!(body["violated-policies"][0], "burst");
        }
        crate::interned::tests::OFF.with(|off| off.set(false));
    }

    /// Readers on other threads see one whole value or the other while the
    /// quota flips, never a torn or empty one.
    #[test]
    fn the_policy_header_is_whole_while_quotas_change() {
        let set = PolicySet::memory(
            "default".into(),
            vec![Policy::per_key("burst", Quota::per_second(7).unwrap())],
        );
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        let mut reads = 0u64;
                        while !done.load(Ordering::Relaxed) || reads == 0 {
                            let v = set.policy_header();
                            assert!(
                                v == "\"burst\";q=7;w=1" || v == "\"burst\";q=9;w=1",
                                "{v:?}"
                            );
                            reads += 1;
                        }
                        reads
                    })
                })
                .collect();
            for i in 0..2_000 {
                let q = if i % 2 == 0 { 9 } else { 7 };
                *set.policies[0].quota.write().unwrap() = Quota::per_second(q).unwrap();
                set.refresh_policy_header();
            }
            done.store(true, Ordering::Relaxed);
            for r in readers {
                assert!(r.join().unwrap() > 0);
            }
        });
        assert_eq!(set.policy_header(), "\"burst\";q=7;w=1");
    }

    #[test]
    fn a_hashed_entry_is_one_cache_line() {
        // The reason `Policy::per_key` hashes its keys (see its body).
        assert!(KeyedLimiter::<u64>::estimated_bytes_per_key() <= 80);
        assert!(KeyedLimiter::<Key>::estimated_bytes_per_key() >= 128);
    }
}
