//! Simulated servers: what answers the clients' requests.
//!
//! A server is a state machine told the time of each request
//! ([`ServerModel::handle`]); it answers success or throttled plus the hints a
//! real API would send (`RateLimit-Remaining`, `Retry-After`). Requests are
//! handled in the order the engine delivers them, which is the order of
//! arrival, exactly as a mutex-protected fake server would.
//!
//! Invariants every model keeps:
//! * time never runs backwards for a model (the engine guarantees it);
//! * a throttled request consumes nothing;
//! * [`ServerModel::offered`] is the number of successes the server could
//!   have granted between the first request and `end` — the denominator of
//!   the utilization metric — so `successes <= offered` up to rounding.
//!
//! One job per file: `model` is the interface every server implements
//! ([`ServerModel`], [`Response`]), `config` the `[server]` section of a
//! scenario file ([`ServerConfig`], the TOML schema, which builds a model),
//! and one file per model; the stack of limits is [`crate::stack`].

pub(crate) mod autoscaling;
pub(crate) mod config;
pub(crate) mod decrease_only;
pub(crate) mod fixed_window;
pub(crate) mod heroku_bucket;
pub(crate) mod limiter;
pub(crate) mod model;
pub(crate) mod overstated;
pub(crate) mod shared;
mod stock;

pub use autoscaling::AutoscalingServer;
pub use config::ServerConfig;
pub use decrease_only::DecreaseOnly;
pub use fixed_window::FixedWindowServer;
pub use heroku_bucket::HerokuBucket;
pub use limiter::{LimiterAlgorithm, LimiterServer};
pub use model::{RawResponse, Response, ServerModel};
pub use overstated::{OverstatedServer, Overstatement};
pub use shared::{BackgroundLoad, SharedServer};
