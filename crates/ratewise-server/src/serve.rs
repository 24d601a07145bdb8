//! Running the service: both listeners, configuration reloads, metrics, and
//! a graceful shutdown (in-flight calls finish, then [`run`] returns).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use ratewise::MonotonicClock;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{config_files, load_path, ConfigError, LoadOptions};
use crate::grpc::RateLimiter;
use crate::history::History;
use crate::http::{router, HttpState, ReloadStatus};
use crate::quota::{QuotaService, QuotaSettings};
use crate::redis_store::{RedisSettings, RedisStore};
use crate::telemetry::record_reload;
use crate::{Engine, EngineOptions};
use ratewise_redis::Fleet;

/// What [`run`] serves, and where.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The configuration file or directory.
    pub config: PathBuf,
    /// The gRPC address.
    pub grpc: SocketAddr,
    /// The HTTP address.
    pub http: SocketAddr,
    /// How often the configuration's files are looked at for changes.
    pub reload_interval: Duration,
    /// How often the live page's decisions per rule are sampled.
    pub sample_interval: Duration,
    /// Decision settings.
    pub engine: EngineOptions,
    /// Rule settings.
    pub load: LoadOptions,
    /// Where the shared counters live; `None` keeps them in memory.
    pub redis: Option<RedisTarget>,
    /// Certificates for `rediss://` beyond the system's roots (a private
    /// authority, a client certificate).
    pub redis_tls: Option<ratewise_redis::TlsCerts>,
    /// Deadline and failure policy for the shared store.
    pub redis_settings: RedisSettings,
    /// The quota service (RLQS): assignment time to live, abandoning.
    pub quota: QuotaSettings,
}

/// A Redis deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (or a proxy), e.g. `redis://127.0.0.1:6379`. The service
    /// starts without it and connects as soon as it answers.
    Single(String),
    /// A Redis Cluster, by the URLs of some of its nodes (reachable at
    /// start).
    Cluster(Vec<String>),
}

/// Why the service could not start or stopped on an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration could not be loaded at start.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// A listener could not be opened.
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        /// `gRPC` or `HTTP`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// What went wrong (e.g. the address is in use).
        source: std::io::Error,
    },
    /// The Redis address is not usable.
    #[error("redis: {0}")]
    Redis(#[from] ratewise_redis::Error),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
    /// The HTTP server failed.
    #[error("HTTP server: {0}")]
    Http(std::io::Error),
}

/// Upper bounds (seconds) of the latency histograms' buckets: every
/// metric whose name ends in `_seconds` (the decision's, and a Redis
/// call's) is a Prometheus histogram with these buckets, so a fleet's
/// instances add up into one distribution (quantiles computed per instance
/// would not); 20 ms is Envoy's default rate-limit RPC timeout.
pub const LATENCY_BUCKETS_S: [f64; 15] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.02, 0.05, 0.1,
    0.25, 0.5, 1.0,
];

/// Installs the Prometheus recorder for the `metrics` facade, latencies as
/// histograms ([`LATENCY_BUCKETS_S`]); `None` if another recorder is
/// already installed in this process.
pub fn install_prometheus() -> Option<PrometheusHandle> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS_S)
        .ok()?
        .install_recorder()
        .ok()
}

/// Serves until `shutdown` completes, then lets in-flight calls finish and
/// returns. `prometheus` renders `/metrics` (see [`install_prometheus`]).
/// `on_ready` is called with the bound addresses (gRPC, HTTP) once both
/// listen.
///
/// # Errors
/// [`ServeError`] when the configuration cannot be loaded at start, a
/// listener cannot be opened, or a server fails.
pub async fn run(
    options: ServeOptions,
    prometheus: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(SocketAddr, SocketAddr),
) -> Result<(), ServeError> {
    let reloads = Arc::new(ReloadStatus::default());
    let rules = match load_path(&options.config, None, options.load) {
        Ok(rules) => rules,
        Err(e) => {
            record_reload(false);
            return Err(e.into());
        }
    };
    record_reload(true);
    reloads.record_ok();
    let clock = MonotonicClock::new();
    let mut engine_options = options.engine;
    // Fixed windows align with the Unix epoch: the clock counts from now.
    engine_options.epoch_offset = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let engine = Arc::new(Engine::new(rules, engine_options));
    let mut limiter = RateLimiter::new(Arc::clone(&engine), clock.clone());
    if let Some(target) = &options.redis {
        let conn: ratewise_redis::Connection = match target {
            RedisTarget::Single(url) => {
                ratewise_redis::connect_lazy_with(url, options.redis_tls.as_ref())?.into()
            }
            RedisTarget::Cluster(nodes) => {
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                ratewise_redis::connect_cluster_with(&nodes, options.redis_tls.as_ref())
                    .await?
                    .into()
            }
        };
        limiter = limiter.with_redis(Arc::new(RedisStore::new(
            conn,
            options.redis_settings.clone(),
        )));
    }
    let prefix = Arc::clone(&options.redis_settings.prefix);
    let fleet = limiter
        .redis()
        .map(|store| Arc::new(Fleet::new(store.connection().clone(), &prefix, FLEET_TTL)));

    let grpc_listener = bind("gRPC", options.grpc).await?;
    let http_listener = bind("HTTP", options.http).await?;
    let grpc_addr = grpc_listener.local_addr().unwrap_or(options.grpc);
    let http_addr = http_listener.local_addr().unwrap_or(options.http);

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let reload = tokio::spawn(watch_config(
        options.config.clone(),
        options.reload_interval,
        options.load,
        Arc::clone(&engine),
        Arc::clone(&reloads),
        stop_rx.clone(),
    ));
    let quota = match limiter.redis() {
        Some(store) => {
            let fleet = Arc::clone(store);
            QuotaService::on_redis(
                Arc::clone(&engine),
                clock.clone(),
                store.connection().clone(),
                QuotaSettings {
                    redis_prefix: prefix,
                    ..options.quota.clone()
                },
                move || fleet.instances(),
            )
        }
        None => QuotaService::new(Arc::clone(&engine), clock.clone(), options.quota.clone()),
    };
    if let Some(RedisTarget::Single(url)) = &options.redis {
        let client = ratewise_redis::client(url, options.redis_tls.as_ref())?;
        quota.listen_for_nudges(client).await;
    }
    let grpc = tonic::transport::Server::builder()
        .add_service(limiter.clone().into_server())
        .add_service(quota.into_server())
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            stopped(stop_rx.clone()),
        );
    // The exporter keeps histogram samples until upkeep folds them in:
    // without it they would pile up for as long as the process lives.
    let upkeep = prometheus.clone().map(|handle| {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                handle.run_upkeep();
            }
        })
    });
    let heartbeat = fleet
        .clone()
        .zip(limiter.redis().cloned())
        .map(|(fleet, store)| tokio::spawn(heartbeat(fleet, store)));
    let history = Arc::new(History::default());
    let sampler = tokio::spawn(sample(
        Arc::clone(&engine),
        Arc::clone(&history),
        options.sample_interval,
    ));
    let http = axum::serve(
        http_listener,
        router(HttpState {
            limiter,
            prometheus,
            reloads,
            history,
        }),
    )
    .with_graceful_shutdown(stopped(stop_rx));
    tracing::info!(%grpc_addr, %http_addr, config = %options.config.display(), "serving");
    on_ready(grpc_addr, http_addr);
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: finishing in-flight calls");
        let _ = stop_tx.send(true);
    });
    let (grpc, http) = tokio::join!(grpc, async { http.await.map_err(ServeError::Http) });
    reload.abort();
    sampler.abort();
    if let Some(h) = heartbeat {
        h.abort();
    }
    if let Some(fleet) = fleet {
        // Best effort: otherwise the others count this instance until its
        // heartbeat lapses.
        let _ = tokio::time::timeout(Duration::from_millis(200), fleet.leave()).await;
    }
    if let Some(u) = upkeep {
        u.abort();
    }
    grpc?;
    http?;
    Ok(())
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { what, addr, source })
}

/// What identifies the configuration's content on disk: each file's path,
/// length and modification time (a symlink swap changes them too).
fn fingerprint(path: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    config_files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f).ok();
            let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
            let modified = meta.and_then(|m| m.modified().ok());
            (f, len, modified)
        })
        .collect()
}

/// Reloads the configuration when its files change. A bad configuration
/// keeps the rules in force; its error is logged once and counted.
async fn watch_config(
    path: PathBuf,
    every: Duration,
    load: LoadOptions,
    engine: Arc<Engine>,
    reloads: Arc<ReloadStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let mut seen = fingerprint(&path);
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let now = fingerprint(&path);
        if now == seen {
            continue;
        }
        seen = now;
        let current = engine.rules();
        match load_path(&path, Some(&current), load) {
            Ok(rules) => {
                let domains = rules.domain_names().len();
                engine.swap_rules(rules);
                record_reload(true);
                reloads.record_ok();
                last_error = None;
                tracing::info!(domains, "configuration reloaded");
            }
            Err(e) => {
                let message = e.to_string();
                record_reload(false);
                reloads.record_failed(message.clone());
                if last_error.as_deref() != Some(&message) {
                    tracing::error!(error = %message, "configuration not reloaded; the previous rules stay in force");
                }
                last_error = Some(message);
            }
        }
    }
}

/// Samples every rule's totals for the live page.
async fn sample(engine: Arc<Engine>, history: Arc<History>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let unix_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        history.record(&engine.rules(), unix_ms);
    }
}

/// How often an instance on Redis says it is alive.
pub const FLEET_HEARTBEAT: Duration = Duration::from_secs(1);
/// How long an instance counts as alive after its last heartbeat.
pub const FLEET_TTL: Duration = Duration::from_secs(3);

/// Beats this instance's heartbeat and resizes the local fallback to the
/// live instance count. While Redis is away the last count stands.
async fn heartbeat(fleet: Arc<Fleet>, store: Arc<RedisStore>) {
    let gauge = metrics::gauge!("ratewise_server_fleet_instances");
    gauge.set(f64::from(store.instances()));
    let mut tick = tokio::time::interval(FLEET_HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match tokio::time::timeout(FLEET_HEARTBEAT, fleet.beat()).await {
            Ok(Ok(live)) => {
                store.set_instances(live);
                gauge.set(f64::from(live));
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "heartbeat not recorded; the instance count stands")
            }
            Err(_) => tracing::debug!("heartbeat timed out; the instance count stands"),
        }
    }
}
