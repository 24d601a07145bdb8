//! A flood of distinct keys against a keyed limiter with a key cap.
//!
//! ```text
//! cargo run --release -p ratewise --example keyed_flood [flood_keys] [max_keys]
//! ```
//!
//! Defaults: 10 000 000 flood keys, a cap of 100 000 keys. Every key may make
//! 10 requests per second (burst 10). Time is simulated, so the run is
//! deterministic and takes seconds:
//!
//! * phase A (first half of the flood): new keys arrive at a rate whose
//!   keys fit in half the cap while they recover (each flood key's single
//!   request takes 100 ms to refill), so rested keys are evicted and no key
//!   is ever refused;
//! * phase B (second half): keys arrive four times faster than that, more
//!   than the cap can hold while they recover; new keys are refused with
//!   `KeyedError::Full`.
//!
//! The flood runs twice: with the default strict eviction, and with lenient
//! eviction forgiving at most 100 ms (one flood key's single request) of a
//! key's debt, under which nobody is refused.
//!
//! Throughout, 100 legitimate keys send twice their allowed rate, and every
//! answer they get is compared with a model limiter per key that is never
//! evicted: they must match exactly. Resident memory is read from
//! `/proc/self/statm` (Linux) and reported; the run fails if the legitimate
//! keys were ever answered wrongly or if the process grew by more than
//! [`FloodReport::memory_bound`].

#![allow(dead_code)] // also compiled as a module of the scaled-down test

use std::time::{Duration, Instant};

use ratewise::keyed::{KeyedError, KeyedLimiter, NoClock};
use ratewise::{Gcra, Quota, RateLimiter, Timestamp};

/// Fixed allowance (8 MiB) for the allocator and the test harness, on top
/// of the limiter's own bound ([`KeyedLimiter::max_table_bytes`]).
pub const MEMORY_BOUND_FIXED: u64 = 8 << 20;

/// Shards of the flood's limiter.
pub const FLOOD_SHARDS: usize = 128;

/// What the flood run saw.
#[derive(Debug, Default)]
pub struct FloodReport {
    /// Distinct flood keys sent.
    pub flood_keys: u64,
    /// The configured cap.
    pub max_keys: usize,
    /// The limiter's own bound on its tables, in bytes.
    pub table_bound: usize,
    /// Resident bytes before the limiter was built.
    pub rss_before: Option<u64>,
    /// Highest resident bytes sampled during the run.
    pub rss_peak: Option<u64>,
    /// The most keys tracked at once (sampled).
    pub max_tracked: usize,
    /// Flood requests refused because the table was full, per phase.
    pub refused_a: u64,
    /// As `refused_a`, in phase B.
    pub refused_b: u64,
    /// Legitimate checks made.
    pub legit_checks: u64,
    /// Legitimate checks admitted.
    pub legit_admitted: u64,
    /// Legitimate checks whose answer differed from the model.
    pub legit_mismatches: u64,
    /// Legitimate checks refused because the table was full.
    pub legit_refused: u64,
    /// Visits of returning (occasional) keys.
    pub returning_checks: u64,
    /// Visits of returning keys refused because the table was full.
    pub returning_refused: u64,
    /// Keys evicted.
    pub evictions: u64,
    /// Of those, keys evicted by lenient eviction before they were rested.
    pub lenient_evictions: u64,
    /// Wall-clock time of the flood.
    pub elapsed: Duration,
}

impl FloodReport {
    /// The memory bound for this run: the limiter's bound on its tables
    /// plus [`MEMORY_BOUND_FIXED`].
    pub fn memory_bound(&self) -> u64 {
        MEMORY_BOUND_FIXED + self.table_bound as u64
    }

    /// Growth of resident memory over the run, if it could be measured.
    pub fn rss_growth(&self) -> Option<u64> {
        Some(self.rss_peak?.saturating_sub(self.rss_before?))
    }
}

/// Resident memory of this process in bytes, from `/proc/self/statm`
/// (second field, in pages; pages are assumed to be 4 KiB).
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

const LEGIT: u64 = 100;
/// Simulated time between two legitimate turns (one key per turn, so each
/// active key has a turn every 100 ms, two requests: 20 per second).
const LEGIT_EVERY_NS: u64 = 1_000_000;
/// Keys that come back only every few seconds: rested (and so evictable)
/// between visits.
const RETURNING: u64 = 100;
const RETURNING_EVERY_NS: u64 = 30_000_000;

/// Runs the flood.
/// Floods a limiter of cap `max_keys` with `flood_keys` distinct keys;
/// `lenient` turns on lenient eviction with that debt bound.
pub fn run(flood_keys: u64, max_keys: usize, lenient: Option<Duration>) -> FloodReport {
    let quota = Quota::per_second(10).expect("valid quota");
    let refill = quota.emission_nanos(); // one flood request's worth
    let cap = max_keys.max(1) as u64;
    // Live flood keys ~ refill / step: half the cap in phase A, twice it in B.
    let step_a = (2 * refill / cap).max(1);
    let step_b = (refill / (2 * cap)).max(1);

    let mut report = FloodReport {
        flood_keys,
        max_keys,
        rss_before: rss_bytes(),
        ..FloodReport::default()
    };
    // A fixed shard count and hasher seed make the run reproducible: the
    // production default seeds the hasher at random and sizes shards by CPU
    // count, which would make the per-shard load (and so the exact counts
    // reported) differ from run to run and machine to machine. 128 shards
    // is the default on a two-CPU machine (fewer if the cap is small).
    let seed = std::env::var("RATEWISE_FLOOD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED);
    let keyed = KeyedLimiter::<u64>::builder(quota)
        .max_keys(max_keys)
        .shards(
            FLOOD_SHARDS
                .min(max_keys / ratewise::keyed::MIN_KEYS_PER_SHARD)
                .max(1),
        )
        .preallocate(true)
        .hasher(foldhash::fast::FixedState::with_seed(seed));
    let keyed = match lenient {
        Some(max_debt) => keyed.lenient_eviction(max_debt),
        None => keyed,
    }
    .build();
    report.table_bound = keyed.max_table_bytes();
    let models: Vec<Gcra<NoClock>> = (0..LEGIT)
        .map(|_| Gcra::with_clock(quota, NoClock))
        .collect();

    let started = Instant::now();
    let mut now = 0u64;
    let (mut next_legit, mut legit_turn) = (0u64, 0u64);
    let (mut next_returning, mut returning_turn) = (0u64, 0u64);
    let sample_every = (flood_keys / 100).max(1);
    for i in 0..flood_keys {
        let phase_b = i >= flood_keys / 2;
        now += if phase_b { step_b } else { step_a };
        let t = Timestamp::from_nanos(now);
        let key = (1u64 << 40) + i;
        match keyed.check_at(&key, 1, t) {
            Ok(_) => {}
            Err(KeyedError::Full { .. }) if phase_b => report.refused_b += 1,
            Err(KeyedError::Full { .. }) => report.refused_a += 1,
            Err(e) => panic!("flood key: unexpected error {e}"),
        }
        while next_returning <= now {
            let who = 1_000 + returning_turn % RETURNING;
            returning_turn += 1;
            next_returning += RETURNING_EVERY_NS;
            report.returning_checks += 1;
            match keyed.check_at(&who, 1, t) {
                Ok(d) if d.allowed => {}
                Ok(_) => panic!("a returning key is rested and must be admitted"),
                Err(KeyedError::Full { .. }) => report.returning_refused += 1,
                Err(e) => panic!("returning key: unexpected error {e}"),
            }
        }
        while next_legit <= now {
            let who = legit_turn % LEGIT;
            legit_turn += 1;
            next_legit += LEGIT_EVERY_NS;
            // Two requests per turn: twice the allowed rate.
            for _ in 0..2 {
                report.legit_checks += 1;
                let model = &models[who as usize];
                match keyed.check_at(&who, 1, t) {
                    Ok(d) => {
                        let m = model.check_at(1, t).expect("valid weight");
                        if d != m {
                            report.legit_mismatches += 1;
                        }
                        if d.allowed {
                            report.legit_admitted += 1;
                        }
                    }
                    Err(KeyedError::Full { .. }) => report.legit_refused += 1,
                    Err(e) => panic!("legitimate key: unexpected error {e}"),
                }
            }
        }
        if i % sample_every == 0 {
            report.max_tracked = report.max_tracked.max(keyed.len());
            report.rss_peak = report.rss_peak.max(rss_bytes());
        }
    }
    report.elapsed = started.elapsed();
    report.max_tracked = report.max_tracked.max(keyed.len());
    report.rss_peak = report.rss_peak.max(rss_bytes());
    report.evictions = keyed.evictions();
    report.lenient_evictions = keyed.lenient_evictions();
    report
}

fn main() {
    let mut args = std::env::args().skip(1);
    let flood_keys = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let max_keys = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    println!("strict eviction (the default)");
    let strict = run(flood_keys, max_keys, None);
    print_report(&strict);
    // A flood key owes one emission interval just after its one request;
    // legitimate keys, sending twice their rate, owe more than that.
    let max_debt = Duration::from_nanos(Quota::per_second(10).expect("valid").emission_nanos());
    println!("\nlenient eviction, forgiving at most {max_debt:?} of a key's debt");
    let lenient = run(flood_keys, max_keys, Some(max_debt));
    print_report(&lenient);
    let failed = [&strict, &lenient].iter().any(|r| {
        r.legit_mismatches > 0
            || r.legit_refused > 0
            || r.rss_growth().is_some_and(|g| g > r.memory_bound())
    });
    if failed {
        eprintln!("FAILED");
        std::process::exit(1);
    }
}

fn print_report(r: &FloodReport) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("flood keys          {}", r.flood_keys);
    println!("key cap             {}", r.max_keys);
    println!("max keys tracked    {}", r.max_tracked);
    println!(
        "evictions           {} ({} of keys not yet rested)",
        r.evictions, r.lenient_evictions
    );
    println!("refused (phase A)   {}", r.refused_a);
    println!("refused (phase B)   {}", r.refused_b);
    println!(
        "legitimate checks   {} ({} admitted, {} wrong answers, {} refused as new)",
        r.legit_checks, r.legit_admitted, r.legit_mismatches, r.legit_refused
    );
    println!(
        "returning keys      {} visits, {} refused as new while the table was full",
        r.returning_checks, r.returning_refused
    );
    println!(
        "wall time           {:.2?} ({:.1} M checks/s)",
        r.elapsed,
        (r.flood_keys + r.legit_checks) as f64 / r.elapsed.as_secs_f64() / 1e6
    );
    println!(
        "table estimate      {} bytes/key at full load; at most {:.1} MiB for the whole table",
        KeyedLimiter::<u64>::estimated_bytes_per_key(),
        mib(r.table_bound as u64)
    );
    match (r.rss_before, r.rss_peak, r.rss_growth()) {
        (Some(b), Some(p), Some(g)) => {
            println!(
                "resident memory     {:.1} MiB before, {:.1} MiB peak, +{:.1} MiB ({:.0} bytes per key of cap); bound +{:.1} MiB",
                mib(b),
                mib(p),
                mib(g),
                g as f64 / r.max_keys as f64,
                mib(r.memory_bound())
            );
        }
        _ => println!("resident memory     not measurable here (/proc/self/statm missing)"),
    }
}
