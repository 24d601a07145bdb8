//! Overload over real HTTP: a server with a real bottleneck (20 workers,
//! 100 ms a request: 200 requests/s) behind no limiter, tower's fixed
//! `ConcurrencyLimit` (+ `LoadShed`) and ratewise's adaptive
//! `ConcurrencyLimitLayer` (`Knee`), driven open loop by the same arrivals
//! at 1.4× and 2× capacity, through a capacity halving (20 → 10 workers
//! under 1.4× demand, so 2.8× the capacity left) and, for contrast, a
//! scale-out (20 → 40 workers under 2× the first capacity).
//!
//! ```sh
//! cargo run --release -p ratewise-tower --example overload
//! ```
//!
//! The latency objective is 300 ms (three service times); callers give up
//! after 600 ms. Two fixed limits are shown: 40 (the workers plus a queue
//! as long again: 200 ms, within the objective at the start) and 20 (the
//! workers, no queue). Every scenario starts fresh servers. Figures and
//! their reading: `benches/README.md`.

mod bottleneck;
mod open_loop;

use std::time::Duration;

use bottleneck::{app, serve, Guard, Pool};
use open_loop::{drive, Plan, Score, Target};

const WORKERS: usize = 20;
const SERVICE: Duration = Duration::from_millis(100);
const CAPACITY: f64 = WORKERS as f64 / 0.1;

async fn targets(guards: &[Guard]) -> Vec<Target> {
    let mut out = Vec::new();
    for &guard in guards {
        let pool = Pool::start(WORKERS, SERVICE);
        let addr = serve(app(pool.clone(), guard)).await;
        out.push(Target { guard, addr, pool });
    }
    out
}

fn print(title: &str, plan: &Plan, scores: &[Score]) {
    println!(
        "\n{title}: {:.0} arrivals/s, capacity {:.0}/s in the scored phase",
        plan.rate, plan.capacity
    );
    println!(
        "| configuration | offered/s | goodput ≤ {} ms /s | share of capacity | p99 (completed) | shed | timed out | wasted |",
        plan.objective.as_millis()
    );
    println!("|---|---|---|---|---|---|---|---|");
    for s in scores {
        let p99 = s.p99.map_or("—".to_string(), |p| {
            format!("{:.0} ms", p.as_secs_f64() * 1e3)
        });
        println!(
            "| {} | {:.0} | {:.0} | {:.0} % | {p99} | {:.0} % | {:.0} % | {} |",
            s.guard.name(),
            s.offered,
            s.goodput,
            s.share * 100.0,
            s.shed * 100.0,
            s.timed_out * 100.0,
            s.wasted
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let guards = [
        Guard::None,
        Guard::Fixed(2 * WORKERS),
        Guard::Fixed(WORKERS),
        Guard::Adaptive,
    ];
    let base = Plan {
        rate: 1.4 * CAPACITY,
        lead: Duration::ZERO,
        scored: Duration::from_secs(6),
        change: None,
        deadline: Duration::from_millis(600),
        objective: Duration::from_millis(300),
        capacity: CAPACITY,
    };
    let scenarios = [
        ("demand steps to 1.4× capacity", base.clone()),
        (
            "demand steps to 2× capacity",
            Plan {
                rate: 2.0 * CAPACITY,
                ..base.clone()
            },
        ),
        (
            "capacity halves (20 → 10 workers) under 1.4× demand; scored after the halving",
            Plan {
                lead: Duration::from_secs(3),
                change: Some((WORKERS / 2, SERVICE)),
                capacity: CAPACITY / 2.0,
                ..base.clone()
            },
        ),
        (
            "capacity doubles (20 → 40 workers) under 2× demand; scored after the scale-out",
            Plan {
                rate: 2.0 * CAPACITY,
                lead: Duration::from_secs(3),
                change: Some((WORKERS * 2, SERVICE)),
                capacity: CAPACITY * 2.0,
                ..base.clone()
            },
        ),
    ];
    for (title, plan) in scenarios {
        let targets = targets(&guards).await;
        let scores = drive(&targets, &plan).await;
        print(title, &plan, &scores);
    }
}
