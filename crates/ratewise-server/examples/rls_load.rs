//! A load generator for any Envoy rate-limit service (RLS v3 over gRPC):
//! ratewise-server, Limitador, envoyproxy/ratelimit, or the `rls_floor`
//! example. Closed loop by default (a fixed number of calls in flight);
//! `--rate` switches to an open loop (evenly spaced calls, as many in flight
//! as the service holds) whose latencies count from each call's scheduled
//! time.
//!
//! ```text
//! cargo run --release -p ratewise-server --example rls_load -- \
//!     --target 127.0.0.1:8081 --seconds 10 --connections 4 --in-flight 64 --keys 10000 --json
//! ```

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use ratewise_server::rls::{
    Code, Entry, RateLimitClient, RateLimitDescriptor, RateLimitRequest, RateLimitResponse,
};

/// Drive ShouldRateLimit calls at a service and report throughput and latency.
#[derive(Debug, Parser)]
struct Args {
    /// The service's gRPC address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: String,
    /// How long to drive load, after a one-second warm-up.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Closed loop: calls in flight in all (split over the connections).
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Distinct descriptor values (1 is one hot key).
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// The request's domain.
    #[arg(long, default_value = "bench")]
    domain: String,
    /// The descriptor's key.
    #[arg(long, default_value = "user")]
    key: String,
    /// Calls per second in all (open loop); without it, closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

#[derive(Default)]
struct Tally {
    latencies_ns: Vec<u64>,
    ok: u64,
    over: u64,
    errors: u64,
    /// Open loop: the 99th percentile of how late calls went out.
    send_lag_p99_ns: Option<u64>,
}

impl Tally {
    fn record(&mut self, sent: Instant, answer: &Result<RateLimitResponse, tonic::Status>) {
        self.latencies_ns.push(sent.elapsed().as_nanos() as u64);
        match answer {
            Ok(r) if r.overall_code() == Code::Ok => self.ok += 1,
            Ok(_) => self.over += 1,
            Err(_) => self.errors += 1,
        }
    }

    fn merge(&mut self, other: Tally) {
        self.latencies_ns.extend(other.latencies_ns);
        self.ok += other.ok;
        self.over += other.over;
        self.errors += other.errors;
    }
}

/// Calls before this much time has passed are not counted.
const WARMUP: Duration = Duration::from_secs(1);

fn request(args: &Args, n: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: args.domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: args.key.clone(),
                value: format!("k{}", n % args.keys.max(1)),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

/// Closed loop: `in_flight` tasks, each sending its next call when the
/// last is answered.
async fn closed_loop(
    args: &Arc<Args>,
    channels: &[tonic::transport::Channel],
) -> Result<Tally, Box<dyn std::error::Error>> {
    let workers = args.in_flight.max(1);
    let measure_from = Instant::now() + WARMUP;
    let until = measure_from + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut client = RateLimitClient::new(channels[w % channels.len()].clone());
        let args = Arc::clone(args);
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut n = w;
            loop {
                let sent = Instant::now();
                if sent >= until {
                    break;
                }
                let answer = client.should_rate_limit(request(&args, n)).await;
                n += workers;
                if sent >= measure_from {
                    tally.record(sent, &answer);
                }
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for t in tasks {
        all.merge(t.await?);
    }
    Ok(all)
}

/// Open loop: calls go out at evenly spaced times whatever the service
/// does, each on its own task, and a call's latency counts from its
/// scheduled time (so a stalled service is charged for the calls it held
/// up). A dedicated thread keeps the schedule: tokio's timer ticks once a
/// millisecond, which alone would add up to a millisecond to every call;
/// the thread's sleep overshoots by tens of microseconds, and each wake-up
/// sends every call that has come due. How late calls went out is reported
/// (`send_lag_p99_us`), so a result the generator could not keep up with
/// shows as such.
async fn open_loop(
    args: &Arc<Args>,
    channels: &[tonic::transport::Channel],
    rate: f64,
) -> Result<Tally, Box<dyn std::error::Error>> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(
            format!("--rate must be a positive number of calls per second, not {rate}").into(),
        );
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let measure_from = start + WARMUP;
    let until = measure_from + Duration::from_secs_f64(args.seconds);
    let shared = Arc::new(std::sync::Mutex::new(Tally::default()));
    let runtime = tokio::runtime::Handle::current();
    let clients: Vec<RateLimitClient<tonic::transport::Channel>> = channels
        .iter()
        .map(|c| RateLimitClient::new(c.clone()))
        .collect();
    let args = Arc::clone(args);
    let tally = Arc::clone(&shared);
    let dispatcher = std::thread::spawn(move || {
        let mut lags_ns = Vec::new();
        let mut n = 0usize;
        let mut tasks = Vec::new();
        loop {
            let scheduled = start + period.mul_f64(n as f64);
            if scheduled >= until {
                break;
            }
            let now = Instant::now();
            if scheduled > now {
                // A load generator keeps real time: this thread's only job
                // is to wait for the next call's scheduled instant.
                std::thread::sleep(scheduled - now);
                continue;
            }
            if scheduled >= measure_from {
                lags_ns.push(now.duration_since(scheduled).as_nanos() as u64);
            }
            let mut client = clients[n % clients.len()].clone();
            let request = request(&args, n);
            let tally = Arc::clone(&tally);
            tasks.push(runtime.spawn(async move {
                let answer = client.should_rate_limit(request).await;
                if scheduled >= measure_from {
                    let mut t = tally.lock().unwrap_or_else(PoisonError::into_inner);
                    t.record(scheduled, &answer);
                }
            }));
            n += 1;
        }
        (tasks, lags_ns)
    });
    let (tasks, mut lags_ns) = tokio::task::spawn_blocking(move || dispatcher.join())
        .await?
        .map_err(|_| "the dispatcher thread panicked")?;
    for t in tasks {
        t.await?;
    }
    let mut all = std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner));
    lags_ns.sort_unstable();
    all.send_lag_p99_ns = percentile(&lags_ns, 0.99);
    Ok(all)
}

fn percentile(sorted_ns: &[u64], p: f64) -> Option<u64> {
    if sorted_ns.is_empty() {
        return None;
    }
    Some(sorted_ns[((sorted_ns.len() - 1) as f64 * p).round() as usize])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Arc::new(Args::parse());
    let mut channels = Vec::new();
    for _ in 0..args.connections.max(1) {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", args.target))?
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", args.target))?;
        channels.push(channel);
    }
    let mut all = match args.rate {
        Some(rate) => open_loop(&args, &channels, rate).await?,
        None => closed_loop(&args, &channels).await?,
    };
    all.latencies_ns.sort_unstable();
    let pct = |p: f64| percentile(&all.latencies_ns, p).unwrap_or(0) as f64 / 1_000.0;
    let send_lag_p99_us = all.send_lag_p99_ns.map(|ns| ns as f64 / 1_000.0);
    let calls = all.latencies_ns.len();
    let rate = calls as f64 / args.seconds;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "target": args.target,
                "mode": if args.rate.is_some() { "open" } else { "closed" },
                "offered_per_s": args.rate,
                "connections": args.connections,
                "in_flight": args.in_flight,
                "keys": args.keys,
                "seconds": args.seconds,
                "calls": calls,
                "calls_per_s": rate.round(),
                "ok": all.ok,
                "over_limit": all.over,
                "errors": all.errors,
                "p50_us": pct(0.50),
                "p99_us": pct(0.99),
                "p999_us": pct(0.999),
                "send_lag_p99_us": send_lag_p99_us,
            })
        );
    } else {
        println!(
            "{}: {calls} calls in {:.1} s = {rate:.0}/s; ok {} over {} errors {}; p50 {:.0} µs p99 {:.0} µs p99.9 {:.0} µs",
            args.target,
            args.seconds,
            all.ok,
            all.over,
            all.errors,
            pct(0.5),
            pct(0.99),
            pct(0.999)
        );
        if let Some(lag) = send_lag_p99_us {
            println!("calls went out at most {lag:.0} µs late (p99)");
        }
    }
    Ok(())
}
