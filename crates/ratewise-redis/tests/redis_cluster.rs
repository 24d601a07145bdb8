//! Redis Cluster: three masters created with `redis-cli --cluster create`.
//! Keys spread over the slots, a multi-level decision needs a shared hash
//! tag (without one, `CROSSSLOT` goes to the failure policy), and a dead
//! master's keys are answered by the policy, never a panic.

mod common;

use std::time::{Duration, Instant};

use ratewise::backend::DecisionSource;
use ratewise::Quota;
use ratewise_redis::{
    connect_cluster, Algorithm, FailurePolicy, MultiLimiter, Options, RedisLimiter,
    ResilienceConfig,
};

fn options(policy: FailurePolicy, timeout: Duration) -> Options {
    Options {
        policy,
        resilience: ResilienceConfig {
            timeout,
            // A breaker per limiter: keep it out of the way of the
            // per-key checks below except where it is under test.
            failure_threshold: 1_000_000,
            ..ResilienceConfig::default()
        },
        ..Options::default()
    }
}

/// A fail-open GCRA limiter of 1 000/s on the cluster, with `timeout`.
fn gcra_limiter(
    rt: &tokio::runtime::Runtime,
    cluster: &common::RedisCluster,
    timeout: Duration,
) -> RedisLimiter {
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    rt.block_on(async {
        let conn = connect_cluster(&nodes).await.expect("cluster connection");
        RedisLimiter::with_options(
            conn,
            Quota::per_second(1000).unwrap(),
            Algorithm::Gcra,
            options(FailurePolicy::FailOpen, timeout),
        )
        .unwrap()
    })
}

#[test]
#[cfg_attr(
    any(ratewise_no_redis_server, ratewise_no_redis_cli),
    ignore = "needs redis-server and redis-cli (apt-get install redis-server redis-tools)"
)]
fn cluster_limits_keys_in_every_slot_and_multi_levels_need_a_hash_tag() {
    let cluster = common::RedisCluster::start(3);
    let rt = common::multi_thread_runtime();
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    rt.block_on(async {
        let conn = connect_cluster(&nodes).await.expect("cluster connection");
        for alg in Algorithm::ALL {
            let l = RedisLimiter::with_options(
                conn.clone(),
                Quota::per_minute(2).unwrap(),
                alg,
                Options {
                    prefix: format!("rl:{alg}:"),
                    ..options(FailurePolicy::FailClosed, Duration::from_secs(5))
                },
            )
            .unwrap();
            for k in 0..30 {
                let key = format!("user-{k}");
                for i in 0..3 {
                    let d = l.check(&key, 1).await.unwrap();
                    assert_eq!(d.source, DecisionSource::Backend, "{alg} {key}");
                    assert_eq!(d.decision.allowed, i < 2, "{alg} {key} #{i}");
                }
            }
        }
        // One script, several keys: they must share a slot.
        let m = MultiLimiter::new(
            conn.clone(),
            [Quota::per_minute(5).unwrap(), Quota::per_minute(3).unwrap()],
            options(FailurePolicy::FailClosed, Duration::from_secs(5)),
        )
        .unwrap();
        let tagged = ["{user-7}:all", "{user-7}:search"];
        for i in 0..4 {
            let d = m.check(&tagged, 1).await.unwrap();
            assert_eq!(d.overall.source, DecisionSource::Backend);
            assert_eq!(d.overall.decision.allowed, i < 3);
        }
        // "a" and "b" hash to different slots: Redis refuses the script
        // (CROSSSLOT), the policy answers, and it is counted.
        let d = m.check(&["a", "b"], 1).await.unwrap();
        assert_eq!(d.overall.source, DecisionSource::FailClosed);
        assert!(!d.overall.decision.allowed);
        assert!(m.stats().redis_errors >= 1);
    });
    // The keys really are spread over the three masters.
    for n in &cluster.nodes {
        assert!(n.dbsize() > 0, "a master holds no key");
    }
}

#[test]
#[cfg_attr(
    any(ratewise_no_redis_server, ratewise_no_redis_cli),
    ignore = "needs redis-server and redis-cli (apt-get install redis-server redis-tools)"
)]
fn a_dead_master_is_answered_by_the_policy() {
    let mut cluster = common::RedisCluster::start(3);
    let rt = common::multi_thread_runtime();
    let timeout = Duration::from_millis(100);
    let l = gcra_limiter(&rt, &cluster, timeout);
    let keys: Vec<String> = (0..30).map(|k| format!("user-{k}")).collect();
    rt.block_on(async {
        for k in &keys {
            assert_eq!(l.check(k, 1).await.unwrap().source, DecisionSource::Backend);
        }
    });
    cluster.nodes[0].kill9();
    let (backend, degraded, worst) = rt.block_on(async {
        let (mut backend, mut degraded, mut worst) = (0, 0, Duration::ZERO);
        for _ in 0..3 {
            for k in &keys {
                let t = Instant::now();
                let d = l.check(k, 1).await.expect("the policy answers");
                worst = worst.max(t.elapsed());
                match d.source {
                    DecisionSource::Backend => backend += 1,
                    DecisionSource::FailOpen => {
                        assert!(d.decision.allowed);
                        degraded += 1;
                    }
                    other => panic!("unexpected source {other:?}"),
                }
            }
        }
        (backend, degraded, worst)
    });
    println!("dead master: {backend} from Redis, {degraded} by the policy, worst {worst:?}");
    assert!(degraded > 0, "no key lived on the dead master");
    assert!(backend > 0, "the live masters stopped answering");
    assert!(worst <= timeout + Duration::from_millis(200), "{worst:?}");
    assert_eq!(l.stats().fail_open, degraded);
    // The master comes back (same port, same cluster config): its keys are
    // decided by Redis again, without rebuilding the limiter.
    cluster.nodes[0].restart();
    cluster.wait_ok();
    let back = Instant::now();
    rt.block_on(async {
        loop {
            let mut all = true;
            for k in &keys {
                all &= l.check(k, 1).await.unwrap().source == DecisionSource::Backend;
            }
            if all {
                break;
            }
            assert!(
                back.elapsed() < Duration::from_secs(5),
                "the master's keys did not come back"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    println!(
        "dead master back on Redis {:?} after it answered",
        back.elapsed()
    );
}

/// Moves a hot slot from one master to another mid-load, by hand as
/// `redis-cli --cluster reshard` does: the target IMPORTING, the source
/// MIGRATING, the slot's keys sent with MIGRATE one by one, then SETSLOT
/// NODE on every master. Requests meanwhile meet ASK (a key already moved)
/// and MOVED (a stale slot map): the cluster client follows them, and what
/// it cannot follow goes to the failure policy. (The client sends ASKING
/// and the command as two commands on a shared connection, so under
/// concurrency another command can take the ASKING; the retry then meets
/// ASK again, and after its retries the error reaches the policy.)
/// Never a panic or an error to the caller, and afterwards the slot's keys
/// are decided by Redis again, on the new master.
#[test]
#[cfg_attr(
    any(ratewise_no_redis_server, ratewise_no_redis_cli),
    ignore = "needs redis-server and redis-cli (apt-get install redis-server redis-tools)"
)]
fn a_slot_moving_mid_load_is_followed_or_answered_by_the_policy() {
    let cluster = common::RedisCluster::start(3);
    let rt = common::multi_thread_runtime();
    // Under this load the keys stay ahead of their rate, so they live (up
    // to 1 s) and are there to be migrated.
    let l = gcra_limiter(&rt, &cluster, Duration::from_secs(1));
    // Several keys in one slot (one hash tag), all hot.
    let keys: Vec<String> = (0..4).map(|i| format!("{{moving}}:{i}")).collect();
    let mut any = cluster.nodes[0].sync();
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(l.redis_key(&keys[0]))
        .query(&mut any)
        .unwrap();
    // CLUSTER NODES: "<id> <ip:port@bus> <flags> <master> <ping> <pong>
    // <epoch> <link> <slot ranges>…"; find the master whose ranges hold
    // the slot, and its node here by port.
    let table: String = redis::cmd("CLUSTER").arg("NODES").query(&mut any).unwrap();
    let (from_id, from_port) = table
        .lines()
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .find(|f| {
            f.iter().skip(8).any(|range| {
                let mut ends = range.split('-').map(|x| x.parse::<u16>().ok());
                match (ends.next().flatten(), ends.next().flatten()) {
                    (Some(lo), Some(hi)) => (lo..=hi).contains(&slot),
                    (Some(one), None) => one == slot,
                    _ => false,
                }
            })
        })
        .map(|f| {
            let port = f[1]
                .split(['@', ':'])
                .nth(1)
                .unwrap()
                .parse::<u16>()
                .unwrap();
            (f[0].to_owned(), port)
        })
        .expect("a master owns the slot");
    let from = (0..cluster.nodes.len())
        .find(|&i| cluster.nodes[i].port() == from_port)
        .unwrap();
    let to = (from + 1) % cluster.nodes.len();
    let to_id: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut cluster.nodes[to].sync())
        .unwrap();

    // The load: every decision's source goes down a channel, so the
    // migration below advances on the load's progress, not on a timer.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<DecisionSource>();
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (l, stop, tx) = (l.clone(), stop.clone(), tx.clone());
            let key = keys[t % keys.len()].clone();
            rt.spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let d = l.check(&key, 1).await.expect("the policy answers");
                    if tx.send(d.source).is_err() {
                        break;
                    }
                    if d.source.is_degraded() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let mut seen: Vec<DecisionSource> = Vec::new();
    let progress = |seen: &mut Vec<DecisionSource>, n: usize| {
        for _ in 0..n {
            seen.push(
                rx.recv_timeout(Duration::from_secs(5))
                    .expect("the load stalled"),
            );
        }
    };
    progress(&mut seen, 200);
    let run = |node: usize, args: &[&str]| -> redis::Value {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut cluster.nodes[node].sync())
            .unwrap_or_else(|e| panic!("{args:?} on node {node}: {e}"))
    };
    let s = slot.to_string();
    run(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
    run(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
    progress(&mut seen, 200);
    // The keys move one at a time, with load in between.
    loop {
        let v: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(1)
            .query(&mut cluster.nodes[from].sync())
            .unwrap();
        let Some(k) = v.first() else { break };
        let port = cluster.nodes[to].port().to_string();
        run(from, &["MIGRATE", "127.0.0.1", &port, k, "0", "5000"]);
        progress(&mut seen, 100);
    }
    for i in 0..cluster.nodes.len() {
        run(i, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
    }
    let moved_at = seen.len();
    // After the move: decisions come from Redis again.
    let mut backend_after = 0;
    while backend_after < 500 {
        progress(&mut seen, 1);
        if seen.last() == Some(&DecisionSource::Backend) {
            backend_after += 1;
        }
        assert!(
            seen.len() < moved_at + 100_000,
            "decisions did not come back to Redis after the move"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(rx);
    rt.block_on(async {
        for t in tasks {
            t.await.expect("no load task panicked");
        }
    });
    let degraded = seen.iter().filter(|s| s.is_degraded()).count();
    let s = l.stats();
    println!(
        "slot {slot} moved from node {from} to node {to}: {} decisions, {degraded} by the policy, {} Redis errors",
        seen.len(),
        s.redis_errors
    );
    assert_eq!(u64::try_from(degraded).unwrap(), s.fail_open);
    // The keys live on the new master now.
    let on_target: u64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut cluster.nodes[to].sync())
        .unwrap();
    let on_source: u64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut cluster.nodes[from].sync())
        .unwrap();
    assert!(
        on_target > 0 && on_source == 0,
        "target {on_target}, source {on_source}"
    );
}
