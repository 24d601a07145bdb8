//! Invariants of the engine over random scenarios, servers and strategies.

use proptest::prelude::*;
use ratewise_sim::scenario::{ClientGroup, Latency, StateSharing, StrategyParamsConfig, Workload};
use ratewise_sim::server::{LimiterAlgorithm, ServerConfig};
use ratewise_sim::{run, strategies, Scenario};

fn server() -> impl Strategy<Value = ServerConfig> {
    prop_oneof![
        (
            0.5f64..50.0,
            1u64..20,
            0..LimiterAlgorithm::ALL.len(),
            any::<bool>()
        )
            .prop_map(|(rate, burst, a, full)| {
                let algorithm = LimiterAlgorithm::ALL[a];
                ServerConfig::Limiter {
                    algorithm,
                    rate_per_s: rate,
                    burst,
                    // Only GCRA and the token bucket can start empty.
                    start_full: full || a > 1,
                }
            }),
        (1u64..50, 1.0f64..30.0)
            .prop_map(|(limit, window_s)| ServerConfig::FixedWindow { limit, window_s }),
        (1.0f64..100.0, 0.1f64..5.0, 0.0f64..20.0).prop_map(|(capacity, refill, starting)| {
            ServerConfig::HerokuBucket {
                capacity,
                refill_per_s: refill,
                starting: starting.min(capacity),
            }
        }),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        server(),
        1u32..4,
        1u32..4,
        any::<bool>(),
        prop_oneof![
            (1u64..25).prop_map(|n| Workload {
                requests: Some(n),
                ..Workload::default()
            }),
            (5.0f64..60.0, any::<bool>()).prop_map(|(d, i)| Workload {
                duration_s: Some(d),
                interrupt_siblings: i,
                ..Workload::default()
            }),
        ],
        0.0f64..0.3,
    )
        .prop_map(
            |(server, processes, threads, shared, workload, lat)| Scenario {
                name: "prop".into(),
                description: "random".into(),
                seed: 1,
                sample_interval_s: 1.0,
                overhead_s: 0.0,
                max_time_s: 1.0e7,
                time_to_clear_from: None,
                strategy: StrategyParamsConfig::default(),
                latency: Latency::Uniform {
                    min_s: lat,
                    max_s: lat * 2.0,
                },
                server,
                clients: vec![ClientGroup {
                    name: None,
                    processes,
                    threads,
                    state: if shared {
                        StateSharing::PerProcess
                    } else {
                        StateSharing::PerThread
                    },
                    join_s: 0.0,
                    leave_s: None,
                    workload,
                }],
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn engine_invariants(sc in scenario(), which in 0usize..strategies::ALL.len(), seed in any::<u64>()) {
        let info = strategies::ALL[which];
        let a = run(&sc, &info, seed);
        prop_assert!(a.is_ok(), "{:?}", a.err());
        let a = a.unwrap_or_else(|e| panic!("{e}"));
        let m = &a.metrics;
        prop_assert_eq!(m.threads.len(), sc.client_count());
        for t in &m.threads {
            prop_assert_eq!(t.requests, t.successes + t.throttled);
        }
        prop_assert_eq!(m.requests, m.successes + m.throttled);
        // Never more successes than the server offered (plus float slack).
        prop_assert!(m.utilization <= 1.0 + 1e-6, "utilization {}", m.utilization);
        let n = sc.client_count() as f64;
        prop_assert!(m.fairness >= 1.0 / n - 1e-9 && m.fairness <= 1.0 + 1e-9);
        prop_assert!(m.wait_p50_s <= m.wait_p99_s && m.wait_p99_s <= m.wait_max_s);
        prop_assert!((0.0..=100.0).contains(&m.avg_retry_rate_pct));
        if let Some(w) = &sc.clients[0].workload.requests {
            // A fixed job always finishes and clears.
            prop_assert!(m.time_to_clear_s.is_some());
            prop_assert!(m.threads.iter().all(|t| t.requests >= *w));
        }
        // Deterministic.
        let b = run(&sc, &info, seed).unwrap_or_else(|e| panic!("{e}"));
        prop_assert_eq!(&a.metrics, &b.metrics);
        prop_assert_eq!(&a.trace, &b.trace);
    }
}
