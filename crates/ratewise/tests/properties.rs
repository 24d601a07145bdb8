//! Property tests over every algorithm: the quota bound in every window,
//! GCRA ≡ token bucket, reserve-then-cancel, backwards time.

mod common;

use common::{bound, build, ALGORITHMS};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratewise::{Gcra, ManualClock, Quota, RateLimiter, Timestamp, TokenBucket};

/// Algorithms whose reserve-then-cancel is exactly a no-op. The window
/// algorithms may book a future window and stay conservative after the
/// cancel (documented in each module).
const EXACT_CANCEL: &[&str] = &["gcra", "token_bucket", "leaky_meter", "leaky_queue"];

fn quota() -> impl Strategy<Value = Quota> {
    (1_000_000u64..500_000_000, 1u64..12)
        .prop_map(|(e, b)| Quota::from_parts(e, b).expect("valid quota"))
}

/// Arrivals as (gap since previous arrival in ns, weight).
fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..300_000_000, 1u64..5), 1..200)
}

/// Max admitted weight over every closed window `[t_i, t_i + t]` starting at
/// an admission (the worst window always starts at one).
fn max_in_window(admitted: &[(u64, u64)], t: u64) -> u64 {
    let mut best = 0;
    let mut j = 0;
    let mut sum = 0;
    for i in 0..admitted.len() {
        while j < admitted.len() && admitted[j].0 <= admitted[i].0.saturating_add(t) {
            sum += admitted[j].1;
            j += 1;
        }
        best = best.max(sum);
        sum -= admitted[i].1;
    }
    best
}

fn window_lengths(q: Quota) -> Vec<u64> {
    let e = q.emission_nanos();
    let w = q.window_nanos();
    vec![
        0,
        1,
        e - 1,
        e,
        w / 2,
        w.saturating_sub(1),
        w,
        w + e,
        2 * w,
        5 * w + 7,
    ]
}

/// Checks `arrivals` (weights capped at the burst) through `l` from time 0;
/// returns the time of the last one.
fn replay(l: &dyn RateLimiter, q: Quota, arrivals: &[(u64, u64)]) -> u64 {
    let mut now = 0u64;
    for &(gap, w) in arrivals {
        now += gap;
        let _ = l.check_at(w.min(q.burst()), Timestamp::from_nanos(now));
    }
    now
}

/// Fails unless the weight of `acts` (time, weight) in every window of
/// [`window_lengths`] is within `name`'s bound.
fn assert_bound(name: &str, q: Quota, mut acts: Vec<(u64, u64)>) -> Result<(), TestCaseError> {
    acts.sort_unstable();
    for t in window_lengths(q) {
        let got = max_in_window(&acts, t);
        prop_assert!(
            got <= bound(name, q, t),
            "{name}: {got} acted within {t} ns, bound {}",
            bound(name, q, t)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    /// No algorithm ever admits more than its documented bound in any
    /// window, whatever the arrivals and weights.
    #[test]
    fn never_exceeds_bound_in_any_window(q in quota(), arr in arrivals()) {
        for name in ALGORITHMS {
            let l = build(name, q);
            let mut now = 0u64;
            let mut admitted = Vec::new();
            for &(gap, w) in &arr {
                now += gap;
                let w = w.min(q.burst());
                let d = l.check_at(w, Timestamp::from_nanos(now)).expect("valid weight");
                if d.allowed {
                    // An admission with a delay (the queue) happens when it departs.
                    admitted.push((now + d.delay.as_nanos() as u64, w));
                }
            }
            assert_bound(name, q, admitted)?;
        }
    }

    /// A clock that jumps backwards never lets more through: admissions are
    /// placed at the latest time seen (the real time), and the bound holds.
    #[test]
    fn backwards_time_never_over_admits(q in quota(),
        steps in prop::collection::vec((-300_000_000i64..300_000_000, 1u64..5), 1..200)) {
        for name in ALGORITHMS {
            let l = build(name, q);
            let (mut now, mut latest) = (1_000_000_000i64, 0u64);
            let mut admitted = Vec::new();
            for &(step, w) in &steps {
                now = (now + step).max(0);
                latest = latest.max(now as u64);
                let w = w.min(q.burst());
                let d = l.check_at(w, Timestamp::from_nanos(now as u64)).expect("valid weight");
                if d.allowed {
                    // The queue's departure is an absolute time: `now + delay`.
                    admitted.push((latest.max(now as u64 + d.delay.as_nanos() as u64), w));
                }
            }
            assert_bound(name, q, admitted)?;
        }
    }

    /// GCRA and the token bucket are one algorithm: same quota, same
    /// arrivals, same answers — admissions and evidence alike.
    #[test]
    fn gcra_and_token_bucket_agree(q in quota(),
        ops in prop::collection::vec((0u64..300_000_000, 1u64..5, any::<bool>()), 1..300)) {
        let g = Gcra::with_clock(q, ManualClock::new());
        let b = TokenBucket::with_clock(q, ManualClock::new());
        let mut now = 0;
        for (gap, w, peek) in ops {
            now += gap;
            let t = Timestamp::from_nanos(now);
            let w = w.min(q.burst());
            let (dg, db) = if peek {
                (g.peek_at(w, t), b.peek_at(w, t))
            } else {
                (g.check_at(w, t), b.check_at(w, t))
            };
            prop_assert_eq!(dg, db);
        }
    }

    /// Reserving and then cancelling before the act time leaves the limiter
    /// exactly where an untouched twin is.
    #[test]
    fn reserve_then_cancel_is_a_no_op(q in quota(), before in arrivals(), after in arrivals(),
        weight in 1u64..12, cancel_frac in 0.0f64..=1.0) {
        for name in EXACT_CANCEL {
            let a = build(name, q);
            let b = build(name, q);
            let mut now = 0u64;
            for &(gap, w) in &before {
                now += gap;
                let w = w.min(q.burst());
                let t = Timestamp::from_nanos(now);
                prop_assert_eq!(a.check_at(w, t), b.check_at(w, t));
            }
            let t = Timestamp::from_nanos(now);
            let r = a.reserve_at(weight.min(q.burst()), t).expect("valid weight");
            let span = r.act_at().as_nanos() - now;
            now += (span as f64 * cancel_frac) as u64;
            let weight = r.weight();
            let returned = a.cancel_at(r, Timestamp::from_nanos(now));
            prop_assert_eq!(returned, weight, "{} returned less than reserved", name);
            for &(gap, w) in &after {
                now += gap;
                let w = w.min(q.burst());
                let t = Timestamp::from_nanos(now);
                prop_assert_eq!(a.check_at(w, t), b.check_at(w, t), "{}", name);
            }
        }
    }

    /// `retry_after` is exact: waiting that long admits the same request,
    /// one nanosecond less does not.
    #[test]
    fn retry_after_is_exact(q in quota(), arr in arrivals(), w in 1u64..12) {
        for name in ALGORITHMS {
            let l = build(name, q);
            let now = replay(&*l, q, &arr);
            let w = w.min(q.burst());
            let d = l.peek_at(w, Timestamp::from_nanos(now)).expect("valid");
            if let Some(retry) = d.retry_after {
                let at = now + retry.as_nanos() as u64;
                prop_assert!(!l.peek_at(w, Timestamp::from_nanos(at - 1)).expect("valid").allowed, "{name}");
                prop_assert!(l.peek_at(w, Timestamp::from_nanos(at)).expect("valid").allowed, "{name}");
            } else {
                prop_assert!(d.allowed);
            }
        }
    }

    /// A forged or foreign reservation (built with `Reservation::new` from
    /// arbitrary numbers) never panics and never gives back more than its
    /// weight.
    #[test]
    fn forged_reservations_are_harmless(q in quota(), before in arrivals(),
        weight in 0u64..20, made in any::<u64>(), act in any::<u64>(), mark in any::<u64>(),
        cost in any::<u64>(), at in any::<u64>()) {
        for name in ALGORITHMS {
            let l = build(name, q);
            let now = replay(&*l, q, &before);
            let forged = ratewise::Reservation::new(
                weight,
                Timestamp::from_nanos(made),
                Timestamp::from_nanos(act),
                mark,
                cost,
            );
            let back = l.cancel_at(forged, Timestamp::from_nanos(at % (now + 1)));
            prop_assert!(back <= weight, "{name}: gave back {back} for weight {weight}");
        }
    }

    /// Checks, reservations (waiting or not) and out-of-order cancellations
    /// mixed at random: what actually acts — admitted checks at their time,
    /// reservations not cancelled at their act time — never exceeds the
    /// algorithm's bound in any window.
    #[test]
    fn reservations_and_cancels_keep_the_bound(q in quota(),
        ops in prop::collection::vec((0u64..200_000_000, 0u8..4, 1u64..5, any::<u16>()), 1..150)) {
        for name in ALGORITHMS {
            let l = build(name, q);
            let mut now = 0u64;
            let mut acts: Vec<Option<(u64, u64)>> = Vec::new();
            let mut held: Vec<(usize, ratewise::Reservation)> = Vec::new();
            for &(gap, kind, w, pick) in &ops {
                now += gap;
                let t = Timestamp::from_nanos(now);
                let w = w.min(q.burst());
                match kind {
                    0 => {
                        let d = l.check_at(w, t).expect("valid weight");
                        if d.allowed {
                            acts.push(Some((now + d.delay.as_nanos() as u64, w)));
                        }
                    }
                    1 | 2 => {
                        let max_wait = if kind == 1 {
                            std::time::Duration::MAX
                        } else {
                            q.emission_interval() * 2
                        };
                        if let Ok(r) = l.reserve_within_at(w, t, max_wait) {
                            acts.push(Some((r.act_at().as_nanos(), w)));
                            held.push((acts.len() - 1, r));
                        }
                    }
                    _ => {
                        if !held.is_empty() {
                            let (slot, r) = held.swap_remove(pick as usize % held.len());
                            if r.act_at() >= t {
                                // Cancelled before its time: the caller will not act.
                                acts[slot] = None;
                            }
                            let weight = r.weight();
                            prop_assert!(l.cancel_at(r, t) <= weight);
                        }
                    }
                }
            }
            assert_bound(name, q, acts.into_iter().flatten().collect())?;
        }
    }
}

/// The bucket family (GCRA, token bucket, leaky meter) once gave out twice
/// the stretch a grant had been promised: cancelling a reservation that is
/// not the latest let a later one be booked at the latest's act time, and
/// cancelling that one moved "the latest act time" back past the other,
/// so an earlier reservation's cancel then returned capacity that was
/// still promised. Four units acted at one instant under a burst of three.
#[test]
fn cancelling_a_co_timed_latest_grant_keeps_the_other_ones_promise() {
    let q = Quota::per_second(10).unwrap().with_burst(3).unwrap();
    let t = Timestamp::ZERO;
    let ms = |v: u64| Timestamp::from_nanos(v * 1_000_000);
    for name in ["gcra", "token_bucket", "leaky_meter"] {
        let l = build(name, q);
        assert!(l.check_at(2, t).unwrap().allowed, "{name}");
        let early = l.reserve_at(3, t).unwrap();
        assert_eq!(early.act_at(), ms(200), "{name}");
        let middle = l.reserve_at(3, t).unwrap();
        assert_eq!(middle.act_at(), ms(500), "{name}");
        let kept = l.reserve_at(1, t).unwrap();
        assert_eq!(kept.act_at(), ms(600), "{name}");
        // One of `middle`'s three units was promised to `kept`.
        assert_eq!(l.cancel_at(middle, t), 2, "{name}");
        let twin = l.reserve_at(2, t).unwrap();
        assert_eq!(twin.act_at(), kept.act_at(), "{name}");
        assert_eq!(l.cancel_at(twin, t), 2, "{name}");
        // `kept` still acts at 600 ms: all of `early` stays promised.
        assert_eq!(l.cancel_at(early, t), 0, "{name}");
        let last = l.reserve_at(3, t).unwrap();
        assert_eq!(last.act_at(), ms(700), "{name}");
        let acts = vec![
            (0, 2),
            (kept.act_at().as_nanos(), 1),
            (last.act_at().as_nanos(), 3),
        ];
        assert_bound(name, q, acts).unwrap();
    }
}
