//! The circuit breaker's invariants: a closed breaker never refuses, it
//! opens only by its rule, a refusal's `retry_in` is when a call goes
//! through again, half-open lets at most its probes through, and its counts
//! add up; then the same under threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use proptest::prelude::*;
use ratewise::breaker::{BreakerConfig, CallResult, CircuitBreaker, State};
use ratewise::Timestamp;

fn config() -> impl Strategy<Value = BreakerConfig> {
    (
        1u32..=10,   // failure ratio, tenths
        1u32..20,    // minimum calls
        1u64..2_000, // window, ms
        0u32..6,     // consecutive failures (0: off)
        1u64..500,   // open for, ms
        1u32..4,     // probes
    )
        .prop_map(|(ratio, min, window, row, open, probes)| {
            BreakerConfig::default()
                .failure_ratio(f64::from(ratio) / 10.0)
                .minimum_calls(min)
                .window(Duration::from_millis(window))
                .consecutive_failures(row)
                .open_for(Duration::from_millis(open))
                .probes(probes)
        })
}

#[derive(Clone, Debug)]
enum Op {
    /// Time moves on by this many ms.
    Wait(u64),
    /// A call is tried; if let through it is held.
    Call,
    /// The oldest held call reports this result.
    Report(CallResult),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let result = prop_oneof![
        3 => Just(CallResult::Success),
        3 => Just(CallResult::Failure),
        1 => Just(CallResult::Ignored),
    ];
    prop::collection::vec(
        prop_oneof![
            1 => (0u64..300).prop_map(Op::Wait),
            3 => Just(Op::Call),
            3 => result.prop_map(Op::Report),
        ],
        1..300,
    )
}

proptest! {
    #[test]
    fn breaker_invariants_hold_for_any_sequence(config in config(), ops in ops()) {
        let breaker = CircuitBreaker::new(config).expect("a valid config");
        let open_for = config.open_duration();
        let mut now = Timestamp::from_nanos(1_000_000_000);
        let mut held = std::collections::VecDeque::new();
        let (mut tries, mut failures_reported) = (0u64, 0u64);
        // Probes let through since the breaker was last seen other than
        // half-open, minus the probes that reported Ignored (which free a
        // slot), within one allowance of `open_for`.
        let mut batch: Option<(Timestamp, i64)> = None;
        for op in ops {
            match op {
                Op::Wait(ms) => now = now + Duration::from_millis(ms),
                Op::Call => {
                    let before = breaker.state(now);
                    tries += 1;
                    match breaker.try_call(now) {
                        Ok(call) => {
                            prop_assert_eq!(call.is_probe(), before == State::HalfOpen);
                            if call.is_probe() {
                                let (since, n) = batch.get_or_insert((now, 0));
                                if now.saturating_duration_since(*since) >= open_for {
                                    *since = now;
                                    *n = 0;
                                }
                                *n += 1;
                                prop_assert!(*n <= i64::from(config.probe_count()), "too many probes: {n}");
                            } else {
                                batch = None;
                            }
                            held.push_back(call);
                        }
                        Err(refused) => {
                            prop_assert!(before != State::Closed, "a closed breaker refused");
                            prop_assert!(failures_reported > 0, "refused with no failure ever reported");
                            prop_assert!(refused.retry_in() <= open_for);
                            // At `retry_in`, a call goes through.
                            now = now + refused.retry_in();
                            tries += 1;
                            let call = breaker.try_call(now);
                            prop_assert!(call.is_ok(), "refused again at retry_in");
                            let call = call.unwrap();
                            prop_assert!(call.is_probe());
                            batch = Some((now, 1));
                            held.push_back(call);
                        }
                    }
                }
                Op::Report(result) => {
                    if let Some(call) = held.pop_front() {
                        let probe = call.is_probe();
                        failures_reported += u64::from(result == CallResult::Failure);
                        let opened = breaker.counts().opened;
                        let moved = breaker.record(call, now, result);
                        // A reported change is the state now, and every
                        // opening is reported.
                        if let Some(state) = moved {
                            prop_assert_eq!(breaker.state(now), state);
                        }
                        prop_assert_eq!(breaker.counts().opened, opened + u64::from(moved == Some(State::Open)));
                        if probe && result == CallResult::Ignored {
                            if let Some((_, n)) = batch.as_mut() { *n -= 1; }
                        }
                    }
                }
            }
            let counts = breaker.counts();
            prop_assert_eq!(counts.admitted + counts.refused, tries);
        }
    }

    /// With only successes (and ignored calls), it never opens.
    #[test]
    fn successes_never_open_it(config in config(), gaps in prop::collection::vec(0u64..50, 1..300)) {
        let breaker = CircuitBreaker::new(config).expect("a valid config");
        let mut now = Timestamp::ZERO;
        for (i, gap) in gaps.into_iter().enumerate() {
            now = now + Duration::from_millis(gap);
            let call = breaker.try_call(now);
            prop_assert!(call.is_ok());
            let result = if i % 5 == 0 { CallResult::Ignored } else { CallResult::Success };
            breaker.record(call.unwrap(), now, result);
        }
        prop_assert_eq!(breaker.counts().opened, 0);
    }

    /// With the in-a-row rule off, fewer results than `minimum_calls` in
    /// the window never open it, whatever they are.
    #[test]
    fn too_few_calls_never_open_it(min in 2u32..40, failures in 1u32..40) {
        let breaker = CircuitBreaker::new(
            BreakerConfig::default().consecutive_failures(0).minimum_calls(min).failure_ratio(0.1),
        ).expect("a valid config");
        let now = Timestamp::ZERO;
        for i in 0..failures.min(min - 1) {
            let call = breaker.try_call(now);
            prop_assert!(call.is_ok(), "refused after {i} failures");
            breaker.record(call.unwrap(), now, CallResult::Failure);
        }
        prop_assert_eq!(breaker.state(now), State::Closed);
        if failures >= min {
            let call = breaker.try_call(now).expect("still closed");
            breaker.record(call, now, CallResult::Failure);
            prop_assert_eq!(breaker.state(now), State::Open);
        }
    }
}

#[test]
fn results_from_before_a_trip_are_ignored_and_a_failed_probe_reopens() {
    let breaker = CircuitBreaker::new(
        BreakerConfig::default()
            .consecutive_failures(2)
            .open_for(Duration::from_secs(1))
            .probes(2),
    )
    .unwrap();
    let t0 = Timestamp::ZERO;
    let late = breaker.try_call(t0).unwrap();
    for _ in 0..2 {
        let c = breaker.try_call(t0).unwrap();
        breaker.record(c, t0, CallResult::Failure);
    }
    assert_eq!(breaker.state(t0), State::Open);
    // A call let through while closed reports after the trip: no effect.
    let t1 = t0 + Duration::from_secs(1);
    let probe = breaker.try_call(t1).unwrap();
    breaker.record(late, t1, CallResult::Success);
    assert_eq!(breaker.state(t1), State::HalfOpen);
    let second = breaker.try_call(t1).unwrap();
    let refused = breaker.try_call(t1).unwrap_err();
    assert_eq!(refused.retry_in(), Duration::from_secs(1));
    assert!(
        refused.to_string().contains("lets a probe through in 1s"),
        "{refused}"
    );
    // One probe of two succeeded: no change yet; the other fails: open.
    assert_eq!(breaker.record(probe, t1, CallResult::Success), None);
    assert_eq!(
        breaker.record(second, t1, CallResult::Failure),
        Some(State::Open)
    );
    assert_eq!(breaker.state(t1), State::Open);
    assert_eq!(breaker.counts().opened, 2);
    // Both probes of the next pause succeed: closed, reported by the second.
    let t2 = t1 + Duration::from_secs(1);
    let (a, b) = (breaker.try_call(t2).unwrap(), breaker.try_call(t2).unwrap());
    assert_eq!(breaker.record(a, t2, CallResult::Success), None);
    assert_eq!(
        breaker.record(b, t2, CallResult::Success),
        Some(State::Closed)
    );
    assert_eq!(breaker.state(t2), State::Closed);
}

#[test]
fn the_failure_ratio_trips_over_the_window_only() {
    let breaker = CircuitBreaker::new(
        BreakerConfig::default()
            .consecutive_failures(0)
            .failure_ratio(0.5)
            .minimum_calls(4)
            .window(Duration::from_secs(10)),
    )
    .unwrap();
    let mut now = Timestamp::ZERO;
    let call = |now, result| {
        let c = breaker.try_call(now).unwrap();
        breaker.record(c, now, result);
    };
    // Two failures, then 11 s later two successes and one failure: the old
    // failures have left the window, so 1 of 3 (then 2 of 5 is never seen).
    call(now, CallResult::Failure);
    call(now, CallResult::Failure);
    now = now + Duration::from_secs(11);
    call(now, CallResult::Success);
    call(now, CallResult::Success);
    call(now, CallResult::Failure);
    assert_eq!(breaker.state(now), State::Closed, "1 failure in 3 calls");
    call(now, CallResult::Failure);
    assert_eq!(breaker.state(now), State::Open, "2 failures in 4 calls");
}

#[test]
fn bad_configs_are_errors_that_say_why() {
    let bad = [
        BreakerConfig::default().failure_ratio(0.0),
        BreakerConfig::default().failure_ratio(f64::NAN),
        BreakerConfig::default().failure_ratio(1.5),
        BreakerConfig::default().window(Duration::ZERO),
        BreakerConfig::default().open_for(Duration::ZERO),
        BreakerConfig::default().probes(0),
    ];
    for config in bad {
        let err = CircuitBreaker::new(config).unwrap_err();
        assert!(!err.to_string().is_empty());
    }
    assert!(CircuitBreaker::new(BreakerConfig::default()).is_ok());
}

/// Four threads against one breaker and a dependency that fails, then
/// heals: while half-open on a frozen clock no more than the probes get
/// through, and once healed it closes for everyone.
#[test]
fn threads_share_one_breaker_and_half_open_lets_only_the_probes_through() {
    const THREADS: usize = 4;
    const PROBES: u32 = 2;
    let open_for = Duration::from_millis(100);
    let breaker = CircuitBreaker::new(
        BreakerConfig::default()
            .consecutive_failures(5)
            .open_for(open_for)
            .probes(PROBES),
    )
    .unwrap();
    let clock = AtomicU64::new(0);
    let failing = AtomicBool::new(true);
    let admitted = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS + 1);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _phase in 0..3 {
                    barrier.wait();
                    for _ in 0..2_000 {
                        let now = Timestamp::from_nanos(clock.load(Ordering::SeqCst));
                        if let Ok(call) = breaker.try_call(now) {
                            admitted.fetch_add(1, Ordering::SeqCst);
                            let result = if failing.load(Ordering::SeqCst) {
                                CallResult::Failure
                            } else {
                                CallResult::Success
                            };
                            breaker.record(call, now, result);
                        }
                    }
                    barrier.wait();
                }
            });
        }
        // Phase 1: failing; it opens after a handful of calls.
        barrier.wait();
        barrier.wait();
        let t = Timestamp::from_nanos(clock.load(Ordering::SeqCst));
        assert_eq!(breaker.state(t), State::Open);
        let first = admitted.swap(0, Ordering::SeqCst);
        assert!((5..=5 + THREADS as u64).contains(&first), "{first}");
        // Phase 2: the pause is over, still failing, the clock frozen: at
        // most the probes get through, then it is open again.
        clock.fetch_add(open_for.as_nanos() as u64, Ordering::SeqCst);
        barrier.wait();
        barrier.wait();
        let probes = admitted.swap(0, Ordering::SeqCst);
        assert!((1..=u64::from(PROBES)).contains(&probes), "{probes}");
        let t = Timestamp::from_nanos(clock.load(Ordering::SeqCst));
        assert_eq!(breaker.state(t), State::Open);
        // Phase 3: healed; the probes succeed and it closes for everyone.
        failing.store(false, Ordering::SeqCst);
        clock.fetch_add(open_for.as_nanos() as u64, Ordering::SeqCst);
        barrier.wait();
        barrier.wait();
        let t = Timestamp::from_nanos(clock.load(Ordering::SeqCst));
        assert_eq!(breaker.state(t), State::Closed);
        let healed = admitted.load(Ordering::SeqCst);
        // Everything but the calls refused while the probes were out.
        assert!(healed > (THREADS as u64 * 2_000) * 9 / 10, "{healed}");
    });
    let c = breaker.counts();
    assert_eq!(c.admitted + c.refused, THREADS as u64 * 2_000 * 3);
    assert_eq!(c.opened, 2);
}
