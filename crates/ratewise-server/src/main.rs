//! `ratewise-server`: the rate-limit service for Envoy. See the crate docs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ratewise_server::config::{FailureMode, LoadOptions};
use ratewise_server::quota::QuotaSettings;
use ratewise_server::redis_store::RedisSettings;
use ratewise_server::serve::{install_prometheus, run, RedisTarget, ServeOptions};
use ratewise_server::{EngineOptions, HeaderMode};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An Envoy-compatible rate-limit service (gRPC RLS v3 and RLQS v3, HTTP /json).
#[derive(Debug, Parser)]
#[command(name = "ratewise-server", version, args_override_self = true)]
struct Args {
    /// Read envoyproxy/ratelimit's environment settings (RUNTIME_ROOT,
    /// RUNTIME_SUBDIRECTORY, GRPC_PORT, PORT, REDIS_URL, REDIS_SOCKET_TYPE,
    /// REDIS_TYPE, REDIS_AUTH, LIMIT_RESPONSE_HEADERS_ENABLED, LOG_LEVEL, …)
    /// as the flags they stand for; flags given on the command line win.
    #[arg(long)]
    ratelimit_env: bool,
    /// The configuration: a YAML file, or a directory of them
    /// (envoyproxy/ratelimit's format, with ratewise's extensions).
    #[arg(long)]
    config: PathBuf,
    /// Let several files name one domain: their descriptors are merged into
    /// it (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); a top-level
    /// descriptor two files define is still an error.
    #[arg(long)]
    merge_domains: bool,
    /// Load the configuration, print the rules it holds, and exit: 0 when it
    /// is valid, 1 with the error (file, line and key) when it is not.
    /// Nothing is served and no store is contacted.
    #[arg(long)]
    check: bool,
    /// Where to serve gRPC (envoy.service.ratelimit.v3.RateLimitService and
    /// envoy.service.rate_limit_quota.v3.RateLimitQuotaService).
    #[arg(long, default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,
    /// Where to serve HTTP: /json, /healthcheck, /metrics, /status, /rules.
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Which rate-limit headers to ask Envoy to add: off, legacy
    /// (RateLimit-Limit/-Remaining/-Reset) or ietf (RateLimit-Policy and
    /// RateLimit); Retry-After is added when over the limit unless off.
    #[arg(long, default_value = "ietf")]
    headers: HeaderMode,
    /// Name the matched and refusing rules in each response's
    /// dynamic_metadata, for Envoy's access logs.
    #[arg(long)]
    dynamic_metadata: bool,
    /// How often to look at the configuration's files for changes, e.g.
    /// 1s or 500ms.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    reload_interval: Duration,
    /// How often the live page (`/`) samples decisions per rule.
    #[arg(long, default_value = "5s", value_parser = parse_interval)]
    sample_interval: Duration,
    /// The most descriptors one request may carry.
    #[arg(long, default_value_t = 64)]
    max_descriptors: usize,
    /// The most distinct descriptor values one rule keeps counters for.
    #[arg(long, default_value_t = 1_000_000)]
    max_keys_per_rule: usize,
    /// Keep the counters on Redis, shared by every instance pointed at it,
    /// e.g. redis://127.0.0.1:6379, or rediss://host:6380 for TLS (checked
    /// against the system's roots). Without it they are in memory.
    #[arg(long, conflicts_with = "redis_cluster")]
    redis: Option<String>,
    /// Keep the counters on a Redis Cluster, given some nodes' URLs,
    /// comma-separated.
    #[arg(long, value_delimiter = ',')]
    redis_cluster: Option<Vec<String>>,
    /// Trust the certificate authority in this PEM file (instead of the
    /// system's roots) for a rediss:// Redis.
    #[arg(long, value_name = "PEM")]
    redis_ca_cert: Option<PathBuf>,
    /// Present this client certificate (PEM) to a rediss:// Redis that asks
    /// for one; needs --redis-client-key.
    #[arg(long, value_name = "PEM", requires = "redis_client_key")]
    redis_client_cert: Option<PathBuf>,
    /// The private key (PEM) of --redis-client-cert.
    #[arg(long, value_name = "PEM", requires = "redis_client_cert")]
    redis_client_key: Option<PathBuf>,
    /// The longest a decision waits on Redis before the failure policy
    /// answers (keep it under Envoy's 20 ms timeout).
    #[arg(long, default_value = "10ms", value_parser = parse_interval)]
    store_deadline: Duration,
    /// What every key, heartbeat and channel of the service on Redis starts
    /// with: deployments sharing one Redis under different prefixes share
    /// nothing (envoyproxy/ratelimit's CACHE_KEY_PREFIX). No braces.
    #[arg(long, default_value = ratewise_server::redis_store::DEFAULT_PREFIX, value_parser = parse_prefix)]
    redis_prefix: String,
    /// What a decision does when Redis cannot answer in time, for domains
    /// that do not say (`failure_policy:` in their file): open (admit),
    /// closed (refuse), local (this instance's share of each limit: the
    /// limit divided by the instances heartbeats on Redis last saw) or error (answer UNAVAILABLE; Envoy's failure_mode_deny
    /// decides). Every such decision is counted.
    #[arg(long, default_value = "open")]
    store_failure: FailureMode,
    /// How many instances to assume share the quotas until the first
    /// heartbeat on Redis answers (sizes the local fallback).
    #[arg(long, default_value_t = 1)]
    instances: u32,
    /// How long a quota assignment (RLQS) holds, in whole seconds; at least
    /// twice the data planes' reporting interval (Envoy 1.40: 5 s).
    #[arg(long, default_value = "12s", value_parser = parse_interval)]
    quota_ttl: Duration,
    /// A quota bucket (RLQS) reported idle this long is abandoned.
    #[arg(long, default_value = "30s", value_parser = parse_interval)]
    quota_abandon_after: Duration,
    /// Log filter (tracing's syntax), e.g. info or ratewise_server=debug.
    #[arg(long, default_value = "info")]
    log: String,
}

fn parse_prefix(s: &str) -> Result<String, String> {
    if s.contains(['{', '}']) {
        return Err(
            "a prefix may not hold `{` or `}`: the service's keys carry their own hash tags".into(),
        );
    }
    Ok(s.to_string())
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    ratewise_server::config::parse_period(s)
}

/// The command line, with envoyproxy/ratelimit's environment settings put
/// before the given flags when `--ratelimit-env` is among them (the last
/// occurrence of a flag wins).
fn command_line() -> Result<Vec<std::ffi::OsString>, String> {
    let mut given: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if !given.iter().skip(1).any(|a| a == "--ratelimit-env") {
        return Ok(given);
    }
    let env = ratewise_server::config::flags_from_ratelimit_env(|k| std::env::var(k).ok())
        .map_err(|e| format!("--ratelimit-env: {e}"))?;
    if !env.ignored.is_empty() {
        eprintln!(
            "ratewise-server: --ratelimit-env: not used here: {} (metrics are served on /metrics)",
            env.ignored.join(", ")
        );
    }
    let rest = given.split_off(1);
    given.extend(env.args.into_iter().map(Into::into));
    given.extend(rest);
    Ok(given)
}

fn main() -> ExitCode {
    let args = match command_line() {
        Ok(line) => Args::parse_from(line),
        Err(e) => {
            eprintln!("ratewise-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let load = LoadOptions {
        max_keys_per_rule: args.max_keys_per_rule,
        merge_domains: args.merge_domains,
    };
    if args.check {
        return check(&args.config, load);
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log).unwrap_or_else(|e| {
        eprintln!(
            "ratewise-server: --log {:?} is not a valid filter ({e}); using info",
            args.log
        );
        tracing_subscriber::EnvFilter::new("info")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let redis_tls = match redis_tls(&args) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("ratewise-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ratewise-server: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = ServeOptions {
        config: args.config,
        grpc: args.grpc,
        http: args.http,
        reload_interval: args.reload_interval,
        sample_interval: args.sample_interval,
        engine: EngineOptions {
            headers: args.headers,
            dynamic_metadata: args.dynamic_metadata,
            max_descriptors: args.max_descriptors,
            max_keys_per_rule: args.max_keys_per_rule,
            ..EngineOptions::default()
        },
        load,
        redis: match (args.redis, args.redis_cluster) {
            (Some(url), _) => Some(RedisTarget::Single(url)),
            (None, Some(nodes)) => Some(RedisTarget::Cluster(nodes)),
            (None, None) => None,
        },
        redis_tls,
        redis_settings: RedisSettings {
            deadline: args.store_deadline,
            failure: args.store_failure,
            instances: args.instances.max(1),
            prefix: args.redis_prefix.as_str().into(),
        },
        quota: QuotaSettings {
            assignment_ttl: args.quota_ttl,
            abandon_after: args.quota_abandon_after,
            store_deadline: args.store_deadline.max(Duration::from_millis(100)),
            redis_prefix: args.redis_prefix.as_str().into(),
        },
    };
    let result = runtime.block_on(async {
        let prometheus = install_prometheus();
        let shutdown = shutdown_signal();
        run(options, prometheus, shutdown, |grpc, http| {
            // One line a supervisor (or a test) can wait on.
            println!("ready grpc={grpc} http={http}");
        })
        .await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ratewise-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The certificates `--redis-ca-cert`, `--redis-client-cert` and
/// `--redis-client-key` name, read now: a file that cannot be read stops
/// the start with its flag and path.
fn redis_tls(args: &Args) -> Result<Option<ratewise_redis::TlsCerts>, String> {
    let read = |flag: &str, path: &Option<PathBuf>| {
        path.as_ref()
            .map(|p| std::fs::read(p).map_err(|e| format!("--{flag} {}: {e}", p.display())))
            .transpose()
    };
    let ca = read("redis-ca-cert", &args.redis_ca_cert)?;
    let cert = read("redis-client-cert", &args.redis_client_cert)?;
    let key = read("redis-client-key", &args.redis_client_key)?;
    let client = cert.zip(key);
    Ok((ca.is_some() || client.is_some()).then_some(ratewise_redis::TlsCerts { ca, client }))
}

/// `--check`: loads the configuration at `path` and prints its rules, or
/// the error.
fn check(path: &std::path::Path, load: LoadOptions) -> ExitCode {
    match ratewise_server::config::load_path(path, None, load) {
        Ok(set) => {
            let rules: Vec<_> = set.rules().collect();
            println!(
                "{}: valid: {} file(s), {} domain(s), {} rule(s)",
                path.display(),
                set.sources.len(),
                set.domain_names().len(),
                rules.len()
            );
            let mut lines: Vec<String> = rules
                .iter()
                .map(|r| format!("  {} (name `{}`)", r.describe(), r.name))
                .collect();
            lines.sort();
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ratewise-server: configuration: {e}");
            ExitCode::FAILURE
        }
    }
}

/// SIGTERM or Ctrl-C. The handlers are installed before this returns, so a
/// signal sent as soon as the service says it is ready is not lost.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async move {
            match term {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            () = ctrl_c => {}
            () = term => {}
        }
    }
}
