//! `ratewise call --json` against rate-limited servers this project did not
//! write, on 127.0.0.1: Envoy's local rate limit filter (a token bucket,
//! 429 and its `x-ratelimit-*` headers) and nginx's `limit_req` (a leaky
//! bucket: a bare 503, told to the command with `--throttle-status 503`, or
//! 429 with `burst`/`nodelay`).
//!
//! Each case asserts the target of the default throttle: zero
//! failed calls, refusals ≤ 3 % of the requests sent, and a time ≤ 1.15×
//! the least the server's limit allows. A run still going at 4× that time
//! is interrupted (SIGINT, as Ctrl-C) and reported with the summary so far.
//! The reqwest crate's `real_servers` test measures the same servers with a
//! naive client beside it.

use std::process::{Command, Stdio};
use std::time::Duration;

use test_servers::{Envoy, EnvoyLimit, Nginx, NginxLimit};

const MAX_REFUSED: f64 = 0.03;
const MAX_RATIO: f64 = 1.15;

/// Runs `ratewise call url --calls calls --concurrency tasks --json
/// extra…`, interrupting it at `4 × allowed`; returns a miss, if any.
fn call(
    server: &str,
    url: &str,
    calls: u64,
    tasks: u64,
    allowed: Duration,
    extra: &[&str],
) -> Option<String> {
    let child = Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args([
            "call",
            url,
            "--calls",
            &calls.to_string(),
            "--concurrency",
            &tasks.to_string(),
            "--json",
        ])
        .args(extra)
        .env_remove("CI")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ratewise starts");
    // Wait for the exit itself on a thread; at 4× the allowed time,
    // interrupt (Ctrl-C) and take the summary so far.
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let o = match rx.recv_timeout(allowed * 4) {
        Ok(o) => o,
        Err(_) => {
            let status = Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .expect("kill runs");
            assert!(status.success());
            rx.recv_timeout(Duration::from_secs(30))
                .expect("ratewise ends within 30 s of Ctrl-C")
        }
    }
    .expect("ratewise ends");
    let text = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "{server}: not one JSON object ({e}):\n{text}\n{}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let count = |f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{f}: {v}"));
    let (done, ok, failed) = (count("calls"), count("ok"), count("failed"));
    let (attempts, refused) = (count("attempts"), count("refused"));
    let elapsed = v["elapsed_s"].as_f64().expect("elapsed_s");
    let ratio = elapsed / allowed.as_secs_f64();
    let share = refused as f64 / attempts.max(1) as f64;
    println!(
        "| {server} | {tasks} | ratewise call | {elapsed:.2} s | {:.2} s | {ratio:.2}× | {refused} / {attempts} ({:.1} %) | {failed} | learned {} |",
        allowed.as_secs_f64(),
        share * 100.0,
        v["learned_rate_per_s"]
    );
    assert_eq!(failed, 0, "{server}, {tasks} tasks: a call failed: {v}");
    assert_eq!(ok, done, "{v}");
    let interrupted = v["interrupted"] == true;
    if interrupted {
        assert_eq!(o.status.code(), Some(130), "{o:?}");
    } else {
        assert!(o.status.success(), "{o:?}");
        assert_eq!(done, calls, "{v}");
    }
    (interrupted || ratio > MAX_RATIO || share > MAX_REFUSED).then(|| {
        format!(
            "{server}, {tasks} tasks: {ratio:.2}× the time allowed, {:.1} % refused{}",
            share * 100.0,
            if interrupted {
                format!(", interrupted after {done} of {calls} calls")
            } else {
                String::new()
            }
        )
    })
}

#[ignore = "target not met yet: the default throttle misses 1.15× / 3 % here (figures in benches/README.md, Clients against real rate-limited servers); run with --ignored"]
#[test]
fn ratewise_call_against_envoys_local_rate_limit() {
    let limit = EnvoyLimit {
        max_tokens: 10,
        tokens_per_fill: 5,
        fill_interval: Duration::from_millis(50),
        headers: true,
    };
    let envoy = Envoy::start(&limit, 3).unwrap_or_else(|e| panic!("{e}"));
    const CALLS: u64 = 150;
    let allowed =
        Duration::from_secs_f64((CALLS - u64::from(limit.max_tokens)) as f64 / limit.rate_per_s());
    let misses: Vec<String> = [1, 4, 16]
        .iter()
        .enumerate()
        .filter_map(|(i, &tasks)| {
            call(
                "envoy 429 + x-ratelimit",
                &envoy.url(i),
                CALLS,
                tasks,
                allowed,
                &[],
            )
        })
        .collect();
    assert!(misses.is_empty(), "{misses:#?}\n{}", envoy.log());
}

#[ignore = "target not met yet: the default throttle misses 1.15× / 3 % here (figures in benches/README.md, Clients against real rate-limited servers); run with --ignored"]
#[test]
fn ratewise_call_against_nginx_limit_req() {
    const CALLS: u64 = 100;
    let bare = Nginx::start(&NginxLimit::per_second(50)).unwrap_or_else(|e| panic!("{e}"));
    let burst = Nginx::start(&NginxLimit::per_second(50).burst(10).nodelay().status(429))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut misses = vec![];
    // A bare 503 is a refusal only when the command is told so.
    let allowed = Duration::from_secs_f64((CALLS - 1) as f64 / 50.0);
    misses.extend(call(
        "nginx 503",
        &bare.url(0),
        CALLS,
        4,
        allowed,
        &["--throttle-status", "503"],
    ));
    let allowed = Duration::from_secs_f64((CALLS - 11) as f64 / 50.0);
    misses.extend(call(
        "nginx 429 burst=10 nodelay",
        &burst.url(0),
        CALLS,
        16,
        allowed,
        &[],
    ));
    assert!(misses.is_empty(), "{misses:#?}");
}
