//! `ratewise`: score client throttling strategies against a simulated API.
//!
//! * `ratewise simulate` — with no arguments, Heroku's experiment for every
//!   strategy: a table shaped like the blog's on stdout and an HTML report.
//! * `ratewise strategies` / `ratewise scenarios` — what exists, one line
//!   each.
//!
//! Errors go to stderr with a non-zero exit status; a progress bar is drawn
//! on stderr only for multi-run sweeps on a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ratewise_sim::{report, strategies, Experiment, Scenario, SimError};

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
        /// Print one JSON document instead of the table.
        #[arg(long)]
        json: bool,
        /// Where to write the HTML report (default: ratewise-report.html;
        /// with --json, only when given).
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// List the strategies the simulator can drive.
    Strategies,
    /// List the built-in scenarios.
    Scenarios,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), SimError> {
    match cli.command {
        Command::Strategies => {
            let w = strategies::ALL
                .iter()
                .map(|s| s.name.len())
                .max()
                .unwrap_or(0);
            for s in strategies::ALL {
                println!("{:w$}  {}", s.name, s.description);
            }
            Ok(())
        }
        Command::Scenarios => {
            let all = Scenario::built_in()?;
            let w = all.iter().map(|s| s.name.len()).max().unwrap_or(0);
            for s in all {
                println!("{:w$}  {}", s.name, s.description);
            }
            Ok(())
        }
        Command::Simulate {
            scenario,
            strategies: names,
            seed,
            runs,
            json,
            report: report_path,
        } => {
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
            if json {
                println!("{}", report::json(&result));
            } else {
                print!("{}", report::table(&result));
            }
            let path = match (report_path, json) {
                (Some(p), _) => Some(p),
                (None, false) => Some(PathBuf::from("ratewise-report.html")),
                (None, true) => None,
            };
            if let Some(p) = path {
                std::fs::write(&p, report::html(&result)).map_err(|source| SimError::Io {
                    path: p.display().to_string(),
                    source,
                })?;
                if !json {
                    println!("report: {}", p.display());
                }
            }
            Ok(())
        }
    }
}
