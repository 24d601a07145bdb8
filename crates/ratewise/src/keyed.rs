//! [`KeyedLimiter`]: one limiter per key (user, API key, IP address), with
//! memory that an attacker cannot exhaust.
//!
//! * **Sharded.** Keys are hashed once (foldhash, seeded at random per limiter,
//!   [`DefaultHashBuilder`]; pass `RandomState` to [`KeyedBuilder::hasher`] for
//!   SipHash) onto many small shards ([`DEFAULT_SHARDS_PER_CPU`] per CPU), each
//!   a hash table behind its own spin-then-yield lock.
//! * **A hard cap.** At most `max_keys` keys; [`KeyedLimiter::max_table_bytes`]
//!   bounds the memory, [`KeyedBuilder::preallocate`] allocates it up front.
//! * **Only rested keys are evicted**: a key back at full capacity, so a
//!   re-created key gets exactly what a never-forgotten one would. Inserts
//!   sweep a few entries ([`SWEEP_PER_INSERT`], [`SCAN_WHEN_FULL`]);
//!   [`KeyedLimiter::maintain`] sweeps on demand. No operation walks a shard.
//! * **Full means "no".** A new key with no room is refused
//!   ([`KeyedError::Full`]); [`KeyedBuilder::lenient_eviction`] instead
//!   forgives at most a set debt of one key per eviction.
//! * **Quotas** per key override the default ([`KeyedLimiter::set_key_quota_at`],
//!   kept apart from the table, so they survive eviction).
//! * **Per-key state** is any [`KeyState`]; every [`RateLimiter`] built on
//!   [`NoClock`] is one. The default [`GcraState`] answers exactly as
//!   [`Gcra`](crate::Gcra) in 48 bytes of plain fields.
//!
//! ```
//! use ratewise::keyed::KeyedLimiter;
//! use ratewise::{Quota, Timestamp};
//!
//! let per_user = KeyedLimiter::<u64>::builder(Quota::per_second(2)?)
//!     .max_keys(1000)
//!     .build();
//! let t0 = Timestamp::ZERO;
//! assert!(per_user.check_at(&7, 2, t0)?.is_allowed());
//! assert!(!per_user.check_at(&7, 1, t0)?.is_allowed()); // user 7 is out
//! assert!(per_user.check_at(&8, 1, t0)?.is_allowed()); // user 8 is not
//!
//! per_user.set_key_quota_at(&9, Quota::per_second(100)?, t0); // a premium user
//! assert_eq!(per_user.check_at(&9, 1, t0)?.limit, 100);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

use crate::algorithms::gcra::math;
use crate::algorithms::gcra::QuotaCell;
use crate::decision::Decision;
use crate::error::{CheckError, ReserveError};
use crate::limiter::{validate_weight, RateLimiter, Reservation};
use crate::quota::Quota;
use crate::sync::{ShardGuard, ShardLock};
use crate::time::{Clock, MonotonicClock, Timestamp};

/// The default hasher of a [`KeyedLimiter`]: `foldhash`'s fast hasher,
/// seeded at random per limiter (see the [module docs](self) for why).
pub type DefaultHashBuilder = foldhash::fast::RandomState;

/// Entries examined (and dropped if rested) before each insert of a new
/// key into a shard at least half full: the amortised, bounded work of
/// time-based expiry.
pub const SWEEP_PER_INSERT: usize = 2;

/// Further entries examined to make room when a shard is full, before the
/// new key is refused with [`KeyedError::Full`].
pub const SCAN_WHEN_FULL: usize = 32;

/// Shards per CPU in a [`KeyedLimiter`] built without
/// [`KeyedBuilder::shards`]. Shards are many and small because two threads
/// wanting one shard at once is what costs, not the number of locks.
pub const DEFAULT_SHARDS_PER_CPU: usize = 64;

/// The default shard count is lowered until each shard holds at least this
/// many keys, so that shards fill evenly: one shard full while the table
/// as a whole has room refuses new keys early.
pub const MIN_KEYS_PER_SHARD: usize = 256;

/// How many of a shard's hash-table buckets a sweep may walk per entry of
/// its budget (buckets can be empty; this bounds the walk over them).
const SWEEP_BUCKETS_PER_ENTRY: usize = 16;

/// A clock for limiters that are only ever told the time (`*_at` methods):
/// it takes no space and always reads [`Timestamp::ZERO`]. The per-key
/// limiters of a [`KeyedLimiter`] use it, since the keyed limiter hands them
/// `now` itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoClock;

impl Clock for NoClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp::ZERO
    }
}

/// Why a keyed operation did not produce an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyedError {
    /// The request itself is invalid for this key's quota.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// A reservation would have had to wait longer than allowed; nothing
    /// was reserved.
    #[error("the reservation would have to wait {wait:?}, more than the allowed {max_wait:?}")]
    WouldWaitTooLong {
        /// How long the caller would have had to wait.
        wait: Duration,
        /// The most the caller was prepared to wait.
        max_wait: Duration,
    },
    /// The key is not tracked yet and its shard is full of keys that are
    /// still recovering, so it could not be added. Nothing was recorded.
    #[error("the keyed limiter is full ({max_keys} keys, none of those examined is idle); retry after about {retry_after:?} or raise max_keys")]
    Full {
        /// The configured key cap.
        max_keys: usize,
        /// An estimate of when a slot frees up: the soonest time one of the
        /// examined keys is back at full capacity.
        retry_after: Duration,
    },
}

impl From<ReserveError> for KeyedError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::Invalid(c) => KeyedError::Check(c),
            ReserveError::WouldWaitTooLong { wait, max_wait } => {
                KeyedError::WouldWaitTooLong { wait, max_wait }
            }
        }
    }
}

/// The state kept for one key: what a [`KeyedLimiter`] needs from a per-key
/// limiter. Methods take `&mut self` because the keyed limiter only touches
/// a key's state under its shard's lock.
///
/// Every [`RateLimiter`] implements it; [`GcraState`] is an atomics-free
/// GCRA for the common case.
pub trait KeyState: Send {
    /// The current quota.
    fn quota(&self) -> Quota;
    /// Replaces the quota; see [`RateLimiter::set_quota_at`].
    fn set_quota_at(&mut self, quota: Quota, now: Timestamp);
    /// See [`RateLimiter::check_at`].
    ///
    /// # Errors
    /// As [`RateLimiter::check_at`].
    fn check_at(&mut self, n: u64, now: Timestamp) -> Result<Decision, CheckError>;
    /// See [`RateLimiter::peek_at`].
    ///
    /// # Errors
    /// As [`RateLimiter::peek_at`].
    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError>;
    /// See [`RateLimiter::reserve_within_at`].
    ///
    /// # Errors
    /// As [`RateLimiter::reserve_within_at`].
    fn reserve_within_at(
        &mut self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError>;
    /// See [`RateLimiter::cancel_at`].
    fn cancel_at(&mut self, reservation: Reservation, now: Timestamp) -> u64;
    /// When the limiter will be back at full capacity, judged at `now`
    /// (`now` itself if it is already; [`Timestamp::MAX`] if never). The
    /// keyed limiter evicts a key only when this is at most `now`.
    ///
    /// The default asks [`KeyState::peek_at`]; a state that can answer
    /// more cheaply should, since eviction sweeps call this for every key
    /// they examine.
    fn full_at(&self, now: Timestamp) -> Timestamp {
        match self.peek_at(1, now) {
            Ok(d) => now.saturating_add(d.reset_after),
            // Cannot happen (burst >= 1); be conservative: never rested.
            Err(_) => Timestamp::MAX,
        }
    }
}

impl<L: RateLimiter> KeyState for L {
    fn quota(&self) -> Quota {
        RateLimiter::quota(self)
    }
    fn set_quota_at(&mut self, quota: Quota, now: Timestamp) {
        RateLimiter::set_quota_at(self, quota, now)
    }
    #[inline]
    fn check_at(&mut self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        RateLimiter::check_at(self, n, now)
    }
    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        RateLimiter::peek_at(self, n, now)
    }
    fn reserve_within_at(
        &mut self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError> {
        RateLimiter::reserve_within_at(self, n, now, max_wait)
    }
    fn cancel_at(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        RateLimiter::cancel_at(self, reservation, now)
    }
}

/// GCRA as plain fields, for use under a lock: the default per-key state of
/// a [`KeyedLimiter`]. It answers exactly as [`Gcra`](crate::Gcra) does for
/// the same calls (see that type for the algorithm); it is not shareable on
/// its own (`&mut self`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraState {
    /// Theoretical arrival time, nanoseconds after `origin`: when the
    /// limiter is full.
    tat: u64,
    /// The act time of the latest reservation, for cancellation (as in
    /// [`Gcra`](crate::Gcra)); absolute.
    last_act: u64,
    /// The origin of `tat`, moved up as time passes (as in `Gcra`).
    origin: u64,
    quota: Quota,
}

impl GcraState {
    /// A state at full capacity.
    pub fn new(quota: Quota) -> Self {
        GcraState {
            tat: 0,
            last_act: 0,
            origin: 0,
            quota,
        }
    }

    /// `now` relative to the origin, moving the origin first when `now` is
    /// too far past it; `Err(origin)` when `now` is before the origin. The
    /// one rule `Gcra` follows too ([`math::Frame::place`]).
    #[inline(always)]
    fn relative(&mut self, now: Timestamp) -> Result<u64, u64> {
        let frame = math::Frame {
            origin: self.origin,
            tat: self.tat,
        };
        let (frame, rel) = frame.place(now.as_nanos());
        (self.origin, self.tat) = (frame.origin, frame.tat);
        rel
    }
}

/// Every method is `Gcra`'s arithmetic (`gcra::math`) committed to plain
/// fields instead of through a CAS.
impl KeyState for GcraState {
    fn quota(&self) -> Quota {
        self.quota
    }

    fn set_quota_at(&mut self, quota: Quota, now: Timestamp) {
        let now = self.relative(now).unwrap_or(0);
        self.tat = math::convert(self.tat, now, self.quota, quota);
        self.quota = quota;
    }

    #[inline]
    fn check_at(&mut self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        let now = match self.relative(now) {
            Ok(rel) => rel,
            Err(origin) => {
                let d = self.check_at(n, Timestamp::from_nanos(origin))?;
                return Ok(math::later(d, origin - now.as_nanos()));
            }
        };
        validate_weight(n, self.quota.burst())?;
        match math::admit(self.tat, now, n, self.quota) {
            math::Admission::Admit { new_tat } => {
                self.tat = new_tat;
                Ok(math::decision(true, self.quota, now, new_tat, None))
            }
            math::Admission::Deny { base, retry } => {
                Ok(math::Admission::denial(base, retry, self.quota, now))
            }
        }
    }

    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        // A copy, so that moving the origin changes nothing here.
        let mut state = *self;
        let now = match state.relative(now) {
            Ok(rel) => rel,
            Err(origin) => {
                let d = state.peek_at(n, Timestamp::from_nanos(origin))?;
                return Ok(math::later(d, origin - now.as_nanos()));
            }
        };
        validate_weight(n, state.quota.burst())?;
        Ok(math::peek(state.tat, now, n, state.quota))
    }

    fn reserve_within_at(
        &mut self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError> {
        let now_ns = match self.relative(now) {
            Ok(rel) => rel,
            Err(origin) => {
                // Decided at the origin, as a check would be.
                return self.reserve_within_at(n, Timestamp::from_nanos(origin), max_wait);
            }
        };
        validate_weight(n, self.quota.burst())?;
        let (new_tat, act, cost) = math::reserve(self.tat, now_ns, n, self.quota, max_wait)?;
        let act = self.origin.saturating_add(act);
        self.tat = new_tat;
        self.last_act = self.last_act.max(act);
        Ok(Reservation::new(
            n,
            now,
            Timestamp::from_nanos(act),
            act,
            cost,
        ))
    }

    fn cancel_at(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        // As `Gcra`: an act time pinned at the end of the timeline gives
        // nothing back.
        if now > reservation.act_at() || reservation.act_at() == Timestamp::MAX {
            return 0;
        }
        let now = match self.relative(now) {
            Ok(rel) => rel,
            Err(origin) => return self.cancel_at(reservation, Timestamp::from_nanos(origin)),
        };
        let tat = self.tat;
        let Some(new_tat) = math::cancel(
            tat,
            now,
            reservation.act_at().as_nanos(),
            reservation.cost(),
            reservation.weight(),
            self.quota,
            self.last_act,
        ) else {
            return 0;
        };
        self.tat = new_tat;
        (tat - new_tat) / self.quota.emission_nanos()
    }

    #[inline]
    fn full_at(&self, now: Timestamp) -> Timestamp {
        // Full capacity is reached when the theoretical arrival time is
        // not in the future.
        now.max(Timestamp::from_nanos(self.origin.saturating_add(self.tat)))
    }
}

type PaddedShard<K, L> = CachePadded<ShardLock<Shard<K, L>>>;

type Factory<L> = Box<dyn Fn(Quota) -> L + Send + Sync>;

/// One tracked key, stored inline in its shard's hash table so that a check
/// reads the key and its state from one place.
///
/// Aligned to a cache line: an entry never straddles two lines, and two
/// entries never share one, so a check touches one line of the table's
/// data and two threads checking neighbouring keys do not invalidate each
/// other's copies (with `u64` keys and [`GcraState`] an entry is 56 bytes,
/// and without the alignment most entries would straddle two lines).
#[repr(align(64))]
struct Entry<K, L> {
    key: K,
    limiter: L,
    /// The quota generation this entry's quota was resolved in.
    generation: u32,
}

/// What one sweep did.
struct Swept {
    dropped: usize,
    /// The soonest time an examined, kept entry will be rested.
    soonest: Timestamp,
    /// The bucket of that entry.
    soonest_bucket: Option<usize>,
}

struct Shard<K, L> {
    table: HashTable<Entry<K, L>>,
    /// Next bucket index the sweep examines.
    cursor: usize,
}

/// A rate limiter per key. See the [module docs](self).
///
/// `K` is the key, `L` the per-key state (any [`KeyState`]: [`GcraState`]
/// by default, or any [`RateLimiter`]), `C` the
/// clock used by the convenience methods without `_at`, `S` the hasher.
pub struct KeyedLimiter<K, L = GcraState, C = MonotonicClock, S = DefaultHashBuilder> {
    shards: Box<[PaddedShard<K, L>]>,
    shard_mask: usize,
    per_shard_cap: usize,
    hasher: S,
    factory: Factory<L>,
    default_quota: QuotaCell,
    generation: AtomicU64,
    overrides: RwLock<HashMap<K, Quota, S>>,
    has_overrides: AtomicBool,
    evictions: AtomicU64,
    refusals: AtomicU64,
    lenient_evictions: AtomicU64,
    /// `Some(d)`: lenient eviction, forgiving at most `d` of a key's debt.
    leniency: Option<Duration>,
    clock: C,
}

/// Configures a [`KeyedLimiter`]; from [`KeyedLimiter::builder`].
pub struct KeyedBuilder<K, L, C, S> {
    key: std::marker::PhantomData<fn() -> K>,
    settings: Settings,
    factory: Factory<L>,
    clock: C,
    hasher: S,
}

/// The builder's settings that do not depend on its type parameters, so
/// that the methods changing a type parameter carry them over in one move.
#[derive(Clone, Copy)]
struct Settings {
    quota: Quota,
    max_keys: usize,
    /// `None`: the default, chosen at build from the CPU count and the cap.
    shards: Option<usize>,
    preallocate: bool,
    leniency: Option<Duration>,
}

impl<K> KeyedLimiter<K> {
    /// Starts configuring a keyed limiter whose keys get `quota` by default,
    /// with GCRA per key, the production clock and a randomly seeded hasher.
    /// Defaults: at most 100 000 keys, [`DEFAULT_SHARDS_PER_CPU`] shards per
    /// CPU (fewer if shards would then hold under [`MIN_KEYS_PER_SHARD`]
    /// keys each), no preallocation.
    pub fn builder(quota: Quota) -> KeyedBuilder<K, GcraState, MonotonicClock, DefaultHashBuilder> {
        KeyedBuilder {
            key: std::marker::PhantomData,
            settings: Settings {
                quota,
                max_keys: 100_000,
                shards: None,
                preallocate: false,
                leniency: None,
            },
            factory: Box::new(GcraState::new),
            clock: MonotonicClock::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl<K, L, C, S> KeyedBuilder<K, L, C, S> {
    /// The most keys tracked at once (at least 1). The shard count is
    /// lowered if needed so that every shard can hold at least one key.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.settings.max_keys = max_keys.max(1);
        self
    }

    /// The number of shards, rounded up to a power of two (1 to 65 536),
    /// instead of the default. More shards make two threads less likely to
    /// want the same lock at once; each shard holds `max_keys / shards`
    /// keys, so fewer, larger shards fill more evenly.
    pub fn shards(mut self, shards: usize) -> Self {
        self.settings.shards = Some(shards);
        self
    }

    /// Allocate every shard at the largest size it can reach up front
    /// ([`KeyedLimiter::max_table_bytes`] in all): memory is then fixed
    /// from the start and no shard ever pauses to grow. (A shard may still
    /// pause to clear the tombstones evictions leave, in place: work
    /// bounded by the shard's size, once per many evictions.)
    pub fn preallocate(mut self, yes: bool) -> Self {
        self.settings.preallocate = yes;
        self
    }

    /// Lenient eviction: when a new key finds its shard full and none of
    /// the examined keys is rested, evict the examined key nearest to
    /// rested instead of refusing, provided it is at most `max_debt` away
    /// from full capacity.
    ///
    /// The default (strict) never forgets a key that still owes capacity,
    /// so a flood can only get *new* keys refused ([`KeyedError::Full`]),
    /// including legitimate keys returning after their entry was evicted.
    /// Lenient mode trades a bounded allowance for serving them: **each
    /// lenient eviction forgives at most `max_debt` of one key's debt**,
    /// so a key re-created afterwards can admit at most
    /// `⌈max_debt / emission interval⌉` units (for GCRA; the state's own
    /// arithmetic for others) more than its quota allows, once per time
    /// it is evicted. A key that keeps using its quota stays far from rested
    /// and is not evicted: pick `max_debt` below the debt your legitimate
    /// heavy users carry (for example, one or two emission intervals, the
    /// debt of a key that made one request). New keys are still refused
    /// when no examined key is within `max_debt`.
    /// [`KeyedLimiter::lenient_evictions`] counts these evictions.
    pub fn lenient_eviction(mut self, max_debt: Duration) -> Self {
        self.settings.leniency = Some(max_debt);
        self
    }

    /// Builds per-key limiters with `factory` (called with the key's quota
    /// whenever a key is first seen or seen again after eviction). The
    /// limiters must start at full capacity for eviction to be exact; a
    /// limiter that starts empty only makes eviction stricter.
    pub fn limiter<L2: KeyState>(
        self,
        factory: impl Fn(Quota) -> L2 + Send + Sync + 'static,
    ) -> KeyedBuilder<K, L2, C, S> {
        KeyedBuilder {
            key: std::marker::PhantomData,
            settings: self.settings,
            factory: Box::new(factory),
            clock: self.clock,
            hasher: self.hasher,
        }
    }

    /// The clock read by the convenience methods (`check`, `peek`).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<K, L, C2, S> {
        KeyedBuilder {
            key: std::marker::PhantomData,
            settings: self.settings,
            factory: self.factory,
            clock,
            hasher: self.hasher,
        }
    }

    /// The hasher. Keys usually come from outside, so keep it randomly
    /// seeded (as the default and `RandomState` are) or an attacker can
    /// crowd one shard.
    pub fn hasher<S2: BuildHasher + Clone>(self, hasher: S2) -> KeyedBuilder<K, L, C, S2> {
        KeyedBuilder {
            key: std::marker::PhantomData,
            settings: self.settings,
            factory: self.factory,
            clock: self.clock,
            hasher,
        }
    }

    /// Builds the limiter.
    pub fn build(self) -> KeyedLimiter<K, L, C, S>
    where
        K: Hash + Eq + Clone,
        L: KeyState,
        C: Clock,
        S: BuildHasher + Clone,
    {
        let settings = self.settings;
        let mut shards = match settings.shards {
            Some(n) => n.clamp(1, 1 << 16).next_power_of_two(),
            None => {
                let cpus = std::thread::available_parallelism().map_or(4, usize::from);
                let mut n = cpus
                    .saturating_mul(DEFAULT_SHARDS_PER_CPU)
                    .clamp(1, 1 << 16)
                    .next_power_of_two();
                while n > 1 && settings.max_keys / n < MIN_KEYS_PER_SHARD {
                    n /= 2;
                }
                n
            }
        };
        // A power of two no larger than max_keys, so each shard holds >= 1.
        while shards > settings.max_keys {
            shards /= 2;
        }
        let per_shard_cap = settings.max_keys / shards;
        let shard_vec = (0..shards)
            .map(|_| {
                // Twice the cap: room for the tombstones evictions leave, so
                // that the table never has to double later (see
                // `max_table_bytes`).
                let cap = if settings.preallocate {
                    per_shard_cap.saturating_mul(2)
                } else {
                    0
                };
                CachePadded::new(ShardLock::new(Shard {
                    table: HashTable::with_capacity(cap),
                    cursor: 0,
                }))
            })
            .collect();
        KeyedLimiter {
            shards: shard_vec,
            shard_mask: shards - 1,
            per_shard_cap,
            overrides: RwLock::new(HashMap::with_hasher(self.hasher.clone())),
            hasher: self.hasher,
            factory: self.factory,
            default_quota: QuotaCell::new(settings.quota),
            generation: AtomicU64::new(0),
            has_overrides: AtomicBool::new(false),
            evictions: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            lenient_evictions: AtomicU64::new(0),
            leniency: settings.leniency,
            clock: self.clock,
        }
    }
}

impl<K, L, C, S> KeyedLimiter<K, L, C, S>
where
    K: Hash + Eq + Clone,
    L: KeyState,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Admits a request of weight `n` for `key` at `now` if the key's
    /// capacity allows; see [`RateLimiter::check_at`]. A key seen for the
    /// first time is created at full capacity.
    ///
    /// # Errors
    /// [`KeyedError::Check`] for an invalid weight; [`KeyedError::Full`]
    /// when the key is new and there is no room for it.
    #[inline]
    pub fn check_at(&self, key: &K, n: u64, now: Timestamp) -> Result<Decision, KeyedError> {
        self.check_with(key, n, || now)
    }

    /// `check_at` with the time read by `now` once the shard is locked.
    #[inline]
    fn check_with(
        &self,
        key: &K,
        n: u64,
        now: impl FnOnce() -> Timestamp,
    ) -> Result<Decision, KeyedError> {
        self.with_entry(key, now, |e, now| Ok(e.limiter.check_at(n, now)?))
    }

    /// [`KeyedLimiter::check_at`] at the clock's current time.
    ///
    /// # Errors
    /// As [`KeyedLimiter::check_at`].
    pub fn check(&self, key: &K, n: u64) -> Result<Decision, KeyedError> {
        // The clock is read after the shard lock is taken: the lock's
        // atomic instruction would otherwise wait for the (slow, but
        // independent) clock read to finish, where this way the read
        // overlaps the table lookup.
        self.check_with(key, n, || self.clock.now())
    }

    /// What [`KeyedLimiter::check_at`] would answer, changing nothing (an
    /// unknown key is answered as a fresh one and not added).
    ///
    /// # Errors
    /// [`CheckError`] for an invalid weight.
    pub fn peek_at(&self, key: &K, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock_shard(hash);
        let gen = self.current_generation();
        if let Some(e) = self.tracked(&mut shard, hash, key, now, gen) {
            return e.limiter.peek_at(n, now);
        }
        drop(shard);
        (self.factory)(self.quota_for(key)).peek_at(n, now)
    }

    /// [`KeyedLimiter::peek_at`] at the clock's current time.
    ///
    /// # Errors
    /// As [`KeyedLimiter::peek_at`].
    pub fn peek(&self, key: &K, n: u64) -> Result<Decision, CheckError> {
        self.peek_at(key, n, self.clock.now())
    }

    /// Reserves `n` units of `key`'s capacity for the earliest time they are
    /// available, if that is within `max_wait`; see
    /// [`RateLimiter::reserve_within_at`].
    ///
    /// # Errors
    /// As [`KeyedLimiter::check_at`], and [`KeyedError::WouldWaitTooLong`].
    pub fn reserve_within_at(
        &self,
        key: &K,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, KeyedError> {
        self.with_entry(
            key,
            || now,
            |e, now| Ok(e.limiter.reserve_within_at(n, now, max_wait)?),
        )
    }

    /// Hands back a reservation made on `key`; see
    /// [`RateLimiter::cancel_at`]. Returns the units given back (0 if the
    /// key is no longer tracked: it was evicted, so it was rested already,
    /// or, with lenient eviction, its remaining debt was forgiven).
    pub fn cancel_at(&self, key: &K, reservation: Reservation, now: Timestamp) -> u64 {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock_shard(hash);
        let Some(e) = Self::find(&mut shard, hash, key) else {
            return 0;
        };
        e.limiter.cancel_at(reservation, now)
    }

    /// The default quota.
    pub fn default_quota(&self) -> Quota {
        self.default_quota.load()
    }

    /// Replaces the default quota. O(1): each tracked key without an
    /// override switches at its next use (or when a sweep examines it),
    /// keeping its available units as [`RateLimiter::set_quota_at`] does.
    pub fn set_default_quota(&self, quota: Quota) {
        self.default_quota.store(quota);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Gives `key` its own quota (kept even while the key is evicted) and
    /// applies it at once if the key is tracked.
    pub fn set_key_quota_at(&self, key: &K, quota: Quota, now: Timestamp) {
        {
            let mut o = self
                .overrides
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            o.insert(key.clone(), quota);
            self.has_overrides.store(true, Ordering::Release);
        }
        self.apply_now(key, now);
    }

    /// Removes `key`'s own quota; it goes back to the default at once.
    pub fn clear_key_quota_at(&self, key: &K, now: Timestamp) {
        {
            let mut o = self
                .overrides
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            o.remove(key);
            self.has_overrides.store(!o.is_empty(), Ordering::Release);
        }
        self.apply_now(key, now);
    }

    /// The quota `key` is limited by (its override, or the default).
    pub fn key_quota(&self, key: &K) -> Quota {
        self.quota_for(key)
    }

    /// Sweeps up to `budget` entries per shard (from where the previous
    /// sweep stopped), dropping those whose limiter is back at full
    /// capacity at `now`. Each shard's lock is held only for its part of
    /// the sweep. Returns the number of keys dropped.
    ///
    /// Not required for the memory bound (inserts sweep by themselves); call
    /// it periodically to give memory back sooner after a burst of keys.
    pub fn maintain(&self, now: Timestamp, budget: usize) -> usize {
        let gen = self.current_generation();
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            let budget = budget.min(s.table.len());
            dropped += self.sweep(&mut s, now, budget, gen, false).dropped;
        }
        dropped
    }

    /// Whether `key` is tracked now (it has been seen and not evicted).
    pub fn contains(&self, key: &K) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock_shard(hash);
        Self::find(&mut shard, hash, key).is_some()
    }

    /// Forgets `key`'s state, so its next request finds it at full capacity
    /// (an operator's "reset this user"). Returns whether the key was
    /// tracked. Its quota override, if any, stays.
    pub fn reset(&self, key: &K) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock_shard(hash);
        match shard.table.find_entry(hash, |e| e.key == *key) {
            Ok(occupied) => {
                let _ = occupied.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Keys currently tracked (takes each shard's lock in turn).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().table.len()).sum()
    }

    /// `true` if no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Keys dropped so far because they were rested.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Keys evicted so far by lenient eviction (see
    /// [`KeyedBuilder::lenient_eviction`]) while not yet rested.
    pub fn lenient_evictions(&self) -> u64 {
        self.lenient_evictions.load(Ordering::Relaxed)
    }

    /// New keys refused so far with [`KeyedError::Full`].
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// The clock of the convenience methods.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The table's bytes per tracked key for this `K` and `L`, with the
    /// hash table at its maximum load (7/8); a table that has just grown
    /// uses up to twice that. Heap memory owned by a key (a `String`'s
    /// text) comes on top.
    pub fn estimated_bytes_per_key() -> usize {
        // hashbrown stores each entry inline in a bucket, plus one control
        // byte per bucket; at most 7 of every 8 buckets are full.
        let bucket = std::mem::size_of::<Entry<K, L>>() + 1;
        (bucket * 8).div_ceil(7)
    }

    /// An upper bound on the bytes this limiter's tables can ever occupy,
    /// whatever keys arrive: every shard at the largest size its hash table
    /// can reach. Heap memory owned by keys comes on top.
    ///
    /// A shard's table is sized for its cap (buckets: the cap × 8/7
    /// rounded up to a power of two). Evictions leave tombstones, and when
    /// the table runs out of fresh buckets it either cleans them up in
    /// place or, if more than half its capacity is in use, doubles once;
    /// after that doubling the cap is under half the capacity, so it
    /// never grows again. Hence at most twice the initial buckets, each
    /// holding one entry and one control byte.
    pub fn max_table_bytes(&self) -> usize {
        let cap = self.per_shard_cap;
        // hashbrown's bucket count for a capacity.
        let buckets = if cap < 4 {
            4
        } else if cap < 8 {
            8
        } else {
            (cap.saturating_mul(8) / 7).next_power_of_two()
        };
        let per_bucket = std::mem::size_of::<Entry<K, L>>() + 1;
        // Control bytes are padded by one SIMD group (16 bytes).
        let table = (2 * buckets).saturating_mul(per_bucket).saturating_add(16);
        let shard = std::mem::size_of::<PaddedShard<K, L>>();
        self.shards
            .len()
            .saturating_mul(table.saturating_add(shard))
    }

    // ---- internals ----

    #[inline]
    fn current_generation(&self) -> u32 {
        // Truncation is fine: a generation only needs to differ from the
        // one an entry saw, and 2^32 quota changes between two uses of one
        // key would at worst delay a quota change to the key's next use.
        self.generation.load(Ordering::Acquire) as u32
    }

    #[inline]
    fn lock_shard(&self, hash: u64) -> ShardGuard<'_, Shard<K, L>> {
        // Bits 40.. are used by neither hashbrown's bucket index (low bits)
        // nor its control byte (top 7 bits), so shard choice does not
        // correlate with placement inside the shard.
        let i = (hash >> 40) as usize & self.shard_mask;
        let shard = match self.shards.get(i) {
            Some(s) => s,
            // Unreachable: the mask is len - 1. Stay panic-free anyway.
            None => &self.shards[0],
        };
        shard.lock()
    }

    fn quota_for(&self, key: &K) -> Quota {
        if self.has_overrides.load(Ordering::Acquire) {
            let o = self
                .overrides
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(q) = o.get(key) {
                return *q;
            }
        }
        self.default_quota.load()
    }

    fn refresh(&self, e: &mut Entry<K, L>, now: Timestamp, gen: u32) {
        let q = self.quota_for(&e.key);
        if e.limiter.quota() != q {
            e.limiter.set_quota_at(q, now);
        }
        e.generation = gen;
    }

    fn apply_now(&self, key: &K, now: Timestamp) {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock_shard(hash);
        let gen = self.current_generation();
        // Unconditionally: an override does not move the generation.
        if let Some(e) = Self::find(&mut shard, hash, key) {
            self.refresh(e, now, gen);
        }
    }

    /// Examines up to `budget` entries, walking the table's buckets from
    /// the cursor (at most one full circle, and at most
    /// `SWEEP_BUCKETS_PER_ENTRY` buckets per entry of budget, so that a
    /// sparse table costs no more than a dense one), and drops rested
    /// entries.
    fn sweep(
        &self,
        shard: &mut Shard<K, L>,
        now: Timestamp,
        budget: usize,
        gen: u32,
        stop_at_first: bool,
    ) -> Swept {
        let mut dropped = 0;
        let mut examined = 0;
        let mut soonest = Timestamp::MAX;
        let mut soonest_bucket = None;
        let buckets = shard.table.num_buckets();
        let walk = buckets.min(budget.saturating_mul(SWEEP_BUCKETS_PER_ENTRY));
        for _ in 0..walk {
            if examined == budget {
                break;
            }
            if shard.cursor >= buckets {
                shard.cursor = 0;
            }
            let idx = shard.cursor;
            shard.cursor += 1;
            let Some(e) = shard.table.get_bucket_mut(idx) else {
                continue; // an empty bucket
            };
            examined += 1;
            if e.generation != gen {
                self.refresh(e, now, gen);
            }
            let full_at = e.limiter.full_at(now);
            if full_at <= now {
                // Removing leaves every other entry where it is.
                if let Ok(occupied) = shard.table.get_bucket_entry(idx) {
                    let _ = occupied.remove();
                    dropped += 1;
                }
                if stop_at_first {
                    break;
                }
            } else if full_at < soonest {
                soonest = full_at;
                soonest_bucket = Some(idx);
            }
        }
        if dropped > 0 {
            self.evictions.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        Swept {
            dropped,
            soonest,
            soonest_bucket,
        }
    }

    #[inline]
    fn with_entry<R>(
        &self,
        key: &K,
        now: impl FnOnce() -> Timestamp,
        f: impl FnOnce(&mut Entry<K, L>, Timestamp) -> Result<R, KeyedError>,
    ) -> Result<R, KeyedError> {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock_shard(hash);
        let now = now();
        let gen = self.current_generation();
        if let Some(e) = self.tracked(&mut shard, hash, key, now, gen) {
            return f(e, now);
        }
        self.insert_slow(&mut shard, hash, key, now, gen, f)
    }

    /// `key`'s entry if it is tracked, brought up to quota generation `gen`
    /// first (a default-quota change or an override applies at first use).
    #[inline]
    fn tracked<'s>(
        &self,
        shard: &'s mut Shard<K, L>,
        hash: u64,
        key: &K,
        now: Timestamp,
        gen: u32,
    ) -> Option<&'s mut Entry<K, L>> {
        let e = Self::find(shard, hash, key)?;
        if e.generation != gen {
            self.refresh(e, now, gen);
        }
        Some(e)
    }

    /// `key`'s entry if it is tracked, as it is.
    #[inline]
    fn find<'s>(shard: &'s mut Shard<K, L>, hash: u64, key: &K) -> Option<&'s mut Entry<K, L>> {
        shard.table.find_mut(hash, |e| e.key == *key)
    }

    /// Lenient eviction (if configured): drops the examined entry nearest to
    /// rested if it owes at most the configured debt. Returns whether it
    /// made room. Runs right after a sweep that dropped nothing, so the
    /// sweep's bucket index still holds that entry.
    fn evict_leniently(&self, shard: &mut Shard<K, L>, swept: &Swept, now: Timestamp) -> bool {
        let (Some(max_debt), Some(idx)) = (self.leniency, swept.soonest_bucket) else {
            return false;
        };
        if swept.soonest > now.saturating_add(max_debt) {
            return false;
        }
        match shard.table.get_bucket_entry(idx) {
            Ok(occupied) => {
                let _ = occupied.remove();
                self.evictions.fetch_add(1, Ordering::Relaxed);
                self.lenient_evictions.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    #[cold]
    fn insert_slow<R>(
        &self,
        shard: &mut Shard<K, L>,
        hash: u64,
        key: &K,
        now: Timestamp,
        gen: u32,
        f: impl FnOnce(&mut Entry<K, L>, Timestamp) -> Result<R, KeyedError>,
    ) -> Result<R, KeyedError> {
        if shard.table.len() >= self.per_shard_cap / 2 {
            let budget = SWEEP_PER_INSERT.min(shard.table.len());
            self.sweep(shard, now, budget, gen, false);
        }
        if shard.table.len() >= self.per_shard_cap {
            let budget = SCAN_WHEN_FULL.min(shard.table.len());
            let swept = self.sweep(shard, now, budget, gen, true);
            if swept.dropped == 0 && !self.evict_leniently(shard, &swept, now) {
                let soonest = swept.soonest;
                self.refusals.fetch_add(1, Ordering::Relaxed);
                let retry = if soonest == Timestamp::MAX {
                    self.default_quota.load().window()
                } else {
                    soonest.saturating_duration_since(now)
                };
                return Err(KeyedError::Full {
                    max_keys: self.max_keys(),
                    retry_after: retry,
                });
            }
        }
        let entry = Entry {
            key: key.clone(),
            limiter: (self.factory)(self.quota_for(key)),
            generation: gen,
        };
        // The caller holds the lock and found no entry for `key`.
        let hasher = &self.hasher;
        let e = shard
            .table
            .insert_unique(hash, entry, |e| hasher.hash_one(&e.key))
            .into_mut();
        f(e, now)
    }
}

impl<K, L, C, S> KeyedLimiter<K, L, C, S> {
    /// The most keys tracked at once: the configured `max_keys` rounded
    /// down to a multiple of the shard count.
    pub fn max_keys(&self) -> usize {
        self.per_shard_cap * self.shards.len()
    }
}

impl<K, L, C, S> std::fmt::Debug for KeyedLimiter<K, L, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("default_quota", &self.default_quota.load())
            .field("max_keys", &self.max_keys())
            .field("shards", &self.shards.len())
            .field("evictions", &self.evictions.load(Ordering::Relaxed))
            .field("refusals", &self.refusals.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::token_bucket::TokenBucket;
    use crate::test_support::ms;

    fn small(max_keys: usize, shards: usize) -> KeyedLimiter<u64> {
        KeyedLimiter::<u64>::builder(Quota::per_second(10).unwrap())
            .max_keys(max_keys)
            .shards(shards)
            .build()
    }

    #[test]
    fn keys_are_independent_and_exact() {
        let k = small(100, 4);
        for _ in 0..10 {
            assert!(k.check_at(&1, 1, ms(0)).unwrap().allowed);
        }
        let d = k.check_at(&1, 1, ms(0)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
        assert!(k.check_at(&2, 10, ms(0)).unwrap().allowed);
        assert!(k.check_at(&1, 1, ms(100)).unwrap().allowed);
        assert_eq!(k.len(), 2);
        assert_eq!(
            k.check_at(&3, 11, ms(0)),
            Err(KeyedError::Check(CheckError::ExceedsBurst {
                requested: 11,
                burst: 10
            }))
        );
    }

    #[test]
    fn full_table_refuses_new_keys_but_keeps_limiting_old_ones() {
        let k = small(4, 1);
        for key in 0..4 {
            assert!(k.check_at(&key, 5, ms(0)).unwrap().allowed);
        }
        // Nobody is rested: key 9 is refused, with an honest retry estimate.
        match k.check_at(&9, 1, ms(0)) {
            Err(KeyedError::Full {
                max_keys,
                retry_after,
            }) => {
                assert_eq!(max_keys, 4);
                assert_eq!(retry_after, Duration::from_millis(500));
            }
            other => panic!("expected Full, got {other:?}"),
        }
        assert_eq!(k.refusals(), 1);
        // Tracked keys are still exact.
        assert!(k.check_at(&0, 5, ms(0)).unwrap().allowed);
        assert!(!k.check_at(&0, 1, ms(0)).unwrap().allowed);
        // Key 1 is rested at 500 ms; then there is room.
        assert!(k.check_at(&9, 1, ms(499)).is_err());
        assert!(k.check_at(&9, 1, ms(500)).unwrap().allowed);
        assert!(k.evictions() >= 1);
        assert!(k.len() <= 4);
    }

    #[test]
    fn lenient_eviction_drops_only_keys_within_its_debt() {
        // 10/s: one request owes 100 ms, five owe 500 ms.
        let k = KeyedLimiter::<u64>::builder(Quota::per_second(10).unwrap())
            .max_keys(2)
            .shards(1)
            .lenient_eviction(std::time::Duration::from_millis(150))
            .build();
        assert!(k.check_at(&1, 1, ms(0)).unwrap().allowed);
        assert!(k.check_at(&2, 5, ms(0)).unwrap().allowed);
        // Full: key 1 owes 100 ms <= 150 ms, so it makes room for key 3.
        assert!(k.check_at(&3, 1, ms(0)).unwrap().allowed);
        assert!(!k.contains(&1) && k.contains(&2) && k.contains(&3));
        // Then key 3 (100 ms) for key 4; key 2 (500 ms) always stays.
        assert!(k.check_at(&4, 1, ms(0)).unwrap().allowed);
        assert!(k.contains(&2) && !k.contains(&3));
        assert_eq!(k.lenient_evictions(), 2);
        // With both remaining keys owing more than 150 ms, new keys wait.
        assert!(k.check_at(&4, 4, ms(0)).unwrap().allowed); // key 4 owes 500 ms
        assert!(matches!(
            k.check_at(&5, 1, ms(0)),
            Err(KeyedError::Full { .. })
        ));
        assert_eq!(k.lenient_evictions(), 2);
        assert_eq!(k.refusals(), 1);
        // Strict (the default) refuses where lenient made room.
        let strict = small(2, 1);
        assert!(strict.check_at(&1, 1, ms(0)).unwrap().allowed);
        assert!(strict.check_at(&2, 5, ms(0)).unwrap().allowed);
        assert!(matches!(
            strict.check_at(&3, 1, ms(0)),
            Err(KeyedError::Full { .. })
        ));
        assert_eq!(strict.lenient_evictions(), 0);
    }

    #[test]
    fn overrides_survive_eviction_and_default_changes_apply_lazily() {
        let k = small(10, 2);
        let premium = Quota::per_second(100).unwrap();
        k.set_key_quota_at(&1, premium, ms(0));
        assert_eq!(k.key_quota(&1), premium);
        assert!(k.check_at(&1, 50, ms(0)).unwrap().allowed);
        assert_eq!(k.maintain(ms(10_000), usize::MAX), 1);
        assert_eq!(k.len(), 0);
        assert_eq!(k.check_at(&1, 1, ms(10_000)).unwrap().limit, 100);

        assert!(k.check_at(&2, 4, ms(10_000)).unwrap().allowed); // 6 left
        k.set_default_quota(Quota::per_second(10).unwrap().with_burst(5).unwrap());
        // Available units preserved, capped at the new burst: 5.
        assert_eq!(k.peek_at(&2, 1, ms(10_000)).unwrap().remaining, 5);
        let d = k.check_at(&2, 5, ms(10_000)).unwrap();
        assert!(d.allowed);
        assert_eq!(d.limit, 5);
        assert_eq!(k.check_at(&1, 1, ms(10_000)).unwrap().limit, 100);

        k.clear_key_quota_at(&1, ms(10_000));
        assert_eq!(k.check_at(&1, 1, ms(10_000)).unwrap().limit, 5);
    }

    #[test]
    fn peek_of_unknown_key_adds_nothing() {
        let k = small(10, 2);
        assert_eq!(k.peek_at(&5, 3, ms(0)).unwrap().remaining, 10);
        assert!(k.is_empty());
    }

    #[test]
    fn reserve_and_cancel_on_a_key() {
        let k = small(10, 2);
        let r = k
            .reserve_within_at(&1, 10, ms(0), Duration::ZERO)
            .expect("fresh key has capacity");
        assert!(matches!(
            k.reserve_within_at(&1, 1, ms(0), Duration::ZERO),
            Err(KeyedError::WouldWaitTooLong { .. })
        ));
        // Not rested: maintain keeps it.
        assert_eq!(k.maintain(ms(0), usize::MAX), 0);
        // A stale twin of the reservation, to cancel after the key is gone.
        let stale = Reservation::new(r.weight(), r.made_at(), r.act_at(), r.mark(), r.cost());
        assert_eq!(k.cancel_at(&1, r, ms(0)), 10);
        // Rested again, so it may go.
        assert_eq!(k.maintain(ms(0), usize::MAX), 1);
        assert_eq!(k.cancel_at(&1, stale, ms(0)), 0);
    }

    #[test]
    fn any_limiter_and_clock_conveniences() {
        let clock = crate::ManualClock::new();
        let k: KeyedLimiter<String, TokenBucket<NoClock>, _> =
            KeyedLimiter::<String>::builder(Quota::per_second(2).unwrap())
                .limiter(|q| TokenBucket::with_clock(q, NoClock))
                .clock(clock.clone())
                .max_keys(8)
                .build();
        let a = "alice".to_string();
        assert!(k.check(&a, 2).unwrap().allowed);
        assert!(!k.check(&a, 1).unwrap().allowed);
        clock.advance(Duration::from_millis(500));
        assert!(k.peek(&a, 1).unwrap().allowed);
        assert!(k.check(&a, 1).unwrap().allowed);
    }

    #[test]
    fn sweep_work_is_bounded_per_insert() {
        // 1000 rested keys; one insert drops at most SWEEP_PER_INSERT.
        let k = small(2000, 1);
        for key in 0..1000 {
            assert!(k.check_at(&key, 1, ms(0)).unwrap().allowed);
        }
        let before = k.evictions();
        assert!(k.check_at(&5000, 1, ms(10_000)).unwrap().allowed);
        assert_eq!(k.evictions() - before, SWEEP_PER_INSERT as u64);
        // A budget of 100 examines 100 entries: at most 100 dropped (fewer
        // when the kept key is examined along the way).
        let first = k.maintain(ms(10_000), 100);
        assert!((95..=100).contains(&first), "{first}");
        // Later passes finish the job; only the key in use stays.
        let mut passes = 0;
        while k.len() > 1 && passes < 10 {
            k.maintain(ms(10_000), usize::MAX);
            passes += 1;
        }
        assert_eq!(k.len(), 1);
        assert_eq!(k.evictions(), 1000);
    }

    #[test]
    fn rested_keys_stay_until_the_shard_is_half_full() {
        let k = small(100, 1);
        for key in 0..10 {
            assert!(k.check_at(&key, 1, ms(0)).unwrap().allowed);
        }
        // Keys 0..10 are rested at 10 s; new keys below half the cap
        // leave them alone.
        for key in 10..50 {
            assert!(k.check_at(&key, 1, ms(10_000)).unwrap().allowed);
        }
        assert_eq!(k.evictions(), 0);
        assert_eq!(k.len(), 50);
        // From half the cap on, each insert expires rested keys again: at
        // 20 s every key is rested, so the insert drops exactly the
        // SWEEP_PER_INSERT entries it examines (whichever they are: the
        // table's order is the hash's).
        assert!(k.check_at(&50, 1, ms(20_000)).unwrap().allowed);
        assert_eq!(k.evictions(), SWEEP_PER_INSERT as u64);
        assert_eq!(k.len(), 51 - SWEEP_PER_INSERT);
        // `maintain` expires the rest at any size; key 50 is busy and stays.
        assert_eq!(k.maintain(ms(20_000), usize::MAX), 50 - SWEEP_PER_INSERT);
        assert_eq!(k.len(), 1);
    }

    #[test]
    fn default_hasher_is_seeded_foldhash() {
        let a = KeyedLimiter::<u64>::builder(Quota::per_second(1).unwrap()).build();
        let b = KeyedLimiter::<u64>::builder(Quota::per_second(1).unwrap()).build();
        let _: &DefaultHashBuilder = &a.hasher;
        // Two limiters hash the same key differently (a random seed each).
        let differ = (0..8u64).any(|k| a.hasher.hash_one(k) != b.hasher.hash_one(k));
        assert!(differ);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// `GcraState` answers exactly as `Gcra` for every call.
        #[test]
        fn gcra_state_is_gcra(ops in proptest::collection::vec((0u8..5, 1u64..6, 0u64..300, 1u64..12), 1..200)) {
            let q0 = Quota::per_second(10).unwrap().with_burst(5).unwrap();
            let a = crate::Gcra::with_clock(q0, NoClock);
            let mut b = GcraState::new(q0);
            let mut now = 0;
            let mut held: Vec<(Reservation, Reservation)> = Vec::new();
            for (op, n, dt, burst) in ops {
                now += dt;
                let t = ms(now);
                match op {
                    0 => proptest::prop_assert_eq!(RateLimiter::check_at(&a, n, t), KeyState::check_at(&mut b, n, t)),
                    1 => proptest::prop_assert_eq!(RateLimiter::peek_at(&a, n, t), KeyState::peek_at(&b, n, t)),
                    2 => {
                        let w = Duration::from_millis(dt);
                        let (ra, rb) = (RateLimiter::reserve_within_at(&a, n, t, w), KeyState::reserve_within_at(&mut b, n, t, w));
                        proptest::prop_assert_eq!(&ra, &rb);
                        if let (Ok(ra), Ok(rb)) = (ra, rb) { held.push((ra, rb)); }
                    }
                    3 => if let Some((ra, rb)) = held.pop() {
                        proptest::prop_assert_eq!(RateLimiter::cancel_at(&a, ra, t), KeyState::cancel_at(&mut b, rb, t));
                    },
                    _ => {
                        let q = Quota::per_second(1 + n * 3).unwrap().with_burst(burst).unwrap();
                        RateLimiter::set_quota_at(&a, q, t);
                        KeyState::set_quota_at(&mut b, q, t);
                    }
                }
            }
        }
    }

    #[test]
    fn threads_sharing_keys_get_exactly_each_burst() {
        // Time stands still: every key admits exactly its burst in total,
        // however the threads interleave. The cap is per shard and the hasher
        // is seeded at random, so it leaves room for all 40 keys landing in
        // one shard: a full shard would (correctly) refuse new keys and make
        // the count depend on the seed.
        let k = KeyedLimiter::<u64>::builder(Quota::per_second(25).unwrap())
            .max_keys(160)
            .shards(4)
            .build();
        let admitted: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    let k = &k;
                    s.spawn(move || {
                        (0..4000u64)
                            .filter(|i| {
                                let key = (i * 7 + t) % 40;
                                matches!(k.check_at(&key, 1, ms(5)), Ok(d) if d.allowed)
                            })
                            .count() as u64
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 40 * 25);
        assert_eq!(k.len(), 40);
    }

    #[test]
    fn bytes_per_key_is_what_the_docs_say() {
        assert_eq!(std::mem::size_of::<GcraState>(), 48);
        assert_eq!(std::mem::size_of::<crate::Gcra<NoClock>>(), 384);
        assert_eq!(KeyedLimiter::<u64>::estimated_bytes_per_key(), 75);
    }
}
