//! The qualitative results of Heroku's published comparison, pinned over
//! several seeds (the published numbers are single noisy runs; see
//! docs/simulator.md for the side-by-side table).

use ratewise_sim::strategies::{self, HEROKU_FIVE};
use ratewise_sim::{Experiment, ExperimentResult, Scenario};

const SEEDS: u32 = 8;

fn heroku() -> ExperimentResult {
    let scenario = Scenario::load("heroku").unwrap_or_else(|e| panic!("{e}"));
    let chosen = HEROKU_FIVE
        .iter()
        .map(|n| strategies::find(n).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    Experiment::new(scenario)
        .strategies(chosen)
        .seed(100)
        .runs(SEEDS)
        .run(|| {})
        .unwrap_or_else(|e| panic!("{e}"))
}

fn mean(e: &ExperimentResult, strategy: &str, metric: &str) -> f64 {
    e.results
        .iter()
        .find(|r| r.strategy == strategy)
        .and_then(|r| r.stat(metric))
        .map(|s| s.mean)
        .unwrap_or_else(|| panic!("no {metric} for {strategy}"))
}

fn max(e: &ExperimentResult, strategy: &str, metric: &str) -> f64 {
    e.results
        .iter()
        .find(|r| r.strategy == strategy)
        .and_then(|r| r.stat(metric))
        .map(|s| s.max)
        .unwrap_or_else(|| panic!("no {metric} for {strategy}"))
}

#[test]
fn published_qualitative_results_hold() {
    let e = heroku();
    let retry = |s| mean(&e, s, "avg_retry_rate_pct");
    // EIPRD's retry rate is under 10 % in every run and far below EB's.
    assert!(max(&e, "eiprd", "avg_retry_rate_pct") < 10.0);
    assert!(retry("eb") > 60.0 && retry("eb") > 10.0 * retry("eiprd"));
    // Retry ordering: EB ×1.2 > EB ×2 > EIGD > both proportional ones.
    assert!(retry("eb") > retry("eb-x2"));
    assert!(retry("eb-x2") > retry("eigd"));
    assert!(retry("eigd") > 5.0 * retry("eipd").max(retry("eiprd")));

    // Max sleep: EB ×2 > EIGD > EB ×1.2 > the proportional ones, which stay
    // near the 16.6 s rung of the ladder.
    let sleep = |s| mean(&e, s, "max_sleep_s");
    assert!(sleep("eb-x2") > sleep("eigd"));
    assert!(sleep("eigd") > sleep("eb"));
    assert!(sleep("eb") > sleep("eipd").max(sleep("eiprd")));
    assert!(sleep("eiprd") < 40.0 && sleep("eipd") < 40.0);

    // Request-count spread: EIGD (one client rides the floor) > EB ×2 > EB
    // and the proportional ones.
    let sd = |s| mean(&e, s, "stdev_request_count");
    assert!(sd("eigd") > 2.0 * sd("eb-x2"));
    assert!(sd("eb-x2") > sd("eb"));
    assert!(sd("eb") > sd("eipd").min(sd("eiprd")));

    // Time to clear: EIPD's is several times everyone else's.
    let ttc = |s| mean(&e, s, "time_to_clear_s");
    for other in ["eb-x2", "eb", "eigd", "eiprd"] {
        assert!(ttc("eipd") > 4.0 * ttc(other), "eipd vs {other}");
        assert!(ttc(other) < 100.0, "{other}: {}", ttc(other));
    }

    // Every strategy uses the ~2250 available successes fully.
    for s in HEROKU_FIVE {
        let u = mean(&e, s, "utilization");
        assert!(u > 0.9 && u <= 1.0 + 1e-9, "{s}: utilization {u}");
    }
}

#[test]
fn null_strategy_hammers_the_server() {
    // Spec §6: Null against the bucket: no sleep, every retry ratio > 0.5.
    let scenario = Scenario::load("heroku").unwrap_or_else(|e| panic!("{e}"));
    let null = strategies::find("null").unwrap_or_else(|e| panic!("{e}"));
    let out = ratewise_sim::run(&scenario, &null, 3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.metrics.max_sleep_s, 0.0);
    assert!(out
        .metrics
        .threads
        .iter()
        .all(|t| t.retry_ratio().is_some_and(|r| r > 0.5)));
}

#[test]
fn workload_run_drains_the_server_without_429s() {
    let scenario = Scenario::load("heroku-workload").unwrap_or_else(|e| panic!("{e}"));
    let eb = strategies::find("eb").unwrap_or_else(|e| panic!("{e}"));
    let out = ratewise_sim::run(&scenario, &eb, 5).unwrap_or_else(|e| panic!("{e}"));
    let m = &out.metrics;
    assert_eq!(m.throttled, 0);
    assert!((4489..=4500).contains(&m.successes), "{}", m.successes);
    assert!(m.time_to_clear_s.is_some());
}

#[test]
fn every_built_in_scenario_runs_every_strategy() {
    for scenario in Scenario::built_in().unwrap_or_else(|e| panic!("{e}")) {
        if scenario.name.starts_with("heroku") {
            continue; // covered above
        }
        let e = Experiment::new(scenario.clone())
            .run(|| {})
            .unwrap_or_else(|e| panic!("{}: {e}", scenario.name));
        assert_eq!(e.results.len(), strategies::ALL.len());
        for r in &e.results {
            let m = &r.runs[0];
            assert_eq!(m.requests, m.successes + m.throttled, "{}", r.strategy);
            assert!(m.successes > 0, "{} / {}", scenario.name, r.strategy);
        }
    }
}
