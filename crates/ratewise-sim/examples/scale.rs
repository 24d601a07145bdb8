//! How the client-side simulator's cost grows with the number of clients.
//!
//! `cargo run --release -p ratewise-sim --example scale`
//!
//! Runs a Heroku-shaped scenario (the `heroku` server, quota and latency,
//! scaled so every client has the same share: 450 requests of bucket and
//! 0.125/s of refill each, clients in processes of 5 threads) with 1,000,
//! 10,000 and 100,000 clients, each size in a fresh process so its peak
//! memory is its own. Prints, per size: simulated requests, wall time,
//! simulated requests per second, peak resident memory, the memory per
//! client above the smallest size, and the size of the HTML report.
//!
//! Options: `--clients 1000,10000,100000`, `--strategy eb` (any name of
//! `ratewise strategies`), `--duration-s 600`.
//!
//! `--server-side` measures the server-side simulator instead: the
//! `retry-storm` overload scenario with 1, 10, 100 and 500 times its workers
//! and demand (`--scales`), printing the most calls in flight at once (the fleet of callers
//! the run holds) beside the same figures.
use std::process::Command;
use std::time::Instant;

use ratewise_sim::{report, strategies, Experiment, Scenario};

fn scenario(clients: usize, duration_s: f64) -> Scenario {
    let processes = clients.div_ceil(5);
    let src = format!(
        "name = \"heroku-x{clients}\"\n\
         description = \"Heroku's contention run with {clients} clients\"\n\
         sample_interval_s = 10\n\
         [latency]\nkind = \"uniform\"\nmin_s = 0.10\nmax_s = 0.20\n\
         [server]\nkind = \"heroku_bucket\"\ncapacity = {cap}\nrefill_per_s = {refill}\nstarting = 0\n\
         [[clients]]\nprocesses = {processes}\nthreads = 5\nstate = \"per_thread\"\n\
         [clients.workload]\nduration_s = {duration_s}\ninterrupt_siblings = true\n",
        cap = 450 * processes * 5,
        refill = 0.125 * (processes * 5) as f64,
    );
    Scenario::parse(&src, "scale.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// Peak resident set of this process, bytes (Linux; 0 elsewhere).
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The `retry-storm` overload scenario with `k` times its workers and
/// demand, run with the default controller: (requests the server saw,
/// wall seconds, most calls in flight at once).
fn server_side(k: u32) -> (u64, f64, u64) {
    use ratewise_sim::overload::{run, Controller, OverloadScenario, BUILT_IN};
    let src = BUILT_IN
        .iter()
        .find(|(n, _)| *n == "retry-storm")
        .map(|(_, s)| *s)
        .expect("retry-storm ships");
    let src = src
        .replace("workers = 20\n", &format!("workers = {}\n", 20 * k))
        .replace("per_s = 800.0", &format!("per_s = {}.0", 800 * k))
        .replace("per_s = 1600.0", &format!("per_s = {}.0", 1600 * k));
    let s =
        OverloadScenario::parse(&src, "retry-storm-scaled.toml").unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let r = run(&s, Controller::DEFAULT, 1);
    (
        r.arrived,
        start.elapsed().as_secs_f64(),
        r.peak_calls_in_flight,
    )
}

fn child(clients: usize, strategy: &str, duration_s: f64) {
    let info = strategies::find(strategy).unwrap_or_else(|e| panic!("{e}"));
    let s = scenario(clients, duration_s);
    let start = Instant::now();
    let result = Experiment::new(s)
        .strategies(vec![info])
        .seed(1)
        .run(|| {})
        .unwrap_or_else(|e| panic!("{e}"));
    let wall = start.elapsed().as_secs_f64();
    let requests = result.results[0].runs[0].requests;
    let html = report::html(&result).len();
    // clients requests events wall_s peak_bytes html_bytes
    println!(
        "{clients} {requests} {} {wall} {} {html}",
        result.events,
        peak_rss()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let strategy = value("--strategy").unwrap_or_else(|| "eb".to_owned());
    let duration_s: f64 = value("--duration-s").map_or(600.0, |d| d.parse().expect("--duration-s"));
    if let Some(k) = value("--server-child") {
        let (arrived, wall, fleet) = server_side(k.parse().expect("--server-child"));
        println!("{k} {arrived} {wall} {} {fleet}", peak_rss());
        return;
    }
    if args.iter().any(|a| a == "--server-side") {
        let exe = std::env::current_exe().expect("own path");
        println!(
            "retry-storm × k (k × 20 workers, k × 800/s, 2× for 10 s), default controller\n\
             | k | requests | calls in flight (most) | wall s | µs/request | M requests/s | peak MB |\n|---:|---:|---:|---:|---:|---:|---:|"
        );
        let scales: Vec<u32> = value("--scales")
            .unwrap_or_else(|| "1,10,100,500".to_owned())
            .split(',')
            .map(|k| k.trim().parse().expect("--scales: numbers"))
            .collect();
        for k in scales {
            let out = Command::new(&exe)
                .args(["--server-child", &k.to_string()])
                .output()
                .expect("run a child");
            let f: Vec<f64> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(|x| x.parse().expect("child output"))
                .collect();
            println!(
                "| {k} | {:.0} | {:.0} | {:.2} | {:.3} | {:.2} | {:.0} |",
                f[1],
                f[4],
                f[2],
                f[2] * 1e6 / f[1],
                f[1] / f[2] / 1e6,
                f[3] / 1e6
            );
        }
        return;
    }
    if let Some(n) = value("--child") {
        child(n.parse().expect("--child"), &strategy, duration_s);
        return;
    }
    let sizes: Vec<usize> = value("--clients")
        .unwrap_or_else(|| "1000,10000,100000".to_owned())
        .split(',')
        .map(|n| n.trim().parse().expect("--clients: numbers"))
        .collect();
    let exe = std::env::current_exe().expect("own path");
    println!(
        "strategy {strategy}, {duration_s} simulated seconds, Heroku's quota per client\n\
         | clients | requests | wall s | µs/request | M requests/s | peak MB | bytes/client | HTML KB |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut base: Option<(usize, u64)> = None;
    for n in sizes {
        let out = Command::new(&exe)
            .args(["--child", &n.to_string(), "--strategy", &strategy])
            .args(["--duration-s", &duration_s.to_string()])
            .output()
            .expect("run a child");
        if !out.status.success() {
            panic!("{n} clients: {}", String::from_utf8_lossy(&out.stderr));
        }
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<f64> = line
            .split_whitespace()
            .map(|x| x.parse().expect("child output"))
            .collect();
        let (requests, wall, peak, html) = (f[1], f[3], f[4] as u64, f[5]);
        let per_client = match base {
            Some((bn, bpeak)) if n > bn => {
                format!("{:.0}", (peak as f64 - bpeak as f64) / (n - bn) as f64)
            }
            _ => "—".to_owned(),
        };
        base.get_or_insert((n, peak));
        println!(
            "| {n} | {requests:.0} | {wall:.2} | {:.3} | {:.2} | {:.0} | {per_client} | {:.0} |",
            wall * 1e6 / requests,
            requests / wall / 1e6,
            peak as f64 / 1e6,
            html / 1e3,
        );
    }
}
