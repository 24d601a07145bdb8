//! Rate-limited servers that this project did not write, started on
//! 127.0.0.1 for end-to-end tests: [`Nginx`] with `limit_req` (a leaky
//! bucket) and [`Envoy`] with its local rate limit filter (a token bucket).
//!
//! Each server gets its own temporary directory (configuration, pid file,
//! logs), a free port, and is waited on until it answers (bounded); it is
//! killed when its handle drops. Each limited path (`/run-0`, `/run-1`, …)
//! has a bucket of its own, so the runs of one test start afresh without
//! waiting for a bucket to refill.
//!
//! ```no_run
//! use test_servers::{Nginx, NginxLimit};
//!
//! let nginx = Nginx::start(&NginxLimit::per_second(50)).expect("nginx starts");
//! let url = nginx.url(0); // http://127.0.0.1:PORT/run-0
//! # let _ = url;
//! ```

mod envoy;
mod nginx;
mod process;

pub use envoy::{Envoy, EnvoyLimit};
pub use nginx::{Nginx, NginxLimit};
pub use process::{free_port, http_status, StartError};
