//! The default `throttle` is never dominated (`rank::NEVER_DOMINATED`),
//! fails no call and keeps its retry rate at or below 5 % (the scenarios
//! where it does not yet are named below, with the bound they must not
//! pass).
//!
//! A debug build checks the scenarios that broke the rule before (a strict
//! sliding log, over-stated headers, a leaky bucket with no burst, a
//! bucket's remaining count shared by many clients, a bucket of one whose
//! count says "none left" after every success, two clients of a bucket whose
//! empty answers state its refill, eight clients of a fast bucket that says
//! nothing) and a few shipped APIs,
//! two runs each, in about 20 s;
//! the full sweep over every file in `scenarios/` is
//! `cargo run --release -p ratewise-sim --example never_dominated`.

use ratewise_sim::{rank, Experiment, Scenario};

/// Scenarios where the default's retry rate is still above 5 %, with the
/// bound it must stay under (blind shared quotas: see docs/simulator.md).
/// `many-clients` averages 5.08 % over 30 runs (5.04 % before the fair
/// climb; its two runs here were under 5 % by luck of the seeds).
const OVER_5_PERCENT: &[(&str, f64)] = &[("sliding-log-bare", 7.0), ("many-clients", 6.0)];

#[test]
fn the_default_is_never_dominated_on_any_scenario() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut broken = Vec::new();
    for file in [
        "sliding-log-retry-after",
        "sliding-log-bare",
        "overstated-quota",
        "leaky-bucket-strict",
        "bucket-of-one-draft",
        "token-bucket-many",
        "sliding-log-shared",
        "hidden-limit",
        "many-clients",
        "stripe",
        "emr-scan",
        "bucket-pair-draft",
        "leaky-bucket-fleet",
    ] {
        let path = dir.join(format!("{file}.toml"));
        let scenario = Scenario::load(&path.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
        let name = scenario.name.clone();
        let seed = scenario.seed;
        let e = Experiment::new(scenario)
            .seed(seed)
            .runs(2)
            .run(|| {})
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for (who, retry, clear) in rank::dominating_the_default(&e) {
            broken.push(format!(
                "{name}: `{who}` beats it ({retry:.2} %, {clear:.1} s)"
            ));
        }
        let d = e
            .results
            .iter()
            .find(|r| r.strategy == rank::DEFAULT_STRATEGY)
            .expect("the default runs");
        let failed = d.stat("failed_calls").map_or(0.0, |s| s.mean);
        if failed > 0.0 {
            broken.push(format!("{name}: {failed} failed calls"));
        }
        let retry = d.stat("avg_retry_rate_pct").map_or(f64::NAN, |s| s.mean);
        let bound = OVER_5_PERCENT
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(5.0, |&(_, b)| b);
        if retry.is_nan() || retry > bound {
            broken.push(format!("{name}: retry rate {retry:.2} % > {bound} %"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
