//! Score client throttling strategies in virtual time: a deterministic
//! discrete-event simulator of clients calling a rate-limited API, in the
//! manner of Heroku's experiment (retry rate, max sleep, fairness, time to
//! clear) — thirty simulated minutes in milliseconds, byte-identical output
//! for the same seed.
//!
//! ```
//! use ratewise_sim::{Experiment, Scenario, strategies};
//!
//! let scenario = Scenario::load("heroku")?;
//! let eiprd = strategies::find("eiprd")?;
//! let result = Experiment::new(scenario)
//!     .strategies(vec![eiprd])
//!     .seed(7)
//!     .run(|| {})?;
//! let eiprd = &result.results[0];
//! let retry = eiprd.stat("avg_retry_rate_pct").map_or(100.0, |s| s.mean);
//! assert!(retry < 10.0, "EIPRD rarely sees a 429: {retry}");
//! # Ok::<(), ratewise_sim::SimError>(())
//! ```
//!
//! [`scenario`] loads TOML scenarios; [`server`] and [`stack`] model the APIs
//! (stacks of core limiters answering with real header text); [`engine`]
//! drives real `ratewise_client` strategies through their sans-IO
//! interface; [`metrics`], [`rank`] and [`report`] measure, rank by a stated
//! rule and print; [`strategies`] is the registry. No real time, all
//! randomness from the seed, no strategy logic of its own.

#![warn(missing_docs)]

pub mod engine;
pub mod error;
mod in_flight;
pub mod metrics;
pub mod overload;
mod prefetch;
pub mod queue;
pub mod rank;
pub mod report;
pub mod samples;
pub mod scenario;
pub mod server;
pub mod stack;
pub mod strategies;

pub use engine::{run, RunOutput, Trace};
pub use error::{Location, SimError};
pub use metrics::{RunMetrics, Stat};
pub use scenario::Scenario;
pub use strategies::{StrategyInfo, StrategyParams};

/// One strategy's results over all runs of an experiment.
#[derive(Clone, Debug)]
pub struct StrategyResult {
    /// Strategy name.
    pub strategy: String,
    /// Metrics of each run of the main scenario, in seed order.
    pub runs: Vec<RunMetrics>,
    /// Metrics of each run of the time-to-clear companion scenario, if any.
    pub clear_runs: Vec<RunMetrics>,
    /// Chart data of the first run of the main scenario.
    pub trace: Trace,
}

impl StrategyResult {
    /// Mean / min / max of metric `name` (see
    /// [`metrics::METRIC_NAMES`]) over the runs. `time_to_clear_s` comes
    /// from the companion scenario when there is one, and is `None` unless
    /// every run cleared.
    pub fn stat(&self, name: &str) -> Option<Stat> {
        self.per_run(name).and_then(|v| Stat::of(&v))
    }

    /// Metric `name` of each run, in seed order, from the same runs as
    /// [`StrategyResult::stat`]; `None` when some run has no value.
    pub fn per_run(&self, name: &str) -> Option<Vec<f64>> {
        let source = if name == "time_to_clear_s" && !self.clear_runs.is_empty() {
            &self.clear_runs
        } else {
            &self.runs
        };
        source
            .iter()
            .map(|m| metrics::metric_value(m, name))
            .collect()
    }
}

/// The results of an experiment.
#[derive(Clone, Debug)]
pub struct ExperimentResult {
    /// The main scenario.
    pub scenario: Scenario,
    /// The time-to-clear companion scenario, if the main one names one.
    pub clear_scenario: Option<Scenario>,
    /// First seed; run `k` uses `seed + k`.
    pub seed: u64,
    /// Number of runs per strategy.
    pub runs: u32,
    /// Per strategy, in the order requested.
    pub results: Vec<StrategyResult>,
    /// Events processed in total.
    pub events: u64,
}

/// A scenario × strategies × seeds sweep.
#[derive(Clone, Debug)]
pub struct Experiment {
    scenario: Scenario,
    strategies: Vec<StrategyInfo>,
    seed: Option<u64>,
    runs: u32,
}

impl Experiment {
    /// An experiment on `scenario` with every registered strategy, the
    /// scenario's seed and one run.
    pub fn new(scenario: Scenario) -> Self {
        Experiment {
            scenario,
            strategies: strategies::ALL.to_vec(),
            seed: None,
            runs: 1,
        }
    }

    /// Restricts the strategies (in this order).
    pub fn strategies(self, strategies: Vec<StrategyInfo>) -> Self {
        Experiment { strategies, ..self }
    }

    /// Sets the first seed.
    pub fn seed(self, seed: u64) -> Self {
        Experiment {
            seed: Some(seed),
            ..self
        }
    }

    /// Sets the number of runs (seeds) per strategy; at least 1.
    pub fn runs(self, runs: u32) -> Self {
        Experiment {
            runs: runs.max(1),
            ..self
        }
    }

    /// How many single runs [`Experiment::run`] will perform (for progress
    /// bars).
    ///
    /// # Errors
    /// As [`Experiment::run`] when the companion scenario cannot be loaded.
    pub fn total_runs(&self) -> Result<u64, SimError> {
        let per = if self.companion()?.is_some() { 2 } else { 1 };
        Ok(per * u64::from(self.runs) * self.strategies.len() as u64)
    }

    fn companion(&self) -> Result<Option<Scenario>, SimError> {
        self.scenario
            .time_to_clear_from
            .as_deref()
            .map(|name| {
                Scenario::load(name).map_err(|e| {
                    SimError::invalid(
                        "time_to_clear_from",
                        format!("the companion scenario `{name}` cannot be loaded: {e}"),
                    )
                })
            })
            .transpose()
    }

    /// Runs everything; `progress` is called after each single run.
    ///
    /// # Errors
    /// [`SimError`] from loading the companion scenario or from a run.
    pub fn run(self, mut progress: impl FnMut()) -> Result<ExperimentResult, SimError> {
        let clear_scenario = self.companion()?;
        let seed = self.seed.unwrap_or(self.scenario.seed);
        let mut results = Vec::with_capacity(self.strategies.len());
        let mut events = 0;
        for info in &self.strategies {
            let mut runs = Vec::new();
            let mut clear_runs = Vec::new();
            let mut trace = None;
            for k in 0..self.runs {
                let s = seed.wrapping_add(u64::from(k));
                let out = engine::run(&self.scenario, info, s)?;
                events += out.events;
                runs.push(out.metrics);
                trace.get_or_insert(out.trace);
                progress();
                if let Some(c) = &clear_scenario {
                    let out = engine::run(c, info, s)?;
                    events += out.events;
                    clear_runs.push(out.metrics);
                    progress();
                }
            }
            results.push(StrategyResult {
                strategy: info.name.to_owned(),
                runs,
                clear_runs,
                trace: trace.unwrap_or_default(),
            });
        }
        Ok(ExperimentResult {
            scenario: self.scenario,
            clear_scenario,
            seed,
            runs: self.runs,
            results,
            events,
        })
    }
}
