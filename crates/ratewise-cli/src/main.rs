//! `ratewise`: score client throttling strategies against a simulated API.
//!
//! * `ratewise simulate` — with no arguments, Heroku's experiment for every
//!   strategy: a table shaped like the blog's on stdout and an HTML report.
//! * `ratewise call URL` — the default throttle against a real endpoint
//!   (see `call.rs`).
//! * `ratewise strategies` / `ratewise scenarios` — what exists, one line
//!   each.
//!
//! Errors go to stderr with a non-zero exit status; a progress bar is drawn
//! on stderr only for multi-run sweeps on a terminal.
//!
//! Output goes through one locked stdout handle with `writeln!`, never
//! `println!`: a reader that goes away early (`ratewise simulate | head -3`)
//! makes writes fail with `BrokenPipe`, which ends the program quietly with
//! status 0, as Unix filters do, instead of panicking.

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ratewise_sim::{report, strategies, Experiment, Scenario, SimError};

mod call;

/// Rate limiting on both sides of the wire: simulate client throttles.
#[derive(Debug, Parser)]
#[command(name = "ratewise", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario for one or more strategies and print their metrics.
    Simulate {
        /// Built-in scenario name (see `ratewise scenarios`) or a path to a
        /// scenario .toml file.
        #[arg(long, default_value = "heroku")]
        scenario: String,
        /// Strategy to run (repeatable); all strategies when omitted.
        #[arg(long = "strategy")]
        strategies: Vec<String>,
        /// First seed; run k uses seed + k. Defaults to the scenario's.
        #[arg(long)]
        seed: Option<u64>,
        /// Runs (seeds) per strategy; metrics show mean and min–max.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        runs: u32,
        /// With several runs, show each metric's min–max beside its mean
        /// (a wider table than the default 120 columns).
        #[arg(long)]
        spread: bool,
        /// Print one JSON document instead of the table.
        #[arg(long)]
        json: bool,
        /// Where to write the HTML report (default: ratewise-report.html;
        /// with --json, only when given).
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Server side: compare admission controllers (adaptive concurrency
    /// limits) in front of a server whose capacity moves.
    Overload {
        /// A shipped server-side scenario (steady-overload, capacity-halving,
        /// latency-spike, bursty, step-1.4x, step-2x, scale-out, fleet-loss,
        /// retry-storm, priorities) or a path to a scenario .toml file; all
        /// shipped ones when omitted.
        #[arg(long)]
        scenario: Option<String>,
        /// The seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print one JSON array (an object per scenario with every
        /// controller's figures) instead of the tables.
        #[arg(long)]
        json: bool,
        /// Also write a self-contained HTML page charting each controller's
        /// limit, in-flight count and p99 latency over time.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Call a real HTTP endpoint through the default throttle and say how
    /// it went: refusals, time, the rate it learned, the server's headers.
    Call(call::CallArgs),
    /// List the strategies the simulator can drive.
    Strategies,
    /// List the built-in scenarios.
    Scenarios,
}

/// Why a command failed.
#[derive(Debug)]
enum CliError {
    /// The simulation or its inputs.
    Sim(SimError),
    /// Writing to stdout.
    Stdout(io::Error),
    /// A command-line value that cannot work, found before any run.
    Usage(String),
    /// `ratewise call`.
    Call(call::CallError),
}

impl From<SimError> for CliError {
    fn from(e: SimError) -> Self {
        CliError::Sim(e)
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        CliError::Stdout(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let result = run(cli, &mut out).and_then(|()| out.flush().map_err(CliError::from));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): nothing left to say to anyone.
        Err(CliError::Stdout(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(CliError::Stdout(e)) => {
            // Nothing better to do if stderr is gone too.
            let _ = writeln!(io::stderr(), "error: writing to stdout: {e}");
            ExitCode::FAILURE
        }
        Err(CliError::Sim(e)) => {
            let _ = writeln!(io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
        Err(CliError::Usage(message)) => {
            let _ = writeln!(io::stderr(), "error: {message}");
            ExitCode::FAILURE
        }
        Err(CliError::Call(call::CallError::Io(e))) if e.kind() == io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(CliError::Call(e)) => {
            let _ = writeln!(io::stderr(), "error: {e}");
            // 130: the shell's status for a process ended by Ctrl-C.
            ExitCode::from(if matches!(e, call::CallError::Interrupted) {
                130
            } else {
                1
            })
        }
    }
}

/// The HTML report's file, opened before the simulation so that a path
/// that cannot be written fails at once. If the command fails before the
/// report is written, a file this command created is removed again.
struct ReportFile {
    path: PathBuf,
    file: Option<std::fs::File>,
    created: bool,
}

impl ReportFile {
    fn create(path: &Path) -> Result<Self, CliError> {
        let io = |e: io::Error| {
            CliError::Usage(format!(
                "--report {}: {e} (nothing was simulated)",
                path.display()
            ))
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(CliError::Usage(format!(
                "--report {}: directory `{}` does not exist (nothing was simulated)",
                path.display(),
                parent.display()
            )));
        }
        if path.is_dir() {
            return Err(CliError::Usage(format!(
                "--report {}: is a directory; give a file name (nothing was simulated)",
                path.display()
            )));
        }
        let created = !path.exists();
        let file = std::fs::File::create(path).map_err(io)?;
        Ok(ReportFile {
            path: path.to_path_buf(),
            file: Some(file),
            created,
        })
    }

    fn write(mut self, html: &str) -> Result<(), SimError> {
        let result = match self.file.take() {
            Some(mut f) => f.write_all(html.as_bytes()).and_then(|()| f.flush()),
            None => Ok(()),
        };
        self.created = false;
        result.map_err(|source| SimError::Io {
            path: self.path.display().to_string(),
            source,
        })?;
        Ok(())
    }
}

impl Drop for ReportFile {
    fn drop(&mut self) {
        if self.created {
            // Best effort: an empty report left behind is only untidy.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One `name  description` line per row, names padded to the longest.
fn list(out: &mut impl Write, rows: &[(&str, &str)]) -> io::Result<()> {
    let w = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    for (name, description) in rows {
        writeln!(out, "{name:w$}  {description}")?;
    }
    Ok(())
}

/// `ratewise overload`: every controller on each scenario, as tables or
/// JSON, and the HTML page when asked.
fn overload(
    scenario: Option<String>,
    seed: u64,
    json: bool,
    report_path: Option<&Path>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    use ratewise_sim::overload::{self, Controller, OverloadScenario};
    // Opened first: a path that cannot be written costs no run.
    let report = report_path.map(ReportFile::create).transpose()?;
    let scenarios = match scenario {
        None => OverloadScenario::all(),
        Some(name) => vec![OverloadScenario::load(&name).map_err(|e| match e {
            SimError::UnknownScenario(_) => CliError::Usage(format!(
                "--scenario {name}: no such server-side scenario or file (there are: {})",
                overload::BUILT_IN
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            other => CliError::Sim(other),
        })?],
    };
    let mut runs = Vec::new();
    for s in scenarios {
        let results: Vec<_> = Controller::ALL
            .iter()
            .map(|&c| overload::run(&s, c, seed))
            .collect();
        if !json {
            writeln!(out, "{}", overload::text_report(&s, &results))?;
        }
        runs.push((s, results));
    }
    if let Some(report) = report {
        report.write(&overload::html(&runs))?;
    }
    if json {
        let all: Vec<_> = runs.iter().map(|(s, r)| overload::json(s, r)).collect();
        writeln!(out, "{}", serde_json::Value::Array(all))?;
    } else {
        writeln!(out, "{}", overload::LEGEND)?;
    }
    Ok(())
}

fn run(cli: Cli, out: &mut impl Write) -> Result<(), CliError> {
    match cli.command {
        Command::Call(args) => call::run(args, out).map_err(CliError::Call),
        Command::Overload {
            scenario,
            seed,
            json,
            report: report_path,
        } => overload(scenario, seed, json, report_path.as_deref(), out),
        Command::Strategies => {
            let rows: Vec<(&str, &str)> = strategies::ALL
                .iter()
                .map(|s| (s.name, s.description))
                .collect();
            list(out, &rows).map_err(CliError::from)
        }
        Command::Scenarios => {
            let all = Scenario::built_in()?;
            let rows: Vec<(&str, &str)> = all
                .iter()
                .map(|s| (s.name.as_str(), s.description.as_str()))
                .collect();
            list(out, &rows).map_err(CliError::from)
        }
        Command::Simulate {
            scenario,
            strategies: names,
            seed,
            runs,
            spread,
            json,
            report: report_path,
        } => {
            // Where the report goes is settled, and the file opened, before
            // anything runs: a bad path costs no simulation.
            let path = match (report_path, json) {
                (Some(p), _) => Some(p),
                (None, false) => Some(PathBuf::from("ratewise-report.html")),
                (None, true) => None,
            };
            let report_file = path.as_deref().map(ReportFile::create).transpose()?;
            let scenario = Scenario::load(&scenario)?;
            let chosen = if names.is_empty() {
                strategies::ALL.to_vec()
            } else {
                names
                    .iter()
                    .map(|n| strategies::find(n))
                    .collect::<Result<Vec<_>, _>>()?
            };
            let mut exp = Experiment::new(scenario).strategies(chosen).runs(runs);
            if let Some(s) = seed {
                exp = exp.seed(s);
            }
            let total = exp.total_runs()?;
            let bar = if runs > 1 && std::io::stderr().is_terminal() {
                let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
                if let Ok(style) =
                    ProgressStyle::with_template("{bar:40} {pos}/{len} runs ({elapsed})")
                {
                    b.set_style(style);
                }
                b
            } else {
                ProgressBar::hidden()
            };
            let result = exp.run(|| bar.inc(1))?;
            bar.finish_and_clear();
            // The report is written before anything is printed, so a reader
            // that stops early (`| head`) cannot cost the user the report.
            if let Some(f) = report_file {
                f.write(&report::html(&result))?;
            }
            if json {
                writeln!(out, "{}", report::json(&result))?;
            } else {
                write!(out, "{}", report::table_with(&result, spread))?;
                if let Some(p) = &path {
                    writeln!(out, "report: {}", p.display())?;
                }
            }
            Ok(())
        }
    }
}
