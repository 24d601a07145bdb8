//! The one-limiter comparison of `benches/check.rs` as interleaved A/B
//! trials timed by on-CPU time, for machines too busy for criterion's
//! wall-clock numbers (see `support/ab.rs`).
//!
//! Each trial runs, one after another on one thread, 5 million admitted
//! checks of:
//! * `Gcra`, reading only the verdict, and governor's bare `check`;
//! * `Gcra` keeping the whole `Decision` (what a server that writes headers
//!   needs), and governor's check with its `StateInformationMiddleware`
//!   (the evidence governor can give: remaining burst capacity);
//! * a denial: `Gcra` and governor on an exhausted one-per-hour quota;
//!
//! and prints the median rates and the median, lowest and highest ratio.
//!
//! ```text
//! cargo bench -p ratewise --bench check_ab -- 9    # 9 trials (default 7)
//! ```

use std::hint::black_box;
use std::num::NonZeroU32;

use governor::middleware::StateInformationMiddleware;
use ratewise::{Gcra, Quota, RateLimiter};

#[path = "support/ab.rs"]
mod ab;

fn main() {
    let open = Quota::per_second(1_000_000_000).expect("valid quota");
    let gov_open = governor::Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero"));
    let gcra = Gcra::new(open);
    let gov = governor::RateLimiter::direct(gov_open);
    let gov_info =
        governor::RateLimiter::direct(gov_open).with_middleware::<StateInformationMiddleware>();
    let closed = Quota::per_hour(1).expect("valid quota");
    let gcra_deny = Gcra::new(closed);
    let gov_deny =
        governor::RateLimiter::direct(governor::Quota::per_hour(NonZeroU32::new(1).expect("1")));
    let _ = gcra_deny.check(1);
    let _ = gov_deny.check();

    let trials = ab::trials(7);
    let iters = 5_000_000;
    println!(
        "{trials} interleaved trials of {iters} checks, 1 thread; rates in M checks/s by CPU time"
    );
    compare(
        "admit, verdict only",
        trials,
        iters,
        || gcra.check(1).is_ok_and(|d| d.allowed),
        || gov.check().is_ok(),
    );
    compare(
        "admit, full evidence",
        trials,
        iters,
        || black_box(gcra.check(1)).is_ok_and(|d| d.allowed),
        || black_box(gov_info.check()).is_ok(),
    );
    compare(
        "deny",
        trials,
        iters,
        || gcra_deny.check(1).is_ok_and(|d| d.allowed),
        || gov_deny.check().is_ok(),
    );
}

/// Interleaved trials of `ours` and `theirs` (monomorphised, so each is
/// inlined as a caller's code would be).
fn compare(
    name: &str,
    trials: usize,
    iters: u64,
    ours: impl Fn() -> bool + Sync,
    theirs: impl Fn() -> bool + Sync,
) {
    let mut rows = Vec::new();
    for _ in 0..trials {
        let a = ab::run(1, iters, &|_, _| ours());
        let b = ab::run(1, iters, &|_, _| theirs());
        rows.push((a.1, b.1));
    }
    let (ours_rate, _, _) = ab::spread(rows.iter().map(|r| r.0 / 1e6).collect());
    let (gov_rate, _, _) = ab::spread(rows.iter().map(|r| r.1 / 1e6).collect());
    // Time per check, ours over governor's: below 1.0 is faster.
    let (ratio, lo, hi) = ab::spread(rows.iter().map(|r| r.1 / r.0).collect());
    println!(
        "{name:22} ratewise {ours_rate:6.1} ({:.2} ns)  governor {gov_rate:6.1} ({:.2} ns)  time ratio ratewise/governor {ratio:.3} (min {lo:.3} max {hi:.3})",
        1e3 / ours_rate,
        1e3 / gov_rate,
    );
}
