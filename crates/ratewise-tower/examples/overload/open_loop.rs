//! The load generator: arrivals at a fixed rate whatever the servers do
//! (open loop), the same arrival times sent to every target, each request
//! with a deadline after which its caller gives up; then the scores.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::{Instant, MissedTickBehavior};

use crate::bottleneck::{Guard, Pool};

/// One server under test.
pub struct Target {
    /// Its protection.
    pub guard: Guard,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its worker pool (for the wasted-work count).
    pub pool: Pool,
}

/// A run: a rate, an optional capacity change, and what is scored.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Arrivals per second, at each target.
    pub rate: f64,
    /// Time before the scored phase (the change happens at its end).
    pub lead: Duration,
    /// The scored phase.
    pub scored: Duration,
    /// Workers and service time from the end of `lead` on, if they change.
    pub change: Option<(usize, Duration)>,
    /// A caller gives up after this long.
    pub deadline: Duration,
    /// The latency objective.
    pub objective: Duration,
    /// Requests per second the servers can complete in the scored phase.
    pub capacity: f64,
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Ok(Duration),
    Shed,
    Failed,
    TimedOut,
}

struct Record {
    target: usize,
    /// Scheduled send time, since the start of the run.
    sent: Duration,
    outcome: Outcome,
}

/// One target's figures over the scored phase.
#[derive(Clone, Debug)]
pub struct Score {
    /// Its protection.
    pub guard: Guard,
    /// Requests sent per second.
    pub offered: f64,
    /// Completions within the objective per second.
    pub goodput: f64,
    /// `goodput` as a share of the capacity.
    pub share: f64,
    /// The 99th percentile latency of the completed requests (`None` if
    /// none completed).
    pub p99: Option<Duration>,
    /// Share of requests refused with a 503.
    pub shed: f64,
    /// Share of requests whose caller gave up at the deadline.
    pub timed_out: f64,
    /// Requests the workers finished for callers that had gone, over the
    /// whole run.
    pub wasted: u64,
}

async fn one(
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    uri: String,
    scheduled: Instant,
    deadline: Duration,
) -> Outcome {
    let call = async {
        let req = Request::get(uri).body(Empty::new()).ok()?;
        let res = client.request(req).await.ok()?;
        let status = res.status();
        res.into_body().collect().await.ok()?;
        Some(status)
    };
    match tokio::time::timeout_at(scheduled + deadline, call).await {
        Err(_) => Outcome::TimedOut,
        Ok(Some(StatusCode::OK)) => Outcome::Ok(scheduled.elapsed()),
        Ok(Some(StatusCode::SERVICE_UNAVAILABLE)) => Outcome::Shed,
        Ok(_) => Outcome::Failed,
    }
}

/// Runs `plan` against every target at once and scores each.
pub async fn drive(targets: &[Target], plan: &Plan) -> Vec<Score> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let records = Arc::new(Mutex::new(Vec::new()));
    let wasted_before: Vec<u64> = targets.iter().map(|t| t.pool.wasted()).collect();
    let period = Duration::from_secs_f64(1.0 / plan.rate);
    let arrivals = ((plan.lead + plan.scored).as_secs_f64() * plan.rate) as u64;
    let start = Instant::now();

    let change = plan.change.map(|(workers, service)| {
        let client = client.clone();
        let uris: Vec<String> = targets
            .iter()
            .map(|t| {
                format!(
                    "http://{}/admin/capacity?workers={workers}&service_ms={}",
                    t.addr,
                    service.as_millis()
                )
            })
            .collect();
        let at = start + plan.lead;
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let calls = uris.into_iter().map(|uri| {
                let req = Request::post(uri)
                    .body(Empty::new())
                    .expect("admin request");
                client.request(req)
            });
            for res in futures_join(calls).await {
                let status = res.expect("the admin endpoint answers").status();
                assert_eq!(status, StatusCode::NO_CONTENT, "capacity change refused");
            }
        })
    });

    let mut ticks = tokio::time::interval_at(start, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut calls = Vec::with_capacity(arrivals as usize * targets.len());
    for _ in 0..arrivals {
        let scheduled = ticks.tick().await;
        let sent = scheduled - start;
        for (i, t) in targets.iter().enumerate() {
            let (client, records) = (client.clone(), Arc::clone(&records));
            let uri = format!("http://{}/work", t.addr);
            let deadline = plan.deadline;
            calls.push(tokio::spawn(async move {
                let outcome = one(client, uri, scheduled, deadline).await;
                records.lock().expect("records").push(Record {
                    target: i,
                    sent,
                    outcome,
                });
            }));
        }
    }
    for call in calls {
        call.await.expect("a request task");
    }
    if let Some(change) = change {
        change.await.expect("the capacity change");
    }

    let records = std::mem::take(&mut *records.lock().expect("records"));
    targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            score(
                t.guard,
                records
                    .iter()
                    .filter(|r| r.target == i && r.sent >= plan.lead)
                    .map(|r| r.outcome),
                plan,
                t.pool.wasted() - wasted_before[i],
            )
        })
        .collect()
}

/// Awaits every future (the few admin calls) together.
async fn futures_join<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("an admin call"));
    }
    out
}

fn score(guard: Guard, outcomes: impl Iterator<Item = Outcome>, plan: &Plan, wasted: u64) -> Score {
    let (mut sent, mut shed, mut timed_out) = (0u64, 0u64, 0u64);
    let mut latencies = Vec::new();
    for o in outcomes {
        sent += 1;
        match o {
            Outcome::Ok(l) => latencies.push(l),
            Outcome::Shed => shed += 1,
            Outcome::TimedOut => timed_out += 1,
            Outcome::Failed => {}
        }
    }
    latencies.sort_unstable();
    let secs = plan.scored.as_secs_f64();
    let within = latencies.iter().filter(|l| **l <= plan.objective).count();
    let goodput = within as f64 / secs;
    let p99 = (!latencies.is_empty())
        .then(|| latencies[(latencies.len() * 99).div_ceil(100).saturating_sub(1)]);
    let of = |n: u64| n as f64 / sent.max(1) as f64;
    Score {
        guard,
        offered: sent as f64 / secs,
        goodput,
        share: goodput / plan.capacity,
        p99,
        shed: of(shed),
        timed_out: of(timed_out),
        wasted,
    }
}
