//! `ratewise overload` end to end: the JSON carries every figure of the
//! table under the names docs/simulator.md defines, and a scenario file
//! works like a shipped name.

use std::process::{Command, Output};

fn ratewise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args(args)
        .env_remove("CI")
        .output()
        .unwrap_or_else(|e| panic!("running ratewise: {e}"))
}

/// The figures every controller object carries: the table's columns.
const FIGURES: &[&str] = &[
    "goodput_within_objective_per_s",
    "goodput_within_objective_share",
    "p99_overloaded_ms",
    "p999_overloaded_ms",
    "refused_share",
    "refusal_p99_ms",
    "wasted_work_share",
    "retry_amplification",
    "convergence_ms",
    "final_share",
    "success_by_priority",
    "success_by_tenant",
    "jain_fairness",
];

#[test]
fn json_has_every_figure_and_marks_the_default() {
    let out = ratewise(&["overload", "--scenario", "priorities", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let scenarios = doc.as_array().expect("an array of scenarios");
    assert_eq!(scenarios.len(), 1);
    let s = &scenarios[0];
    assert_eq!(s["scenario"], "priorities");
    assert!(s["objective_ms"].as_f64().unwrap() > 0.0);
    let default = s["default_controller"].as_str().unwrap();
    let controllers = s["controllers"].as_array().unwrap();
    assert_eq!(controllers.len(), 7);
    let marked: Vec<_> = controllers
        .iter()
        .filter(|c| c["default"] == true)
        .map(|c| c["controller"].as_str().unwrap())
        .collect();
    assert_eq!(marked, [default]);
    for c in controllers {
        for f in FIGURES {
            assert!(c.get(*f).is_some(), "{} lacks {f}", c["controller"]);
        }
        let share = c["goodput_within_objective_share"].as_f64().unwrap();
        assert!((0.0..=1.2).contains(&share), "{c}");
        // Two tenants, two classes.
        assert_eq!(c["success_by_priority"].as_object().unwrap().len(), 2);
    }
    // The same seed, the same document.
    let again = ratewise(&["overload", "--scenario", "priorities", "--json"]);
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn a_scenario_file_runs_and_a_bad_one_is_located() {
    let dir = std::env::temp_dir().join(format!("ratewise-overload-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("small.toml");
    std::fs::write(
        &good,
        "name = \"small\"\ndescription = \"two workers\"\nduration_ms = 5000\nworkers = 2\n\
         [arrivals]\nkind = \"poisson\"\nper_s = 150.0\n",
    )
    .unwrap();
    let out = ratewise(&["overload", "--scenario", good.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("small: two workers"), "{text}");
    assert!(text.contains("knee*"), "the default is marked: {text}");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\ndescription = \"x\"\nservice_ms = -1.0\n[arrivals]\nkind = \"poisson\"\nper_s = 1.0\n",
    )
    .unwrap();
    let out = ratewise(&["overload", "--scenario", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:3: field `service_ms`"), "{err}");
    let out = ratewise(&["overload", "--scenario", "no-such-thing"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("retry-storm"));
    std::fs::remove_dir_all(&dir).unwrap();
}
