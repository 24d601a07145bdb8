//! Several instances on one real `redis-server`: quotas survive the
//! replacement of every instance, the instances count each other through
//! heartbeats on Redis, and in an outage each holds its share of the live
//! count, starting spent.

mod common;
mod support;

use std::time::{Duration, Instant};

use common::{desc, req};
use ratewise_server::rls::{Code, RateLimitClient, RateLimitRequest};
use support::*;

type Client = RateLimitClient<tonic::transport::Channel>;

async fn client(server: &Server) -> Client {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    RateLimitClient::new(channel)
}

async fn ok(c: &mut Client, r: &RateLimitRequest) -> bool {
    c.should_rate_limit(r.clone()).await.unwrap().overall_code() == Code::Ok
}

/// Stops `server` with SIGTERM and waits (at most 10 s) for it to exit.
fn terminate(mut server: Server) {
    server.terminate(Duration::from_secs(10));
}

/// The instance count `/status` reports for the shared store.
fn instances(server: &Server) -> Option<u64> {
    let (_, _, s) = http_get(server.http, "/status", &[]);
    let v: serde_json::Value = serde_json::from_str(&s).ok()?;
    v["store"]["instances"].as_u64()
}

/// NVIDIA's nvcf scenario: a limit of 10 per hour, 4 spent, every instance
/// replaced (one by one, then all at once): exactly 6 more pass.
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_every_instance_resets_no_quota() {
    let redis = Redis::start();
    let dir = config_dir(
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n",
    );
    let args = ["--redis", &redis.url(), "--store-deadline", "2s"];
    let r = req("edge", vec![desc(&[("user", "nvcf")])]);
    let (a, b) = (Server::start(&dir, &args), Server::start(&dir, &args));
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    for _ in 0..2 {
        assert!(ok(&mut ca, &r).await);
        assert!(ok(&mut cb, &r).await);
    }
    // A rolling restart: a new instance up before each old one goes.
    let c = Server::start(&dir, &args);
    terminate(a);
    let d = Server::start(&dir, &args);
    terminate(b);
    let (mut cc, mut cd) = (client(&c).await, client(&d).await);
    let mut admitted = 0;
    for _ in 0..2 {
        admitted += usize::from(ok(&mut cc, &r).await);
        admitted += usize::from(ok(&mut cd, &r).await);
    }
    assert_eq!(admitted, 4, "4 of the 6 left");
    // Then every instance at once.
    terminate(c);
    terminate(d);
    let (e, f) = (Server::start(&dir, &args), Server::start(&dir, &args));
    let (mut ce, mut cf) = (client(&e).await, client(&f).await);
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += usize::from(ok(&mut ce, &r).await);
        admitted += usize::from(ok(&mut cf, &r).await);
    }
    assert_eq!(
        admitted, 2,
        "exactly 6 after the first 4, across both restarts"
    );
}

/// Three instances count each other; one killed with SIGKILL stops being
/// counted after the heartbeat's time to live. Redis then goes away: the
/// count the others last saw stands, each holds half of the limit, and a
/// share starts spent, so the pair admits no more than the limit's rate
/// over the outage.
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_an_outage_each_instance_holds_its_share_of_the_live_count() {
    const RATE: f64 = 20.0;
    let mut redis = Redis::start();
    let dir = config_dir(
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 20 }\n",
    );
    let args = [
        "--redis",
        &redis.url(),
        "--store-failure",
        "local",
        "--store-deadline",
        "200ms",
    ];
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&dir, &args)).collect();
    wait_until(Duration::from_secs(10), "three instances counted", || {
        servers.iter().all(|s| instances(s) == Some(3))
    });
    let mut servers = servers.into_iter();
    drop(servers.next()); // SIGKILL: no goodbye, its heartbeat lapses
    let (a, b) = (servers.next().unwrap(), servers.next().unwrap());
    wait_until(
        Duration::from_secs(10),
        "the dead instance forgotten",
        || instances(&a) == Some(2) && instances(&b) == Some(2),
    );
    redis.kill();
    let r = req("edge", vec![desc(&[("user", "outage")])]);
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    // Demand far above the limit on both instances for a little over a
    // second (the load's length, not a wait for anything).
    let start = Instant::now();
    let mut admitted = 0;
    let mut calls = 0;
    while start.elapsed() < Duration::from_millis(1200) {
        admitted += usize::from(ok(&mut ca, &r).await);
        admitted += usize::from(ok(&mut cb, &r).await);
        calls += 2;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let span = start.elapsed().as_secs_f64();
    assert_eq!(instances(&a), Some(2), "the last count stands");
    // Each instance: 10/s from empty; two of them: the limit's rate.
    let bound = (RATE * span).floor() as usize + 2;
    println!(
        "outage: {admitted} of {calls} admitted in {span:.2} s by 2 instances (bound {bound})"
    );
    assert!(admitted > 0, "the local shares admitted nothing");
    assert!(
        admitted <= bound,
        "{admitted} admitted in {span:.2} s; the limit's rate allows {bound}"
    );
}
