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

macro_rules! cluster_or_skip {
    () => {
        match common::RedisCluster::start(3) {
            Some(c) => c,
            None => return,
        }
    };
}

#[test]
fn cluster_limits_keys_in_every_slot_and_multi_levels_need_a_hash_tag() {
    let cluster = cluster_or_skip!();
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
fn a_dead_master_is_answered_by_the_policy() {
    let mut cluster = cluster_or_skip!();
    let rt = common::multi_thread_runtime();
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let timeout = Duration::from_millis(100);
    let l = rt.block_on(async {
        let conn = connect_cluster(&nodes).await.expect("cluster connection");
        RedisLimiter::with_options(
            conn,
            Quota::per_second(1000).unwrap(),
            Algorithm::Gcra,
            options(FailurePolicy::FailOpen, timeout),
        )
        .unwrap()
    });
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
