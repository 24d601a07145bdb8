//! Server-side scenarios: the server, the traffic, the clients' timeout
//! and retries, the tenants and what changes when, read from TOML.

use ratewise::concurrency::Priority;
use serde::Deserialize;

use crate::error::{Location, SimError};

/// The server-side scenarios shipped with ratewise: `(name, TOML source)`,
/// compiled into the binary.
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "steady-overload",
        include_str!("../../scenarios/overload/steady-overload.toml"),
    ),
    (
        "capacity-halving",
        include_str!("../../scenarios/overload/capacity-halving.toml"),
    ),
    (
        "latency-spike",
        include_str!("../../scenarios/overload/latency-spike.toml"),
    ),
    (
        "bursty",
        include_str!("../../scenarios/overload/bursty.toml"),
    ),
    (
        "step-1.4x",
        include_str!("../../scenarios/overload/step-1.4x.toml"),
    ),
    (
        "step-2x",
        include_str!("../../scenarios/overload/step-2x.toml"),
    ),
    (
        "scale-out",
        include_str!("../../scenarios/overload/scale-out.toml"),
    ),
    (
        "fleet-loss",
        include_str!("../../scenarios/overload/fleet-loss.toml"),
    ),
    (
        "retry-storm",
        include_str!("../../scenarios/overload/retry-storm.toml"),
    ),
    (
        "priorities",
        include_str!("../../scenarios/overload/priorities.toml"),
    ),
];

/// How requests arrive.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Arrivals {
    /// Poisson arrivals at `per_s` requests per second.
    Poisson {
        /// Mean rate.
        per_s: f64,
    },
    /// Alternating phases of `period_ms`: `high` × the mean, then
    /// `2 − high` × the mean.
    Bursty {
        /// Mean rate.
        per_s: f64,
        /// Rate multiplier of the high phase (between 1 and 2).
        high: f64,
        /// Length of each phase.
        period_ms: u64,
    },
}

/// A change of the server or of the demand at a time.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// From `at_ms` on, workers serve at `factor` × their base speed.
    Capacity {
        /// When.
        at_ms: u64,
        /// Speed factor (0.5 halves capacity).
        factor: f64,
    },
    /// From `at_ms` on, every response takes `extra_ms` more, without
    /// occupying a worker.
    Latency {
        /// When.
        at_ms: u64,
        /// The added delay.
        extra_ms: u64,
    },
    /// From `at_ms` on, the server has `workers` workers (a request being
    /// served when workers go away is finished first).
    Workers {
        /// When.
        at_ms: u64,
        /// The new worker count.
        workers: usize,
    },
    /// From `at_ms` on, new calls arrive at a mean of `per_s` per second
    /// (bursty arrivals keep their shape around the new mean).
    Demand {
        /// When.
        at_ms: u64,
        /// The new mean rate of calls.
        per_s: f64,
    },
}

impl Change {
    /// When it happens.
    pub fn at_ms(&self) -> u64 {
        match *self {
            Change::Capacity { at_ms, .. }
            | Change::Latency { at_ms, .. }
            | Change::Workers { at_ms, .. }
            | Change::Demand { at_ms, .. } => at_ms,
        }
    }
}

/// A request class, as a scenario file names it.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum PriorityName {
    /// [`Priority::Critical`].
    Critical,
    /// [`Priority::High`].
    High,
    /// [`Priority::Normal`].
    Normal,
    /// [`Priority::Sheddable`].
    Sheddable,
}

impl PriorityName {
    /// The core's class.
    pub fn priority(self) -> Priority {
        match self {
            PriorityName::Critical => Priority::Critical,
            PriorityName::High => Priority::High,
            PriorityName::Normal => Priority::Normal,
            PriorityName::Sheddable => Priority::Sheddable,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PriorityName::Critical => "critical",
            PriorityName::High => "high",
            PriorityName::Normal => "normal",
            PriorityName::Sheddable => "sheddable",
        }
    }
}

/// One tenant: a share of the calls, all of one class.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// Its name in reports.
    pub name: String,
    /// Its share of the calls (shares are normalised to their sum).
    pub share: f64,
    /// The class its requests are admitted as.
    pub priority: PriorityName,
}

/// A server-side scenario.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OverloadScenario {
    /// Its name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// How long it runs.
    #[serde(default = "default_duration")]
    pub duration_ms: u64,
    /// Worker count at the start.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Mean service time of one request at full speed.
    #[serde(default = "default_service")]
    pub service_ms: f64,
    /// Client timeout: a caller gives up on an attempt this long after
    /// sending it.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// The latency objective; 2 × the no-load p99 at full speed when
    /// absent.
    #[serde(default)]
    pub objective_ms: Option<f64>,
    /// Attempts a caller makes after the first, each after a refusal or a
    /// timeout.
    #[serde(default)]
    pub retries: u32,
    /// The pause before a retry.
    #[serde(default)]
    pub retry_backoff_ms: u64,
    /// The traffic.
    pub arrivals: Arrivals,
    /// Who sends it; one critical tenant when absent.
    #[serde(default)]
    pub tenants: Vec<Tenant>,
    /// Capacity, latency and demand changes, in time order.
    #[serde(default)]
    pub changes: Vec<Change>,
}

fn default_duration() -> u64 {
    60_000
}
fn default_workers() -> usize {
    20
}
fn default_service() -> f64 {
    20.0
}
fn default_timeout() -> u64 {
    1_000
}

impl OverloadScenario {
    /// Parses and checks `src`; errors name `file` (a path or a built-in
    /// name), the line when known, and the field.
    ///
    /// # Errors
    /// [`SimError::Scenario`] for bad TOML or an out-of-range value.
    pub fn parse(src: &str, file: &str) -> Result<Self, SimError> {
        let located =
            |line: Option<usize>, field: Option<String>, message: String| SimError::Scenario {
                location: Location {
                    file: file.to_owned(),
                    line,
                    field,
                },
                message,
            };
        let s: OverloadScenario = toml::from_str(src).map_err(|e| {
            let line = e
                .span()
                .map(|sp| src[..sp.start.min(src.len())].matches('\n').count() + 1);
            located(line, None, e.message().to_owned())
        })?;
        s.validate().map_err(|e| match e {
            SimError::Invalid { field, message } => {
                let key = field.rsplit('.').next().unwrap_or(&field).to_owned();
                let line = src
                    .lines()
                    .position(|l| l.trim_start().starts_with(&format!("{key} ")))
                    .map(|i| i + 1);
                located(line, Some(field), message)
            }
            other => other,
        })?;
        Ok(s)
    }

    /// A shipped scenario by name, or a scenario file by path.
    ///
    /// # Errors
    /// [`SimError::UnknownScenario`] when `name_or_path` is neither;
    /// [`SimError::Scenario`] when the file is invalid.
    pub fn load(name_or_path: &str) -> Result<Self, SimError> {
        if let Some((name, src)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(src, &format!("<built-in {name}>"));
        }
        let path = std::path::Path::new(name_or_path);
        if path.is_file() {
            let src = std::fs::read_to_string(path).map_err(|source| SimError::Io {
                path: name_or_path.to_owned(),
                source,
            })?;
            return Self::parse(&src, name_or_path);
        }
        Err(SimError::UnknownScenario(name_or_path.to_owned()))
    }

    fn validate(&self) -> Result<(), SimError> {
        use crate::error::{non_negative, positive};
        let bad = |field: &str, message: &str| Err(SimError::invalid(field, message));
        if self.duration_ms < 1_000 {
            return bad("duration_ms", "must be at least 1000 (one second)");
        }
        if self.workers == 0 {
            return bad("workers", "must be at least 1");
        }
        positive(self.service_ms, "service_ms")?;
        if self.timeout_ms == 0 {
            return bad("timeout_ms", "must be at least 1");
        }
        if let Some(o) = self.objective_ms {
            positive(o, "objective_ms")?;
        }
        if self.retries > 10 {
            return bad("retries", "must be at most 10");
        }
        match self.arrivals {
            Arrivals::Poisson { per_s } => positive(per_s, "arrivals.per_s")?,
            Arrivals::Bursty {
                per_s,
                high,
                period_ms,
            } => {
                positive(per_s, "arrivals.per_s")?;
                if !(1.0..2.0).contains(&high) {
                    return bad("arrivals.high", "must be at least 1 and below 2");
                }
                if period_ms == 0 {
                    return bad("arrivals.period_ms", "must be at least 1");
                }
            }
        }
        for t in &self.tenants {
            positive(t.share, "tenants.share")?;
        }
        let mut last = 0;
        for c in &self.changes {
            if c.at_ms() < last {
                return bad("changes.at_ms", "changes must be in time order");
            }
            if c.at_ms() >= self.duration_ms {
                return bad("changes.at_ms", "must be before the end of the run");
            }
            last = c.at_ms();
            match *c {
                Change::Capacity { factor, .. } => positive(factor, "changes.factor")?,
                Change::Workers { workers: 0, .. } => {
                    return bad("changes.workers", "must be at least 1")
                }
                Change::Demand { per_s, .. } => non_negative(per_s, "changes.per_s")?,
                Change::Workers { .. } | Change::Latency { .. } => {}
            }
        }
        Ok(())
    }

    /// A shipped scenario by name.
    pub fn by_name(name: &str) -> Option<OverloadScenario> {
        BUILT_IN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, src)| Self::shipped(n, src))
    }

    /// Every shipped server-side scenario.
    pub fn all() -> Vec<OverloadScenario> {
        BUILT_IN
            .iter()
            .map(|(n, src)| Self::shipped(n, src))
            .collect()
    }

    fn shipped(name: &str, src: &str) -> OverloadScenario {
        // The shipped files are checked by `every_shipped_scenario_parses`.
        Self::parse(src, name).unwrap_or_else(|e| panic!("shipped scenario {name}: {e}"))
    }

    /// Steady overload: 1.5 × capacity for a minute.
    pub fn steady_overload() -> Self {
        Self::all().swap_remove(0)
    }

    /// Capacity halves at 20 s and recovers at 40 s, under 80 % load.
    pub fn capacity_halving() -> Self {
        Self::all().swap_remove(1)
    }

    /// A slow dependency adds 100 ms to every response from 20 s to 40 s;
    /// capacity does not change.
    pub fn latency_spike() -> Self {
        Self::all().swap_remove(2)
    }

    /// Bursty traffic averaging 90 % of capacity.
    pub fn bursty() -> Self {
        Self::all().swap_remove(3)
    }

    /// Requests per second the server can complete at full speed with its
    /// initial workers.
    pub fn capacity_per_s(&self) -> f64 {
        self.workers as f64 * 1000.0 / self.service_ms
    }

    /// Requests per second the server can complete at `t_ms`.
    pub fn capacity_at(&self, t_ms: u64) -> f64 {
        self.workers_at(t_ms) as f64 * self.speed_at(t_ms) * 1000.0 / self.service_ms
    }

    /// The 99th percentile latency with no queueing at full speed: the
    /// service time's own p99 (exponential: mean × ln 100).
    pub fn no_load_p99_ms(&self) -> f64 {
        self.service_ms * 100f64.ln()
    }

    /// The latency objective: the stated one, else 2 × the no-load p99.
    pub fn objective_ms(&self) -> f64 {
        self.objective_ms
            .unwrap_or_else(|| 2.0 * self.no_load_p99_ms())
    }

    /// The latency bound recovery is judged against at `t_ms`: 2 × the
    /// no-load p99 of the server in force then (service times scale with
    /// 1 / speed), plus the delay a latency change adds to every response.
    pub fn recovery_bound_ms(&self, t_ms: u64) -> f64 {
        2.0 * self.no_load_p99_ms() / self.speed_at(t_ms) + self.extra_at(t_ms) as f64
    }

    /// The tenants, one critical tenant when the file names none.
    pub fn tenants_or_default(&self) -> Vec<Tenant> {
        if self.tenants.is_empty() {
            vec![Tenant {
                name: "all".to_owned(),
                share: 1.0,
                priority: PriorityName::Critical,
            }]
        } else {
            self.tenants.clone()
        }
    }

    /// The mean rate of new calls at `t_ms`, before any burst shape.
    pub fn demand_at(&self, t_ms: u64) -> f64 {
        let base = match self.arrivals {
            Arrivals::Poisson { per_s } | Arrivals::Bursty { per_s, .. } => per_s,
        };
        self.changes
            .iter()
            .filter_map(|c| match *c {
                Change::Demand { at_ms, per_s } if at_ms <= t_ms => Some(per_s),
                _ => None,
            })
            .next_back()
            .unwrap_or(base)
    }

    /// The rate of new calls at `t_ms`, burst shape included.
    pub fn rate_at(&self, t_ms: u64) -> f64 {
        let mean = self.demand_at(t_ms);
        match self.arrivals {
            Arrivals::Poisson { .. } => mean,
            Arrivals::Bursty {
                high, period_ms, ..
            } => {
                if (t_ms / period_ms.max(1)) % 2 == 0 {
                    mean * high
                } else {
                    mean * (2.0 - high)
                }
            }
        }
    }

    /// The speed factor in force at `t_ms`.
    pub fn speed_at(&self, t_ms: u64) -> f64 {
        self.changes
            .iter()
            .filter_map(|c| match *c {
                Change::Capacity { at_ms, factor } if at_ms <= t_ms => Some(factor),
                _ => None,
            })
            .next_back()
            .unwrap_or(1.0)
            .max(0.01)
    }

    /// The worker count in force at `t_ms`.
    pub fn workers_at(&self, t_ms: u64) -> usize {
        self.changes
            .iter()
            .filter_map(|c| match *c {
                Change::Workers { at_ms, workers } if at_ms <= t_ms => Some(workers),
                _ => None,
            })
            .next_back()
            .unwrap_or(self.workers)
    }

    /// The delay added to every response at `t_ms`.
    pub fn extra_at(&self, t_ms: u64) -> u64 {
        self.changes
            .iter()
            .filter_map(|c| match *c {
                Change::Latency { at_ms, extra_ms } if at_ms <= t_ms => Some(extra_ms),
                _ => None,
            })
            .next_back()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_parses() {
        for (name, src) in BUILT_IN {
            let s = OverloadScenario::parse(src, name).unwrap();
            assert_eq!(s.name, *name);
        }
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let src = "name = \"x\"\ndescription = \"y\"\nworkers = 0\n[arrivals]\nkind = \"poisson\"\nper_s = 10.0\n";
        let e = OverloadScenario::parse(src, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.toml:3: field `workers`"), "{e}");
        let e = OverloadScenario::parse("name = \"x\"\nbogus = 1\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.toml:"), "{e}");
        assert!(matches!(
            OverloadScenario::load("no-such-scenario"),
            Err(SimError::UnknownScenario(_))
        ));
    }
}
