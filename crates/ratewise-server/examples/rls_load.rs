//! A load generator for any Envoy rate-limit service (RLS v3 over gRPC):
//! ratewise-server, Limitador, envoyproxy/ratelimit, or the `rls_floor`
//! example. Closed loop by default (a fixed number of calls in flight);
//! `--rate` switches to an open loop whose latencies count from each call's
//! scheduled time.
//!
//! ```text
//! cargo run --release -p ratewise-server --example rls_load -- \
//!     --target 127.0.0.1:8081 --seconds 10 --connections 4 --in-flight 64 --keys 10000 --json
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use ratewise_server::rls::{Code, Entry, RateLimitClient, RateLimitDescriptor, RateLimitRequest};

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
    /// Calls in flight in all (split over the connections).
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
}

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
    let workers = args.in_flight.max(1);
    let warmup = Duration::from_secs(1);
    let start = Instant::now();
    let measure_from = start + warmup;
    let until = measure_from + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut client = RateLimitClient::new(channels[w % channels.len()].clone());
        let args = Arc::clone(&args);
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let period = args
                .rate
                .map(|r| Duration::from_secs_f64(workers as f64 / r));
            let mut scheduled =
                start + period.map_or(Duration::ZERO, |p| p.mul_f64(w as f64 / workers as f64));
            let mut n = w;
            loop {
                if let Some(p) = period {
                    tokio::time::sleep_until(scheduled.into()).await;
                    scheduled += p;
                }
                let sent = if period.is_some() {
                    scheduled - period.unwrap_or_default()
                } else {
                    Instant::now()
                };
                if sent >= until {
                    break;
                }
                let answer = client.should_rate_limit(request(&args, n)).await;
                n += workers;
                let done = Instant::now();
                if sent < measure_from {
                    continue;
                }
                tally
                    .latencies_ns
                    .push(done.duration_since(sent).as_nanos() as u64);
                match answer {
                    Ok(r) if r.overall_code() == Code::Ok => tally.ok += 1,
                    Ok(_) => tally.over += 1,
                    Err(_) => tally.errors += 1,
                }
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for t in tasks {
        let t = t.await?;
        all.latencies_ns.extend(t.latencies_ns);
        all.ok += t.ok;
        all.over += t.over;
        all.errors += t.errors;
    }
    all.latencies_ns.sort_unstable();
    let pct = |p: f64| {
        let v = &all.latencies_ns;
        if v.is_empty() {
            0.0
        } else {
            v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1_000.0
        }
    };
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
    }
    Ok(())
}
