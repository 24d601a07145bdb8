//! The Generic Cell Rate Algorithm, lock-free.
//!
//! GCRA keeps one number, the *theoretical arrival time* (TAT): the moment at
//! which the limiter would be back at full capacity. A request of weight `n`
//! at `now` would move it to `max(TAT, now) + n·T` (T is the emission
//! interval); it is admitted if that is no more than `τ = burst·T` ahead of
//! `now`. That is exactly a token bucket whose "tokens" are
//! `burst − (TAT − now)/T` — the two admit the same sequences, which a
//! property test checks — but with a single word of state it can live in one
//! `AtomicU64` and be updated with compare-and-swap:
//!
//! * an admitted check is one load and one successful CAS;
//! * **a denied check writes nothing**, so a flood of denials does not bounce
//!   the cache line between cores;
//! * a lost CAS race retries with the fresh TAT, so no admission is ever
//!   based on a stale value.
//!
//! The quota lives beside the TAT in a small sequence lock, so every check
//! sees one consistent (interval, burst) pair. [`RateLimiter::set_quota_at`]
//! runs concurrently with checks: it swaps the TAT for a sentinel, converts
//! it to the new quota's units, publishes the new quota, and only then puts
//! the converted TAT back. A check that meets the sentinel waits those few
//! nanoseconds; a check that read the old TAT fails its CAS and starts again
//! with the new quota. So no check ever combines a new quota with an arrival
//! time measured in the old one's units. (Re-configuration is the one moment
//! a check may wait on another thread; checks never wait on each other.)

use std::time::Duration;

use crate::decision::Decision;
use crate::error::{CheckError, ReserveError};
use crate::limiter::{validate_weight, RateLimiter, Reservation};
use crate::quota::Quota;
use crate::sync::{fence, spin_wait, AtomicU64, Ordering};
use crate::time::{Clock, MonotonicClock, Timestamp};

/// A lock-free GCRA limiter. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use ratewise::{Gcra, ManualClock, Quota, RateLimiter};
///
/// let clock = ManualClock::new();
/// let limiter = Gcra::with_clock(Quota::per_second(5)?, clock.clone());
/// for _ in 0..5 {
///     assert!(limiter.check(1)?.is_allowed());
/// }
/// let denied = limiter.check(1)?;
/// assert_eq!(denied.retry_after, Some(Duration::from_millis(200)));
/// clock.advance(Duration::from_millis(200));
/// assert!(limiter.check(1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Gcra<C = MonotonicClock> {
    /// Theoretical arrival time, nanoseconds on the clock's scale. Alone on
    /// its cache line: under contention this line bounces between cores, and
    /// the read-mostly quota and clock must not bounce with it.
    tat: CacheAligned<AtomicU64>,
    /// The act time of the latest reservation (Go `x/time/rate`'s
    /// `lastEvent`), for cancellation. Raised *before* a reservation's CAS,
    /// so a cancel never misses a reservation that was promised room after
    /// it (a stale, higher value only makes cancels return less), and never
    /// lowered, not even by cancelling the latest reservation (see
    /// [`give_back`](crate::limiter::give_back)). Checks do not touch
    /// it: an admitted check acts at `now`, never after an outstanding
    /// reservation.
    last_act: CacheAligned<AtomicU64>,
    config: FrameCell,
    clock: C,
}

// The TAT word: the top `GEN_BITS` bits count re-configurations, the rest
// hold the arrival time in nanoseconds *relative to the limiter's origin*
// (kept beside the quota in `config`).
//
// Why a check cannot pair a word with the wrong quota: it reads the word
// *inside* the quota's sequence-lock read ([`Gcra::snapshot`]), so the word,
// the quota and the origin it decides on were the limiter's state at one
// instant — a denial is linearised there. An admission commits with a CAS on
// that word; every re-configuration (a quota change or a move of the origin)
// changes the word, through the generation bits, even when the converted
// time happens to be the same number, so a CAS from before it fails. The
// generation wraps after 2^GEN_BITS re-configurations: a CAS could then only
// succeed on a word that came back bit for bit, which takes a multiple of
// four re-configurations between one check's read and its CAS *and* an
// identical arrival time *and* a different quota at the end (a limiter
// toggled between two quotas is back at the quota it was read with, so even
// then the commit is exact). A wider generation would close that case too,
// at the cost of the value domain below.
//
// The domain, and why nothing saturates into an admission: a quota's window
// is at most `MAX_WINDOW_NANOS` (2^61 ns); a relative `now` is at most
// `REBASE_AT` (2^60 ns) — a later `now` first moves the origin up to it
// (`rebase`, cold, once per 36 years of timeline); a reservation waits at
// most `MAX_RESERVE_WAIT`. So every arrival time the arithmetic commits is at
// most `REBASE_AT + MAX_WINDOW_NANOS + MAX_RESERVE_WAIT = TAT_MAX`, and every
// intermediate sum is below 2^63: exact, with no clamp anywhere on the path
// that decides.
//
// Where the origin sits must not change an answer, except in the one
// documented way (a caller more than `REBASE_SLACK` behind the latest time
// that moved it is decided at the origin, `math::Off::Behind`). So the
// origin moves by one rule, `math::Frame::place`, which the keyed
// `GcraState` follows too: only a `now` more than `REBASE_AT` past it moves
// it, and only on a call that may write (check, reserve, cancel, quota
// change) — a peek places a copy. The one clamp off the deciding path (a
// debt converted to a much slower quota) is measured from `now`, never from
// the origin (`MAX_AHEAD`). The property tests in `tests/gcra_agreement.rs`
// hold `Gcra` to this: a peek changes nothing, and the keyed state answers
// exactly as `Gcra`, over the whole domain.
const GEN_BITS: u32 = 2;
const VALUE_MASK: u64 = u64::MAX >> GEN_BITS;
/// The word while a re-configuration converts it; no real word equals it
/// because stored times stay below [`TAT_MAX`] + 1.
const RECONFIGURING: u64 = u64::MAX;
/// The largest relative arrival time the word holds (2^62 − 2).
pub(crate) const TAT_MAX: u64 = VALUE_MASK - 1;
/// The largest relative `now` used as is; a later one moves the origin.
pub(crate) const REBASE_AT: u64 = 1 << 60;
/// How far behind a `now` that moves the origin the new origin is put, so
/// that callers whose `now` is a little stale (up to 18 years) are still
/// measured from their own `now`.
pub(crate) const REBASE_SLACK: u64 = 1 << 59;
/// The longest a reservation may wait; defined beside [`Reservation`] (every
/// algorithm caps its waits there) and exactly what the word leaves room for.
pub use crate::limiter::MAX_RESERVE_WAIT;
const _: () = assert!(
    MAX_RESERVE_WAIT.as_nanos() == (TAT_MAX - REBASE_AT - crate::quota::MAX_WINDOW_NANOS) as u128
);
/// The furthest an arrival time is ever committed ahead of the `now` that
/// commits it (a full window plus the longest reservation wait): with a
/// relative `now` of at most [`REBASE_AT`], every committed time is at most
/// [`TAT_MAX`], wherever the origin sits.
pub(crate) const MAX_AHEAD: u64 = TAT_MAX - REBASE_AT;

#[inline]
fn split(word: u64) -> (u64, u64) {
    (word & !VALUE_MASK, word & VALUE_MASK)
}

impl Gcra<MonotonicClock> {
    /// A limiter on the production clock, starting with its full burst.
    pub fn new(quota: Quota) -> Self {
        Gcra::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> Gcra<C> {
    /// A limiter on `clock`, starting with its full burst.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Gcra::with_tat(quota, clock, 0, 0)
    }

    /// A limiter on `clock` that starts empty: the first unit becomes
    /// available one interval after the clock's current time.
    pub fn empty_with_clock(quota: Quota, clock: C) -> Self {
        // The origin is the clock's current time, so the first arrival
        // time is one window ahead of it, exactly, at any timestamp.
        let now = clock.now().as_nanos();
        let origin = now.saturating_sub(REBASE_SLACK);
        Gcra::with_tat(quota, clock, origin, now - origin + quota.window_nanos())
    }

    fn with_tat(quota: Quota, clock: C, origin: u64, tat: u64) -> Self {
        Gcra {
            tat: CacheAligned(AtomicU64::new(tat)),
            last_act: CacheAligned(AtomicU64::new(0)),
            config: FrameCell::new(quota, origin),
            clock,
        }
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Forgets every unit granted and every credit saved: the next unit is
    /// available at `at` and the ones after it one interval apart (credit
    /// builds up from `at` on, as in any idle limiter). What earlier
    /// reservations were promised is no longer counted against later ones:
    /// a caller that reserved before this and has not acted yet should
    /// reserve again. For a client pacer that re-plans its schedule after a
    /// change of pace; a server limiter has no use for it.
    pub fn restart_at(&self, at: Timestamp) {
        // A reservation at `t <= at` commits `max(tat, t) + e` and acts at
        // that minus the window: exactly `at`.
        self.reconfigure_at(at, |quota, _, at| {
            let tat = (at + quota.window_nanos())
                .saturating_sub(quota.emission_nanos())
                .min(TAT_MAX);
            (quota, tat)
        });
    }

    /// Replaces the quota and the TAT with what `f(quota, tat, now)` makes
    /// of them, `tat` and `now` relative to the origin, placed first as any
    /// call that writes places it ([`math::Frame::place`]; a `now` before
    /// the origin is taken at the origin). Writers are serialised; checks go
    /// on until they meet the sentinel.
    fn reconfigure_at(&self, now: Timestamp, f: impl FnOnce(Quota, u64, u64) -> (Quota, u64)) {
        let writer = self.config.lock_writer();
        let (old, origin) = self.config.load();
        let (generation, tat) = split(self.tat.swap(RECONFIGURING, Ordering::AcqRel));
        let (frame, now) = math::Frame { origin, tat }.place(now.as_nanos());
        let (origin, tat) = (frame.origin, frame.tat);
        let now = now.unwrap_or(0);
        let (quota, new_tat) = f(old, tat, now);
        let next_generation = generation.wrapping_add(VALUE_MASK + 1);
        self.config.store_locked(&writer, quota, origin);
        // Publishing the TAT after the quota: a check that sees the new TAT
        // also sees the new quota (Release here, Acquire in the seqlock).
        self.tat.store(next_generation | new_tat, Ordering::Release);
    }

    /// The quota, the origin and the TAT word as they were at one instant
    /// (the word is read inside the quota's sequence-lock read), waiting out
    /// a re-configuration in progress.
    #[inline(always)]
    fn snapshot(&self) -> Snapshot {
        loop {
            // A re-configuration in progress is waited out on the word
            // alone, not by retrying the sequence-lock read.
            if self.tat.load(Ordering::Relaxed) != RECONFIGURING {
                let snap = self.config.load_with(&self.tat);
                if snap.word != RECONFIGURING {
                    return snap;
                }
            }
            // Returns nothing, so that no snapshot passes through memory
            // on the hot path: one returned from a call would (it is six
            // words), and the compiler would then keep every snapshot on the
            // stack, reloading each word the check needs.
            self.wait_out_reconfiguring();
        }
    }

    /// Spins until no re-configuration is in progress. Cold: only a
    /// re-configuration in flight leads here.
    #[cold]
    #[inline(never)]
    fn wait_out_reconfiguring(&self) {
        while self.tat.load(Ordering::Relaxed) == RECONFIGURING {
            spin_wait();
        }
    }

    /// After a lost CAS that found `actual`: the snapshot to retry from.
    /// While the quota's sequence is unchanged, `actual` belongs with the
    /// same quota and origin (a re-configuration publishes its quota before
    /// its word, and the failed CAS read `actual` with Acquire), so only the
    /// word is replaced; otherwise the whole state is read again.
    #[inline(always)]
    fn after_lost_race(&self, snap: &mut Snapshot, actual: u64) {
        if actual != RECONFIGURING && self.config.sequence() == snap.sequence {
            snap.word = actual;
        } else {
            *snap = self.snapshot();
        }
    }

    /// `now_abs` relative to `snap`'s origin, for a call that may write. A
    /// `now_abs` too far past the origin moves the stored origin up first
    /// ([`Gcra::rebase`]) and replaces `snap` with the state after it; one
    /// before the origin is `Err(origin)`, for the caller to decide at the
    /// origin. (A peek places a copy instead: [`math::Frame::place`].)
    #[inline(always)]
    fn relative_now(&self, snap: &mut Snapshot, now_abs: u64) -> Result<u64, u64> {
        loop {
            match math::relative(now_abs, snap.origin) {
                Ok(now) => return Ok(now),
                Err(math::Off::Ahead) => {
                    self.rebase(now_abs);
                    *snap = self.snapshot();
                }
                Err(math::Off::Behind) => return Err(snap.origin),
            }
        }
    }

    /// A check from a caller whose `now` is before the origin (see
    /// [`math::Off::Behind`]). Cold.
    #[cold]
    #[inline(never)]
    fn check_behind(&self, n: u64, now: u64, origin: u64) -> Result<Decision, CheckError> {
        let d = self.check_at(n, Timestamp::from_nanos(origin))?;
        Ok(math::later(d, origin - now))
    }

    /// Moves the origin up behind `now` (a `now` more than [`REBASE_AT`] past
    /// the origin); the caller takes a new snapshot after it. Cold: once per
    /// 36 years of timeline, or when a caller's timestamps jump that far.
    #[cold]
    #[inline(never)]
    fn rebase(&self, now: u64) {
        let writer = self.config.lock_writer();
        let (quota, origin) = self.config.load();
        if matches!(math::relative(now, origin), Err(math::Off::Ahead)) {
            let (generation, tat) = split(self.tat.swap(RECONFIGURING, Ordering::AcqRel));
            let (frame, _) = math::Frame { origin, tat }.place(now);
            self.config.store_locked(&writer, quota, frame.origin);
            self.tat.store(
                generation.wrapping_add(VALUE_MASK + 1) | frame.tat,
                Ordering::Release,
            );
        }
    }
}

impl<C: Clock> RateLimiter for Gcra<C> {
    fn quota(&self) -> Quota {
        self.config.load().0
    }

    fn set_quota_at(&self, quota: Quota, now: Timestamp) {
        // Preserve the number of available units (see `math::convert`).
        self.reconfigure_at(now, |old, tat, now| {
            (quota, math::convert(tat, now, old, quota))
        });
    }

    // Always inlined: the hot path is a handful of instructions around one
    // CAS, and inlining lets a caller that reads only `allowed` drop the rest
    // of the evidence.
    #[inline(always)]
    fn check_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        let now_abs = now.as_nanos();
        // One consistent state: a denial is decided on it and stands; an
        // admission commits only if the word is still the same (see the note
        // on the word's layout).
        let mut snap = self.snapshot();
        loop {
            let now = match self.relative_now(&mut snap, now_abs) {
                Ok(now) => now,
                Err(origin) => return self.check_behind(n, now_abs, origin),
            };
            let Snapshot { quota: q, word, .. } = snap;
            let (generation, tat) = split(word);
            validate_weight(n, q.burst())?;
            let new_tat = match math::admit(tat, now, n, q) {
                math::Admission::Admit { new_tat } => new_tat,
                math::Admission::Deny { base, retry } => {
                    return Ok(math::Admission::denial(base, retry, q, now))
                }
            };
            match self.tat.compare_exchange_weak(
                word,
                generation | new_tat,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(math::decision(true, q, now, new_tat, None)),
                Err(actual) => self.after_lost_race(&mut snap, actual),
            }
        }
    }

    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        let now_abs = now.as_nanos();
        let snap = self.snapshot();
        let (_, tat) = split(snap.word);
        // Placed on a copy: a peek moves no origin (a stored move would
        // change how a later stale caller is answered).
        let frame = math::Frame {
            origin: snap.origin,
            tat,
        };
        let (frame, now) = match frame.place(now_abs) {
            (frame, Ok(now)) => (frame, now),
            (frame, Err(origin)) => {
                validate_weight(n, snap.quota.burst())?;
                let d = math::peek(frame.tat, 0, n, snap.quota);
                return Ok(math::later(d, origin - now_abs));
            }
        };
        validate_weight(n, snap.quota.burst())?;
        Ok(math::peek(frame.tat, now, n, snap.quota))
    }

    fn reserve_within_at(
        &self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError> {
        let now_abs = now.as_nanos();
        let mut snap = self.snapshot();
        loop {
            let now_ns = match self.relative_now(&mut snap, now_abs) {
                Ok(now) => now,
                // Decided at the origin, as a check would be.
                Err(origin) => {
                    return self.reserve_within_at(n, Timestamp::from_nanos(origin), max_wait);
                }
            };
            let Snapshot {
                quota: q,
                origin,
                word,
                ..
            } = snap;
            let (generation, tat) = split(word);
            validate_weight(n, q.burst())?;
            // A refusal stands as a denial does: judged on one consistent
            // state.
            let (new_tat, act, cost) = math::reserve(tat, now_ns, n, q, max_wait)?;
            let act = origin.saturating_add(act);
            self.last_act.fetch_max(act, Ordering::AcqRel);
            match self.tat.compare_exchange_weak(
                word,
                generation | new_tat,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Reservation::new(
                        n,
                        now,
                        Timestamp::from_nanos(act),
                        act,
                        cost,
                    ))
                }
                Err(actual) => self.after_lost_race(&mut snap, actual),
            }
        }
    }

    fn cancel_at(&self, reservation: Reservation, now: Timestamp) -> u64 {
        // An act time pinned at the end of the timeline may stand for a
        // later one, so what later grants were promised is unknown: give
        // nothing back rather than too much.
        if now > reservation.act_at || reservation.act_at == Timestamp::MAX {
            return 0;
        }
        let now_abs = now.as_nanos();
        let act = reservation.act_at.as_nanos();
        let mut snap = self.snapshot();
        loop {
            let now = match self.relative_now(&mut snap, now_abs) {
                Ok(now) => now,
                // Cancelling at the origin gives back no more than at the
                // caller's earlier `now` would.
                Err(origin) => return self.cancel_at(reservation, Timestamp::from_nanos(origin)),
            };
            let Snapshot { quota: q, word, .. } = snap;
            let (generation, tat) = split(word);
            let last_act = self.last_act.load(Ordering::Acquire);
            let Some(new_tat) = math::cancel(
                tat,
                now,
                act,
                reservation.cost,
                reservation.weight,
                q,
                last_act,
            ) else {
                return 0;
            };
            match self.tat.compare_exchange_weak(
                word,
                generation | new_tat,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (tat - new_tat) / q.emission_nanos(),
                Err(actual) => self.after_lost_race(&mut snap, actual),
            }
        }
    }

    #[inline]
    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

/// GCRA's arithmetic as pure functions of (TAT, now, quota): shared by the
/// lock-free [`Gcra`] (which commits results with a CAS) and the keyed
/// limiter's plain-field [`GcraState`](crate::keyed::GcraState) (which
/// commits them under its shard lock), so the two cannot drift apart.
pub(crate) mod math {
    use std::time::Duration;

    use super::{MAX_AHEAD, MAX_RESERVE_WAIT, REBASE_AT, REBASE_SLACK, TAT_MAX};
    use crate::decision::Decision;
    use crate::error::ReserveError;
    use crate::quota::Quota;

    /// Why a `now` cannot be used relative to the origin as it is.
    pub(crate) enum Off {
        /// More than [`REBASE_AT`] past the origin: the origin must move.
        Ahead,
        /// Before the origin (a caller more than [`REBASE_SLACK`] behind the
        /// time that moved it): decide at the origin — an earlier time than
        /// one the limiter has seen, where GCRA is only ever stricter — and
        /// measure the durations from the caller's `now` ([`later`]).
        Behind,
    }

    /// `now` relative to `origin`.
    #[inline(always)]
    pub(crate) fn relative(now: u64, origin: u64) -> Result<u64, Off> {
        match now.checked_sub(origin) {
            Some(rel) if rel <= REBASE_AT => Ok(rel),
            Some(_) => Err(Off::Ahead),
            None => Err(Off::Behind),
        }
    }

    /// A decision made at a time `stale` ns after the caller's `now`,
    /// re-measured from the caller's `now`.
    pub(crate) fn later(mut d: Decision, stale: u64) -> Decision {
        let stale = Duration::from_nanos(stale);
        d.reset_after = d.reset_after.saturating_add(stale);
        d.retry_after = d.retry_after.map(|r| r.saturating_add(stale));
        d
    }

    /// A GCRA's arrival time in its frame: `tat` nanoseconds after
    /// `origin`. Every holder of a GCRA state ([`Gcra`](super::Gcra) and
    /// the keyed [`GcraState`](crate::keyed::GcraState)) moves its frame by
    /// [`Frame::place`] and nothing else, so that where the origin sits —
    /// which decides how a caller more than [`REBASE_SLACK`] behind is
    /// answered ([`Off::Behind`]) — is a function of the calls that may
    /// write (check, reserve, cancel, quota change) and of nothing else: a
    /// peek places a copy and stores nothing.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) struct Frame {
        /// Absolute nanoseconds on the clock's scale.
        pub(crate) origin: u64,
        /// The arrival time, relative to `origin`.
        pub(crate) tat: u64,
    }

    impl Frame {
        /// The frame `now` is measured in, and `now` relative to it:
        /// `Ok(relative now)`, or `Err(origin)` for a `now` before the
        /// origin ([`Off::Behind`]: decided at the origin). A `now` more
        /// than [`REBASE_AT`] past the origin first moves the origin up to
        /// [`REBASE_SLACK`] before `now`; only such a `now` moves it. An
        /// arrival time that falls before the new origin is in the past at
        /// every `now` the new frame measures (full capacity), so it
        /// becomes the origin.
        #[inline(always)]
        pub(crate) fn place(self, now: u64) -> (Frame, Result<u64, u64>) {
            match relative(now, self.origin) {
                Ok(rel) => (self, Ok(rel)),
                Err(Off::Behind) => (self, Err(self.origin)),
                Err(Off::Ahead) => {
                    let origin = now - REBASE_SLACK;
                    let shift = origin - self.origin;
                    let moved = Frame {
                        origin,
                        tat: self.tat.saturating_sub(shift),
                    };
                    (moved, Ok(REBASE_SLACK))
                }
            }
        }
    }

    /// The evidence for a decision whose TAT (after it) is `tat_after`.
    #[inline]
    pub(crate) fn decision(
        allowed: bool,
        q: Quota,
        now: u64,
        tat_after: u64,
        retry_after: Option<u64>,
    ) -> Decision {
        let ahead = tat_after.saturating_sub(now);
        Decision {
            allowed,
            limit: q.burst(),
            remaining: q.units_in(q.window_nanos().saturating_sub(ahead)),
            reset_after: Duration::from_nanos(ahead),
            retry_after: retry_after.map(Duration::from_nanos),
            delay: Duration::ZERO,
        }
    }

    /// The outcome of admitting weight `n` (already validated) at `now`.
    pub(crate) enum Admission {
        /// Admitted: commit `new_tat`.
        Admit {
            /// The TAT after the admission.
            new_tat: u64,
        },
        /// Denied: commit nothing. `base` is `max(TAT, now)`; the same
        /// request fits after `retry` nanoseconds.
        Deny {
            /// `max(TAT, now)`.
            base: u64,
            /// Nanoseconds until the same request would fit.
            retry: u64,
        },
    }

    impl Admission {
        /// The denial's evidence.
        #[inline]
        pub(crate) fn denial(base: u64, retry: u64, q: Quota, now: u64) -> Decision {
            decision(false, q, now, base, Some(retry))
        }
    }

    /// Whether `n` units fit at `now`, and the TAT to commit if they do.
    ///
    /// Exact, with no clamp: `tat ≤ TAT_MAX`, `now ≤ REBASE_AT` and
    /// `n·I ≤ τ ≤ MAX_WINDOW_NANOS` (see the domain note at [`TAT_MAX`]), so
    /// every sum stays below 2^63, and an admitted TAT is at most
    /// `now + τ ≤ TAT_MAX`.
    #[inline]
    pub(crate) fn admit(tat: u64, now: u64, n: u64, q: Quota) -> Admission {
        debug_assert!(tat <= TAT_MAX && now <= REBASE_AT && n <= q.burst());
        let tau = q.window_nanos();
        let base = tat.max(now);
        let new_tat = base + n * q.emission_nanos();
        let ahead = new_tat - now;
        if ahead > tau {
            // The request fits once `ahead` has shrunk to `tau`.
            Admission::Deny {
                base,
                retry: ahead - tau,
            }
        } else {
            Admission::Admit { new_tat }
        }
    }

    /// What a check would answer, without committing.
    #[inline]
    pub(crate) fn peek(tat: u64, now: u64, n: u64, q: Quota) -> Decision {
        match admit(tat, now, n, q) {
            Admission::Deny { base, retry } => Admission::denial(base, retry, q, now),
            Admission::Admit { .. } => decision(true, q, now, tat.max(now), None),
        }
    }

    /// A reservation of `n` units at `now`: the TAT to commit, the act time
    /// and the cost, or the wait that exceeds `max_wait`.
    #[inline]
    pub(crate) fn reserve(
        tat: u64,
        now: u64,
        n: u64,
        q: Quota,
        max_wait: Duration,
    ) -> Result<(u64, u64, u64), ReserveError> {
        debug_assert!(tat <= TAT_MAX && now <= REBASE_AT && n <= q.burst());
        let cost = n * q.emission_nanos();
        // Exact as in `admit`; the wait is capped at MAX_RESERVE_WAIT, which
        // keeps the committed TAT at or below TAT_MAX.
        let new_tat = tat.max(now) + cost;
        let wait = (new_tat - now).saturating_sub(q.window_nanos());
        let allowed = crate::time::duration_to_nanos_saturating(max_wait.min(MAX_RESERVE_WAIT));
        if wait > allowed {
            return Err(ReserveError::WouldWaitTooLong {
                wait: Duration::from_nanos(wait),
                max_wait,
            });
        }
        Ok((new_tat, now.saturating_add(wait), cost))
    }

    /// Cancelling a reservation (act time `act`, `cost`, `weight`) at `now`
    /// when the latest reservation acts at `last_act`: Go `x/time/rate`'s
    /// rule ([`give_back`](crate::limiter::give_back)) — later
    /// reservations were promised the stretch from `act` to `last_act`; only
    /// the rest comes back, and a forged reservation never returns more than
    /// its weight. `None` if nothing comes back; otherwise the new TAT.
    /// `last_act` stays as it is: the latest act time is never moved back
    /// (see `give_back`).
    #[inline]
    pub(crate) fn cancel(
        tat: u64,
        now: u64,
        act: u64,
        cost: u64,
        weight: u64,
        q: Quota,
        last_act: u64,
    ) -> Option<u64> {
        let restore = crate::limiter::give_back(cost, weight, q, act, last_act)?;
        Some(tat.saturating_sub(restore).max(now.min(tat)))
    }

    /// The TAT that keeps the number of available units when the quota
    /// changes from `old` to `new` at `now` (capped at the new burst; a debt
    /// stays a debt, re-expressed in the new interval — up to [`MAX_AHEAD`]
    /// past `now`, about 110 years, beyond which a debt converted to a much
    /// slower rate is capped). The cap is measured from `now`, not from the
    /// origin, so the answer does not depend on where the frame sits. A
    /// change that leaves the limiter full keeps a past arrival time as it
    /// is: re-applying the same quota is the identity.
    pub(crate) fn convert(tat: u64, now: u64, old: Quota, new: Quota) -> u64 {
        let ahead = u128::from(tat.saturating_sub(now));
        let old_e = u128::from(old.emission_nanos());
        let new_e = u128::from(new.emission_nanos());
        let debt_new = i128::try_from(ahead * new_e / old_e).unwrap_or(i128::MAX);
        let burst_shift = i128::from(new.burst()) - i128::from(old.burst());
        let new_ahead = debt_new
            .saturating_add(burst_shift.saturating_mul(i128::try_from(new_e).unwrap_or(i128::MAX)))
            .max(0);
        let new_ahead = u64::try_from(new_ahead).unwrap_or(u64::MAX).min(MAX_AHEAD);
        debug_assert!(now <= REBASE_AT);
        if new_ahead == 0 {
            // Full capacity either way: an arrival time already in the past
            // stays where it is, so a change to the same quota changes
            // nothing (not even for a caller whose `now` is stale).
            return tat.min(now);
        }
        now + new_ahead
    }
}

impl<C> std::fmt::Debug for Gcra<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gcra")
            .field("quota", &self.config.load().0)
            .field("origin", &self.config.load().1)
            .field("tat", &(self.tat.load(Ordering::Relaxed) & VALUE_MASK))
            .finish_non_exhaustive()
    }
}

/// Keeps its contents on a cache line of their own (128 bytes covers the
/// adjacent-line prefetcher of current x86 parts).
#[repr(align(128))]
struct CacheAligned<T>(T);

impl<T> std::ops::Deref for CacheAligned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// `N` words readable without locks while another thread replaces them: a
/// sequence lock. Writers are serialised by a mutex (they are rare); readers
/// retry while a write is in progress.
pub(crate) struct SeqWords<const N: usize> {
    seq: AtomicU64,
    words: [AtomicU64; N],
    writer: std::sync::Mutex<()>,
}

impl<const N: usize> SeqWords<N> {
    fn new(words: [u64; N]) -> Self {
        SeqWords {
            seq: AtomicU64::new(0),
            words: words.map(AtomicU64::new),
            writer: std::sync::Mutex::new(()),
        }
    }

    /// The words and `extra`'s value, read within one sequence-lock read.
    ///
    /// If the sequence is unchanged across the read, no write of the words
    /// overlapped it. A writer that stores `extra` (Release) only after its
    /// words leaves nothing between: reading its new `extra` (Acquire) puts
    /// the second sequence read after its final sequence store, so the read
    /// retries; reading the old `extra` after a first sequence read that
    /// saw the writer's final store is impossible, as the writer replaced
    /// `extra` (with a read-modify-write) before touching the words.
    #[inline(always)]
    fn load_with(&self, extra: &AtomicU64) -> ([u64; N], u64, u64) {
        let (words, (x, s)) = self.read(|s| (extra.load(Ordering::Acquire), s));
        (words, x, s)
    }

    /// The sequence number now: equal to the one a read returned while no
    /// write has begun since.
    #[inline(always)]
    fn sequence(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    #[inline(always)]
    fn load(&self) -> [u64; N] {
        self.read(|_| ()).0
    }

    /// The words, and what `also` reads after them, within one sequence-lock
    /// read; `also` gets the (even) sequence number the read is taken at.
    #[inline(always)]
    fn read<T>(&self, also: impl Fn(u64) -> T) -> ([u64; N], T) {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            let words = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            let x = also(s1);
            fence(Ordering::Acquire);
            let s2 = self.seq.load(Ordering::Relaxed);
            if s1 == s2 && s1 % 2 == 0 {
                return (words, x);
            }
            spin_wait();
        }
    }

    /// Serialises writers; hold the guard across a read-modify-write and
    /// pass it to [`SeqWords::store_locked`].
    fn lock_writer(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the words while the caller holds the writer lock.
    fn store_locked(&self, _writer: &std::sync::MutexGuard<'_, ()>, words: [u64; N]) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (cell, w) in self.words.iter().zip(words) {
            cell.store(w, Ordering::Relaxed);
        }
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}

/// A quota readable without locks while another thread replaces it.
pub(crate) struct QuotaCell(SeqWords<3>);

impl QuotaCell {
    pub(crate) fn new(q: Quota) -> Self {
        let (e, b, r) = q.raw_parts();
        QuotaCell(SeqWords::new([e, b, r]))
    }

    #[inline]
    pub(crate) fn load(&self) -> Quota {
        let [e, b, r] = self.0.load();
        // The words were written together by `store`, which only writes
        // quotas that passed validation.
        Quota::from_raw_parts(e, b, r)
    }

    /// Replaces the quota.
    pub(crate) fn store(&self, q: Quota) {
        let guard = self.0.lock_writer();
        let (e, b, r) = q.raw_parts();
        self.0.store_locked(&guard, [e, b, r]);
    }
}

/// [`Gcra`]'s state as it was at one instant (see [`Gcra::snapshot`]).
#[derive(Clone, Copy)]
struct Snapshot {
    quota: Quota,
    origin: u64,
    /// The TAT word.
    word: u64,
    /// The quota cell's sequence number when it was read.
    sequence: u64,
}

/// [`Gcra`]'s quota and the origin of its relative arrival times, read
/// together.
struct FrameCell(SeqWords<4>);

impl FrameCell {
    fn new(q: Quota, origin: u64) -> Self {
        let (e, b, r) = q.raw_parts();
        FrameCell(SeqWords::new([e, b, r, origin]))
    }

    #[inline(always)]
    fn load(&self) -> (Quota, u64) {
        let [e, b, r, origin] = self.0.load();
        (Quota::from_raw_parts(e, b, r), origin)
    }

    /// The quota, the origin and `word`'s value, all as they were at one
    /// instant: `word` is read inside the sequence-lock read. For the TAT
    /// word, which every writer of this cell replaces only after the cell.
    #[inline(always)]
    fn load_with(&self, word: &AtomicU64) -> Snapshot {
        let ([e, b, r, origin], word, sequence) = self.0.load_with(word);
        Snapshot {
            quota: Quota::from_raw_parts(e, b, r),
            origin,
            word,
            sequence,
        }
    }

    /// The cell's sequence number (see [`SeqWords::sequence`]).
    #[inline(always)]
    fn sequence(&self) -> u64 {
        self.0.sequence()
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock_writer()
    }

    fn store_locked(&self, writer: &std::sync::MutexGuard<'_, ()>, q: Quota, origin: u64) {
        let (e, b, r) = q.raw_parts();
        self.0.store_locked(writer, [e, b, r, origin]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{ms, quota};
    use crate::time::ManualClock;

    #[test]
    fn admits_burst_then_paces() {
        let g = Gcra::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        for i in 0..10 {
            let d = g.check_at(1, ms(0)).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 9 - i);
        }
        let d = g.check_at(1, ms(0)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
        assert_eq!(d.reset_after, Duration::from_secs(1));
        assert!(!g.check_at(1, ms(99)).unwrap().allowed);
        assert!(g.check_at(1, ms(100)).unwrap().allowed);
    }

    #[test]
    fn weighted_and_oversized_requests() {
        let g = Gcra::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        assert_eq!(
            g.check_at(11, ms(0)),
            Err(CheckError::ExceedsBurst {
                requested: 11,
                burst: 10
            })
        );
        assert_eq!(g.check_at(0, ms(0)), Err(CheckError::ZeroWeight));
        assert!(g.check_at(7, ms(0)).unwrap().allowed);
        let d = g.check_at(4, ms(0)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 3);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
    }

    #[test]
    fn peek_does_not_consume() {
        let g = Gcra::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
        for _ in 0..5 {
            assert!(g.peek_at(1, ms(0)).unwrap().allowed);
        }
        assert!(g.check_at(1, ms(0)).unwrap().allowed);
        assert!(!g.peek_at(1, ms(0)).unwrap().allowed);
    }

    #[test]
    fn backwards_time_is_conservative() {
        let g = Gcra::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        for _ in 0..10 {
            assert!(g.check_at(1, ms(10_000)).unwrap().allowed);
        }
        // Far in the past: nothing may be admitted.
        for back in [0, 1, 5_000, 9_999] {
            assert!(!g.check_at(1, ms(back)).unwrap().allowed);
        }
        assert!(g.check_at(1, ms(10_100)).unwrap().allowed);
    }

    #[test]
    fn reserve_and_cancel_restore_state() {
        let g = Gcra::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        assert!(g.check_at(10, ms(0)).unwrap().allowed);
        let r = g.reserve_at(5, ms(0)).unwrap();
        assert_eq!(r.act_at(), ms(500));
        assert!(matches!(
            g.reserve_within_at(1, ms(0), Duration::from_millis(500)),
            Err(ReserveError::WouldWaitTooLong { .. })
        ));
        assert_eq!(g.cancel_at(r, ms(100)), 5);
        // As if the reservation never happened: one unit back at 100 ms.
        assert!(g.check_at(1, ms(100)).unwrap().allowed);
        assert!(!g.check_at(1, ms(100)).unwrap().allowed);
    }

    #[test]
    fn cancel_keeps_what_later_reservations_were_promised() {
        let g = Gcra::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        assert!(g.check_at(10, ms(0)).unwrap().allowed);
        let first = g.reserve_at(3, ms(0)).unwrap();
        let second = g.reserve_at(2, ms(0)).unwrap();
        assert_eq!(second.act_at(), ms(500));
        // 2 of the first reservation's 3 units are already promised onward.
        assert_eq!(g.cancel_at(first, ms(0)), 1);
        assert_eq!(g.cancel_at(second, ms(0)), 2);
        // After the cancels: 3 of 5 reserved units returned; the remaining
        // debt is 2 units (200 ms).
        assert!(!g.check_at(1, ms(200)).unwrap().allowed);
        assert!(g.check_at(1, ms(300)).unwrap().allowed);
        // Cancelling after the act time does nothing.
        let late = g.reserve_at(1, ms(300)).unwrap();
        assert_eq!(
            {
                let after = late.act_at() + Duration::from_nanos(1);
                g.cancel_at(late, after)
            },
            0
        );
    }

    #[test]
    fn set_quota_preserves_available_units() {
        let g = Gcra::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        assert!(g.check_at(6, ms(0)).unwrap().allowed); // 4 left
        g.set_quota_at(quota(1, 10), ms(0));
        assert_eq!(g.peek_at(1, ms(0)).unwrap().remaining, 4);
        assert!(g.check_at(4, ms(0)).unwrap().allowed);
        // Now one per second.
        assert!(!g.check_at(1, ms(999)).unwrap().allowed);
        assert!(g.check_at(1, ms(1000)).unwrap().allowed);
        // Raising the burst does not hand out capacity by itself.
        g.set_burst_at_for_test(20, ms(1000));
        assert_eq!(g.peek_at(1, ms(1000)).unwrap().remaining, 0);
        // Lowering it caps what is available.
        let g2 = Gcra::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        g2.set_quota_at(quota(10, 3), ms(0));
        assert_eq!(g2.peek_at(1, ms(0)).unwrap().remaining, 3);
    }

    impl<C: Clock> Gcra<C> {
        fn set_burst_at_for_test(&self, b: u64, now: Timestamp) {
            self.set_quota_at(self.quota().with_burst(b).unwrap(), now);
        }
    }

    #[test]
    fn sub_one_per_second() {
        let g = Gcra::with_clock(Quota::from_rate(0.5).unwrap(), ManualClock::new());
        assert!(g.check_at(1, ms(0)).unwrap().allowed);
        let d = g.check_at(1, ms(0)).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_secs(2)));
        assert!(g.check_at(1, ms(2000)).unwrap().allowed);
    }

    #[test]
    fn starts_empty_when_asked() {
        let clock = ManualClock::new();
        let g = Gcra::empty_with_clock(Quota::per_second(10).unwrap(), clock);
        assert!(!g.check_at(1, ms(0)).unwrap().allowed);
        assert!(g.check_at(1, ms(100)).unwrap().allowed);
    }

    // At most `b + ⌊D/I⌋` units within any span of `D` ns.
    crate::test_support::shared_limiter_tests!(Gcra, span_bound: |i, b, span| b + span / i);
}
