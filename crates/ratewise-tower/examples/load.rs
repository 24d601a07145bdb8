//! Load comparison, same run, same machine, with `wrk`: axum with no limiter
//! (the floor), `tower_governor` (keyed GCRA, headers on), and
//! ratewise-tower (keyed GCRA in memory, headers on). 10 000 clients are
//! simulated with an `x-api-key` header; every key gets 50 requests/s, burst
//! 50, so almost every request is admitted and the limiter's own cost is
//! what differs.
//!
//! ```sh
//! cargo run --release -p ratewise-tower --example load -- [--seconds 5] [--rounds 3] [--connections 64]
//! ```
//!
//! On a shared machine whose speed drifts, many short rounds (`--seconds 2
//! --rounds 15`) give steadier ratios than a few long ones.
//!
//! The servers run on one tokio worker thread and wrk on one thread, so on
//! a 2-core machine each has a core. Rounds alternate the three servers, in
//! an order that rotates from round to round; the table reports the median
//! round of each and the ratios: requests per second and p99 as wrk sees
//! them, and the server's on-CPU time per request as the scheduler accounts
//! it, which a busy machine distorts far less than throughput. The last
//! lines pair the servers round by round (they run back to back): the
//! ratios least distorted when the machine's speed drifts.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;

use axum::routing::get;
use axum::Router;

#[path = "../benches/common/peers.rs"]
mod peers;
use peers::{governor_layer, ratewise_layer, KEYS};

fn handler() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn floor() -> Router {
    handler()
}

fn governor() -> Router {
    handler().layer(governor_layer())
}

fn ratewise() -> Router {
    handler().layer(ratewise_layer())
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    addr
}

struct Run {
    rps: f64,
    p99_ms: f64,
    non_2xx: u64,
    /// Server on-CPU microseconds per request (all of this process's
    /// threads, as the scheduler accounts them: robust on a busy machine).
    cpu_us: f64,
    requests: u64,
}

/// This process's on-CPU nanoseconds: the sum over its threads (Linux).
fn process_cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn parse_duration_ms(s: &str) -> Option<f64> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => v / 1000.0,
        "ms" => v,
        "s" => v * 1000.0,
        _ => return None,
    })
}

fn wrk(addr: SocketAddr, script: &std::path::Path, seconds: u64, connections: u32) -> Run {
    let cpu0 = process_cpu_ns();
    let out = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            "-s",
        ])
        .arg(script)
        .arg(format!("http://{addr}/"))
        .output()
        .expect("wrk is installed (apt-get install wrk)");
    let cpu = match (cpu0, process_cpu_ns()) {
        (Some(a), Some(b)) if b > a => (b - a) as f64,
        _ => f64::NAN,
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut run = Run {
        rps: 0.0,
        p99_ms: f64::NAN,
        non_2xx: 0,
        cpu_us: f64::NAN,
        requests: 0,
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => run.rps = v.parse().unwrap_or(0.0),
            ["99%", v] => run.p99_ms = parse_duration_ms(v).unwrap_or(f64::NAN),
            ["Non-2xx", "or", "3xx", "responses:", v] => run.non_2xx = v.parse().unwrap_or(0),
            [n, "requests", "in", ..] => run.requests = n.parse().unwrap_or(0),
            _ => {}
        }
    }
    assert!(run.rps > 0.0, "could not read wrk's output:\n{text}");
    run.cpu_us = cpu / 1000.0 / run.requests.max(1) as f64;
    run
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<(), Infallible> {
    let seconds = arg("--seconds", 5);
    let rounds = arg("--rounds", 3).max(1);
    let connections = arg("--connections", 64) as u32;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let servers = rt.block_on(async {
        [
            ("axum, no limiter (floor)", serve(floor()).await),
            ("tower_governor", serve(governor()).await),
            ("ratewise-tower", serve(ratewise()).await),
        ]
    });
    let script = std::env::temp_dir().join(format!("ratewise-load-{}.lua", std::process::id()));
    std::fs::write(
        &script,
        format!(
            "math.randomseed(42)\nrequest = function()\n  return wrk.format(\"GET\", \"/\", {{[\"x-api-key\"] = \"k\" .. math.random({KEYS})}})\nend\n"
        ),
    )
    .expect("write the wrk script");
    // Warm-up: every key seen once by each limiter.
    for (_, addr) in &servers {
        wrk(*addr, &script, 1, connections);
    }
    let mut results: Vec<Vec<Run>> = servers.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        // The order rotates from round to round, so that no server always
        // follows the same one (a machine whose speed drifts within a round
        // would otherwise favour one position).
        for j in 0..servers.len() {
            let i = (j + round as usize) % servers.len();
            let (name, addr) = &servers[i];
            let r = wrk(*addr, &script, seconds, connections);
            eprintln!(
                "round {round}: {name:<26} {:>10.0} req/s  p99 {:>7.2} ms  server {:>6.2} µs CPU/req  non-2xx {}",
                r.rps, r.p99_ms, r.cpu_us, r.non_2xx
            );
            results[i].push(r);
        }
    }
    let _ = std::fs::remove_file(&script);
    let summary: Vec<(f64, f64, f64)> = results
        .iter()
        .map(|runs| {
            (
                median(runs.iter().map(|r| r.rps).collect()),
                median(runs.iter().map(|r| r.p99_ms).collect()),
                median(runs.iter().map(|r| r.cpu_us).collect()),
            )
        })
        .collect();
    println!(
        "wrk -t1 -c{connections} -d{seconds}s, {KEYS} keys, median of {rounds} rounds; server on 1 tokio worker"
    );
    println!(
        "{:<26} {:>10} {:>9} {:>10} {:>14} {:>10}",
        "server", "req/s", "p99 ms", "vs floor", "CPU µs/req", "vs floor"
    );
    for ((name, _), (rps, p99, cpu)) in servers.iter().zip(&summary) {
        println!(
            "{name:<26} {rps:>10.0} {p99:>9.2} {:>9.2}× {cpu:>14.2} {:>9.2}×",
            rps / summary[0].0,
            cpu / summary[0].2
        );
    }
    println!(
        "ratewise-tower / tower_governor: throughput {:.2}×, server CPU per request {:.2}×",
        summary[2].0 / summary[1].0,
        summary[2].2 / summary[1].2
    );
    // Within a round the servers run back to back, so a round's ratios are
    // what a machine whose speed drifts (a shared host) distorts least:
    // their medians are the figures to quote. Short rounds drift less.
    let paired = |a: &[Run], b: &[Run]| -> (f64, f64, f64) {
        let ratios: Vec<f64> = a.iter().zip(b).map(|(x, y)| x.rps / y.rps).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        (median(ratios), lo, hi)
    };
    for (label, a, b) in [
        ("ratewise-tower / tower_governor", &results[2], &results[1]),
        ("ratewise-tower / floor", &results[2], &results[0]),
        ("tower_governor / floor", &results[1], &results[0]),
    ] {
        let (mid, lo, hi) = paired(a, b);
        println!(
            "per round, {label:<31} throughput: median {mid:.3}× (min {lo:.3}×, max {hi:.3}×)"
        );
    }
    Ok(())
}
