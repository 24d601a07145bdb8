//! The full "never dominated" sweep: every scenario file in `scenarios/`,
//! `RUNS` runs each (default 3) from the scenario's own seed, one line per
//! scenario with the default's retry rate and time to clear, the fastest
//! other strategies with at most 10 % retries, and whatever beats the
//! default as `rank::NEVER_DOMINATED` forbids.
//!
//! `cargo run --release -p ratewise-sim --example never_dominated [RUNS [DIR]]`
//! (`DIR`: another directory of scenario files, such as variants of the
//! shipped ones kept out of the repository).

use ratewise_sim::{rank, Experiment, Scenario};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(3);
    let dir = match std::env::args().nth(2) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios"),
    };
    let mut paths: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|f| f.ok().map(|f| f.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    let mut dominated = 0;
    for path in &paths {
        let scenario = Scenario::load(&path.to_string_lossy())?;
        let name = scenario.name.clone();
        let seed = scenario.seed;
        let e = Experiment::new(scenario).seed(seed).runs(runs).run(|| {})?;
        let mean = |s: &str, m: &str| {
            e.results
                .iter()
                .find(|r| r.strategy == s)
                .and_then(|r| r.stat(m))
                .map_or(f64::INFINITY, |s| s.mean)
        };
        let shown = |s: &str| {
            format!(
                "{s} {:.2} % · {:.1} s",
                mean(s, "avg_retry_rate_pct"),
                mean(s, "time_to_clear_s")
            )
        };
        let mut others: Vec<&str> = e
            .results
            .iter()
            .map(|r| r.strategy.as_str())
            .filter(|s| *s != rank::DEFAULT_STRATEGY && !rank::HANDED_THE_QUOTA.contains(s))
            .filter(|s| mean(s, "avg_retry_rate_pct") <= 10.0 && mean(s, "failed_calls") == 0.0)
            .collect();
        others.sort_by(|a, b| mean(a, "time_to_clear_s").total_cmp(&mean(b, "time_to_clear_s")));
        let beaten = rank::dominating_the_default(&e);
        dominated += usize::from(!beaten.is_empty());
        let verdict = if beaten.is_empty() {
            "never dominated".to_owned()
        } else {
            let who: Vec<String> = beaten.iter().map(|(n, _, _)| n.clone()).collect();
            format!("DOMINATED by {}", who.join(", "))
        };
        let fastest: Vec<String> = others.iter().take(2).map(|s| shown(s)).collect();
        println!(
            "{name}: {} (failed calls {}) — {verdict}; fastest others ≤ 10 %: {}",
            shown(rank::DEFAULT_STRATEGY),
            mean(rank::DEFAULT_STRATEGY, "failed_calls"),
            fastest.join("; ")
        );
    }
    println!(
        "{dominated} of {} scenarios dominate the default",
        paths.len()
    );
    Ok(())
}
