//! GCRA answers one way whoever holds its state: the lock-free [`Gcra`],
//! the keyed limiter's per-key [`GcraState`](ratewise::keyed::GcraState),
//! with or without peeks in between, over the whole documented domain —
//! timestamps from zero to `Timestamp::MAX` (Unix-epoch nanoseconds
//! included), windows up to 2^61 ns, stale callers, reservations,
//! cancellations and quota changes.

use std::time::Duration;

use proptest::prelude::*;
use ratewise::keyed::{KeyedLimiter, NoClock};
use ratewise::quota::MAX_WINDOW_NANOS;
use ratewise::{Decision, Gcra, Quota, RateLimiter, Reservation, Timestamp};

const CASES: u32 = 2000;

/// A quota anywhere in the accepted domain.
fn any_quota() -> impl Strategy<Value = Quota> {
    prop_oneof![
        (1u64..=40, 1u64..=8).prop_map(|(i, b)| (i, b)),
        (1u64..=MAX_WINDOW_NANOS, 1u64..=8).prop_map(|(i, b)| (i, b.min(MAX_WINDOW_NANOS / i))),
        (1u64..=4, 0u64..=1000).prop_map(|(i, k)| (i, MAX_WINDOW_NANOS / i - k)),
        // Windows of years with millisecond intervals (19 years at 3.2 ms).
        (1_000_000u64..=10_000_000, 1u64 << 56..=1u64 << 61).prop_map(|(i, w)| (i, (w / i).max(1))),
        Just((1u64, MAX_WINDOW_NANOS)),
        Just((MAX_WINDOW_NANOS, 1u64)),
        Just((3_600_000_000_000u64, 400_000u64)),
    ]
    .prop_map(|(i, b)| Quota::from_parts(i, b).expect("inside the documented domain"))
}

fn any_start(window: u64) -> impl Strategy<Value = u64> {
    let end = Timestamp::MAX.as_nanos();
    let near_end = end - window.saturating_mul(3).min(end / 2);
    prop_oneof![
        Just(0u64),
        1_580_000_000_000_000_000u64..2_000_000_000_000_000_000,
        ((1u64 << 59) - window.min(1 << 58))..((1u64 << 59) + 1000),
        ((1u64 << 60) - window.min(1 << 59))..((1u64 << 60) + 1000),
        ((1u64 << 61) - window.min(1 << 60))..((1u64 << 61) + 1000),
        near_end..=end,
        0..=end,
    ]
}

/// One call on the limiter.
#[derive(Clone, Copy, Debug)]
enum Call {
    Check(u64),
    Peek(u64),
    Reserve(u64, u64),
    /// Cancels the latest reservation still held.
    Cancel,
    /// Replaces the quota with one of the same shape scaled.
    SetQuota(u64, u64),
}

#[derive(Clone, Copy, Debug)]
struct Op {
    step: u64,
    stale: u64,
    call: Call,
}

fn any_ops(interval: u64, burst: u64) -> impl Strategy<Value = Vec<Op>> {
    let window = interval.saturating_mul(burst);
    let step = prop_oneof![
        3 => Just(0u64),
        4 => 0..=interval,
        2 => 0..=window.saturating_mul(3),
        1 => 0..=(1u64 << 60),
        1 => any::<u64>(),
    ];
    let stale =
        prop_oneof![6 => Just(0u64), 1 => 0..=interval, 1 => 0..=window, 1 => 0..=(1u64 << 61)];
    let weight = prop_oneof![4 => 1..=burst.min(8), 1 => Just(burst), 1 => 1..=burst];
    let call = prop_oneof![
        6 => weight.clone().prop_map(Call::Check),
        2 => weight.clone().prop_map(Call::Peek),
        2 => (weight, prop_oneof![Just(0u64), 0..=window, any::<u64>()])
            .prop_map(|(n, w)| Call::Reserve(n, w)),
        1 => Just(Call::Cancel),
        1 => (1u64..=MAX_WINDOW_NANOS, 1u64..=8)
            .prop_map(|(i, b)| Call::SetQuota(i, b)),
    ];
    proptest::collection::vec(
        (step, stale, call).prop_map(|(step, stale, call)| Op { step, stale, call }),
        1..40,
    )
}

fn case() -> impl Strategy<Value = (Quota, u64, Vec<Op>)> {
    any_quota().prop_flat_map(|q| {
        let (i, b) = (q.emission_nanos(), q.burst());
        (Just(q), any_start(q.window_nanos()), any_ops(i, b))
    })
}

/// What one call answered.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Decision(Result<Decision, String>),
    Reserve(Result<(Timestamp, u64, u64, u64), String>),
    Cancel(u64),
    None,
}

/// A GCRA behind some interface.
trait Subject {
    fn check(&self, n: u64, now: Timestamp) -> Result<Decision, String>;
    fn peek(&self, n: u64, now: Timestamp) -> Result<Decision, String>;
    fn reserve(&self, n: u64, now: Timestamp, w: Duration) -> Result<Reservation, String>;
    fn cancel(&self, r: Reservation, now: Timestamp) -> u64;
    fn set_quota(&self, q: Quota, now: Timestamp);
}

impl Subject for Gcra<NoClock> {
    fn check(&self, n: u64, now: Timestamp) -> Result<Decision, String> {
        self.check_at(n, now).map_err(|e| e.to_string())
    }
    fn peek(&self, n: u64, now: Timestamp) -> Result<Decision, String> {
        self.peek_at(n, now).map_err(|e| e.to_string())
    }
    fn reserve(&self, n: u64, now: Timestamp, w: Duration) -> Result<Reservation, String> {
        self.reserve_within_at(n, now, w).map_err(|e| e.to_string())
    }
    fn cancel(&self, r: Reservation, now: Timestamp) -> u64 {
        self.cancel_at(r, now)
    }
    fn set_quota(&self, q: Quota, now: Timestamp) {
        self.set_quota_at(q, now);
    }
}

/// A lone `Gcra` as the keyed limiter keeps one per key: created (at the
/// key's quota then, full) by the first call that makes the key tracked —
/// a check or a reservation; before that a peek answers as a fresh one, a
/// cancel gives nothing back and a quota change only sets the quota it will
/// start with.
struct Lone {
    gcra: std::cell::RefCell<Option<Gcra<NoClock>>>,
    quota: std::cell::Cell<Quota>,
}

impl Lone {
    fn new(q: Quota) -> Self {
        Lone {
            gcra: std::cell::RefCell::new(None),
            quota: std::cell::Cell::new(q),
        }
    }

    fn tracked(&self) -> std::cell::RefMut<'_, Gcra<NoClock>> {
        std::cell::RefMut::map(self.gcra.borrow_mut(), |g| {
            g.get_or_insert_with(|| Gcra::with_clock(self.quota.get(), NoClock))
        })
    }
}

impl Subject for Lone {
    fn check(&self, n: u64, now: Timestamp) -> Result<Decision, String> {
        Subject::check(&*self.tracked(), n, now)
    }
    fn peek(&self, n: u64, now: Timestamp) -> Result<Decision, String> {
        match &*self.gcra.borrow() {
            Some(g) => Subject::peek(g, n, now),
            None => Subject::peek(&Gcra::with_clock(self.quota.get(), NoClock), n, now),
        }
    }
    fn reserve(&self, n: u64, now: Timestamp, w: Duration) -> Result<Reservation, String> {
        Subject::reserve(&*self.tracked(), n, now, w)
    }
    fn cancel(&self, r: Reservation, now: Timestamp) -> u64 {
        match &*self.gcra.borrow() {
            Some(g) => Subject::cancel(g, r, now),
            None => 0,
        }
    }
    fn set_quota(&self, q: Quota, now: Timestamp) {
        self.quota.set(q);
        if let Some(g) = &*self.gcra.borrow() {
            Subject::set_quota(g, q, now);
        }
    }
}

/// Key 7 of a keyed limiter, with a neighbour's traffic that must change
/// nothing for it.
struct OneKey(KeyedLimiter<u64, ratewise::keyed::GcraState, NoClock>);

impl Subject for OneKey {
    fn check(&self, n: u64, now: Timestamp) -> Result<Decision, String> {
        let _ = self.0.check_at(&8, n, now);
        self.0.check_at(&7, n, now).map_err(|e| e.to_string())
    }
    fn peek(&self, n: u64, now: Timestamp) -> Result<Decision, String> {
        self.0.peek_at(&7, n, now).map_err(|e| e.to_string())
    }
    fn reserve(&self, n: u64, now: Timestamp, w: Duration) -> Result<Reservation, String> {
        self.0
            .reserve_within_at(&7, n, now, w)
            .map_err(|e| e.to_string())
    }
    fn cancel(&self, r: Reservation, now: Timestamp) -> u64 {
        self.0.cancel_at(&7, r, now)
    }
    fn set_quota(&self, q: Quota, now: Timestamp) {
        self.0.set_key_quota_at(&7, q, now);
    }
}

/// Runs `ops` on `s`; `extra_peeks` adds a peek before every call, at a
/// time derived from the op (a far one too), whose answer is dropped.
fn run<S: Subject>(s: &S, start: u64, ops: &[Op], extra_peeks: bool) -> Vec<Answer> {
    let end = Timestamp::MAX.as_nanos();
    let mut t = start;
    let mut held: Vec<Reservation> = Vec::new();
    let mut out = Vec::new();
    for op in ops {
        t = t.saturating_add(op.step).min(end);
        let now = Timestamp::from_nanos(t.saturating_sub(op.stale));
        if extra_peeks {
            for at in [now.as_nanos(), t, t.saturating_add(op.stale), end, 0] {
                let _ = s.peek(1, Timestamp::from_nanos(at));
            }
        }
        let a = match op.call {
            Call::Check(n) => Answer::Decision(s.check(n, now)),
            Call::Peek(n) => Answer::Decision(s.peek(n, now)),
            Call::Reserve(n, w) => {
                let r = s.reserve(n, now, Duration::from_nanos(w));
                let a = r
                    .as_ref()
                    .map(|r| (r.act_at(), r.weight(), r.mark(), r.cost()))
                    .map_err(Clone::clone);
                if let Ok(r) = r {
                    held.push(r);
                }
                Answer::Reserve(a)
            }
            Call::Cancel => match held.pop() {
                Some(r) => Answer::Cancel(s.cancel(r, now)),
                None => Answer::None,
            },
            Call::SetQuota(i, b) => {
                let q = Quota::from_parts(i, b.min(MAX_WINDOW_NANOS / i)).expect("valid");
                s.set_quota(q, now);
                Answer::None
            }
        };
        out.push(a);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A peek changes nothing: the same calls answer the same with peeks
    /// (at any time, the far future and the origin included) in between.
    #[test]
    fn peeks_change_nothing((q, start, ops) in case()) {
        let plain = run(&Gcra::with_clock(q, NoClock), start, &ops, false);
        let peeked = run(&Gcra::with_clock(q, NoClock), start, &ops, true);
        prop_assert_eq!(plain, peeked);
    }

    /// The same for the keyed limiter's per-key GCRA.
    #[test]
    fn keyed_peeks_change_nothing((q, start, ops) in case()) {
        let k = || OneKey(KeyedLimiter::<u64>::builder(q).clock(NoClock).build());
        let plain = run(&k(), start, &ops, false);
        let peeked = run(&k(), start, &ops, true);
        prop_assert_eq!(plain, peeked);
    }

    /// The keyed limiter's per-key answers are a lone `Gcra`'s.
    #[test]
    fn keyed_is_gcra((q, start, ops) in case()) {
        let lone = run(&Lone::new(q), start, &ops, false);
        let keyed = run(&OneKey(KeyedLimiter::<u64>::builder(q).clock(NoClock).build()), start, &ops, false);
        let al = |v: &[Answer]| v.iter().map(|a| match a { Answer::Decision(Ok(d)) => Some(d.allowed), _ => None }).collect::<Vec<_>>();
        prop_assert_eq!(al(&lone), al(&keyed), "{:?} {:?}", lone, keyed);
    }
}

/// 3.2 ms per unit, a window of 19 years.
fn nineteen_years() -> Quota {
    Quota::from_parts(3_200_000, 187_500_000_000).expect("a valid quota")
}

const T: u64 = 850_000_000_000_000_000;

fn at(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos)
}

/// A peek at a far time changes nothing: the next check answers the same
/// `remaining` with or without it (a peek that moved the origin of the
/// relative arrival times would leave the check before that origin, to be
/// decided there).
#[test]
fn a_peek_at_a_far_time_changes_nothing() {
    let q = nineteen_years();
    let plain = Gcra::with_clock(q, NoClock);
    let peeked = Gcra::with_clock(q, NoClock);
    for g in [&plain, &peeked] {
        assert!(g.check_at(100_000_000_000, at(T)).unwrap().allowed);
    }
    let _ = peeked.peek_at(1, at(T + (1 << 60))).unwrap();
    let later = at(T + 1_000_000_000);
    let expected = plain.check_at(1, later).unwrap();
    // 87 500 000 000 left, 312 units back after a second, 1 taken.
    assert_eq!(expected.remaining, 87_500_000_311);
    assert_eq!(peeked.check_at(1, later).unwrap(), expected);
}

/// On a 19-year window at t ≈ 8.5·10^17 ns, after a peek at a far time,
/// the keyed limiter's per-key GCRA and a lone `Gcra` fed the same calls
/// both admit, with `remaining` 42 520 (had the peek moved `Gcra`'s origin
/// and not the keyed state's, `Gcra` would refuse with `remaining` 0).
#[test]
fn keyed_and_gcra_agree_on_a_19_year_window() {
    let q = nineteen_years();
    let g = Gcra::with_clock(q, NoClock);
    let k = KeyedLimiter::<u64>::builder(q).clock(NoClock).build();
    let far = at(T + (1 << 60));
    assert_eq!(g.peek_at(1, far).unwrap(), k.peek_at(&7, 1, far).unwrap());
    let burst = q.burst();
    assert!(g.check_at(burst, at(T)).unwrap().allowed);
    assert!(k.check_at(&7, burst, at(T)).unwrap().allowed);
    // 42 521 intervals later: 42 521 units back, 1 taken.
    let later = at(T + 42_521 * 3_200_000);
    let (dg, dk) = (
        g.check_at(1, later).unwrap(),
        k.check_at(&7, 1, later).unwrap(),
    );
    assert!(dk.allowed);
    assert_eq!(dk.remaining, 42_520);
    assert_eq!(dg, dk);
}

/// A debt converted to a 21-year interval is capped from `now`, not from
/// the origin, so `Gcra` and the keyed state cap it at the same time
/// wherever their origins sit.
#[test]
fn a_quota_change_caps_from_now() {
    let q = Quota::from_parts(3_200_000, 187_000_000_000).unwrap();
    let g = Gcra::with_clock(q, NoClock);
    let k = KeyedLimiter::<u64>::builder(q).clock(NoClock).build();
    let t = 800_000_000_000_000_000;
    let burst = q.burst();
    assert_eq!(
        g.check_at(burst, at(t)).unwrap(),
        k.check_at(&7, burst, at(t)).unwrap()
    );
    let slow = Quota::from_parts(677_459_527_395_206_486, 3).unwrap();
    g.set_quota_at(slow, at(t - 8_404_611));
    k.set_key_quota_at(&7, slow, at(t - 8_404_611));
    assert_eq!(
        g.check_at(1, at(t)).unwrap(),
        k.check_at(&7, 1, at(t)).unwrap()
    );
}

/// Re-applying the same quota changes nothing, not even for a caller 1 ns
/// stale (raising an arrival time in the past up to `now` would refuse it;
/// the keyed limiter skips an unchanged quota and admits it).
#[test]
fn the_same_quota_again_is_the_identity() {
    let q = Quota::from_parts(1, 1).unwrap();
    let g = Gcra::with_clock(q, NoClock);
    let k = KeyedLimiter::<u64>::builder(q).clock(NoClock).build();
    let t = Timestamp::MAX.as_nanos() - 3;
    assert_eq!(
        g.check_at(1, at(t - 10)).unwrap(),
        k.check_at(&7, 1, at(t - 10)).unwrap()
    );
    g.set_quota_at(q, at(t));
    k.set_key_quota_at(&7, q, at(t));
    let d = g.check_at(1, at(t - 1)).unwrap();
    assert!(d.allowed);
    assert_eq!(d, k.check_at(&7, 1, at(t - 1)).unwrap());
}
