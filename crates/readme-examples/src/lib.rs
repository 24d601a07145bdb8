//! The repository README's Rust examples, compiled and run as doc tests
//! (`cargo test -p readme-examples --doc`).
//!
//! The examples use several crates of the workspace at once (the core, the
//! client and debounce crates, the reqwest and tower middleware), so they are compiled
//! here, by a crate that is never published, rather than by one of them:
//! no published crate needs another as a dev-dependency for its README.
//!
//! ```
//! // The crate has no items; its doc tests are the README's code blocks.
//! assert!(include_str!("../../../README.md").contains("```rust"));
//! ```

/// The README's Rust examples.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
