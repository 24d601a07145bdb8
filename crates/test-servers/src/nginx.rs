//! nginx with `limit_req`: a leaky bucket per path, refusals with a bare
//! 503 (or the `limit_req_status` given), no rate headers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{free_port, http_status, scratch_dir, Running, StartError};

/// One `limit_req` configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NginxLimit {
    /// `rate=…r/s`.
    pub rate_per_s: u32,
    /// `burst=…` (requests beyond the rate held, or with
    /// [`nodelay`](Self::nodelay) let through, before refusals start).
    pub burst: Option<u32>,
    /// `nodelay`: requests within the burst are answered at once instead of
    /// being delayed to the rate.
    pub nodelay: bool,
    /// `limit_req_status`; nginx answers 503 without it.
    pub status: Option<u16>,
}

impl NginxLimit {
    /// `rate_per_s` requests a second, no burst, refusals with 503.
    pub fn per_second(rate_per_s: u32) -> Self {
        NginxLimit {
            rate_per_s,
            burst: None,
            nodelay: false,
            status: None,
        }
    }

    /// With `burst=burst`.
    pub fn burst(self, burst: u32) -> Self {
        NginxLimit {
            burst: Some(burst),
            ..self
        }
    }

    /// With `nodelay`.
    pub fn nodelay(self) -> Self {
        NginxLimit {
            nodelay: true,
            ..self
        }
    }

    /// With `limit_req_status status`.
    pub fn status(self, status: u16) -> Self {
        NginxLimit {
            status: Some(status),
            ..self
        }
    }

    /// The status nginx refuses with.
    pub fn refusal_status(&self) -> u16 {
        self.status.unwrap_or(503)
    }
}

/// A running nginx; stopped when dropped.
pub struct Nginx {
    running: Running,
    addr: SocketAddr,
    /// The limit it enforces.
    pub limit: NginxLimit,
}

impl Nginx {
    /// nginx's binary: `$NGINX_BIN`, `nginx` on the PATH, or Debian's
    /// `/usr/sbin/nginx` (not on an unprivileged user's PATH).
    pub fn binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("NGINX_BIN") {
            return Some(PathBuf::from(p));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin")])
            .map(|d| d.join("nginx"))
            .find(|p| p.is_file())
    }

    /// Starts nginx enforcing `limit` (keyed by the request's path), in the
    /// foreground and as one process, with its configuration, pid file,
    /// temporary files and error log in a directory of its own; returns
    /// once it answers (at most 10 s).
    ///
    /// # Errors
    /// nginx is missing, exits, or does not answer in time (its log is in
    /// the message).
    pub fn start(limit: &NginxLimit) -> Result<Nginx, StartError> {
        let binary = Nginx::binary().ok_or_else(|| {
            StartError("nginx is not installed (apt-get install nginx)".to_owned())
        })?;
        let dir = scratch_dir("nginx")?;
        let port = free_port();
        let d = dir.display();
        let burst = limit
            .burst
            .map(|b| format!(" burst={b}"))
            .unwrap_or_default();
        let nodelay = if limit.nodelay { " nodelay" } else { "" };
        let status = limit
            .status
            .map(|s| format!("limit_req_status {s};"))
            .unwrap_or_default();
        let config = format!(
            "daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
    limit_req_zone $uri zone=calls:1m rate={rate}r/s;
    limit_req_log_level info;
    {status}
    server {{
        listen 127.0.0.1:{port};
        location = /ready {{ empty_gif; }}
        location / {{
            limit_req zone=calls{burst}{nodelay};
            empty_gif;
        }}
    }}
}}
",
            rate = limit.rate_per_s
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config)
            .map_err(|e| StartError(format!("cannot write {}: {e}", conf.display())))?;
        let log = dir.join("error.log");
        let child = Command::new(&binary)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| StartError(format!("cannot run {}: {e}", binary.display())))?;
        let mut running = Running { child, dir, log };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        running.wait_ready("nginx", Duration::from_secs(10), || {
            http_status(addr, "/ready") == Some(200)
        })?;
        Ok(Nginx {
            running,
            addr,
            limit: *limit,
        })
    }

    /// The URL of limited path `run` (`/run-{run}`), a bucket of its own.
    pub fn url(&self, run: usize) -> String {
        format!("http://{}/run-{run}", self.addr)
    }

    /// What nginx logged so far.
    pub fn log(&self) -> String {
        self.running.log()
    }
}
