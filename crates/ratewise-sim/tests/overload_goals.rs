//! The goals of the server-side simulator's default controller, each an
//! assertion over the shipped scenarios (docs/simulator.md defines the
//! figures): on the Pareto front of goodput within the objective and p99
//! while overloaded, within 5 % of the best goodput, converging after a 2×
//! step within 10× the no-load p99, recovering from the retry storm,
//! keeping critical traffic at 2× overload, collapsing nowhere.

use std::sync::OnceLock;

use ratewise_sim::overload::{run, Controller, OverloadResult, OverloadScenario};

/// Seeds each figure is averaged over: one seed is one draw of the service
/// times, and the controllers' differences are a fraction of a percent.
const SEEDS: u64 = 3;

/// Every shipped scenario with, per controller (in `Controller::ALL`
/// order), its runs on seeds 1..=SEEDS; computed once, a thread per
/// scenario.
fn all_runs() -> &'static [(OverloadScenario, Vec<Vec<OverloadResult>>)] {
    static RUNS: OnceLock<Vec<(OverloadScenario, Vec<Vec<OverloadResult>>)>> = OnceLock::new();
    RUNS.get_or_init(|| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = OverloadScenario::all()
                .into_iter()
                .map(|s| {
                    scope.spawn(move || {
                        let per_controller = Controller::ALL
                            .iter()
                            .map(|&c| (1..=SEEDS).map(|seed| run(&s, c, seed)).collect())
                            .collect();
                        (s, per_controller)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    })
}

fn mean(runs: &[OverloadResult], f: impl Fn(&OverloadResult) -> f64) -> f64 {
    runs.iter().map(f).sum::<f64>() / runs.len() as f64
}

/// Each controller's name with its mean (goodput within the objective as a
/// share, p99 while overloaded in ms).
fn front_points(per_controller: &[Vec<OverloadResult>]) -> Vec<(&'static str, f64, f64)> {
    Controller::ALL
        .iter()
        .zip(per_controller)
        .map(|(c, runs)| {
            (
                c.name(),
                mean(runs, |r| r.goodput_within_objective_share),
                mean(runs, |r| r.p99_overloaded_ms),
            )
        })
        .collect()
}

fn runs_of<'a>(name: &str) -> &'a [OverloadResult] {
    let (_, per_controller) = all_runs()
        .iter()
        .find(|(s, _)| s.name == name)
        .unwrap_or_else(|| panic!("no shipped scenario {name}"));
    let i = Controller::ALL
        .iter()
        .position(|&c| c == Controller::DEFAULT)
        .unwrap();
    &per_controller[i]
}

#[test]
fn the_default_is_on_the_pareto_front_and_within_5_percent_of_the_best_goodput() {
    for (s, per_controller) in all_runs() {
        let points = front_points(per_controller);
        let &(_, g, p) = points
            .iter()
            .find(|(n, _, _)| *n == Controller::DEFAULT.name())
            .unwrap();
        let best = points.iter().map(|x| x.1).fold(0.0, f64::max);
        assert!(
            g >= 0.95 * best,
            "{}: {g:.4} against the best {best:.4}: {points:?}",
            s.name
        );
        // Dominated: at least as good on both, better on one.
        let dominating: Vec<_> = points
            .iter()
            .filter(|&&(_, og, op)| og >= g && op <= p && (og > g || op < p))
            .copied()
            .collect::<Vec<_>>();
        assert!(
            dominating.is_empty(),
            "{}: the default ({g:.4}, {p:.1} ms) is dominated by {dominating:?}",
            s.name
        );
    }
}

#[test]
fn after_a_2x_step_the_default_converges_within_10x_the_no_load_p99() {
    let s = OverloadScenario::load("step-2x").unwrap();
    let bound = 10.0 * s.no_load_p99_ms();
    for r in runs_of("step-2x") {
        assert!(r.convergence_ms[0] <= bound, "{bound} ms: {r:?}");
    }
}

#[test]
fn the_default_recovers_from_the_retry_storm_where_no_limit_collapses() {
    for r in runs_of("retry-storm") {
        // The last 10 s, demand back to 80 %: all of it within the objective.
        assert!(r.final_share >= 0.95, "{r:?}");
        // Retries are bounded by the refusals: fewer than two attempts a call.
        assert!(r.retry_amplification < 2.0, "{r:?}");
        assert!(r.wasted_work_share < 0.01, "{r:?}");
    }
    // Without a limit the storm outlives its cause: metastable collapse.
    let (_, per_controller) = all_runs()
        .iter()
        .find(|(s, _)| s.name == "retry-storm")
        .unwrap();
    for r in &per_controller[0] {
        assert_eq!(r.controller, "none");
        assert!(r.final_share < 0.05, "{r:?}");
        assert!(r.retry_amplification > 3.0 && r.wasted_work_share > 0.5);
    }
}

#[test]
fn critical_traffic_keeps_99_percent_success_at_2x_overload() {
    for r in runs_of("priorities") {
        assert!(r.success_by_priority["critical"] >= 0.99, "{r:?}");
        assert!(r.success_by_priority["sheddable"] < r.success_by_priority["critical"]);
        assert!(r.jain_fairness < 1.0);
    }
}

#[test]
fn no_collapse_anywhere() {
    let worst = all_runs()
        .iter()
        .map(|(s, _)| {
            (
                s.name.as_str(),
                mean(runs_of(&s.name), |r| r.goodput_within_objective_share),
            )
        })
        .fold(("", f64::MAX), |a, b| if b.1 < a.1 { b } else { a });
    assert!(worst.1 >= 0.8, "{worst:?}");
}
