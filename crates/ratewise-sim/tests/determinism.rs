//! Same seed, same JSON, byte for byte; another seed, another document.

use ratewise_sim::{report, Experiment, Scenario};

fn json(name: &str, seed: u64, runs: u32) -> String {
    let scenario = Scenario::load(name).unwrap_or_else(|e| panic!("{e}"));
    let e = Experiment::new(scenario)
        .seed(seed)
        .runs(runs)
        .run(|| {})
        .unwrap_or_else(|e| panic!("{e}"));
    report::json(&e)
}

#[test]
fn same_seed_same_json() {
    for name in ["heroku", "google-quota"] {
        let a = json(name, 42, 2);
        let b = json(name, 42, 2);
        assert_eq!(a, b, "{name}");
        assert_ne!(a, json(name, 43, 2), "{name}: the seed must matter");
    }
}

#[test]
fn json_has_the_documented_shape() {
    let doc: serde_json::Value =
        serde_json::from_str(&json("heroku", 1, 3)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(doc["scenario"], "heroku");
    assert_eq!(doc["seed"], 1);
    assert_eq!(doc["runs"], 3);
    let results = doc["results"].as_array().map_or(0, Vec::len);
    assert_eq!(results, ratewise_sim::strategies::ALL.len());
    let first = &doc["results"][0];
    for key in [
        "strategy",
        "rank",
        "pareto_tier",
        "flags",
        "avg_retry_rate_pct",
        "max_sleep_s",
        "stdev_request_count",
        "time_to_clear_s",
        "requests",
        "successes",
        "utilization",
        "fairness",
        "wait_p50_s",
        "wait_p99_s",
        "avg_retry_rate_pct_min",
        "avg_retry_rate_pct_max",
        "throttled",
    ] {
        assert!(first.get(key).is_some(), "missing {key}");
    }
    // `null` never waits and gave up its calls; its flags say so.
    let null = doc["results"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["strategy"] == "null")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        null["flags"],
        serde_json::json!(["never_waits", "gave_up_calls"])
    );
    assert_eq!(null["rank"], results);
    let one: serde_json::Value =
        serde_json::from_str(&json("heroku", 1, 1)).unwrap_or_else(|e| panic!("{e}"));
    assert!(one["results"][0].get("max_sleep_s_min").is_none());
}
