//! Configuration: envoyproxy/ratelimit's YAML (valid input unchanged) with
//! ratewise's extensions, compiled into a tree per domain.
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: user                 # any value: one counter per user
//!     rate_limit: { unit: minute, requests_per_unit: 60 }
//!     descriptors:
//!       - key: path
//!         value: /search
//!         charge_parents: true  # [user, path=/search] also charges `user`
//!         rate_limit:
//!           requests_per_unit: 100
//!           period: 5m          # any period, not only a unit
//!           burst: 20
//!           algorithm: gcra     # or token_bucket, leaky_bucket, fixed_window,
//!                               # sliding_window, sliding_log
//!           name: search
//! ```

mod environment;
mod load;
mod rules;
mod schema;

pub use environment::{flags_from_ratelimit_env, EnvError, EnvFlags};
pub use load::{compile_sources, config_files, load_path, ConfigError, LoadOptions};
pub(crate) use rules::policy_item;
pub use rules::{Domain, Limit, Matched, Pattern, ReportedLimit, Rule, RuleSet};
pub use schema::{parse_period, AlgorithmName, FailureMode};
