//! Metrics, defined exactly as Heroku's harness (the demo runner of the
//! open-source `rate_throttle_client` gem) computes them, plus a few that
//! make the trade-offs visible.
//!
//! * **Avg retry rate** — the *unweighted* mean over client threads of each
//!   thread's `throttled / requests`, × 100 (a thread that made no request
//!   is left out: its ratio is undefined).
//! * **Max sleep** — the largest single sleep any strategy asked for,
//!   jitter included, in seconds.
//! * **Stdev request count** — the *sample* standard deviation (n − 1) of
//!   the per-thread request counts, 429s included (0 for a single thread).
//! * **Time to clear** — when every thread has reached its goal (a fixed job
//!   done, or the remaining-capacity stop), plus the scenario's fixed
//!   overhead; `None` when some thread stopped for another reason (deadline,
//!   leaving, interrupted).
//! * **Utilization** — successes / capacity the server offered over the run.
//! * **Wait p50 / p99 / max** — per completed call, the time the strategy
//!   made it sleep (pre-call sleep plus retry sleeps; network latency
//!   excluded). Percentiles are nearest-rank.
//! * **Fairness** — Jain's index over per-thread successes:
//!   `(Σx)² / (n·Σx²)`, 1 when all equal, `1/n` when one thread gets all.
//! * **Throttled** — total 429s.
//! * **Failed calls** — calls that ended without success (a strategy that
//!   gives up, or hands a 429 back). A fixed job counts only successful
//!   calls, so a failed item is attempted again by the next call.

use serde::Serialize;

use crate::samples::Samples;

/// One client thread's counters, as the harness writes them per thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThreadRecord {
    /// Attempts, 429s included.
    pub requests: u64,
    /// Successful attempts.
    pub successes: u64,
    /// Throttled attempts.
    pub throttled: u64,
    /// Largest sleep, seconds, jitter included.
    pub max_sleep_s: f64,
    /// Calls that ended without success (the strategy gave up, or handed a
    /// 429 back). In a fixed job the item is attempted again by a new call.
    pub failed_calls: u64,
    /// When the thread stopped, simulated seconds.
    pub finished_at_s: f64,
    /// Whether it stopped because its goal was reached.
    pub cleared: bool,
}

impl ThreadRecord {
    /// `throttled / requests`, `None` with no request.
    pub fn retry_ratio(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.throttled as f64 / self.requests as f64)
    }
}

/// The metrics of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunMetrics {
    /// Mean of per-thread retry ratios × 100.
    pub avg_retry_rate_pct: f64,
    /// Largest sleep, seconds.
    pub max_sleep_s: f64,
    /// Sample stdev of per-thread request counts.
    pub stdev_request_count: f64,
    /// Time to clear the workload, seconds, if it was cleared.
    pub time_to_clear_s: Option<f64>,
    /// Total attempts.
    pub requests: u64,
    /// Total successes.
    pub successes: u64,
    /// Total 429s.
    pub throttled: u64,
    /// Calls that ended without success.
    pub failed_calls: u64,
    /// Successes / capacity offered.
    pub utilization: f64,
    /// Jain's fairness index over per-thread successes.
    pub fairness: f64,
    /// Median per-call wait, seconds.
    pub wait_p50_s: f64,
    /// 99th-percentile per-call wait, seconds.
    pub wait_p99_s: f64,
    /// Largest per-call wait, seconds.
    pub wait_max_s: f64,
    /// Simulated time when the last thread stopped, seconds.
    pub sim_time_s: f64,
    /// The per-thread records, in thread order.
    pub threads: Vec<ThreadRecord>,
}

/// Sample standard deviation (n − 1); 0 for fewer than two values.
pub fn sample_stdev(values: &[f64]) -> f64 {
    let n = values.len();
    if n < 2 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    (ss / (n - 1) as f64).sqrt()
}

/// Jain's fairness index; 1 for an empty or all-zero input.
pub fn jain(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let sq: f64 = values.iter().map(|v| v * v).sum();
    if sq == 0.0 {
        1.0
    } else {
        sum * sum / (values.len() as f64 * sq)
    }
}

pub use crate::samples::percentile;

impl RunMetrics {
    /// Computes the metrics from per-thread records (kept in the result),
    /// per-call waits, the capacity offered, the fixed overhead and the end
    /// time.
    pub fn compute(
        threads: Vec<ThreadRecord>,
        waits: &mut Samples,
        offered: f64,
        overhead_s: f64,
        end_s: f64,
    ) -> RunMetrics {
        let ratios: Vec<f64> = threads
            .iter()
            .filter_map(ThreadRecord::retry_ratio)
            .collect();
        let avg = if ratios.is_empty() {
            0.0
        } else {
            ratios.iter().sum::<f64>() / ratios.len() as f64 * 100.0
        };
        let counts: Vec<f64> = threads.iter().map(|t| t.requests as f64).collect();
        let succ: Vec<f64> = threads.iter().map(|t| t.successes as f64).collect();
        let successes: u64 = threads.iter().map(|t| t.successes).sum();
        let cleared = !threads.is_empty() && threads.iter().all(|t| t.cleared);
        RunMetrics {
            avg_retry_rate_pct: avg,
            max_sleep_s: threads.iter().map(|t| t.max_sleep_s).fold(0.0, f64::max),
            stdev_request_count: sample_stdev(&counts),
            time_to_clear_s: cleared.then_some(end_s + overhead_s),
            requests: threads.iter().map(|t| t.requests).sum(),
            successes,
            throttled: threads.iter().map(|t| t.throttled).sum(),
            failed_calls: threads.iter().map(|t| t.failed_calls).sum(),
            utilization: if offered > 0.0 {
                successes as f64 / offered
            } else {
                0.0
            },
            fairness: jain(&succ),
            wait_p50_s: waits.percentile(50.0),
            wait_p99_s: waits.percentile(99.0),
            wait_max_s: waits.max(),
            sim_time_s: end_s,
            threads,
        }
    }
}

/// A metric over K runs: mean, min and max.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stat {
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Stat {
    /// Summarises `values`; `None` when empty.
    pub fn of(values: &[f64]) -> Option<Stat> {
        if values.is_empty() {
            return None;
        }
        Some(Stat {
            mean: values.iter().sum::<f64>() / values.len() as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// The names of the summarised metrics, in output order.
pub const METRIC_NAMES: [&str; 13] = [
    "avg_retry_rate_pct",
    "max_sleep_s",
    "stdev_request_count",
    "time_to_clear_s",
    "requests",
    "successes",
    "throttled",
    "failed_calls",
    "utilization",
    "fairness",
    "wait_p50_s",
    "wait_p99_s",
    "wait_max_s",
];

/// One run's value of metric `name` (see [`METRIC_NAMES`]).
pub fn metric_value(m: &RunMetrics, name: &str) -> Option<f64> {
    Some(match name {
        "avg_retry_rate_pct" => m.avg_retry_rate_pct,
        "max_sleep_s" => m.max_sleep_s,
        "stdev_request_count" => m.stdev_request_count,
        "time_to_clear_s" => return m.time_to_clear_s,
        "requests" => m.requests as f64,
        "successes" => m.successes as f64,
        "throttled" => m.throttled as f64,
        "failed_calls" => m.failed_calls as f64,
        "utilization" => m.utilization,
        "fairness" => m.fairness,
        "wait_p50_s" => m.wait_p50_s,
        "wait_p99_s" => m.wait_p99_s,
        "wait_max_s" => m.wait_max_s,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdev_is_the_sample_stdev_heroku_published() {
        // The raw EB request counts in the gem's README; its published
        // stdev, 147.84, is the sample (n − 1) one.
        let counts = [
            1317.0, 1314.0, 1015.0, 963.0, 1254.0, 1133.0, 1334.0, 1025.0, 1024.0, 1036.0,
        ];
        assert!((sample_stdev(&counts) - 147.84).abs() < 0.01);
    }

    #[test]
    fn avg_retry_rate_is_unweighted() {
        let t = |requests, throttled| ThreadRecord {
            requests,
            throttled,
            successes: requests - throttled,
            ..ThreadRecord::default()
        };
        // 1/2 and 90/100: unweighted mean 70 %, weighted would be 89.2 %.
        let m = RunMetrics::compute(
            vec![t(2, 1), t(100, 90)],
            &mut Samples::new(),
            11.0,
            0.0,
            1.0,
        );
        assert!((m.avg_retry_rate_pct - 70.0).abs() < 1e-9);
        assert_eq!(m.throttled, 91);
        assert!((m.utilization - 1.0).abs() < 1e-9);
        assert_eq!(m.time_to_clear_s, None);
    }

    #[test]
    fn jain_bounds() {
        assert!((jain(&[5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[9.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
