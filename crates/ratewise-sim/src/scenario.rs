//! Scenarios: TOML descriptions of an API's limits and of the clients that
//! call it.
//!
//! A scenario is data, not code, so a user can copy a shipped one and
//! describe their own API. The shipped library lives in the repository's
//! `scenarios/` directory and is compiled into the binary, so
//! `--scenario heroku` works from any directory while
//! `--scenario path/to/file.toml` loads a user's file.
//!
//! Loading never panics: syntax errors, unknown or missing fields and
//! out-of-range values all become [`SimError::Scenario`] naming the file,
//! the line and the field.

use std::path::Path;
use std::time::Duration;

use ratewise_client::hints::ResetMeaning;
use serde::Deserialize;

use crate::error::{non_negative, positive, Location, SimError};
use crate::server::ServerConfig;

/// The scenarios shipped with ratewise: `(name, TOML source)`.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("heroku", include_str!("../scenarios/heroku.toml")),
    (
        "heroku-workload",
        include_str!("../scenarios/heroku-workload.toml"),
    ),
    ("emr-scan", include_str!("../scenarios/emr-scan.toml")),
    (
        "google-quota",
        include_str!("../scenarios/google-quota.toml"),
    ),
    (
        "dynamodb-autoscale",
        include_str!("../scenarios/dynamodb-autoscale.toml"),
    ),
    ("github", include_str!("../scenarios/github.toml")),
    ("shopify", include_str!("../scenarios/shopify.toml")),
    ("stripe", include_str!("../scenarios/stripe.toml")),
];

/// A complete scenario.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name used in reports.
    pub name: String,
    /// One line saying what the scenario models.
    pub description: String,
    /// Seed used when the command line gives none.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Charts sample each client's sleep value this often (simulated s).
    #[serde(default = "default_sample")]
    pub sample_interval_s: f64,
    /// Fixed start-up and shutdown time added to "time to clear" (the
    /// published Heroku numbers include server boot and process exit).
    #[serde(default)]
    pub overhead_s: f64,
    /// Safety stop: a run still going after this many simulated seconds
    /// stops there, and its unfinished threads count as not cleared (time to
    /// clear `—`), rather than running forever.
    #[serde(default = "default_max_time")]
    pub max_time_s: f64,
    /// Name of a scenario whose time to clear fills the "time to clear"
    /// column of this one (Heroku's table combines two experiments).
    #[serde(default)]
    pub time_to_clear_from: Option<String>,
    /// Parameters passed to every strategy.
    #[serde(default)]
    pub strategy: StrategyParamsConfig,
    /// Request latency distribution.
    #[serde(default)]
    pub latency: Latency,
    /// The API's admission model.
    pub server: ServerConfig,
    /// Client groups.
    pub clients: Vec<ClientGroup>,
}

/// Strategy parameters a scenario may set.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StrategyParamsConfig {
    /// Starting sleep for strategies that keep one (Heroku's
    /// `starting_sleep_for`), in seconds.
    #[serde(default)]
    pub initial_delay_s: Option<f64>,
    /// The quota one client thread believes it has, `quota_count` per
    /// `quota_window_s` seconds (for the flood guard). Both or neither;
    /// when neither is given, each thread gets its fair share of the
    /// server's quota (see
    /// [`ServerConfig::fair_share`](crate::server::ServerConfig::fair_share)).
    #[serde(default)]
    pub quota_count: Option<u32>,
    /// See `quota_count`.
    #[serde(default)]
    pub quota_window_s: Option<f64>,
    /// How strategies that read `RateLimit-Reset` (`aimd-hints`) interpret
    /// it: `"window-end"` (the default: the whole quota returns then, as on
    /// GitHub and in the IETF draft) or `"refill"` (the time until a token
    /// bucket is full again, as the core limiters used as servers report it).
    #[serde(default)]
    pub reset_meaning: Option<ResetMeaningConfig>,
}

/// The scenario-file spelling of [`ratewise_client::hints::ResetMeaning`].
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ResetMeaningConfig {
    /// The end of the server's quota window.
    WindowEnd,
    /// A token bucket's time to full.
    Refill,
}

impl From<ResetMeaningConfig> for ResetMeaning {
    fn from(c: ResetMeaningConfig) -> Self {
        match c {
            ResetMeaningConfig::WindowEnd => ResetMeaning::WindowEnd,
            ResetMeaningConfig::Refill => ResetMeaning::Refill,
        }
    }
}

/// Request latency: the simulated time between sending a request and
/// receiving its response. The server sees the request when it is sent.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Latency {
    /// Always the same.
    Constant {
        /// Seconds.
        s: f64,
    },
    /// Uniform between `min_s` and `max_s`.
    Uniform {
        /// Lower bound, seconds.
        min_s: f64,
        /// Upper bound, seconds.
        max_s: f64,
    },
    /// `min_s` plus an exponential tail with mean `mean_s − min_s`.
    Exponential {
        /// Floor, seconds.
        min_s: f64,
        /// Mean, seconds.
        mean_s: f64,
    },
}

impl Default for Latency {
    /// Uniform 0.10–0.20 s (mean 0.15 s): the simulated per-request time
    /// implied by the published Heroku workload numbers (see
    /// docs/simulator.md).
    fn default() -> Self {
        Latency::Uniform {
            min_s: 0.10,
            max_s: 0.20,
        }
    }
}

impl Latency {
    /// Draws one latency from `u` (uniform in `[0, 1)`).
    pub fn sample(&self, u: f64) -> Duration {
        let s = match *self {
            Latency::Constant { s } => s,
            Latency::Uniform { min_s, max_s } => min_s + (max_s - min_s) * u,
            Latency::Exponential { min_s, mean_s } => min_s - (mean_s - min_s) * (1.0 - u).ln(),
        };
        Duration::from_secs_f64(s.clamp(0.0, 1.0e9))
    }

    fn validate(&self) -> Result<(), SimError> {
        let ok = match *self {
            Latency::Constant { s } => s.is_finite() && s >= 0.0,
            Latency::Uniform { min_s, max_s } => {
                min_s.is_finite() && max_s.is_finite() && min_s >= 0.0 && max_s >= min_s
            }
            Latency::Exponential { min_s, mean_s } => {
                min_s.is_finite() && mean_s.is_finite() && min_s >= 0.0 && mean_s >= min_s
            }
        };
        if ok {
            Ok(())
        } else {
            Err(SimError::invalid(
                "latency",
                "latencies must be finite, non-negative, with min <= max (or mean)",
            ))
        }
    }
}

/// Whether threads of a process share one strategy object.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StateSharing {
    /// Each thread has its own strategy object (what Heroku's harness
    /// effectively did: each call worked on its own copy of the shared
    /// sleep value).
    #[default]
    PerThread,
    /// One strategy object per process, shared by its threads; calls from
    /// different threads interleave on it.
    PerProcess,
}

/// A group of identical clients.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientGroup {
    /// Label for reports.
    #[serde(default)]
    pub name: Option<String>,
    /// Processes in the group.
    #[serde(default = "one")]
    pub processes: u32,
    /// Threads per process; each thread is one "client" in the metrics.
    #[serde(default = "one")]
    pub threads: u32,
    /// Strategy state per thread or per process.
    #[serde(default)]
    pub state: StateSharing,
    /// When the group's threads start, simulated seconds.
    #[serde(default)]
    pub join_s: f64,
    /// When they stop starting new calls, if ever.
    #[serde(default)]
    pub leave_s: Option<f64>,
    /// What each thread does.
    pub workload: Workload,
}

/// What each thread of a group does. At least one of `duration_s`,
/// `requests`, `stop_when_remaining_at_most` or the group's `leave_s` must
/// bound it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Run for this long: no new call starts after `join + duration`.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// A fixed job: this many successful calls per thread, then stop (a
    /// call that ends without success leaves its item to the next call).
    #[serde(default)]
    pub requests: Option<u64>,
    /// Stop when a call's final response shows `RateLimit-Remaining` at or
    /// below this (Heroku's `remaining_stop_under`).
    #[serde(default)]
    pub stop_when_remaining_at_most: Option<u64>,
    /// Busy/idle cycles: call for `busy_s`, then pause `idle_s`, repeat.
    #[serde(default)]
    pub busy_s: Option<f64>,
    /// See `busy_s`.
    #[serde(default)]
    pub idle_s: Option<f64>,
    /// When a thread stops, end its sleeping siblings in the same process at
    /// once (Heroku's `TimeIsUpError`, duration mode only).
    #[serde(default)]
    pub interrupt_siblings: bool,
}

fn default_seed() -> u64 {
    1
}
fn default_sample() -> f64 {
    10.0
}
fn default_max_time() -> f64 {
    86_400.0
}
fn one() -> u32 {
    1
}

impl Scenario {
    /// Parses `src`; errors are located in `file` (a path or a built-in
    /// name).
    ///
    /// # Errors
    /// [`SimError::Scenario`] naming the file, line and field.
    pub fn parse(src: &str, file: &str) -> Result<Scenario, SimError> {
        let mut scenario = Scenario::parse_alone(src, file)?;
        scenario.resolve_companion(src, file, None)?;
        Ok(scenario)
    }

    /// Parses and validates `src` without looking at its
    /// `time_to_clear_from` companion.
    fn parse_alone(src: &str, file: &str) -> Result<Scenario, SimError> {
        let scenario: Scenario = toml::from_str(src).map_err(|e| {
            let message = e.message().to_owned();
            // Tagged sections (`[server]`, `[latency]`) report the whole
            // table; find the offending `key = value` line inside it.
            let refined = e
                .span()
                .and_then(|s| refine_in_table(src, s.start, s.end, &message));
            let line = refined
                .as_ref()
                .map(|r| r.0)
                .or_else(|| e.span().map(|s| line_of(src, s.start)));
            let field = field_from_message(&message)
                .or_else(|| refined.map(|r| r.1))
                .or_else(|| e.span().and_then(|s| key_at(src, s.start)));
            SimError::Scenario {
                location: Location {
                    file: file.to_owned(),
                    line,
                    field,
                },
                message,
            }
        })?;
        scenario.validate().map_err(|e| match e {
            SimError::Invalid { field, message } => SimError::Scenario {
                location: Location {
                    file: file.to_owned(),
                    line: locate_field(src, &field),
                    field: Some(field),
                },
                message,
            },
            other => other,
        })?;
        Ok(scenario)
    }

    /// Loads a built-in scenario by name, or a file by path.
    ///
    /// # Errors
    /// [`SimError::UnknownScenario`] when `name_or_path` is neither;
    /// [`SimError::Scenario`] when the file is invalid.
    pub fn load(name_or_path: &str) -> Result<Scenario, SimError> {
        if let Some((name, src)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Scenario::parse(src, &format!("<built-in {name}>"));
        }
        let path = Path::new(name_or_path);
        if path.is_file() {
            let src = std::fs::read_to_string(path).map_err(|source| SimError::Io {
                path: name_or_path.to_owned(),
                source,
            })?;
            let mut scenario = Scenario::parse_alone(&src, name_or_path)?;
            scenario.resolve_companion(&src, name_or_path, path.parent())?;
            return Ok(scenario);
        }
        Err(SimError::UnknownScenario(name_or_path.to_owned()))
    }

    /// Checks, before anything runs, that `time_to_clear_from` names a
    /// built-in scenario or a valid scenario file (a relative path is taken
    /// from `dir`, the directory of the file that names it, when there is
    /// one), and rewrites a file reference to that resolved path so the
    /// experiment loads the same file from any working directory.
    fn resolve_companion(
        &mut self,
        src: &str,
        file: &str,
        dir: Option<&Path>,
    ) -> Result<(), SimError> {
        let Some(name) = self.time_to_clear_from.clone() else {
            return Ok(());
        };
        if BUILT_IN.iter().any(|(n, _)| *n == name) {
            return Ok(());
        }
        let candidate = match dir {
            Some(d) if Path::new(&name).is_relative() => d.join(&name),
            _ => Path::new(&name).to_path_buf(),
        };
        let located = |message: String| SimError::Scenario {
            location: Location {
                file: file.to_owned(),
                line: locate_field(src, "time_to_clear_from"),
                field: Some("time_to_clear_from".to_owned()),
            },
            message,
        };
        if !candidate.is_file() {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            return Err(located(format!(
                "`{name}` is neither a built-in scenario ({}) nor a scenario file (no file at `{}`)",
                names.join(", "),
                candidate.display()
            )));
        }
        let shown = candidate.display().to_string();
        let companion_src = std::fs::read_to_string(&candidate)
            .map_err(|e| located(format!("cannot read `{shown}`: {e}")))?;
        Scenario::parse_alone(&companion_src, &shown)
            .map_err(|e| located(format!("the companion scenario is invalid: {e}")))?;
        self.time_to_clear_from = Some(shown);
        Ok(())
    }

    /// All built-in scenarios, parsed.
    ///
    /// # Errors
    /// Only if a shipped file is invalid (a test guards against it).
    pub fn built_in() -> Result<Vec<Scenario>, SimError> {
        BUILT_IN
            .iter()
            .map(|(name, src)| Scenario::parse(src, &format!("<built-in {name}>")))
            .collect()
    }

    /// Checks every value that the types alone do not constrain.
    ///
    /// # Errors
    /// [`SimError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), SimError> {
        positive(self.sample_interval_s, "sample_interval_s")?;
        non_negative(self.overhead_s, "overhead_s")?;
        positive(self.max_time_s, "max_time_s")?;
        if let Some(d) = self.strategy.initial_delay_s {
            non_negative(d, "strategy.initial_delay_s")?;
        }
        match (self.strategy.quota_count, self.strategy.quota_window_s) {
            (Some(c), Some(w)) => {
                if c == 0 {
                    return Err(SimError::invalid(
                        "strategy.quota_count",
                        "must be at least 1",
                    ));
                }
                positive(w, "strategy.quota_window_s")?;
            }
            (None, None) => {}
            _ => {
                return Err(SimError::invalid(
                    "strategy.quota_count",
                    "quota_count and quota_window_s must be given together",
                ))
            }
        }
        self.latency.validate()?;
        self.server.validate()?;
        self.check_finite_capacity()?;
        if self.clients.is_empty() {
            return Err(SimError::invalid(
                "clients",
                "add at least one [[clients]] group",
            ));
        }
        let mut total: u64 = 0;
        for (gi, c) in self.clients.iter().enumerate() {
            let group = || -> Result<(), SimError> {
                if c.processes == 0 {
                    return Err(SimError::invalid("clients.processes", "must be at least 1"));
                }
                if c.threads == 0 {
                    return Err(SimError::invalid("clients.threads", "must be at least 1"));
                }
                non_negative(c.join_s, "clients.join_s")?;
                if let Some(l) = c.leave_s {
                    non_negative(l, "clients.leave_s")?;
                }
                let w = &c.workload;
                if let Some(d) = w.duration_s {
                    positive(d, "clients.workload.duration_s")?;
                }
                match (w.busy_s, w.idle_s) {
                    (Some(b), Some(i)) => {
                        positive(b, "clients.workload.busy_s")?;
                        non_negative(i, "clients.workload.idle_s")?;
                    }
                    (None, None) => {}
                    _ => {
                        return Err(SimError::invalid(
                            "clients.workload.busy_s",
                            "busy_s and idle_s must be given together",
                        ))
                    }
                }
                if w.duration_s.is_none()
                    && w.requests.is_none()
                    && w.stop_when_remaining_at_most.is_none()
                    && c.leave_s.is_none()
                {
                    return Err(SimError::invalid(
                    "clients.workload",
                    "unbounded: set duration_s, requests, stop_when_remaining_at_most, or the group's leave_s",
                ));
                }
                Ok(())
            };
            group().map_err(|e| match e {
                SimError::Invalid { field, message } => SimError::Invalid {
                    field: field.replacen("clients", &format!("clients[{gi}]"), 1),
                    message,
                },
                other => other,
            })?;
            total += u64::from(c.processes) * u64::from(c.threads);
        }
        if total > 100_000 {
            return Err(SimError::invalid(
                "clients.threads",
                format!("{total} clients in total; at most 100000 are supported"),
            ));
        }
        Ok(())
    }

    /// A server that never refills offers a fixed number of successes; a
    /// fixed job that needs more can never finish, so it is refused here,
    /// before any run, naming that cause instead of the time limit it would
    /// otherwise hit.
    fn check_finite_capacity(&self) -> Result<(), SimError> {
        let Some((field, total)) = self.server.total_capacity() else {
            return Ok(());
        };
        // Groups that stop only after their requests are done.
        let needed: u64 = self
            .clients
            .iter()
            .filter(|c| {
                c.leave_s.is_none()
                    && c.workload.duration_s.is_none()
                    && c.workload.stop_when_remaining_at_most.is_none()
            })
            .filter_map(|c| {
                c.workload
                    .requests
                    .map(|r| r.saturating_mul(u64::from(c.processes) * u64::from(c.threads)))
            })
            .fold(0, u64::saturating_add);
        if needed > 0 && (needed as f64) > total {
            return Err(SimError::invalid(
                field,
                format!(
                    "the server never refills and offers {total} successful requests in all, \
                     but the clients' fixed jobs need {needed}: they can never finish \
                     (give the server a refill rate or more starting capacity, or shrink the jobs)"
                ),
            ));
        }
        Ok(())
    }

    /// Total number of client threads.
    pub fn client_count(&self) -> usize {
        self.clients
            .iter()
            .map(|c| c.processes as usize * c.threads as usize)
            .sum()
    }
}

fn line_of(src: &str, offset: usize) -> usize {
    src.get(..offset.min(src.len()))
        .map_or(1, |s| s.matches('\n').count() + 1)
}

/// The literal a serde "invalid type/value" message complains about, as it
/// would appear in TOML.
fn offending_literal(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))?;
    if let Some(r) = rest.strip_prefix("string \"") {
        return r.split("\", expected").next().map(|v| format!("\"{v}\""));
    }
    rest.split('`').nth(1).map(str::to_owned)
}

/// Within the lines from `start` to `end`, the first `key = value` line
/// whose value is the literal the message names: `(line, key)`.
fn refine_in_table(src: &str, start: usize, end: usize, message: &str) -> Option<(usize, String)> {
    let literal = offending_literal(message)?;
    let first = line_of(src, start);
    let last = line_of(src, end);
    src.lines()
        .enumerate()
        .skip(first - 1)
        .take(last + 1 - first)
        .find_map(|(i, l)| {
            let (k, v) = l.split_once('=')?;
            let v = v.split('#').next().unwrap_or("").trim();
            (v == literal).then(|| (i + 1, k.trim().to_owned()))
        })
}

fn field_from_message(message: &str) -> Option<String> {
    for prefix in ["missing field `", "unknown field `", "duplicate field `"] {
        if let Some(rest) = message.split(prefix).nth(1) {
            return rest.split('`').next().map(str::to_owned);
        }
    }
    None
}

/// The key (or table header) on the line containing `offset`.
fn key_at(src: &str, offset: usize) -> Option<String> {
    let line_no = line_of(src, offset);
    let line = src.lines().nth(line_no - 1)?.trim();
    if let Some(h) = line.strip_prefix('[') {
        return Some(h.trim_matches(|c| c == '[' || c == ']').trim().to_owned());
    }
    line.split_once('=').map(|(k, _)| k.trim().to_owned())
}

/// Finds the line of dotted `field` (e.g. `server.capacity`,
/// `clients.workload.duration_s`): the first `key =` line inside a matching
/// table, or the table header itself.
fn locate_field(src: &str, field: &str) -> Option<usize> {
    // `clients[2].threads`: the third `[[clients]]` group;
    // `server.limits[1].status`: the second `[[server.limits]]`.
    let (array, group, plain) = match field.split_once('[').and_then(|(a, r)| {
        let (n, rest) = r.split_once(']')?;
        Some((a.to_owned(), n.parse::<usize>().ok(), format!("{a}{rest}")))
    }) {
        Some((a, n, plain)) => (a, n, plain),
        None => ("clients".to_owned(), None, field.to_owned()),
    };
    let field = plain.as_str();
    let mut seen_groups = 0usize;
    let (table, key) = match field.rsplit_once('.') {
        Some((t, k)) => (t, k),
        None => ("", field),
    };
    let mut current = String::new();
    let mut header_line = None;
    for (i, raw) in src.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            if line.starts_with(&format!("[[{array}]]")) {
                seen_groups += 1;
            }
            current = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
            let right_group = group.is_none_or(|g| seen_groups == g + 1);
            if right_group && (current == field || (current == table && header_line.is_none())) {
                header_line = Some(i + 1);
            }
            continue;
        }
        let right_group =
            !current.starts_with(array.as_str()) || group.is_none_or(|g| seen_groups == g + 1);
        if !right_group {
            continue;
        }
        let in_table = current == table;
        if let Some((k, v)) = line.split_once('=') {
            let k = k.trim();
            if in_table && k == key {
                return Some(i + 1);
            }
            // Inline tables: `workload = { duration_s = 0 }`.
            let inline_parent = if current.is_empty() {
                k.to_owned()
            } else {
                format!("{current}.{k}")
            };
            if inline_parent == table
                && (v.contains(&format!("{key} ")) || v.contains(&format!("{key}=")))
            {
                return Some(i + 1);
            }
            if inline_parent == field {
                return Some(i + 1);
            }
        }
    }
    header_line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_scenario_parses() {
        let all = Scenario::built_in().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all.len(), BUILT_IN.len());
        for ((name, _), s) in BUILT_IN.iter().zip(&all) {
            assert_eq!(&s.name, name);
            assert!(!s.description.is_empty());
        }
    }

    /// The scenarios kept beside the shipped ones (run by path) are valid
    /// too, and each is named after its file.
    #[test]
    fn every_scenario_file_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let s = Scenario::load(&path.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                Some(s.name.as_str()),
                path.file_stem().and_then(|f| f.to_str()),
                "{}",
                path.display()
            );
            files += 1;
        }
        assert!(files > BUILT_IN.len(), "{files} scenario files");
    }

    fn err_of(src: &str) -> String {
        match Scenario::parse(src, "my.toml") {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    const OK: &str = r#"name = "x"
description = "y"

[server]
kind = "decrease_only"
starting = 10

[[clients]]
threads = 2
workload = { requests = 5 }
"#;

    #[test]
    fn minimal_scenario_parses() {
        let s = Scenario::parse(OK, "my.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.client_count(), 2);
    }

    #[test]
    fn unknown_field_names_file_line_and_field() {
        let src = OK.replace("starting = 10", "starting = 10\ncapacty = 3");
        let msg = err_of(&src);
        assert!(msg.starts_with("my.toml:"), "{msg}");
        assert!(msg.contains("capacty"), "{msg}");
    }

    /// Checks that `src` is rejected with an error naming `at` (file and
    /// line) and `field`.
    fn assert_located(src: &str, at: &str, field: &str) {
        let msg = err_of(src);
        assert!(msg.contains(at), "{msg}");
        assert!(msg.contains(field), "{msg}");
    }

    #[test]
    fn wrong_type_names_line_and_field() {
        let src = OK.replace("threads = 2", "threads = \"two\"");
        assert_located(&src, "my.toml:9", "threads");
    }

    #[test]
    fn out_of_range_value_names_line_and_field() {
        let src = OK.replace("threads = 2", "threads = 0");
        assert_located(&src, "my.toml:9", "clients[0].threads");
        let src = OK.replace("starting = 10", "starting = -1");
        assert_located(&src, "my.toml:6", "server.starting");
    }

    #[test]
    fn unbounded_workload_is_rejected() {
        let src = OK.replace("workload = { requests = 5 }", "workload = {}");
        assert_located(&src, "my.toml:10", "clients[0].workload");
    }

    #[test]
    fn syntax_error_has_a_line() {
        let msg = err_of("name = \"x\"\ndescription = \n");
        assert!(msg.contains("my.toml:2"), "{msg}");
    }

    #[test]
    fn unknown_name_is_a_typed_error() {
        assert!(matches!(
            Scenario::load("no-such-scenario"),
            Err(SimError::UnknownScenario(_))
        ));
    }

    #[test]
    fn errors_in_a_later_client_group_point_at_that_group() {
        let src = format!("{OK}\n[[clients]]\nthreads = 0\nworkload = {{ requests = 5 }}\n");
        assert_located(&src, "my.toml:13", "clients[1].threads");
    }

    #[test]
    fn a_server_without_capacity_names_the_cause() {
        let src = OK.replace("starting = 10", "starting = 0");
        assert_located(&src, "my.toml:6", "server.starting");
        assert!(err_of(&src).contains("no capacity"));
        let src = OK.replace(
            "kind = \"decrease_only\"\nstarting = 10",
            "kind = \"heroku_bucket\"\nrefill_per_s = 0",
        );
        assert_located(&src, "my.toml:6", "server.refill_per_s");
        assert!(err_of(&src).contains("no capacity"));
    }

    #[test]
    fn a_fixed_job_larger_than_a_finite_server_is_refused() {
        // 2 threads × 6 requests = 12 > 10, and nothing else stops them.
        let src = OK.replace("requests = 5", "requests = 6");
        let msg = err_of(&src);
        assert!(
            msg.contains("my.toml:6") && msg.contains("server.starting"),
            "{msg}"
        );
        assert!(msg.contains("need 12"), "{msg}");
    }

    #[test]
    fn an_unknown_companion_is_located() {
        let src = OK.replace(
            "description = \"y\"",
            "description = \"y\"\ntime_to_clear_from = \"nope\"",
        );
        assert_located(&src, "my.toml:3", "time_to_clear_from");
        assert!(err_of(&src).contains("`nope` is neither a built-in scenario"));
    }
}
