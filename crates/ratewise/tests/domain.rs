//! The whole documented domain, through the public API: every algorithm, the
//! keyed limiter and `Hierarchy`, at timestamps anywhere from zero to
//! `Timestamp::MAX` = 2^63 − 1 (Unix-epoch nanoseconds, the 2^60 and 2^61
//! boundaries, the last nanoseconds of the timeline), with quotas anywhere in what the
//! constructors accept (one-nanosecond intervals with bursts near 2^61,
//! 73-year intervals), and with callers whose `now` is stale.
//!
//! For every request it asserts:
//! * no panic (the test profile has overflow checks on);
//! * a denial changes nothing (an immediate peek answers the same);
//! * `retry_after` is exact *from the caller's `now`*: on a replica that saw
//!   the same history, the request is still refused 1 ns before
//!   `now + retry_after` and admitted at it;
//! * the algorithm's documented bound holds for what it admitted, measured at
//!   the latest time the limiter had seen (a stale `now` is treated as that
//!   time or stricter).

use std::time::Duration;

use proptest::prelude::*;
use ratewise::hierarchy::Hierarchy;
use ratewise::keyed::{KeyedLimiter, NoClock};
use ratewise::quota::MAX_WINDOW_NANOS;
use ratewise::{
    Decision, FixedWindow, Gcra, LeakyMeter, LeakyQueue, Quota, RateLimiter, SlidingWindowCounter,
    SlidingWindowLog, Timestamp, TokenBucket,
};

const CASES: u32 = 1000;

/// A quota anywhere in the accepted domain.
fn any_quota() -> impl Strategy<Value = Quota> {
    prop_oneof![
        // Everyday quotas, scaled small so every regime is reached.
        (1u64..=40, 1u64..=8).prop_map(|(i, b)| (i, b)),
        // Any interval up to the limit, small bursts.
        (1u64..=MAX_WINDOW_NANOS, 1u64..=8).prop_map(|(i, b)| (i, b.min(MAX_WINDOW_NANOS / i))),
        // Tiny intervals with bursts near the 2^61 window limit.
        (1u64..=4, 0u64..=1000).prop_map(|(i, k)| (i, MAX_WINDOW_NANOS / i - k)),
        // Exactly the limit.
        Just((1u64, MAX_WINDOW_NANOS)),
        Just((MAX_WINDOW_NANOS, 1u64)),
        // 1 per hour, burst 400 000: a 45-year window.
        Just((3_600_000_000_000u64, 400_000u64)),
    ]
    .prop_map(|(i, b)| Quota::from_parts(i, b).expect("inside the documented domain"))
}

/// Where the timeline starts for one case.
fn any_start(window: u64) -> impl Strategy<Value = u64> {
    let end = Timestamp::MAX.as_nanos();
    let near_end = end - window.saturating_mul(3).min(end / 2);
    prop_oneof![
        Just(0u64),
        // Unix-epoch nanoseconds, 2020–2033.
        1_580_000_000_000_000_000u64..2_000_000_000_000_000_000,
        // Either side of 2^60 and 2^61.
        ((1u64 << 60) - window.min(1 << 59))..((1u64 << 60) + 1000),
        ((1u64 << 61) - window.min(1 << 60))..((1u64 << 61) + 1000),
        // The end of the timeline.
        near_end..=end,
        0..=end,
    ]
}

/// One request: a forward step, how stale the caller's `now` is, and the
/// weight (a fraction of the burst, so huge bursts get huge weights too).
#[derive(Clone, Copy, Debug)]
struct Op {
    step: u64,
    stale: u64,
    weight: u64,
}

fn any_ops(interval: u64, burst: u64) -> impl Strategy<Value = Vec<Op>> {
    let window = interval.saturating_mul(burst);
    let step = prop_oneof![
        3 => Just(0u64),
        4 => 0..=interval,
        2 => 0..=window.saturating_mul(3),
        1 => any::<u64>(),
    ];
    let stale = prop_oneof![6 => Just(0u64), 1 => 0..=interval, 1 => 0..=window];
    let weight = prop_oneof![
        4 => 1..=burst.min(8),
        1 => Just(burst),
        1 => 1..=burst,
    ];
    proptest::collection::vec(
        (step, stale, weight).prop_map(|(step, stale, weight)| Op {
            step,
            stale,
            weight,
        }),
        1..40,
    )
}

fn case() -> impl Strategy<Value = (Quota, u64, Vec<Op>)> {
    any_quota().prop_flat_map(|q| {
        let (i, b) = (q.emission_nanos(), q.burst());
        (Just(q), any_start(q.window_nanos()), any_ops(i, b))
    })
}

/// Something that decides requests at given times.
trait Subject {
    fn check(&self, n: u64, now: Timestamp) -> Decision;
    fn peek(&self, n: u64, now: Timestamp) -> Decision;
}

impl<L: RateLimiter> Subject for L {
    fn check(&self, n: u64, now: Timestamp) -> Decision {
        self.check_at(n, now).expect("a valid weight")
    }
    fn peek(&self, n: u64, now: Timestamp) -> Decision {
        self.peek_at(n, now).expect("a valid weight")
    }
}

/// The keyed limiter, on one key among neighbours that must not interfere.
struct OneKey(KeyedLimiter<u64, ratewise::keyed::GcraState, NoClock>);

impl Subject for OneKey {
    fn check(&self, n: u64, now: Timestamp) -> Decision {
        // A neighbour's traffic first: it must change nothing for key 7.
        let _ = self.0.check_at(&8, n, now);
        self.0.check_at(&7, n, now).expect("a valid weight")
    }
    fn peek(&self, n: u64, now: Timestamp) -> Decision {
        self.0.peek_at(&7, n, now).expect("a valid weight")
    }
}

/// A two-level hierarchy whose levels have the same quota: a per-user keyed
/// level and a global token bucket.
struct TwoLevels(Hierarchy<u64>);

impl Subject for TwoLevels {
    fn check(&self, n: u64, now: Timestamp) -> Decision {
        let d = self.0.check_at(&1, n, now).expect("a valid weight");
        Decision {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_after: Duration::ZERO,
            retry_after: d.retry_after,
            delay: Duration::ZERO,
        }
    }
    fn peek(&self, n: u64, now: Timestamp) -> Decision {
        let level = |i| {
            self.0
                .peek_level_at(i, &1, n, now)
                .expect("a level")
                .expect("a valid weight")
        };
        let (mut d, g) = (level(0), level(1));
        d.allowed &= g.allowed;
        d.retry_after = match (d.retry_after, g.retry_after) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        d
    }
}

/// Runs one case and checks everything listed in the module docs. `bound`
/// is the most weight the subject may admit within a span of `d` ns.
fn run<S: Subject>(
    make: impl Fn() -> S,
    start: u64,
    ops: &[Op],
    bound: impl Fn(u128) -> u128,
    compare_peek: bool,
) {
    let s = make();
    let mut t = start;
    let mut latest = 0u64;
    let mut history: Vec<(u64, u64)> = Vec::new();
    let mut acts: Vec<(u64, u64)> = Vec::new();
    let end = Timestamp::MAX.as_nanos();
    for op in ops {
        t = t.saturating_add(op.step).min(end);
        let at = t.saturating_sub(op.stale);
        let now = Timestamp::from_nanos(at);
        let d = s.check(op.weight, now);
        assert!(d.remaining <= d.limit, "{d:?}");
        if d.allowed {
            assert_eq!(d.retry_after, None);
            latest = latest.max(at);
            // A leaky queue's admission acts at its departure.
            let act = now.as_nanos().saturating_add(d.delay.as_nanos() as u64);
            acts.push((act.max(latest), op.weight));
            latest = latest.max(at);
        } else {
            latest = latest.max(at);
            if compare_peek {
                let p = s.peek(op.weight, now);
                assert_eq!(p.allowed, d.allowed, "a denial changed the state");
                assert_eq!(p.retry_after, d.retry_after, "a denial changed the state");
            }
            let retry = d.retry_after.expect("a denial carries retry_after");
            assert!(retry > Duration::ZERO, "a denial must wait");
            let retry = u64::try_from(retry.as_nanos()).expect("retry fits the timeline");
            // Exact from the caller's own `now`, unless passing falls past
            // the end of the timeline.
            if let Some(pass) = at.checked_add(retry).filter(|&p| p <= end) {
                let replica = make();
                for &(u, n) in &history {
                    let _ = replica.check(n, Timestamp::from_nanos(u));
                }
                let early = replica.check(op.weight, Timestamp::from_nanos(pass - 1));
                assert!(
                    !early.allowed,
                    "admitted 1 ns before now + retry_after (now {at}, retry {retry})"
                );
                let replica = make();
                for &(u, n) in &history {
                    let _ = replica.check(n, Timestamp::from_nanos(u));
                }
                assert!(
                    replica
                        .check(op.weight, Timestamp::from_nanos(pass))
                        .allowed,
                    "refused at now + retry_after (now {at}, retry {retry})"
                );
            }
        }
        history.push((at, op.weight));
    }
    acts.sort_unstable();
    for i in 0..acts.len() {
        let mut sum: u128 = 0;
        for &(tj, nj) in &acts[i..] {
            sum += u128::from(nj);
            let span = u128::from(tj - acts[i].0);
            assert!(
                sum <= bound(span),
                "{sum} admitted within {span} ns, bound {}",
                bound(span)
            );
        }
    }
}

fn parts(q: Quota) -> (u128, u128, u128) {
    let (i, b) = (u128::from(q.emission_nanos()), u128::from(q.burst()));
    (i, b, i * b)
}

/// `b + ⌊d/I⌋`: GCRA, token bucket, leaky meter and queue, sliding counter.
fn meter_bound(q: Quota) -> impl Fn(u128) -> u128 {
    let (i, b, _) = parts(q);
    move |d| b + d / i
}

macro_rules! domain_test {
    ($name:ident, $ty:ident, $bound:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(CASES))]
            #[test]
            fn $name((q, start, ops) in case()) {
                run(|| $ty::with_clock(q, NoClock), start, &ops, $bound(q), true);
            }
        }
    };
}

domain_test!(gcra_whole_domain, Gcra, meter_bound);
domain_test!(token_bucket_whole_domain, TokenBucket, meter_bound);
domain_test!(leaky_meter_whole_domain, LeakyMeter, meter_bound);
domain_test!(leaky_queue_whole_domain, LeakyQueue, meter_bound);
domain_test!(
    sliding_window_counter_whole_domain,
    SlidingWindowCounter,
    meter_bound
);
domain_test!(fixed_window_whole_domain, FixedWindow, |q| {
    let (_, b, w) = parts(q);
    move |d: u128| b * (d.div_ceil(w) + 1)
});
domain_test!(sliding_window_log_whole_domain, SlidingWindowLog, |q| {
    let (_, b, w) = parts(q);
    move |d: u128| b * (d + 1).div_ceil(w)
});

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn keyed_whole_domain((q, start, ops) in case()) {
        run(
            || OneKey(KeyedLimiter::<u64>::builder(q).clock(NoClock).build()),
            start,
            &ops,
            meter_bound(q),
            true,
        );
    }

    #[test]
    fn hierarchy_whole_domain((q, start, ops) in case()) {
        run(
            || {
                TwoLevels(
                    Hierarchy::<u64>::new()
                        .keyed("user", KeyedLimiter::<u64>::builder(q).clock(NoClock).build(), |r| r)
                        .global("global", TokenBucket::with_clock(q, NoClock)),
                )
            },
            start,
            &ops,
            meter_bound(q),
            true,
        );
    }
}

/// The reproductions from the report, one by one.
#[test]
fn reported_reproductions_are_refused_or_limited() {
    // Gcra at 2^60 ns: 1 of 1000 admitted, not 1000.
    let g = Gcra::with_clock(Quota::per_second(1).unwrap(), NoClock);
    let at = Timestamp::from_nanos(1 << 60);
    let admitted = (0..1000)
        .filter(|_| g.check_at(1, at).unwrap().allowed)
        .count();
    assert_eq!(admitted, 1);
    // Unix-epoch nanoseconds, on Gcra and the keyed limiter.
    let now = Timestamp::from_nanos(1_795_000_000_000_000_000);
    let g = Gcra::with_clock(Quota::per_second(1).unwrap(), NoClock);
    let k = KeyedLimiter::<u64>::builder(Quota::per_second(1).unwrap())
        .clock(NoClock)
        .build();
    assert!(g.check_at(1, now).unwrap().allowed);
    assert!(k.check_at(&1, 1, now).unwrap().allowed);
    let denied = g.check_at(1, now).unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(Duration::from_secs(1)));
    assert!(!k.check_at(&1, 1, now).unwrap().allowed);
    // 1 per hour, burst 400 000, at t = 0: exactly the burst.
    let q = Quota::per_hour(1).unwrap().with_burst(400_000).unwrap();
    let g = Gcra::with_clock(q, NoClock);
    assert!(g.check_at(400_000, Timestamp::ZERO).unwrap().allowed);
    let d = g.check_at(1, Timestamp::ZERO).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_secs(3600)));
    // A stale caller who waits its retry_after is admitted (token bucket).
    let tb = TokenBucket::with_clock(Quota::per_second(1).unwrap(), NoClock);
    let s = |v: u64| Timestamp::from_nanos(v * 1_000_000_000);
    assert!(tb.check_at(1, s(10)).unwrap().allowed);
    let d = tb.check_at(1, s(9)).unwrap();
    assert_eq!(d.retry_after, Some(Duration::from_secs(2)));
    assert!(!tb.check_at(1, s(10)).unwrap().allowed);
    assert!(tb.check_at(1, s(11)).unwrap().allowed);
}
