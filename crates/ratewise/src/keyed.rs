//! [`KeyedLimiter`]: one limiter per key (user, API key, IP address), with
//! memory that an attacker cannot exhaust.
//!
//! # Why it is built this way
//!
//! A per-key limiter that creates state on first use and never forgets it
//! grows by one entry for every distinct key it has ever seen; ten million
//! spoofed keys are ten million entries. This one bounds its size and still
//! limits every key it tracks exactly, and a check of a key it already
//! tracks takes no lock:
//!
//! * **A lock-free table for the hit path.** Keys live in one concurrent
//!   hash table (`papaya`: lock-free reads, memory reclaimed by epochs
//!   through `seize`). Checking a tracked key is a lookup plus the key's
//!   own update: for the default [`GcraState`] that is one atomic load and,
//!   only if the request is admitted, one compare-and-swap on the key's
//!   theoretical arrival time — a denial writes nothing at all. Two threads
//!   checking different keys (or the same key, when it is denying) share no
//!   written cache line. Other per-key states sit behind a small per-key
//!   mutex ([`Locked`]); they still take no table-wide lock. (A sharded
//!   `Mutex<IndexMap>` and a sharded `RwLock` were measured first: every
//!   check then writes its shard's lock word, which on two cores moves the
//!   line between them on most checks; `benches/keyed.rs` compares with
//!   `governor`'s `DashMap` store, whose read lock pays the same cost.)
//! * **Sharded bookkeeping for everything else.** Inserting, evicting and
//!   re-configuring keys happens under one of N shard mutexes (the shard is
//!   picked by the key's hash). A shard owns the list of its keys and a
//!   cursor into it, so the eviction sweep below resumes where it stopped
//!   in O(1). Invariant: **a key's table entry is only ever inserted,
//!   replaced or removed while its shard's mutex is held**, and a key is in
//!   its shard's list exactly when it is in the table.
//! * **A hard cap on keys.** Each shard holds at most `max_keys / shards`
//!   keys, so the whole limiter holds at most `max_keys`. The hash is
//!   randomly seeded, so an attacker cannot aim keys at one shard. The
//!   default hasher is `foldhash`'s seeded hasher: several times cheaper
//!   than SipHash on small keys, and with a random per-limiter seed it
//!   still gives an attacker no way to predict which keys collide or share
//!   a shard. (It makes no cryptographic claim; pass
//!   `std::collections::hash_map::RandomState` to
//!   [`KeyedBuilder::hasher`] if you want SipHash.)
//! * **Only rested keys are evicted.** A key may be dropped only when its
//!   limiter is back at full capacity (`reset_after == 0`). A key created
//!   afresh later starts at full capacity too, so forgetting it changes
//!   nothing: **eviction never lets a key exceed its quota** (a property
//!   test checks this against a model that never forgets). Eviction first
//!   *retires* the key's state — for GCRA, a compare-and-swap from the
//!   rested arrival time to a sentinel, so it fails if a concurrent check
//!   admitted a request in between — and a check that finds a retired
//!   state goes back to the table under the shard lock. So no admission is
//!   ever recorded in a state that was already dropped. This holds for
//!   times that never run backwards; if a caller later passes a `now`
//!   earlier than the eviction, a re-created key may admit up to the units
//!   its old state still owed at that earlier instant — at most one burst.
//!   Such a key is also exactly one that has been idle longer than its
//!   refill time, so this one rule is both the time-based expiry and the
//!   capacity eviction.
//! * **Bounded work, no pauses.** Every insert of a new key into a shard
//!   that is at least half full first examines [`SWEEP_PER_INSERT`] entries
//!   from a per-shard cursor and drops the rested ones (time-based expiry,
//!   amortised over inserts); when the shard is full it examines up to
//!   [`SCAN_WHEN_FULL`] more to make room. (Below half the cap, rested keys
//!   stay: they cost only memory the cap allows, and keys that rest between
//!   visits would otherwise be dropped and re-created over and over.)
//!   [`KeyedLimiter::maintain`] does the same sweep on demand with a budget
//!   the caller chooses. No operation ever walks a whole shard. The one
//!   larger step is the table's own growth (or its clean-up of removed
//!   slots): the insert that triggers it copies the live entries, at most
//!   `max_keys`, to a new table. Checks of tracked keys keep reading the
//!   old table meanwhile and never wait; [`KeyedBuilder::preallocate`]
//!   sizes the table for the cap up front so it never grows.
//! * **Full means "no", not "forget someone".** When a shard is full and
//!   none of the examined keys is rested, the request of the *new* key is
//!   refused with [`KeyedError::Full`] (carrying an estimate of when room
//!   will appear); keys already tracked keep being limited exactly. This is
//!   the strict choice: under a flood faster than keys refill, new keys are
//!   refused rather than letting an attacker push a legitimate, partly used
//!   key out of the table and reset its allowance. Size `max_keys` so that
//!   `arrival rate of new keys × refill time` fits.
//!
//! # Quotas
//!
//! Every key uses the default quota unless it has an override
//! ([`KeyedLimiter::set_key_quota_at`], e.g. a premium API key). Overrides
//! are kept apart from the limiter table, so they survive eviction; they are
//! meant for keys an operator names, not for every key seen. Changing the
//! default quota ([`KeyedLimiter::set_default_quota`]) is O(1): each tracked
//! key picks up the new quota at its next use (with the usual
//! [`RateLimiter::set_quota_at`] rule that available units are preserved).
//! A key's quota and the quota generation it was resolved in are fixed for
//! the life of its table entry; re-configuring a key retires its entry and
//! puts a converted one in its place, under the shard lock. The hit path
//! therefore reads the quota as plain fields and compares one generation
//! number.
//!
//! # Memory
//!
//! Per tracked key the table stores a pointer-sized slot plus one control
//! byte (the table keeps at least a quarter of its slots free), and a heap
//! entry holding the key, the per-key state and its quota generation; the
//! shard's key list holds a second copy of the key.
//! [`KeyedLimiter::estimated_bytes_per_key`] computes this for a given `K`
//! and `L`: 84 bytes for `u64` keys and the default [`GcraState`] (an entry
//! of 8 + 40 bytes, counted as a 64-byte allocation), with the table at its
//! largest load; a table that has just doubled, or is migrating, uses up to
//! about twice the slot space. The `keyed_flood` example measures the
//! resident memory of the whole process: 10 million flood keys against a
//! cap of 100 000 grew it by about 14 MiB, 143 bytes per key of cap (the
//! table is sized in powers of two, removed entries are freed in batches
//! once no thread can still be reading them, and the allocator keeps some
//! slack under churn). The flood test bounds it at 256 bytes per key.
//!
//! # Per-key state
//!
//! Per-key limiters are built by a factory from a [`Quota`] and implement
//! [`KeyState`]. Every [`RateLimiter`] is a `KeyState` (build them on
//! [`NoClock`], a clock of size zero: the keyed limiter always tells them the
//! time), stored behind a per-key mutex ([`Locked`]). The default is
//! [`GcraState`]: the same GCRA as [`Gcra`](crate::Gcra), answer for answer
//! (a property test compares them), stored as a [`GcraCell`] — one atomic
//! word plus the quota, 32 bytes instead of the 256 of a `Gcra` (whose
//! arrival time has a cache line to itself, right for one shared limiter
//! and wasteful for a million per-key ones).
//!
//! ```
//! use std::time::Duration;
//! use ratewise::keyed::{KeyedError, KeyedLimiter};
//! use ratewise::{Quota, Timestamp};
//!
//! let per_user = KeyedLimiter::<u64>::builder(Quota::per_second(2)?)
//!     .max_keys(1000)
//!     .build();
//! let t0 = Timestamp::ZERO;
//! assert!(per_user.check_at(&7, 1, t0)?.is_allowed());
//! assert!(per_user.check_at(&7, 1, t0)?.is_allowed());
//! assert!(!per_user.check_at(&7, 1, t0)?.is_allowed()); // user 7 is out
//! assert!(per_user.check_at(&8, 1, t0)?.is_allowed()); // user 8 is not
//!
//! // A premium user gets more.
//! per_user.set_key_quota_at(&9, Quota::per_second(100)?, t0);
//! assert_eq!(per_user.check_at(&9, 1, t0)?.limit, 100);
//!
//! // Once rested, keys are forgotten by later inserts or by `maintain`.
//! let later = t0 + Duration::from_secs(1);
//! per_user.maintain(later, usize::MAX);
//! assert_eq!(per_user.len(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::decision::Decision;
use crate::error::{CheckError, ReserveError};
use crate::gcra::QuotaCell;
use crate::limiter::{validate_weight, RateLimiter, Reservation};
use crate::quota::Quota;
use crate::time::{Clock, MonotonicClock, Timestamp};

/// The default hasher of a [`KeyedLimiter`]: `foldhash`'s fast hasher with
/// a random seed per limiter (see the [module docs](self) for why).
pub type DefaultHashBuilder = foldhash::fast::RandomState;

/// Entries examined (and dropped if rested) before each insert of a new
/// key into a shard at least half full: the amortised, bounded work of
/// time-based expiry.
pub const SWEEP_PER_INSERT: usize = 2;

/// Further entries examined to make room when a shard is full, before the
/// new key is refused with [`KeyedError::Full`].
pub const SCAN_WHEN_FULL: usize = 32;

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
/// limiter. Methods take `&mut self`; the keyed limiter stores the state in
/// its [`KeyState::Cell`], which decides how threads share it.
///
/// Every [`RateLimiter`] implements it (with [`Locked`] as its cell);
/// [`GcraState`] is an atomics-free GCRA whose cell, [`GcraCell`], needs no
/// lock at all. A hand-written state can use `type Cell = Locked<Self>;`.
pub trait KeyState: Send + Sized {
    /// How a [`KeyedLimiter`] stores this state so that threads can share
    /// it and eviction can retire it.
    type Cell: KeyCell<State = Self>;
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
    fn cancel_at(&mut self, reservation: &Reservation, now: Timestamp) -> u64;
}

impl<L: RateLimiter> KeyState for L {
    type Cell = Locked<L>;
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
    fn cancel_at(&mut self, reservation: &Reservation, now: Timestamp) -> u64 {
        RateLimiter::cancel_at(self, reservation, now)
    }
}

/// Shared storage of one key's [`KeyState`] inside a [`KeyedLimiter`].
///
/// Every operation may run on many threads at once. A cell can be
/// *retired* (by eviction or re-configuration, always under the key's shard
/// lock); from then on every operation returns `None` and the keyed
/// limiter looks the key up again under that lock. Retiring must be atomic
/// with respect to the operations: an operation either completes before
/// the retirement (and the retirement sees its effect) or returns `None`.
pub trait KeyCell: Send + Sync {
    /// The state stored.
    type State;
    /// A live cell holding `state`.
    fn new(state: Self::State) -> Self;
    /// [`KeyState::check_at`], or `None` if retired.
    fn check_at(&self, n: u64, now: Timestamp) -> Option<Result<Decision, CheckError>>;
    /// [`KeyState::peek_at`], or `None` if retired.
    fn peek_at(&self, n: u64, now: Timestamp) -> Option<Result<Decision, CheckError>>;
    /// [`KeyState::reserve_within_at`], or `None` if retired.
    fn reserve_within_at(
        &self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Option<Result<Reservation, ReserveError>>;
    /// [`KeyState::cancel_at`], or `None` if retired.
    fn cancel_at(&self, reservation: &Reservation, now: Timestamp) -> Option<u64>;
    /// Retires the cell if its state is back at full capacity at `now` (or
    /// it is retired already) and returns `Ok`; otherwise leaves it live and
    /// returns the earliest time it can be at full capacity.
    ///
    /// # Errors
    /// The cell is not rested; the error is when it will be.
    fn retire_if_rested(&self, now: Timestamp) -> Result<(), Timestamp>;
    /// Retires the cell and hands out its state (`None` if it was retired
    /// already).
    fn retire(&self) -> Option<Self::State>;
}

/// The [`KeyCell`] of any [`KeyState`]: the state behind its own mutex
/// (`None` once retired). Each key has its own lock, so checks on
/// different keys never wait for each other.
#[derive(Debug)]
pub struct Locked<L>(Mutex<Option<L>>);

impl<L> Locked<L> {
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut L) -> R) -> Option<R> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .map(f)
    }
}

impl<L: KeyState> KeyCell for Locked<L> {
    type State = L;
    fn new(state: L) -> Self {
        Locked(Mutex::new(Some(state)))
    }
    #[inline]
    fn check_at(&self, n: u64, now: Timestamp) -> Option<Result<Decision, CheckError>> {
        self.with(|s| s.check_at(n, now))
    }
    fn peek_at(&self, n: u64, now: Timestamp) -> Option<Result<Decision, CheckError>> {
        self.with(|s| s.peek_at(n, now))
    }
    fn reserve_within_at(
        &self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Option<Result<Reservation, ReserveError>> {
        self.with(|s| s.reserve_within_at(n, now, max_wait))
    }
    fn cancel_at(&self, reservation: &Reservation, now: Timestamp) -> Option<u64> {
        self.with(|s| s.cancel_at(reservation, now))
    }
    fn retire_if_rested(&self, now: Timestamp) -> Result<(), Timestamp> {
        let mut g = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = g.as_ref() else {
            return Ok(());
        };
        match state.peek_at(1, now) {
            Ok(d) if d.reset_after.is_zero() => {
                *g = None;
                Ok(())
            }
            Ok(d) => Err(ts(full_at(now.as_nanos(), d.reset_after))),
            // Cannot happen (burst >= 1); be conservative: never rested.
            Err(_) => Err(Timestamp::MAX),
        }
    }
    fn retire(&self) -> Option<L> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// GCRA as plain fields: the default per-key state of a [`KeyedLimiter`].
/// It answers exactly as [`Gcra`](crate::Gcra) does for the same calls (see
/// that type for the algorithm); on its own it is not shareable
/// (`&mut self`); a keyed limiter shares it through a [`GcraCell`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraState {
    /// Theoretical arrival time in nanoseconds: when the limiter is full.
    tat: u64,
    quota: Quota,
}

impl GcraState {
    /// A state at full capacity.
    pub fn new(quota: Quota) -> Self {
        GcraState { tat: 0, quota }
    }

    #[inline(always)]
    fn decision(&self, allowed: bool, now: u64, tat: u64, retry: Option<u64>) -> Decision {
        let q = self.quota;
        let ahead = tat.saturating_sub(now);
        Decision {
            allowed,
            limit: q.burst(),
            remaining: q.units_in(q.window_nanos().saturating_sub(ahead)),
            reset_after: Duration::from_nanos(ahead),
            retry_after: retry.map(Duration::from_nanos),
            delay: Duration::ZERO,
        }
    }
}

impl KeyState for GcraState {
    type Cell = GcraCell;

    fn quota(&self) -> Quota {
        self.quota
    }

    fn set_quota_at(&mut self, quota: Quota, now: Timestamp) {
        let now = now.as_nanos();
        let old = self.quota;
        let ahead = u128::from(self.tat.saturating_sub(now));
        let old_e = u128::from(old.emission_nanos());
        let new_e = u128::from(quota.emission_nanos());
        let debt_new = ahead * new_e / old_e;
        let shift = i128::from(quota.burst()) - i128::from(old.burst());
        let new_ahead =
            (i128::try_from(debt_new).unwrap_or(i128::MAX) + shift * new_e as i128).max(0);
        self.tat = now.saturating_add(u64::try_from(new_ahead).unwrap_or(u64::MAX));
        self.quota = quota;
    }

    #[inline(always)]
    fn check_at(&mut self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        let now = now.as_nanos();
        let q = self.quota;
        validate_weight(n, q.burst())?;
        let base = self.tat.max(now);
        let new_tat = base.saturating_add(n * q.emission_nanos());
        let ahead = new_tat.saturating_sub(now);
        if ahead > q.window_nanos() {
            return Ok(self.decision(false, now, base, Some(ahead - q.window_nanos())));
        }
        self.tat = new_tat;
        Ok(self.decision(true, now, new_tat, None))
    }

    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        let now = now.as_nanos();
        let q = self.quota;
        validate_weight(n, q.burst())?;
        let base = self.tat.max(now);
        let ahead = base
            .saturating_add(n * q.emission_nanos())
            .saturating_sub(now);
        let retry = (ahead > q.window_nanos()).then(|| ahead - q.window_nanos());
        Ok(self.decision(retry.is_none(), now, base, retry))
    }

    fn reserve_within_at(
        &mut self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError> {
        let now_ns = now.as_nanos();
        let q = self.quota;
        validate_weight(n, q.burst())?;
        let cost = n * q.emission_nanos();
        let new_tat = self.tat.max(now_ns).saturating_add(cost);
        let wait = new_tat
            .saturating_sub(now_ns)
            .saturating_sub(q.window_nanos());
        if wait > crate::time::duration_to_nanos_saturating(max_wait) {
            return Err(ReserveError::WouldWaitTooLong {
                wait: Duration::from_nanos(wait),
                max_wait,
            });
        }
        self.tat = new_tat;
        Ok(Reservation::new(
            n,
            now,
            Timestamp::from_nanos(now_ns.saturating_add(wait)),
            new_tat,
            cost,
        ))
    }

    fn cancel_at(&mut self, reservation: &Reservation, now: Timestamp) -> u64 {
        if now > reservation.act_at() {
            return 0;
        }
        let tat = self.tat;
        let later = tat.saturating_sub(reservation.mark());
        let restore = reservation.cost().saturating_sub(later);
        if restore == 0 {
            return 0;
        }
        let new_tat = tat.saturating_sub(restore).max(now.as_nanos().min(tat));
        self.tat = new_tat;
        (tat - new_tat) / self.quota.emission_nanos()
    }
}

/// The arrival time that marks a retired [`GcraCell`]. Live arrival times
/// are kept below it (an arrival time 584 years after the clock's origin is
/// clamped by one nanosecond).
const RETIRED: u64 = u64::MAX;

/// The [`KeyCell`] of [`GcraState`]: the arrival time in one atomic word,
/// updated by compare-and-swap, next to a quota that never changes for the
/// life of the cell. A denied check only loads; an admitted one is one
/// successful compare-and-swap.
#[derive(Debug)]
pub struct GcraCell {
    tat: AtomicU64,
    quota: Quota,
}

impl GcraCell {
    /// Runs `f` on a snapshot of the state and publishes the new arrival
    /// time if `f` changed it; retries on a concurrent change.
    #[inline(always)]
    fn update<R>(&self, mut f: impl FnMut(&mut GcraState) -> R) -> Option<R> {
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            if tat == RETIRED {
                return None;
            }
            let mut s = GcraState {
                tat,
                quota: self.quota,
            };
            let r = f(&mut s);
            if s.tat == tat {
                return Some(r);
            }
            let new = s.tat.min(RETIRED - 1);
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(r),
                Err(actual) => tat = actual,
            }
        }
    }
}

impl KeyCell for GcraCell {
    type State = GcraState;
    fn new(state: GcraState) -> Self {
        GcraCell {
            tat: AtomicU64::new(state.tat.min(RETIRED - 1)),
            quota: state.quota,
        }
    }
    #[inline(always)]
    fn check_at(&self, n: u64, now: Timestamp) -> Option<Result<Decision, CheckError>> {
        self.update(|s| s.check_at(n, now))
    }
    #[inline]
    fn peek_at(&self, n: u64, now: Timestamp) -> Option<Result<Decision, CheckError>> {
        let tat = self.tat.load(Ordering::Acquire);
        (tat != RETIRED).then(|| {
            GcraState {
                tat,
                quota: self.quota,
            }
            .peek_at(n, now)
        })
    }
    fn reserve_within_at(
        &self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Option<Result<Reservation, ReserveError>> {
        self.update(|s| s.reserve_within_at(n, now, max_wait))
    }
    fn cancel_at(&self, reservation: &Reservation, now: Timestamp) -> Option<u64> {
        self.update(|s| s.cancel_at(reservation, now))
    }
    fn retire_if_rested(&self, now: Timestamp) -> Result<(), Timestamp> {
        let now = now.as_nanos();
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            if tat == RETIRED {
                return Ok(());
            }
            // Full capacity exactly when the arrival time is not ahead.
            if tat > now {
                return Err(ts(tat));
            }
            match self
                .tat
                .compare_exchange_weak(tat, RETIRED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(actual) => tat = actual,
            }
        }
    }
    fn retire(&self) -> Option<GcraState> {
        let tat = self.tat.swap(RETIRED, Ordering::AcqRel);
        (tat != RETIRED).then_some(GcraState {
            tat,
            quota: self.quota,
        })
    }
}

type Factory<L> = Box<dyn Fn(Quota) -> L + Send + Sync>;

/// A table entry: the key's cell and the quota generation its quota was
/// resolved in (both fixed for the life of the entry).
struct Slot<C> {
    cell: C,
    generation: u32,
}

/// Bookkeeping of one shard: its keys (exactly those of the table whose
/// hash picks this shard) and the sweep's cursor into them.
struct Shard<K> {
    keys: Vec<K>,
    /// Next index the sweep examines.
    cursor: usize,
}

type Table<K, L, S> = papaya::HashMap<K, Slot<<L as KeyState>::Cell>, S>;

/// A rate limiter per key. See the [module docs](self).
///
/// `K` is the key, `L` the per-key state (any [`KeyState`]: [`GcraState`]
/// by default, or any [`RateLimiter`]), `C` the
/// clock used by the convenience methods without `_at`, `S` the hasher.
pub struct KeyedLimiter<K, L: KeyState = GcraState, C = MonotonicClock, S = DefaultHashBuilder> {
    table: Table<K, L, S>,
    shards: Box<[CachePadded<Mutex<Shard<K>>>]>,
    shard_mask: usize,
    per_shard_cap: usize,
    max_keys: usize,
    hasher: S,
    factory: Factory<L>,
    default_quota: QuotaCell,
    generation: AtomicU64,
    overrides: RwLock<HashMap<K, Quota, S>>,
    has_overrides: AtomicBool,
    evictions: AtomicU64,
    refusals: AtomicU64,
    clock: C,
}

/// Configures a [`KeyedLimiter`]; from [`KeyedLimiter::builder`].
pub struct KeyedBuilder<K, L, C, S> {
    key: std::marker::PhantomData<fn() -> K>,
    quota: Quota,
    max_keys: usize,
    shards: usize,
    preallocate: bool,
    factory: Factory<L>,
    clock: C,
    hasher: S,
}

impl<K> KeyedLimiter<K> {
    /// Starts configuring a keyed limiter whose keys get `quota` by default,
    /// with GCRA per key, the production clock and a randomly seeded hasher.
    /// Defaults: at most 100 000 keys, 4 × CPUs shards, no preallocation.
    pub fn builder(quota: Quota) -> KeyedBuilder<K, GcraState, MonotonicClock, DefaultHashBuilder> {
        KeyedBuilder {
            key: std::marker::PhantomData,
            quota,
            max_keys: 100_000,
            shards: std::thread::available_parallelism().map_or(4, usize::from) * 4,
            preallocate: false,
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
        self.max_keys = max_keys.max(1);
        self
    }

    /// The number of shards, rounded up to a power of two (1 to 65 536).
    /// Shards serialise inserts and evictions only; checks of tracked keys
    /// take no shard lock.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Size the table and the key lists for the full cap up front: no
    /// growth (and no migration) happens later.
    pub fn preallocate(mut self, yes: bool) -> Self {
        self.preallocate = yes;
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
            quota: self.quota,
            max_keys: self.max_keys,
            shards: self.shards,
            preallocate: self.preallocate,
            factory: Box::new(factory),
            clock: self.clock,
            hasher: self.hasher,
        }
    }

    /// The clock read by the convenience methods (`check`, `peek`).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<K, L, C2, S> {
        KeyedBuilder {
            key: std::marker::PhantomData,
            quota: self.quota,
            max_keys: self.max_keys,
            shards: self.shards,
            preallocate: self.preallocate,
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
            quota: self.quota,
            max_keys: self.max_keys,
            shards: self.shards,
            preallocate: self.preallocate,
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
        // A power of two no larger than max_keys, so each shard holds >= 1.
        let mut shards = self.shards.clamp(1, 1 << 16).next_power_of_two();
        while shards > self.max_keys {
            shards /= 2;
        }
        let per_shard_cap = self.max_keys / shards;
        let max_keys = per_shard_cap * shards;
        let shard_vec = (0..shards)
            .map(|_| {
                let cap = if self.preallocate { per_shard_cap } else { 0 };
                CachePadded::new(Mutex::new(Shard {
                    keys: Vec::with_capacity(cap),
                    cursor: 0,
                }))
            })
            .collect();
        let table = papaya::HashMap::builder()
            .hasher(self.hasher.clone())
            .capacity(if self.preallocate { max_keys } else { 0 })
            // Incremental migration would leave a read-only table half
            // migrated (and every lookup probing two tables) until enough
            // inserts come by; a blocking copy finishes inside the insert
            // that started it. Checks of tracked keys never wait for it.
            .resize_mode(papaya::ResizeMode::Blocking)
            .build();
        KeyedLimiter {
            table,
            shards: shard_vec,
            shard_mask: shards - 1,
            per_shard_cap,
            max_keys,
            overrides: RwLock::new(HashMap::with_hasher(self.hasher.clone())),
            hasher: self.hasher,
            factory: self.factory,
            default_quota: QuotaCell::new(self.quota),
            generation: AtomicU64::new(0),
            has_overrides: AtomicBool::new(false),
            evictions: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            clock: self.clock,
        }
    }
}

#[inline]
fn ts(n: u64) -> Timestamp {
    Timestamp::from_nanos(n)
}

#[inline]
fn full_at(now: u64, reset_after: Duration) -> u64 {
    now.saturating_add(crate::time::duration_to_nanos_saturating(reset_after))
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
    #[inline(always)]
    pub fn check_at(&self, key: &K, n: u64, now: Timestamp) -> Result<Decision, KeyedError> {
        Ok(self.with_cell(key, now, |c| c.check_at(n, now))??)
    }

    /// [`KeyedLimiter::check_at`] at the clock's current time.
    ///
    /// # Errors
    /// As [`KeyedLimiter::check_at`].
    #[inline(always)]
    pub fn check(&self, key: &K, n: u64) -> Result<Decision, KeyedError> {
        self.check_at(key, n, self.clock.now())
    }

    /// What [`KeyedLimiter::check_at`] would answer, changing nothing (an
    /// unknown key is answered as a fresh one and not added).
    ///
    /// # Errors
    /// [`CheckError`] for an invalid weight.
    pub fn peek_at(&self, key: &K, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        match self.with_existing(key, now, |c| c.peek_at(n, now)) {
            Some(r) => r,
            None => (self.factory)(self.quota_for(key)).peek_at(n, now),
        }
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
        Ok(self.with_cell(key, now, |c| c.reserve_within_at(n, now, max_wait))??)
    }

    /// Hands back a reservation made on `key`; see
    /// [`RateLimiter::cancel_at`]. Returns the units given back (0 if the
    /// key is no longer tracked: it was evicted, so it was rested already).
    pub fn cancel_at(&self, key: &K, reservation: &Reservation, now: Timestamp) -> u64 {
        self.with_existing(key, now, |c| c.cancel_at(reservation, now))
            .unwrap_or(0)
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
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut s = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let gen = self.current_generation();
            let budget = budget.min(s.keys.len());
            dropped += self.sweep(&mut s, now.as_nanos(), budget, gen, false).0;
        }
        dropped
    }

    /// Keys currently tracked (takes each shard's lock in turn).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).keys.len())
            .sum()
    }

    /// `true` if no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys tracked at once: the configured `max_keys` rounded
    /// down to a multiple of the shard count.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Keys dropped so far because they were rested.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// New keys refused so far with [`KeyedError::Full`].
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// The clock of the convenience methods.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The bytes per tracked key for this `K` and `L`, with the table at its
    /// largest load (3/4 of its slots used); a table that has just grown, or
    /// is migrating to a larger one, uses up to twice the slot space. Heap
    /// memory owned by a key (a `String`'s text) comes on top, twice.
    pub fn estimated_bytes_per_key() -> usize {
        // The table: a pointer and a control byte per slot, at most 3/4
        // full. Each entry is its own allocation of (key, slot), rounded up
        // to the allocator's 16-byte classes after an 8-byte header. The
        // shard's key list holds a second copy of the key.
        let slot = (std::mem::size_of::<usize>() + 1) * 4 / 3;
        let entry = std::mem::size_of::<(K, Slot<L::Cell>)>();
        let allocated = (entry + 8).div_ceil(16) * 16;
        slot + allocated + std::mem::size_of::<K>()
    }

    // ---- internals ----

    #[inline]
    fn current_generation(&self) -> u32 {
        // Truncation is fine: a generation only needs to differ from the
        // one an entry saw, and 2^32 quota changes between two uses of one
        // key would at worst delay a quota change to the key's next use.
        self.generation.load(Ordering::Acquire) as u32
    }

    fn lock_shard(&self, key: &K) -> MutexGuard<'_, Shard<K>> {
        let hash = self.hasher.hash_one(key);
        // High bits: the table uses the low ones of its own hash of the key.
        let i = (hash >> 40) as usize & self.shard_mask;
        let shard = match self.shards.get(i) {
            Some(s) => s,
            // Unreachable: the mask is len - 1. Stay panic-free anyway.
            None => &self.shards[0],
        };
        shard.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// The hit path: no lock. `None` from `f` means the cell was retired
    /// (or is of an older quota generation); then the key is looked up
    /// again under its shard's lock.
    #[inline(always)]
    fn with_cell<R>(
        &self,
        key: &K,
        now: Timestamp,
        f: impl Fn(&L::Cell) -> Option<R>,
    ) -> Result<R, KeyedError> {
        let gen = self.current_generation();
        {
            let guard = self.table.guard();
            if let Some(slot) = self.table.get(key, &guard) {
                if slot.generation == gen {
                    if let Some(r) = f(&slot.cell) {
                        return Ok(r);
                    }
                }
            }
        }
        self.with_cell_locked(key, now, f)
    }

    #[cold]
    #[inline(never)]
    fn with_cell_locked<R>(
        &self,
        key: &K,
        now: Timestamp,
        f: impl Fn(&L::Cell) -> Option<R>,
    ) -> Result<R, KeyedError> {
        let mut shard = self.lock_shard(key);
        let guard = self.table.guard();
        let gen = self.current_generation();
        let slot = match self.table.get(key, &guard) {
            Some(slot) if slot.generation == gen => slot,
            Some(slot) => self.refresh(key, slot, now, gen, &guard),
            None => self.insert_new(&mut shard, key, now, gen, &guard)?,
        };
        match f(&slot.cell) {
            Some(r) => Ok(r),
            // Unreachable: cells are retired only under the shard lock we
            // hold, and a retired cell is replaced or removed in the same
            // critical section. Stay panic-free: start the key afresh.
            None => {
                let fresh = self.replace(key, (self.factory)(self.quota_for(key)), gen, &guard);
                f(&fresh.cell).ok_or(KeyedError::Full {
                    max_keys: self.max_keys,
                    retry_after: Duration::ZERO,
                })
            }
        }
    }

    /// Runs `f` on the key's cell if the key is tracked; never inserts.
    #[inline]
    fn with_existing<R>(
        &self,
        key: &K,
        now: Timestamp,
        f: impl Fn(&L::Cell) -> Option<R>,
    ) -> Option<R> {
        let gen = self.current_generation();
        {
            let guard = self.table.guard();
            match self.table.get(key, &guard) {
                None => return None,
                Some(slot) if slot.generation == gen => {
                    if let Some(r) = f(&slot.cell) {
                        return Some(r);
                    }
                }
                Some(_) => {}
            }
        }
        let _shard = self.lock_shard(key);
        let guard = self.table.guard();
        let gen = self.current_generation();
        let slot = match self.table.get(key, &guard) {
            None => return None,
            Some(slot) if slot.generation == gen => slot,
            Some(slot) => self.refresh(key, slot, now, gen, &guard),
        };
        f(&slot.cell)
    }

    /// Puts a live cell with `state` in the key's entry. Caller holds the
    /// key's shard lock and the key is in the shard's list.
    fn replace<'g>(
        &self,
        key: &K,
        state: L,
        gen: u32,
        guard: &'g papaya::LocalGuard<'_>,
    ) -> &'g Slot<L::Cell> {
        let slot = Slot {
            cell: L::Cell::new(state),
            generation: gen,
        };
        // Removing first lets `get_or_insert` hand back the new entry.
        // Concurrent checks of this key find no entry meanwhile and wait
        // for the shard lock we hold.
        self.table.remove(key, guard);
        self.table.get_or_insert(key.clone(), slot, guard)
    }

    /// Re-resolves the key's quota: retires the entry and replaces it with
    /// a converted one. Caller holds the key's shard lock.
    fn refresh<'g>(
        &self,
        key: &K,
        slot: &Slot<L::Cell>,
        now: Timestamp,
        gen: u32,
        guard: &'g papaya::LocalGuard<'_>,
    ) -> &'g Slot<L::Cell> {
        let q = self.quota_for(key);
        let state = match slot.cell.retire() {
            Some(mut s) => {
                if s.quota() != q {
                    s.set_quota_at(q, now);
                }
                s
            }
            // Unreachable (retired cells do not stay in the table).
            None => (self.factory)(q),
        };
        self.replace(key, state, gen, guard)
    }

    fn apply_now(&self, key: &K, now: Timestamp) {
        let _shard = self.lock_shard(key);
        let guard = self.table.guard();
        let gen = self.current_generation();
        if let Some(slot) = self.table.get(key, &guard) {
            self.refresh(key, slot, now, gen, &guard);
        }
    }

    /// Examines up to `budget` keys from the cursor, dropping rested ones.
    /// Returns (dropped, soonest time a kept one is rested).
    fn sweep(
        &self,
        shard: &mut Shard<K>,
        now: u64,
        budget: usize,
        gen: u32,
        stop_at_first: bool,
    ) -> (usize, u64) {
        let guard = self.table.guard();
        let mut dropped = 0;
        let mut soonest = u64::MAX;
        for _ in 0..budget {
            if shard.cursor >= shard.keys.len() {
                shard.cursor = 0;
            }
            let idx = shard.cursor;
            let Some(k) = shard.keys.get(idx) else {
                break;
            };
            let rested = match self.table.get(k, &guard) {
                Some(slot) => {
                    // Rested under the key's current quota (a larger burst
                    // makes a rested key owe the difference).
                    let slot = if slot.generation == gen {
                        slot
                    } else {
                        self.refresh(k, slot, ts(now), gen, &guard)
                    };
                    slot.cell.retire_if_rested(ts(now))
                }
                // Unreachable (the list mirrors the table); drop the key.
                None => Ok(()),
            };
            match rested {
                Ok(()) => {
                    self.table.remove(k, &guard);
                    // The last key moves into `idx`; the cursor stays to
                    // examine it next.
                    let _ = shard.keys.swap_remove(idx);
                    dropped += 1;
                    if stop_at_first {
                        break;
                    }
                }
                Err(at) => {
                    soonest = soonest.min(at.as_nanos());
                    shard.cursor = idx + 1;
                }
            }
        }
        if dropped > 0 {
            self.evictions.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        (dropped, soonest)
    }

    /// Adds a key not in the table, making room first. Caller holds the
    /// key's shard lock (`shard`).
    fn insert_new<'g>(
        &self,
        shard: &mut Shard<K>,
        key: &K,
        now: Timestamp,
        gen: u32,
        guard: &'g papaya::LocalGuard<'_>,
    ) -> Result<&'g Slot<L::Cell>, KeyedError> {
        let now_ns = now.as_nanos();
        // Below half the cap, rested keys cost only memory the cap allows;
        // dropping them early would only make a returning key pay for a
        // new entry (and a workload of keys that rest between visits would
        // churn the table). Above it, expire them as keys arrive.
        if shard.keys.len() >= self.per_shard_cap / 2 {
            let budget = SWEEP_PER_INSERT.min(shard.keys.len());
            self.sweep(shard, now_ns, budget, gen, false);
        }
        if shard.keys.len() >= self.per_shard_cap {
            let budget = SCAN_WHEN_FULL.min(shard.keys.len());
            let (dropped, soonest) = self.sweep(shard, now_ns, budget, gen, true);
            if dropped == 0 {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                let retry = if soonest == u64::MAX {
                    self.default_quota.load().window()
                } else {
                    Duration::from_nanos(soonest.saturating_sub(now_ns))
                };
                return Err(KeyedError::Full {
                    max_keys: self.max_keys,
                    retry_after: retry,
                });
            }
        }
        shard.keys.push(key.clone());
        let slot = Slot {
            cell: L::Cell::new((self.factory)(self.quota_for(key))),
            generation: gen,
        };
        Ok(self.table.get_or_insert(key.clone(), slot, guard))
    }
}

impl<K, L: KeyState, C, S> std::fmt::Debug for KeyedLimiter<K, L, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("default_quota", &self.default_quota.load())
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards.len())
            .field("evictions", &self.evictions.load(Ordering::Relaxed))
            .field("refusals", &self.refusals.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token_bucket::TokenBucket;

    fn ms(n: u64) -> Timestamp {
        Timestamp::from_nanos(n * 1_000_000)
    }

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
        assert_eq!(k.cancel_at(&1, &r, ms(0)), 10);
        // Rested again, so it may go.
        assert_eq!(k.maintain(ms(0), usize::MAX), 1);
        assert_eq!(k.cancel_at(&1, &r, ms(0)), 0);
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

    proptest::proptest! {
        /// `GcraState` answers exactly as `Gcra` for every call.
        #[test]
        fn gcra_state_is_gcra(ops in proptest::collection::vec((0u8..5, 1u64..6, 0u64..300, 1u64..12), 1..200)) {
            let q0 = Quota::per_second(10).unwrap().with_burst(5).unwrap();
            let a = crate::Gcra::with_clock(q0, NoClock);
            let mut b = GcraState::new(q0);
            let mut now = 0;
            let mut held: Vec<Reservation> = Vec::new();
            for (op, n, dt, burst) in ops {
                now += dt;
                let t = ms(now);
                match op {
                    0 => proptest::prop_assert_eq!(RateLimiter::check_at(&a, n, t), KeyState::check_at(&mut b, n, t)),
                    1 => proptest::prop_assert_eq!(RateLimiter::peek_at(&a, n, t), KeyState::peek_at(&b, n, t)),
                    2 => {
                        let w = Duration::from_millis(dt);
                        let (ra, rb) = (RateLimiter::reserve_within_at(&a, n, t, w), KeyState::reserve_within_at(&mut b, n, t, w));
                        proptest::prop_assert_eq!(ra.clone(), rb);
                        if let Ok(r) = ra { held.push(r); }
                    }
                    3 => if let Some(r) = held.pop() {
                        proptest::prop_assert_eq!(RateLimiter::cancel_at(&a, &r, t), KeyState::cancel_at(&mut b, &r, t));
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
        // however the threads interleave, and the cap is never exceeded.
        let k = KeyedLimiter::<u64>::builder(Quota::per_second(25).unwrap())
            .max_keys(64)
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
        assert!(k.len() <= 64);
    }

    /// Retiring is atomic with respect to checks: a retirement that
    /// succeeds saw no admission, and no admission lands after it.
    fn retire_races_check<Cc: KeyCell + 'static>(make: impl Fn() -> Cc) {
        let t = ms(10_000);
        for _ in 0..2000 {
            let cell = make();
            let (admitted, retired) = std::thread::scope(|s| {
                let a = s.spawn(|| matches!(cell.check_at(1, t), Some(Ok(d)) if d.allowed));
                let b = s.spawn(|| cell.retire_if_rested(t).is_ok());
                (a.join().unwrap(), b.join().unwrap())
            });
            assert!(
                admitted != retired,
                "admitted {admitted}, retired {retired}"
            );
            assert!(cell.check_at(1, t).is_none() || !retired);
        }
    }

    #[test]
    fn gcra_cell_retire_is_atomic() {
        let q = Quota::per_second(1).unwrap().with_burst(1).unwrap();
        retire_races_check(|| GcraCell::new(GcraState::new(q)));
    }

    #[test]
    fn locked_cell_retire_is_atomic() {
        let q = Quota::per_second(1).unwrap().with_burst(1).unwrap();
        retire_races_check(|| Locked::new(TokenBucket::with_clock(q, NoClock)));
    }

    #[test]
    fn eviction_racing_checks_never_admits_twice() {
        // Burst 1: a key may admit once at `t`. Eviction of the key (rested
        // at `t`) races the checks; a lost admission would let the second
        // check admit again on a re-created key.
        let q = Quota::per_second(1).unwrap().with_burst(1).unwrap();
        let t = ms(10_000);
        for _ in 0..500 {
            let k = KeyedLimiter::<u64>::builder(q)
                .max_keys(4)
                .shards(1)
                .build();
            assert!(k.check_at(&1, 1, ms(0)).unwrap().allowed);
            let admitted = std::thread::scope(|s| {
                let a = s.spawn(|| {
                    (0..3)
                        .filter(|_| matches!(k.check_at(&1, 1, t), Ok(d) if d.allowed))
                        .count()
                });
                let b = s.spawn(|| k.maintain(t, usize::MAX));
                let n = a.join().unwrap();
                let _ = b.join().unwrap();
                n
            });
            assert_eq!(admitted, 1);
        }
    }

    #[test]
    fn quota_changes_racing_checks_stay_exact() {
        // Re-configuring a key replaces its entry while another thread
        // checks it: the units spent are carried over exactly.
        let q = Quota::per_second(1).unwrap().with_burst(10).unwrap();
        let t = ms(0);
        for _ in 0..200 {
            let k = KeyedLimiter::<u64>::builder(q)
                .max_keys(4)
                .shards(1)
                .build();
            let admitted = std::thread::scope(|s| {
                let a = s.spawn(|| {
                    (0..20)
                        .filter(|_| matches!(k.check_at(&1, 1, t), Ok(d) if d.allowed))
                        .count()
                });
                let b = s.spawn(|| {
                    for _ in 0..5 {
                        k.set_key_quota_at(&1, q, t);
                        k.set_default_quota(q);
                    }
                });
                let n = a.join().unwrap();
                b.join().unwrap();
                n
            });
            assert_eq!(admitted, 10);
        }
    }

    #[test]
    fn bytes_per_key_is_what_the_docs_say() {
        assert_eq!(std::mem::size_of::<GcraState>(), 32);
        assert_eq!(std::mem::size_of::<crate::Gcra<NoClock>>(), 256);
        assert_eq!(std::mem::size_of::<GcraCell>(), 32);
        assert_eq!(std::mem::size_of::<Slot<GcraCell>>(), 40);
        assert_eq!(KeyedLimiter::<u64>::estimated_bytes_per_key(), 84);
    }
}
