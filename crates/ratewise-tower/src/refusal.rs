//! The marker on responses a ratewise layer wrote itself.

/// In the extensions of a refusal a ratewise layer answered itself (the
/// concurrency limit's `503`), so that a layer above, such as the
/// [circuit breaker](crate::breaker), does not count it as the service
/// failing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalRefusal;
