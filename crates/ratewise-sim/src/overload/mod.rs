//! The server side: an admission controller in front of a server with finite
//! workers and a queue, under open-loop traffic and a capacity that moves.
//! It scores the core's concurrency controllers (`ratewise::concurrency`) on
//! goodput within a latency objective, latency while overloaded, wasted
//! work, retry amplification, convergence and per-class success.
//!
//! ```
//! use ratewise_sim::overload::{run, OverloadScenario, Controller};
//!
//! let scenario = OverloadScenario::load("capacity-halving")?;
//! let none = run(&scenario, Controller::None, 1);
//! let knee = run(&scenario, Controller::DEFAULT, 1);
//! // Without admission control the queue grows without bound once capacity
//! // halves: most requests miss the latency objective.
//! assert!(knee.goodput_within_objective_share > 2.0 * none.goodput_within_objective_share);
//! # Ok::<(), ratewise_sim::SimError>(())
//! ```
//!
//! # The model
//!
//! Open-loop arrivals (Poisson, steady or bursty) reach `workers` that serve
//! one request each in an exponential time, behind an unbounded FIFO queue.
//! Clients time out after `timeout_ms` (the server still does the work) and
//! may retry; workers, demand and latency spikes change at stated times;
//! tenants send classes the controller sheds lowest first. The controller
//! is asked at each arrival (`try_acquire_as`); a refusal is an immediate
//! 503. Scenarios are TOML files (ten ship under `scenarios/overload/`):
//! [`OverloadScenario::load`] takes a shipped name or a path.
//!
//! Everything is seeded (ChaCha8); the same seed gives the same numbers.

mod controller;
mod report;
mod run;
mod scenario;

pub use controller::Controller;
pub use report::{html, json, table, text_report, LEGEND};
pub use run::{run, OverloadResult};
pub use scenario::{Arrivals, Change, OverloadScenario, PriorityName, Tenant, BUILT_IN};
