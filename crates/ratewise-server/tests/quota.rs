//! The quota service (RLQS) over gRPC, with a data plane of our own: the
//! parts of a bucket's quota follow the reported demand and never add up
//! to more than the quota, in one instance and across instances on Redis;
//! a subscription has the holders re-divide at once, on any instance; idle
//! buckets are abandoned; a closed stream frees its part.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use ratewise_server::rlqs::{
    Action, BlanketRule, BucketId, BucketQuotaUsage, RateLimitQuotaClient, RateLimitQuotaResponse,
    RateLimitQuotaUsageReports, Strategy,
};
use support::*;
use tokio::sync::mpsc;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

const CONFIG: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 100 }
  - key: banned
    rate_limit: { unit: second, requests_per_unit: 0 }
";

/// One data plane's stream.
struct DataPlane {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: tonic::Streaming<RateLimitQuotaResponse>,
}

impl DataPlane {
    async fn connect(server: &Server) -> DataPlane {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(8);
        let answers = RateLimitQuotaClient::new(channel)
            .stream_rate_limit_quotas(ReceiverStream::new(rx))
            .await
            .unwrap();
        DataPlane {
            reports: tx,
            answers,
        }
    }

    /// Reports `used` requests over one second for `bucket` and returns
    /// the action the service answered with.
    async fn report(&mut self, bucket: &[(&str, &str)], used: u64) -> Action {
        let usage = BucketQuotaUsage {
            bucket_id: Some(id(bucket)),
            time_elapsed: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: used,
            num_requests_denied: 0,
        };
        self.reports
            .send(RateLimitQuotaUsageReports::new("edge", &[usage]))
            .await
            .unwrap();
        self.next_action(bucket).await
    }

    /// The next message's one action, for `bucket`.
    async fn next_action(&mut self, bucket: &[(&str, &str)]) -> Action {
        let answer = tokio::time::timeout(Duration::from_secs(10), self.answers.message())
            .await
            .expect("a message within 10 s")
            .unwrap()
            .expect("the stream stays open");
        assert_eq!(answer.bucket_action.len(), 1, "{answer:?}");
        let action = answer.bucket_action[0].clone();
        assert_eq!(action.bucket_id, Some(id(bucket)));
        action.action.expect("an action")
    }

    /// The rate (requests per second) an assignment lets through.
    async fn gets(&mut self, bucket: &[(&str, &str)], used: u64) -> f64 {
        rate(&self.report(bucket, used).await)
    }

    /// The rate of the next assignment the service pushes for `bucket`
    /// without a report.
    async fn pushed(&mut self, bucket: &[(&str, &str)]) -> f64 {
        rate(&self.next_action(bucket).await)
    }
}

fn id(pairs: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// The rate an assignment allows: a token bucket's fill rate; 0 for
/// deny-all, infinity for allow-all.
fn rate(action: &Action) -> f64 {
    let Action::QuotaAssignmentAction(a) = action else {
        panic!("an assignment, not {action:?}")
    };
    let ttl = a.assignment_time_to_live.unwrap();
    assert!(ttl.seconds >= 1 && ttl.nanos == 0, "whole seconds: {ttl:?}");
    match a
        .rate_limit_strategy
        .as_ref()
        .and_then(|s| s.strategy.clone())
    {
        Some(Strategy::TokenBucket(t)) => {
            let interval = Duration::try_from(t.fill_interval.unwrap()).unwrap();
            f64::from(t.tokens_per_fill.unwrap_or(1)) / interval.as_secs_f64()
        }
        Some(Strategy::BlanketRule(r)) if r == BlanketRule::DenyAll as i32 => 0.0,
        Some(Strategy::BlanketRule(_)) => f64::INFINITY,
        other => panic!("unexpected strategy {other:?}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.01 * b.max(1.0)
}

/// Two data planes divide one bucket by their demand; when one leaves,
/// the other gets the whole. A subscription has the holder re-divide at
/// once, on the same instance or (through Redis) another: both get their
/// parts pushed without a report.
async fn shares_follow_demand(first: &Server, second: &Server) {
    let alice = [("user", "alice")];
    let (mut a, mut b) = (
        DataPlane::connect(first).await,
        DataPlane::connect(second).await,
    );
    // A subscription asks for the whole; the first gets it.
    assert!(close(a.gets(&alice, 0).await, 100.0));
    // The second gets what the first does not hold: nothing yet.
    assert_eq!(b.gets(&alice, 0).await, 0.0);
    // Pushed: the holder's part falls to half first, then the subscriber
    // gets the half freed; never more than the whole.
    let ga = a.pushed(&alice).await;
    let gb = b.pushed(&alice).await;
    assert!(close(ga, 50.0) && close(gb, 50.0), "{ga} {gb}");
    // Renewals converge to shares in proportion to the demands, and the
    // shares held never add up to more than the quota.
    let ga = a.gets(&alice, 30).await;
    let gb = b.gets(&alice, 90).await;
    assert!(close(ga, 100.0 * 30.0 / 130.0), "{ga}");
    assert!(close(gb, 75.0), "{gb}");
    assert!(ga + gb <= 100.0 + 1e-6);
    let ga = a.gets(&alice, 30).await;
    let gb = b.gets(&alice, 90).await;
    assert!(close(ga, 25.0) && close(gb, 75.0), "{ga} {gb}");
    // The first leaves: its lease is freed with its stream.
    drop(a);
    let mut freed = 0.0;
    for _ in 0..100 {
        freed = b.gets(&alice, 90).await;
        if close(freed, 100.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(close(freed, 100.0), "{freed}");
    // Rules without a quota: blanket answers.
    assert_eq!(rate(&b.report(&[("banned", "x")], 1).await), 0.0);
    assert_eq!(rate(&b.report(&[("nobody", "x")], 1).await), f64::INFINITY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_divides_a_bucket_by_demand() {
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &[]);
    shares_follow_demand(&server, &server).await;
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_on_redis_divide_one_bucket() {
    let redis = Redis::start();
    let dir = config_dir(CONFIG);
    let args = ["--redis", &redis.url(), "--store-deadline", "1s"];
    let (first, second) = (Server::start(&dir, &args), Server::start(&dir, &args));
    shares_follow_demand(&first, &second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_bucket_is_abandoned_and_its_part_freed() {
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &["--quota-abandon-after", "1ms"]);
    let bob = [("user", "bob")];
    let (mut a, mut b) = (
        DataPlane::connect(&server).await,
        DataPlane::connect(&server).await,
    );
    assert!(close(a.gets(&bob, 0).await, 100.0));
    assert_eq!(b.gets(&bob, 0).await, 0.0);
    // The subscription has the holder give back half at once.
    assert!(close(a.pushed(&bob).await, 50.0));
    assert!(close(b.pushed(&bob).await, 50.0));
    // Idle reports until one comes 1 ms after the last busy one: abandoned,
    // and the part it held goes to the other data plane at its next report.
    let mut abandoned = false;
    for _ in 0..10_000 {
        match a.report(&bob, 0).await {
            Action::AbandonAction(_) => {
                abandoned = true;
                break;
            }
            // Idle but not yet abandoned: it keeps no more than it held.
            assigned => assert!(rate(&assigned) <= 50.0 + 1e-6),
        }
    }
    assert!(abandoned, "an idle bucket was never abandoned");
    assert!(close(b.gets(&bob, 50).await, 100.0));
}

/// Redis unreachable: the quota's parts come from this instance's share
/// (the quota over the instance count it last knew), answered within the
/// store's deadline, and counted as degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_the_parts_come_from_this_instances_share() {
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let dir = config_dir(CONFIG);
    let server = Server::start(
        &dir,
        &[
            "--redis",
            &nowhere,
            "--instances",
            "4",
            "--store-deadline",
            "50ms",
        ],
    );
    let alice = [("user", "alice")];
    let (mut a, mut b) = (
        DataPlane::connect(&server).await,
        DataPlane::connect(&server).await,
    );
    let started = std::time::Instant::now();
    // 100/s over 4 instances: 25 for this one, divided among its data planes.
    assert!(close(a.gets(&alice, 0).await, 25.0));
    assert_eq!(b.gets(&alice, 0).await, 0.0);
    // The subscription has the holder re-divide this instance's share:
    // 12.5 each, in whole tokens a second.
    let (pa, pb) = (a.pushed(&alice).await, b.pushed(&alice).await);
    assert!(pa == 12.0 && pb == 12.0, "{pa} {pb}");
    let ga = a.gets(&alice, 10).await;
    let gb = b.gets(&alice, 30).await;
    assert!(ga + gb <= 25.0 + 1e-6, "{ga} + {gb}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let (_, _, metrics) = http_get(server.http, "/metrics", &[]);
    assert!(
        metrics.contains("reason=\"quota_local_fallback\""),
        "degraded assignments are counted"
    );
}
