//! 003 Appendix E, "Comparing Algorithms on a Single Workload", run through
//! all seven algorithms with exact timestamps.
//!
//! The workload (quota: 100 per second, burst 100, so every window-based
//! algorithm uses windows of 1 s and a limit of 100):
//!
//! * phase 1 — 100 requests at a steady 100 RPS: t = 0, 10, …, 990 ms;
//! * phase 2 — a burst of 100 in 100 ms: t = 2000, 2001, …, 2099 ms;
//! * phase 3 — 200 requests at a steady 200 RPS: t = 3000, 3005, …, 3995 ms.
//!
//! The document gives approximate totals (token bucket ~300, fixed window
//! 300, sliding-window counter ~250, leaky queue 300). The exact counts are
//! asserted below; where they differ, a comment says why.

use std::time::Duration;

use ratewise::{
    FixedWindow, Gcra, LeakyMeter, LeakyQueue, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, Timestamp, TokenBucket,
};

fn ms(v: u64) -> Timestamp {
    Timestamp::from_nanos(v * 1_000_000)
}

fn phase1() -> impl Iterator<Item = Timestamp> {
    (0..100).map(|i| ms(10 * i))
}

fn phase2() -> impl Iterator<Item = Timestamp> {
    (0..100).map(|i| ms(2000 + i))
}

fn phase3() -> impl Iterator<Item = Timestamp> {
    (0..200).map(|i| ms(3000 + 5 * i))
}

fn quota() -> Quota {
    Quota::per_second(100).unwrap()
}

/// Admitted count per phase; also returns every admitted request's delay.
fn run(l: &dyn RateLimiter) -> ([u64; 3], Vec<(Timestamp, Duration)>) {
    let mut counts = [0; 3];
    let mut delays = Vec::new();
    let phases: [Box<dyn Iterator<Item = Timestamp>>; 3] =
        [Box::new(phase1()), Box::new(phase2()), Box::new(phase3())];
    for (count, times) in counts.iter_mut().zip(phases) {
        for t in times {
            let d = l.check_at(1, t).unwrap();
            if d.allowed {
                *count += 1;
                delays.push((t, d.delay));
            }
        }
    }
    (counts, delays)
}

/// Token bucket — the document's "~100 admitted in phase 3, ~300 in all" is
/// an underestimate. It forgets the refill *during* phase 3: the bucket
/// enters it full (100 tokens; at 2.099 s it held 9.9, and 90.1 more arrive
/// by 3.0 s) and earns 99.5 more over the 995 ms of arrivals, so 199 of the
/// 200 pass (the 200th finds 0.5 token). Likewise phase 2 ends with 9.9
/// tokens, not 0, because the burst lasts 99 ms. Total 399, not ~300.
#[test]
fn token_bucket() {
    let b = TokenBucket::with_clock(quota(), ManualClock::new());
    assert_eq!(run(&b).0, [100, 100, 199]);
}

/// GCRA admits exactly what the token bucket admits (same algorithm, other
/// end): 399, for the same reason.
#[test]
fn gcra() {
    let g = Gcra::with_clock(quota(), ManualClock::new());
    assert_eq!(run(&g).0, [100, 100, 199]);
}

/// The leaky meter is the token bucket upside down; starting empty equals
/// starting with a full bucket. 399, as above.
#[test]
fn leaky_meter() {
    let m = LeakyMeter::with_clock(quota(), ManualClock::new());
    assert_eq!(run(&m).0, [100, 100, 199]);
}

/// Leaky queue — the document says the second hundred of phase 3 find the
/// queue full and are denied (300 in all). But the queue drains at 100/s
/// while phase 3 fills it at 200/s, so it fills at a net 100/s and only
/// reaches its capacity of 100 at the 200th arrival: 199 are admitted
/// (399 in all). The price is latency, which the other algorithms do not
/// charge: the last of phase 3 departs almost a full second after arriving,
/// and departures never come closer than 10 ms.
#[test]
fn leaky_queue() {
    let q = LeakyQueue::with_clock(quota(), ManualClock::new());
    let (counts, delays) = run(&q);
    assert_eq!(counts, [100, 100, 199]);
    // Phase 1 arrives exactly at the drain rate: no waiting at all.
    assert!(delays[..100].iter().all(|(_, d)| d.is_zero()));
    // Phase 2's 100th departs at 2.99 s (the document's "t = 3" is the end of
    // its slot), 891 ms after arriving.
    assert_eq!(delays[199].0 + delays[199].1, ms(2990));
    let departures: Vec<_> = delays.iter().map(|(t, d)| *t + *d).collect();
    assert!(departures
        .windows(2)
        .all(|w| w[1] - w[0] >= Duration::from_millis(10)));
    let worst = delays.iter().map(|(_, d)| *d).max().unwrap();
    // The 199th of phase 3 arrives at 3.990 s behind 99 units of work.
    assert_eq!(worst, Duration::from_millis(990));
}

/// Fixed window — exactly the document's 300: each of the windows [0, 1),
/// [2, 3) and [3, 4) admits its limit of 100. (The document's remark that
/// 200 were admitted "within 0.2 seconds" does not hold for this workload:
/// phase 2's hundred fall in [2.0, 2.1) s and phase 3's in [3.0, 3.5) s. The
/// boundary weakness is real — see the unit tests — but this workload does
/// not straddle a boundary with a burst.)
#[test]
fn fixed_window() {
    let f = FixedWindow::with_clock(quota(), ManualClock::new());
    assert_eq!(run(&f).0, [100, 100, 100]);
}

/// Sliding-window counter — the document's ~250 comes from assuming the
/// window before the burst held 100; it held nothing (1–2 s is silent), so
/// all 100 of phase 2 pass. Phase 3 is where the estimate bites: the burst
/// is the previous window, counted as 100·(1 − f), so request k (at
/// f = 0.005·k) passes only while the admitted count stays ≤ 100·f; by
/// 3.995 s that is 99. Total 299.
#[test]
fn sliding_window_counter() {
    let s = SlidingWindowCounter::with_clock(quota(), ManualClock::new());
    assert_eq!(run(&s).0, [100, 100, 99]);
}

/// Sliding-window log (no figure in the document) — exact: early in phase 3
/// the burst's entries leave the window one per millisecond, faster than
/// requests arrive, so every arrival passes until they are gone (3.1 s);
/// after that the trailing second lies inside phase 3 and holds at most
/// 100. Total 300.
#[test]
fn sliding_window_log() {
    let s = SlidingWindowLog::with_clock(quota(), ManualClock::new());
    assert_eq!(run(&s).0, [100, 100, 100]);
    assert!(s.len() <= 100);
}
