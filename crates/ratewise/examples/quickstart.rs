//! A tour of the core limiters on a manual clock: run with
//! `cargo run -p ratewise --example quickstart`.

use std::time::Duration;

use ratewise::{Gcra, ManualClock, Quota, RateLimiter, TokenBucket};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10)?.with_burst(20)?;
    let gcra = Gcra::with_clock(quota, clock.clone());
    let bucket = TokenBucket::with_clock(quota, clock.clone());

    println!("quota: {quota}");
    for step in 0..5 {
        let mut admitted = (0, 0);
        for _ in 0..15 {
            admitted.0 += u32::from(gcra.check(1)?.is_allowed());
            admitted.1 += u32::from(bucket.check(1)?.is_allowed());
        }
        let d = gcra.peek(1)?;
        println!(
            "t={:>4} ms  gcra admitted {:>2}/15  token bucket admitted {:>2}/15  remaining {:>2}  retry-after {:?}",
            step * 500,
            admitted.0,
            admitted.1,
            d.remaining,
            d.retry_after
        );
        clock.advance(Duration::from_millis(500));
    }
    Ok(())
}
