//! Load generator for the Redis limiters.
//!
//! ```text
//! cargo run --release -p ratewise-redis --example loadgen -- \
//!     --url redis://127.0.0.1:6379 --algorithm gcra --rate 1000 --burst 50 \
//!     --keys 1 --concurrency 64 --duration 5s --json
//! ```
//!
//! `--mode limiter` (default) runs `RedisLimiter::check`; `--mode floor`
//! spends the same round trips on a trivial `EVALSHA` (`return 1`) — the
//! floor a limiter can approach; `--compare-floor N` runs N rounds of the
//! floor then the chosen mode (A/B/A/B) and reports the ratio of decisions
//! per second to the floor's calls per second. `--max-batch` caps how many requests for
//! one key go in one script call (1 turns batching off); `redis_calls` in
//! the output counts round trips. Prints one JSON object with `--json`,
//! otherwise a short summary; a progress line goes to stderr on a terminal.
//! Bad arguments and an unreachable Redis give a one-line error and exit 2
//! and 1.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use ratewise::backend::{AsyncKeyedLimiter, BackendDecision};
use ratewise::Quota;
use ratewise_redis::{
    connect, Algorithm, FailurePolicy, LeaseConfig, Options, RedisLimiter, ResilienceConfig,
    TwoTierLimiter,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Rate-limit decisions through `RedisLimiter::check`.
    Limiter,
    /// The same round trips on a trivial EVALSHA: the floor.
    Floor,
    /// `TwoTierLimiter`: tokens leased from Redis, admitted in process.
    TwoTier,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Policy {
    Open,
    Closed,
    Fallback,
    Error,
}

/// Drives a Redis rate limiter (or the EVALSHA floor) at a fixed
/// concurrency and reports decisions per second and latency percentiles.
#[derive(Parser, Debug, Clone)]
#[command(name = "loadgen")]
struct Args {
    /// Redis URL.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    url: String,
    /// gcra, token-bucket, fixed-window, sliding-window-counter, sliding-window-log.
    #[arg(long, default_value = "gcra", value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Requests per second per key (fractions allowed).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Burst per key.
    #[arg(long, default_value_t = 50)]
    burst: u64,
    /// Distinct keys, used round-robin.
    #[arg(long, default_value_t = 1)]
    keys: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Connections (multiplexed), shared round-robin by the tasks.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// How long to run: 500ms, 5s, 1m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// What to run.
    #[arg(long, value_enum, default_value_t = Mode::Limiter)]
    mode: Mode,
    /// Command timeout of the limiter (its breaker opens after 3 in a row).
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    timeout: Duration,
    /// Failure policy of the limiter.
    #[arg(long, value_enum, default_value_t = Policy::Open)]
    policy: Policy,
    /// The most requests for one key per script call (1 = no batching).
    #[arg(long, default_value_t = 128)]
    max_batch: usize,
    /// The most batch calls in flight at once for one key.
    #[arg(long, default_value_t = 2)]
    batches_in_flight: usize,
    /// Run this many rounds, each the floor then `--mode` (A/B/A/B, the
    /// same duration each), and report every run and the ratio of
    /// decisions per second to the floor's calls per second.
    #[arg(long, default_value_t = 0)]
    compare_floor: u32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    Algorithm::from_name(s).ok_or_else(|| {
        let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        format!("unknown algorithm {s:?}; one of {}", names.join(", "))
    })
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .ok_or_else(|| format!("duration {s:?} needs a unit: ms, s or m"))?;
    let v: f64 = num
        .parse()
        .map_err(|_| format!("duration {s:?} does not start with a number"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("duration {s:?}: unit must be ms, s or m")),
    };
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "duration {s:?} must be above zero and at most a day"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The limiter under test: both implement `AsyncKeyedLimiter`.
#[derive(Clone)]
enum Lim {
    One(RedisLimiter),
    Two(TwoTierLimiter),
}

impl Lim {
    async fn check(&self, key: &str) -> Result<BackendDecision, ratewise_redis::Error> {
        match self {
            Lim::One(l) => AsyncKeyedLimiter::<str>::check(l, key, 1).await,
            Lim::Two(l) => AsyncKeyedLimiter::<str>::check(l, key, 1).await,
        }
    }

    fn stats(&self) -> String {
        match self {
            Lim::One(l) => format!("{:?}", l.stats()),
            Lim::Two(l) => format!("{:?} {:?}", l.stats(), l.lease_stats()),
        }
    }

    /// Calls that reached (or tried to reach) Redis.
    fn redis_calls(&self) -> u64 {
        match self {
            Lim::One(l) => l.stats().round_trips,
            Lim::Two(l) => l.lease_stats().redis_calls,
        }
    }
}

#[derive(Default)]
struct Counts {
    decisions: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
    degraded: AtomicU64,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let msg = e.to_string();
            let line = msg.lines().next().unwrap_or("invalid arguments");
            eprintln!("loadgen: {}", line.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("loadgen: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run(args: Args) -> Result<(), (u8, String)> {
    let bad = |m: String| (2u8, m);
    if args.concurrency == 0 || args.keys == 0 || args.connections == 0 {
        return Err(bad(
            "--concurrency, --keys and --connections must be at least 1".into(),
        ));
    }
    let quota = Quota::from_rate(args.rate)
        .and_then(|q| q.with_burst(args.burst))
        .map_err(|e| bad(format!("invalid quota: {e}")))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| (1, format!("cannot start the runtime: {e}")))?;
    if args.compare_floor == 0 {
        let out = rt.block_on(drive(args.clone(), quota))?;
        report(&args, &out);
        return Ok(());
    }
    let mut rounds = Vec::new();
    for _ in 0..args.compare_floor {
        let floor = rt.block_on(drive(
            Args {
                mode: Mode::Floor,
                ..args.clone()
            },
            quota,
        ))?;
        let run = rt.block_on(drive(args.clone(), quota))?;
        let per_s = |v: &serde_json::Value| v["decisions_per_s"].as_f64().unwrap_or(0.0);
        let ratio = per_s(&run) / per_s(&floor).max(f64::MIN_POSITIVE);
        if !args.json {
            report(&args, &floor);
            report(&args, &run);
            println!("ratio {ratio:.2}× the floor's calls per second");
        }
        rounds.push(serde_json::json!({ "floor": floor, "run": run, "ratio_to_floor": ratio }));
    }
    let mut ratios: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r["ratio_to_floor"].as_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    let median = if ratios.len() % 2 == 0 {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    } else {
        ratios[mid]
    };
    if args.json {
        let out = serde_json::json!({
            "rounds": rounds,
            "ratio_to_floor_min": ratios[0],
            "ratio_to_floor_median": median,
            "ratio_to_floor_max": ratios[ratios.len() - 1],
        });
        println!("{out}");
    } else {
        println!(
            "ratio to the floor over {} rounds: min {:.2}, median {median:.2}, max {:.2}",
            ratios.len(),
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
    Ok(())
}

/// Prints one run: its JSON object with `--json`, else a summary line.
fn report(args: &Args, out: &serde_json::Value) {
    if args.json {
        println!("{out}");
    } else {
        println!(
            "{} {}: {} decisions in {:.2}s = {:.0}/s, {:.0} Redis calls/s, allowed {}, denied {}, errors {}, degraded {}, p50 {} µs, p99 {} µs",
            out["mode"].as_str().unwrap_or_default(),
            args.algorithm,
            out["decisions"],
            out["duration_s"].as_f64().unwrap_or(0.0),
            out["decisions_per_s"].as_f64().unwrap_or(0.0),
            out["redis_calls_per_s"].as_f64().unwrap_or(0.0),
            out["allowed"], out["denied"], out["errors"], out["degraded"],
            out["p50_us"],
            out["p99_us"],
        );
    }
}

/// One run of `args.mode`; returns its JSON object.
async fn drive(args: Args, quota: Quota) -> Result<serde_json::Value, (u8, String)> {
    let unreachable =
        |e: ratewise_redis::Error| (1u8, format!("cannot reach Redis at {}: {e}", args.url));
    let mut conns = Vec::new();
    for _ in 0..args.connections {
        conns.push(connect(&args.url).await.map_err(unreachable)?);
    }
    let policy = match args.policy {
        Policy::Open => FailurePolicy::FailOpen,
        Policy::Closed => FailurePolicy::FailClosed,
        Policy::Fallback => FailurePolicy::local_share(quota, 1)
            .map_err(|e| (2u8, format!("invalid quota: {e}")))?,
        Policy::Error => FailurePolicy::Error,
    };
    let options = Options {
        policy: policy.clone(),
        resilience: ResilienceConfig {
            timeout: args.timeout,
            ..ResilienceConfig::default()
        },
        max_batch: args.max_batch,
        batches_in_flight: args.batches_in_flight,
        ..Options::default()
    };
    let limiters = conns
        .iter()
        .map(|c| match args.mode {
            Mode::TwoTier => {
                TwoTierLimiter::new(c.clone(), quota, options.clone(), LeaseConfig::default())
                    .map(Lim::Two)
            }
            _ => RedisLimiter::with_options(c.clone(), quota, args.algorithm, options.clone())
                .map(Lim::One),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| (2u8, format!("invalid limiter: {e}")))?;
    let floor = redis::Script::new("return 1");
    // Load the floor script once so the measured calls are all EVALSHA hits.
    floor
        .prepare_invoke()
        .load_async(&mut conns[0].clone())
        .await
        .map_err(|e| (1u8, format!("cannot load a script on {}: {e}", args.url)))?;
    let keys: Arc<Vec<String>> = Arc::new(
        (0..args.keys)
            .map(|i| format!("loadgen:{}:{i}", args.algorithm))
            .collect(),
    );
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..args.concurrency {
        let limiter = limiters[t % limiters.len()].clone();
        let mut conn = conns[t % conns.len()].clone();
        let floor = floor.clone();
        let (keys, counts, stop) = (keys.clone(), counts.clone(), stop.clone());
        let mode = args.mode;
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(1 << 16);
            let mut first_error: Option<String> = None;
            let mut i = t;
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // Decisions made in process never wait on anything: let the
                // runtime's timers and I/O run now and then.
                n = n.wrapping_add(1);
                if n % 16 == 0 {
                    tokio::task::yield_now().await;
                }
                let key = &keys[i % keys.len()];
                i = i.wrapping_add(args.concurrency);
                let t0 = Instant::now();
                match mode {
                    Mode::Floor => {
                        match floor.prepare_invoke().invoke_async::<i64>(&mut conn).await {
                            Ok(_) => {
                                counts.allowed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                counts.errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    _ => match limiter.check(key).await {
                        Ok(d) if d.source.is_degraded() && first_error.is_none() => {
                            first_error = Some(format!("{:?} (see the limiter's stats)", d.source));
                            let c = if d.decision.allowed {
                                &counts.allowed
                            } else {
                                &counts.denied
                            };
                            c.fetch_add(1, Ordering::Relaxed);
                            counts.degraded.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(d) => {
                            let c = if d.decision.allowed {
                                &counts.allowed
                            } else {
                                &counts.denied
                            };
                            c.fetch_add(1, Ordering::Relaxed);
                            if d.source.is_degraded() {
                                counts.degraded.fetch_add(1, Ordering::Relaxed);
                                tokio::task::yield_now().await;
                            }
                        }
                        Err(e) => {
                            first_error.get_or_insert_with(|| e.to_string());
                            counts.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                }
                lat.push(u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX));
                counts.decisions.fetch_add(1, Ordering::Relaxed);
            }
            (lat, first_error)
        }));
    }
    let progress = std::io::stderr().is_terminal();
    while start.elapsed() < args.duration {
        let left = args.duration.saturating_sub(start.elapsed());
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        if progress {
            let n = counts.decisions.load(Ordering::Relaxed);
            eprint!(
                "\r{:>5.1}s  {n} decisions  {:.0}/s  ",
                start.elapsed().as_secs_f64(),
                n as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut lat = Vec::new();
    let mut first_error = None;
    for t in tasks {
        let (l, e) = t
            .await
            .map_err(|e| (1u8, format!("a load task failed: {e}")))?;
        lat.extend(l);
        first_error = first_error.or(e);
    }
    let stats: Vec<String> = limiters.iter().map(Lim::stats).collect();
    let redis_calls: u64 = match args.mode {
        Mode::Floor => get(&counts.decisions),
        _ => limiters.iter().map(Lim::redis_calls).sum(),
    };
    let elapsed = start.elapsed().as_secs_f64();
    if progress {
        eprintln!();
    }
    lat.sort_unstable();
    let pct = |p: f64| -> u32 {
        if lat.is_empty() {
            0
        } else {
            lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1]
        }
    };
    let decisions = get(&counts.decisions);
    let out = serde_json::json!({
        "mode": match args.mode { Mode::Floor => "floor", Mode::TwoTier => "two-tier", Mode::Limiter => "limiter" },
        "algorithm": args.algorithm.name(),
        "rate": args.rate,
        "burst": args.burst,
        "keys": args.keys,
        "concurrency": args.concurrency,
        "connections": args.connections,
        "decisions": decisions,
        "allowed": get(&counts.allowed),
        "denied": get(&counts.denied),
        "errors": get(&counts.errors),
        "degraded": get(&counts.degraded),
        "duration_s": elapsed,
        "decisions_per_s": decisions as f64 / elapsed,
        "p50_us": pct(0.50),
        "p99_us": pct(0.99),
        "max_us": lat.last().copied().unwrap_or(0),
        "max_batch": args.max_batch,
        "batches_in_flight": args.batches_in_flight,
        "redis_calls": redis_calls,
        "redis_calls_per_s": redis_calls as f64 / elapsed,
        "redis_calls_per_decision": redis_calls as f64 / decisions.max(1) as f64,
        "first_error": first_error,
        "limiter_stats": stats,
    });
    Ok(out)
}
