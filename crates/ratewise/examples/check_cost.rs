//! Runs one million admitted checks (or `RATEWISE_CHECKS`) on one limiter,
//! for instruction counting under `valgrind --tool=callgrind` (counts are
//! repeatable where timings on a busy machine are not):
//!
//! ```text
//! cargo build --release -p ratewise --example check_cost
//! valgrind --tool=callgrind target/release/examples/check_cost gcra
//! valgrind --tool=callgrind target/release/examples/check_cost governor
//! valgrind --tool=callgrind target/release/examples/check_cost keyed
//! valgrind --tool=callgrind target/release/examples/check_cost governor-keyed
//! ```
//!
//! The keyed modes cycle over 10 000 hot keys, as `benches/keyed.rs` does.

use std::hint::black_box;
use std::num::NonZeroU32;

use ratewise::{Gcra, Quota, RateLimiter};

const CHECKS: u64 = 1_000_000;

/// How many checks to run: [`CHECKS`], or more for sampling profilers
/// (`RATEWISE_CHECKS`).
fn checks() -> u64 {
    std::env::var("RATEWISE_CHECKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CHECKS)
}
const HOT_KEYS: u64 = 10_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "gcra".into());
    let checks = checks();
    let mut admitted = 0u64;
    match which.as_str() {
        "gcra" => {
            let l = Gcra::new(Quota::per_second(1_000_000_000)?);
            for _ in 0..checks {
                admitted += u64::from(black_box(l.check(1)?.allowed));
            }
        }
        "gcra-full" => {
            let l = Gcra::new(Quota::per_second(1_000_000_000)?);
            for _ in 0..checks {
                let d = black_box(l.check(1)?);
                admitted += u64::from(d.allowed);
            }
        }
        "governor" => {
            let nz = NonZeroU32::new(1_000_000_000).ok_or("zero")?;
            let l = governor::RateLimiter::direct(governor::Quota::per_second(nz));
            for _ in 0..checks {
                admitted += u64::from(black_box(l.check().is_ok()));
            }
        }
        "keyed" => {
            let l = ratewise::KeyedLimiter::<u64>::builder(Quota::per_second(1_000_000_000)?)
                .max_keys(100_000)
                .build();
            for i in 0..checks {
                admitted += u64::from(black_box(l.check(&(i % HOT_KEYS), 1)?.allowed));
            }
        }
        "governor-keyed" => {
            let nz = NonZeroU32::new(1_000_000_000).ok_or("zero")?;
            let l = governor::RateLimiter::dashmap(governor::Quota::per_second(nz));
            for i in 0..checks {
                admitted += u64::from(black_box(l.check_key(&(i % HOT_KEYS)).is_ok()));
            }
        }
        other => {
            return Err(format!(
                "unknown limiter {other}: gcra, gcra-full, governor, keyed, governor-keyed"
            )
            .into())
        }
    }
    println!("{which}: {admitted} of {checks} admitted");
    Ok(())
}
