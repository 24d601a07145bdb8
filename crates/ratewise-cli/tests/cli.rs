//! The `ratewise` binary end to end.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The binary with `args`, outside CI whatever the test's environment.
fn command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ratewise"));
    c.args(args).env_remove("CI");
    c
}

fn ratewise(args: &[&str]) -> Output {
    command(args)
        .output()
        .unwrap_or_else(|e| panic!("running ratewise: {e}"))
}

/// A fresh directory for one test's files, unique to this process; the
/// test removes it when done.
fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratewise-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn lists_strategies_and_scenarios() {
    let o = ratewise(&["strategies"]);
    assert!(o.status.success());
    let out = stdout(&o);
    for name in ["eb-x2", "eb", "eigd", "eipd", "eiprd", "null"] {
        assert!(
            out.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{out}"
        );
    }
    let o = ratewise(&["scenarios"]);
    assert!(o.status.success());
    let out = stdout(&o);
    for name in [
        "heroku",
        "heroku-workload",
        "emr-scan",
        "google-quota",
        "dynamodb-autoscale",
        "github",
        "shopify",
        "stripe",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{out}"
        );
    }
}

#[test]
fn default_simulate_prints_the_table_and_writes_a_report() {
    let dir = scratch_dir("report");
    let report = dir.join("r.html");
    let o = ratewise(&["simulate", "--report", report.to_str().unwrap_or_default()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    for h in [
        "Avg retry rate",
        "Max sleep",
        "Stdev req count",
        "Time to clear",
        "eiprd",
    ] {
        assert!(out.contains(h), "{h} missing:\n{out}");
    }
    // It opens with the answer and the rule, defines every column with its
    // direction, and flags the strategy that never waits instead of showing
    // it as perfect.
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].starts_with("Answer: use `"), "{out}");
    // The answer may wrap onto indented lines; the rule comes next, then
    // what "never dominated" means.
    let rule = 2 + lines[2..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .count();
    let answer: Vec<&str> = lines[1..rule].iter().map(|l| l.trim()).collect();
    let answer = answer.join(" ");
    assert!(
        answer.contains("if you know the server's quota")
            && answer.contains("the best strategy that learns the quota")
            && answer.contains("never dominated here"),
        "{out}"
    );
    assert!(
        lines[rule].starts_with("Rule: ranked by Pareto tiers"),
        "{out}"
    );
    assert!(
        out.contains("The default aims to be never dominated: no strategy that is not handed"),
        "{out}"
    );
    assert!(out.contains("lower is better") && out.contains("higher is better"));
    let null = lines
        .iter()
        .find(|l| l.contains(" null !"))
        .unwrap_or_else(|| panic!("null is not flagged:\n{out}"));
    assert_eq!(null.matches("n/a").count(), 3, "{null}");
    assert!(out.contains("`null` never waits"), "{out}");
    let html = std::fs::read_to_string(&report).unwrap_or_default();
    assert!(html.contains("sleep-chart"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_output_is_one_document_and_deterministic() {
    let args = [
        "simulate",
        "--strategy",
        "eiprd",
        "--strategy",
        "eb",
        "--seed",
        "9",
        "--runs",
        "2",
        "--json",
    ];
    let a = ratewise(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let doc: serde_json::Value =
        serde_json::from_str(&stdout(&a)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(doc["seed"], 9);
    assert_eq!(doc["runs"], 2);
    assert_eq!(doc["results"][0]["strategy"], "eiprd");
    assert!(doc["results"][0]["time_to_clear_s"].is_number());
    assert_eq!(stdout(&a), stdout(&ratewise(&args)));
}

#[test]
fn bad_scenario_file_names_file_line_and_field() {
    let dir = scratch_dir("bad");
    let file = dir.join("mine.toml");
    std::fs::write(
        &file,
        "name = \"mine\"\ndescription = \"d\"\n\n[server]\nkind = \"heroku_bucket\"\nrefill_per_s = \"fast\"\n\n[[clients]]\nworkload = { requests = 3 }\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = ratewise(&[
        "simulate",
        "--scenario",
        file.to_str().unwrap_or_default(),
        "--json",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("mine.toml:6"), "{err}");
    assert!(err.contains("refill_per_s"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_names_are_clear_errors() {
    let o = ratewise(&["simulate", "--strategy", "nope", "--json"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown strategy `nope`"));
    let o = ratewise(&["simulate", "--scenario", "nope", "--json"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown scenario `nope`"));
}

/// `ratewise simulate | head -3`: the reader goes away before the table is
/// printed. The command must neither panic nor fail, and the report it was
/// asked for must still be written.
#[test]
fn closed_stdout_is_a_clean_exit() {
    use std::process::Stdio;

    let dir = scratch_dir("pipe");
    let report = dir.join("r.html");
    let mut child = command(&[
        "simulate",
        "--runs",
        "2",
        "--report",
        report.to_str().unwrap_or_default(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap_or_else(|e| panic!("running ratewise: {e}"));
    // Close the read end at once: the simulation runs for far longer than
    // this takes, so every write to stdout meets a closed pipe.
    drop(child.stdout.take());
    let o = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for ratewise: {e}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "panicked:\n{err}");
    assert!(o.status.success(), "status {:?}, stderr:\n{err}", o.status);
    assert!(err.is_empty(), "a broken pipe is not an error:\n{err}");
    let html = std::fs::read_to_string(&report).unwrap_or_default();
    assert!(html.contains("sleep-chart"), "the report was not written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn identical_rows_are_noted_under_the_table() {
    // Heroku's server sends no RateLimit-Reset, so hint pacing never acts.
    let dir = scratch_dir("note");
    let report = dir.join("r.html");
    let o = ratewise(&[
        "simulate",
        "--strategy",
        "aimd",
        "--strategy",
        "aimd-hints",
        "--strategy",
        "eiprd",
        "--report",
        report.to_str().unwrap_or_default(),
    ]);
    let out = stdout(&o);
    let notes: Vec<&str> = out.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{out}");
    assert!(
        notes[0].contains("`aimd-hints` behaved exactly like `aimd`"),
        "{out}"
    );
    let html = std::fs::read_to_string(&report).unwrap_or_default();
    assert!(html.contains("class=\"note\""));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `args` and returns its one-line error: a failure, nothing on
/// stdout, exactly one line on stderr.
fn one_line_error(args: &[&str]) -> String {
    let o = ratewise(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(o.stdout.is_empty(), "{args:?} printed:\n{}", stdout(&o));
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line:\n{err}");
    err
}

/// Bad inputs the CLI must refuse, each before any simulation runs
/// (`--runs 10000` of every strategy would take minutes if it ran first).
#[test]
fn bad_inputs_fail_in_one_line_before_any_run() {
    let dir = scratch_dir("edges");
    let missing = dir.join("no-such-dir").join("r.html");
    let err = one_line_error(&[
        "simulate",
        "--runs",
        "10000",
        "--report",
        missing.to_str().unwrap_or_default(),
    ]);
    assert!(
        err.contains("no-such-dir") && err.contains("does not exist"),
        "{err}"
    );
    let err = one_line_error(&[
        "simulate",
        "--runs",
        "10000",
        "--report",
        dir.to_str().unwrap_or_default(),
    ]);
    assert!(err.contains("is a directory"), "{err}");

    let heroku = include_str!("../../../scenarios/heroku.toml");
    let zero = dir.join("zero.toml");
    std::fs::write(
        &zero,
        heroku.replace("refill_per_s = 1.25", "refill_per_s = 0"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let report = dir.join("r.html");
    let report = report.to_str().unwrap_or_default();
    let zero = zero.to_str().unwrap_or_default();
    let err = one_line_error(&[
        "simulate",
        "--runs",
        "10000",
        "--scenario",
        zero,
        "--report",
        report,
    ]);
    assert!(err.contains("zero.toml:41"), "{err}");
    assert!(err.contains("server.refill_per_s"), "{err}");
    assert!(err.contains("no capacity"), "{err}");
    assert!(!err.contains("max_time_s"), "{err}");
    // The report file opened for the run is not left behind empty.
    assert!(!dir.join("r.html").exists());

    let nope = dir.join("nope.toml");
    std::fs::write(
        &nope,
        heroku.replace(
            "time_to_clear_from = \"heroku-workload\"",
            "time_to_clear_from = \"nope\"",
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let nope = nope.to_str().unwrap_or_default();
    let err = one_line_error(&[
        "simulate",
        "--runs",
        "10000",
        "--scenario",
        nope,
        "--report",
        report,
    ]);
    assert!(err.contains("nope.toml:25"), "{err}");
    assert!(err.contains("time_to_clear_from"), "{err}");
    assert!(err.contains("neither a built-in scenario"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A companion named by a relative path is found next to the file that
/// names it, whatever the working directory.
#[test]
fn companion_scenario_is_found_next_to_its_file() {
    let dir = scratch_dir("companion");
    let heroku = include_str!("../../../scenarios/heroku.toml");
    let workload = include_str!("../../../scenarios/heroku-workload.toml");
    std::fs::write(dir.join("clear.toml"), workload).unwrap_or_else(|e| panic!("{e}"));
    let main = dir.join("main.toml");
    std::fs::write(
        &main,
        heroku.replace(
            "time_to_clear_from = \"heroku-workload\"",
            "time_to_clear_from = \"clear.toml\"",
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = ratewise(&[
        "simulate",
        "--scenario",
        main.to_str().unwrap_or_default(),
        "--strategy",
        "eiprd",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}"));
    assert!(doc["results"][0]["time_to_clear_s"].is_number(), "{doc}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The default table fits 120 columns even over several runs; `--spread`
/// adds each metric's min–max.
#[test]
fn the_table_fits_120_columns_unless_spread_is_asked_for() {
    let widest = |args: &[&str]| {
        let o = ratewise(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        stdout(&o)
            .lines()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
    };
    let dir = scratch_dir("width");
    let report = dir.join("r.html");
    let report = report.to_str().unwrap_or_default();
    let narrow = widest(&["simulate", "--runs", "2", "--report", report]);
    assert!(narrow <= 120, "{narrow} columns");
    let wide = widest(&["simulate", "--runs", "2", "--spread", "--report", report]);
    assert!(wide > narrow, "--spread {wide} vs {narrow}");
    let _ = std::fs::remove_dir_all(&dir);
}
