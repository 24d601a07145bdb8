//! The one-limiter comparison of `benches/check.rs` as interleaved A/B
//! trials timed by on-CPU time, for machines too busy for criterion's
//! wall-clock numbers (see `support/ab.rs`).
//!
//! Each trial runs, one after another on one thread, 5 million admitted
//! checks of:
//! * `Gcra`, reading only the verdict, and governor's bare `check`;
//! * the header values a server writes: `Gcra`'s limit, remaining and reset
//!   read from its `Decision`, and governor's limit and remaining burst
//!   capacity read from the snapshot of its `StateInformationMiddleware`
//!   (the evidence governor can give; it has no reset);
//! * the headers written: the values above formatted on the stack by
//!   `ratewise::response_headers`. For ratewise the draft's `RateLimit` (its
//!   `RateLimit-Policy` never changes for a policy, so a server renders it
//!   once, as `ratewise-tower` does); for governor limit and remaining, the
//!   `x-ratelimit-*` pair tower_governor sends;
//! * the same with ratewise also rendering `RateLimit-Policy` on every call
//!   (`Decision::write_headers`);
//! * the whole return value moved into `black_box` as is: `Gcra`'s
//!   `Result<Decision, _>` and governor's `Result<StateSnapshot, _>`. This
//!   row flatters governor, whose snapshot defers its arithmetic (the
//!   remaining capacity is a division done only when asked), and it charges
//!   ours for a copy no header writer makes (a 72-byte struct whose `bool`
//!   is written narrow and re-read wide by the copy, which stalls store
//!   forwarding on AMD Zen);
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
use ratewise::response_headers::{HeaderBuf, HeaderStyle, PolicyInfo};
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
        "admit, header values",
        trials,
        iters,
        || match gcra.check(1) {
            Ok(d) => {
                black_box((d.limit, d.remaining, d.reset_after));
                d.allowed
            }
            Err(_) => false,
        },
        || match gov_info.check() {
            Ok(s) => {
                black_box((s.quota().burst_size(), s.remaining_burst_capacity()));
                true
            }
            Err(_) => false,
        },
    );
    let policy = PolicyInfo::from_quota("default", &open);
    let gov_headers = || match gov_info.check() {
        Ok(s) => {
            let mut limit = HeaderBuf::<24>::new();
            let mut remaining = HeaderBuf::<24>::new();
            let _ = limit.push_u64(u64::from(s.quota().burst_size().get()));
            let _ = remaining.push_u64(u64::from(s.remaining_burst_capacity()));
            black_box((limit.as_bytes(), remaining.as_bytes()));
            true
        }
        Err(_) => false,
    };
    compare(
        "admit, headers written",
        trials,
        iters,
        || match gcra.check(1) {
            Ok(d) => {
                let mut state = HeaderBuf::<64>::new();
                let _ = state.push_decision("default", &d);
                black_box(state.as_bytes());
                d.allowed
            }
            Err(_) => false,
        },
        gov_headers,
    );
    compare(
        "admit, both headers",
        trials,
        iters,
        || match gcra.check(1) {
            Ok(d) => {
                let _ = d.write_headers(&policy, HeaderStyle::DRAFT, |name, value| {
                    black_box((name, value));
                });
                d.allowed
            }
            Err(_) => false,
        },
        gov_headers,
    );
    compare(
        "admit, value moved",
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
