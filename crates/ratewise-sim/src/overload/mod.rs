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
//! * **Arrivals** are open-loop (clients do not slow down when the server
//!   does): Poisson at a steady rate, or bursty (the rate alternates between
//!   high and low phases with the same mean).
//! * **The server** has `workers` that each serve one request at a time in
//!   an exponentially distributed service time (mean `service_ms` divided by
//!   the capacity factor in force), and an unbounded FIFO queue in front of
//!   them: the queue is where latency grows with load. A *latency spike*
//!   adds a fixed delay to every response without occupying a worker (a slow
//!   dependency the handler waits on), so capacity is unchanged.
//! * **Clients time out** after `timeout_ms`: a response later than that is a
//!   failure for the client (the server did the work anyway) and a *drop* for
//!   the controller.
//! * **Workers and demand change** at stated times: workers join or leave
//!   (a leaving worker finishes its request), the rate of new calls steps.
//! * **Clients retry** if the scenario says so: after a refusal or a
//!   timeout, up to `retries` more attempts after `retry_backoff_ms`; the
//!   server cannot tell an abandoned request and serves it anyway.
//! * **Tenants** send shares of the calls, each as one class
//!   (`Priority`), which the controller sheds lowest first.
//! * **The controller** is asked at each arrival (`try_acquire_as`): a
//!   refusal is an immediate 503. Completed requests report their latency
//!   and whether they were dropped.
//!
//! Scenarios are TOML files (`scenarios/overload/` ships ten, compiled in):
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
