//! Test harness: a private `redis-server` on a free loopback port in a
//! temporary directory, no persistence, stopped (SIGKILL) on drop.
//!
//! Without the binary the build (`build.rs`) marks every test that needs it
//! ignored, so `cargo test` counts them as ignored with the reason — unless
//! `CI` is set, where they run and fail.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The in-memory limiter a Redis algorithm is the Redis form of.
pub fn memory(
    alg: ratewise_redis::Algorithm,
    q: ratewise::Quota,
) -> Box<dyn ratewise::RateLimiter + Send + Sync> {
    use ratewise::{
        FixedWindow, Gcra, ManualClock, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
    };
    use ratewise_redis::Algorithm;
    let c = ManualClock::new();
    match alg {
        Algorithm::Gcra => Box::new(Gcra::with_clock(q, c)),
        Algorithm::TokenBucket => Box::new(TokenBucket::with_clock(q, c)),
        Algorithm::FixedWindow => Box::new(FixedWindow::with_clock(q, c)),
        Algorithm::SlidingWindowCounter => Box::new(SlidingWindowCounter::with_clock(q, c)),
        Algorithm::SlidingWindowLog => Box::new(SlidingWindowLog::with_clock(q, c)),
        other => panic!("no in-memory twin for {other}"),
    }
}

/// `op` on the in-memory twin at `t_us`, in Redis's units ([`in_micros`]).
pub fn memory_step(
    mem: &(dyn ratewise::RateLimiter + Send + Sync),
    op: &Op,
    t_us: u64,
) -> ratewise::Decision {
    let ts = ratewise::Timestamp::from_nanos(t_us * 1000);
    in_micros(if op.peek {
        mem.peek_at(op.n, ts).expect("memory")
    } else {
        mem.check_at(op.n, ts).expect("memory")
    })
}

/// An in-memory decision as Redis reports it: Redis answers in whole
/// microseconds; the in-memory counter places its earliest time in
/// nanoseconds, which Redis rounds up (never early). Every other
/// algorithm's times are whole µs in the conformance tests anyway.
pub fn in_micros(m: ratewise::Decision) -> ratewise::Decision {
    let ceil_us =
        |d: Duration| Duration::from_micros(u64::try_from(d.as_nanos().div_ceil(1000)).unwrap());
    ratewise::Decision {
        retry_after: m.retry_after.map(ceil_us),
        reset_after: ceil_us(m.reset_after),
        ..m
    }
}

/// One request of a conformance scenario: the time since the previous
/// one, its weight, and whether it only peeks.
#[derive(Clone, Debug)]
pub struct Op {
    pub dt_us: u64,
    pub n: u64,
    pub peek: bool,
}

/// Conformance scenarios `(interval µs, burst, start µs, requests)`:
/// intervals from 1 µs to 5 s (sub-1/s rates included), bursts 1..=12,
/// steps up to two intervals or up to three windows (and, with
/// `same_instant`, also all at one instant), starting anywhere in the
/// first ~30 years; at most `max_ops` requests.
pub fn scenarios(
    max_ops: usize,
    same_instant: bool,
) -> impl proptest::strategy::Strategy<Value = (u64, u64, u64, Vec<Op>)> {
    use proptest::prelude::*;
    (1u64..=5_000_000, 1u64..=12, 0u64..1_000_000_000_000_000).prop_flat_map(
        move |(e_us, b, start)| {
            let ops = move |max_dt: u64| {
                prop::collection::vec(
                    (0..=max_dt, 1..=b, prop::bool::weighted(0.2))
                        .prop_map(|(dt_us, n, peek)| Op { dt_us, n, peek }),
                    1..max_ops,
                )
            };
            let mut arms = vec![ops(e_us * 2).boxed(), ops(e_us * b * 3).boxed()];
            if same_instant {
                arms.push(ops(0).boxed());
            }
            (
                Just(e_us),
                Just(b),
                Just(start),
                prop::strategy::Union::new(arms),
            )
        },
    )
}

/// Runs `cases` scenarios through `check(quota, start µs, requests)`.
pub fn run_scenarios(
    cases: u32,
    max_ops: usize,
    same_instant: bool,
    check: impl Fn(ratewise::Quota, u64, &[Op]) -> Result<(), proptest::test_runner::TestCaseError>,
) {
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    });
    runner
        .run(
            &scenarios(max_ops, same_instant),
            |(e_us, b, start, ops)| {
                let q = ratewise::Quota::from_parts(e_us * 1000, b).expect("quota");
                check(q, start, &ops)
            },
        )
        .unwrap();
}

/// Makes `key` hold a hash, so a GCRA script on it fails (`WRONGTYPE`).
pub fn wrong_type(server: &RedisServer, key: Vec<u8>) {
    redis::cmd("HSET")
        .arg(key)
        .arg("f")
        .arg("v")
        .query::<()>(&mut server.sync())
        .unwrap();
}

/// A two-worker tokio runtime (this machine's tests run on 2 cores).
pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A running `redis-server` owned by a test.
pub struct RedisServer {
    child: Option<Child>,
    /// The server's log lines after it reported ready, for tests that wait
    /// on what the server says (a cluster's state changes).
    log: Option<std::sync::Mutex<std::sync::mpsc::Receiver<String>>>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

/// Panics, naming the install command, when `program` is not installed. A
/// test that needs it is marked ignored when the build finds it missing
/// (this crate's `build.rs`: cfg `ratewise_no_redis_server`,
/// `ratewise_no_redis_cli`), so `cargo test` reports it ignored, never
/// passed; it runs anyway under CI, or when asked (`--include-ignored`),
/// and then it fails here rather than pass having run nothing.
fn require(program: &str, install: &str) {
    let present = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(present, "{program} is not installed: {install}");
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    l.local_addr().expect("local address").port()
}

/// A free port for a cluster node: its cluster bus listens on the port plus
/// 10 000, so that one must exist (an ephemeral port above 55 535 has none,
/// and the node would exit) and be free too.
fn free_cluster_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
        let port = l.local_addr().expect("local address").port();
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            return port;
        }
    }
}

impl RedisServer {
    /// A fresh server; panics when `redis-server` is not installed (see
    /// [`require`]).
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A fresh server with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        require("redis-server", "apt-get install redis-server redis-tools");
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratewise-redis-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the server's temporary directory");
        // A port taken between our probe and the server's bind makes the
        // server exit; try a few ports.
        for _ in 0..5 {
            let mut s = RedisServer {
                child: None,
                log: None,
                port: if extra.contains(&"--cluster-enabled") {
                    free_cluster_port()
                } else {
                    free_port()
                },
                dir: dir.clone(),
                extra: extra.iter().map(|a| a.to_string()).collect(),
            };
            if s.spawn() {
                return s;
            }
        }
        panic!("could not start redis-server on a free port after 5 attempts");
    }

    /// Starts the process on `self.port` and waits until it answers PING
    /// (at most 5 s). `false` if it exited (port taken).
    fn spawn(&mut self) -> bool {
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--protected-mode", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        // Readiness is the server's own word: it logs "Ready to accept
        // connections" once it listens, or exits (port taken). A thread
        // reads the log to the end, so the pipe never fills.
        let log = child.stdout.take().expect("piped stdout");
        self.child = Some(child);
        let (tx, rx) = std::sync::mpsc::channel();
        let (lines_tx, lines_rx) = std::sync::mpsc::channel();
        self.log = Some(std::sync::Mutex::new(lines_rx));
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut ready = false;
            for line in std::io::BufReader::new(log).lines().map_while(Result::ok) {
                if ready {
                    let _ = lines_tx.send(line);
                } else if line.contains("Ready to accept connections") {
                    ready = true;
                    let _ = tx.send(true);
                }
            }
            if !ready {
                let _ = tx.send(false);
            }
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(true) => {
                assert!(
                    self.ping(),
                    "redis-server on port {} is not answering",
                    self.port
                );
                true
            }
            Ok(false) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                if let Some(mut c) = self.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                false
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
                "redis-server on port {} did not report ready within 5 s",
                self.port
            ),
        }
    }

    /// Blocks until the server logs another line, or `timeout` passes;
    /// `false` on timeout or when the server has stopped.
    pub fn next_log_line(&self, timeout: Duration) -> bool {
        self.log
            .as_ref()
            .is_some_and(|rx| rx.lock().unwrap().recv_timeout(timeout).is_ok())
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut c).is_ok()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A plain synchronous connection for inspecting the server.
    pub fn sync(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("client")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to the test server")
    }

    pub fn dbsize(&self) -> u64 {
        redis::cmd("DBSIZE")
            .query(&mut self.sync())
            .expect("DBSIZE")
    }

    /// `kill -9`: the process dies at once, connections drop.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port (after [`kill9`], which
    /// has reaped the old process, so the port is free again: Redis binds
    /// with `SO_REUSEADDR`).
    pub fn restart(&mut self) {
        for _ in 0..5 {
            if self.spawn() {
                return;
            }
        }
        panic!("could not restart redis-server on port {}", self.port);
    }
}

/// A Redis Cluster of `masters` servers (no replicas), created with
/// `redis-cli --cluster create`; panics without the binaries (see
/// [`require`]).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> RedisCluster {
        require("redis-cli", "apt-get install redis-tools");
        let mut nodes = Vec::new();
        for _ in 0..masters {
            let conf = "nodes.conf";
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                conf,
                "--cluster-require-full-coverage",
                "no",
            ]));
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    /// Waits (at most 10 s) until every live node reports `cluster_state:ok`
    /// and knows every slot.
    ///
    /// A node that is not there yet is waited on through its log: it logs
    /// what changes in its view of the cluster ("Cluster state changed:
    /// ok", configuration updates), so the check runs again after each line
    /// instead of on a timer.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lagging = self.nodes.iter().filter(|n| n.child.is_some()).find(|n| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut n.sync())
                    .unwrap_or_default();
                !(info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_assigned:16384"))
            });
            let Some(node) = lagging else {
                return;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                node.next_log_line(left),
                "the cluster did not become ready within 10 s"
            );
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
