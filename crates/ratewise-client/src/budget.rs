//! A retry budget as in the AWS SDKs' standard retry mode: a token bucket
//! that limits *retries*, not requests, so a struggling service sees at most
//! a bounded amount of extra traffic from us.
//!
//! Constants (legacy standard mode, still the default): capacity 500; a retry
//! of a throttling or transient error costs 5, a retry after a timeout 10; a
//! call that succeeds at once refunds 1, one that succeeds after retries
//! refunds the cost of its last retry. A retry that cannot pay is not made:
//! the call fails fast instead.
//!
//! [`WithBudget`] puts a budget alongside any [`Strategy`].
//!
//! Invariant: `0 ≤ available ≤ capacity`.

use std::time::Duration;

use super::config::{at_least_one, ConfigError};
use super::{Next, Outcome, Signal, Strategy};
use ratewise::time::Timestamp;

/// The budget's costs and capacity, with AWS standard-mode defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudgetConfig {
    /// Tokens when full (500).
    pub capacity: u32,
    /// Cost of retrying a throttled or transient failure (5).
    pub retry_cost: u32,
    /// Cost of retrying a timeout (10).
    pub timeout_cost: u32,
    /// Refund for a call that succeeded on its first attempt (1).
    pub success_reward: u32,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        RetryBudgetConfig {
            capacity: 500,
            retry_cost: 5,
            timeout_cost: 10,
            success_reward: 1,
        }
    }
}

/// The AWS standard-mode retry quota.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    available: u32,
}

impl RetryBudget {
    /// A full budget.
    ///
    /// # Errors
    /// [`ConfigError`] when the capacity is zero.
    pub fn new(config: RetryBudgetConfig) -> Result<Self, ConfigError> {
        at_least_one("capacity", config.capacity)?;
        Ok(RetryBudget {
            available: config.capacity,
            config,
        })
    }

    /// Tokens left.
    pub fn available(&self) -> u32 {
        self.available
    }

    /// The cost of retrying after `signal`.
    pub fn cost_of(&self, signal: Signal) -> u32 {
        if signal == Signal::Timeout {
            self.config.timeout_cost
        } else {
            self.config.retry_cost
        }
    }

    /// Pays for a retry after `signal`; returns the cost paid, or `None` when
    /// the budget cannot afford it (do not retry).
    pub fn try_acquire(&mut self, signal: Signal) -> Option<u32> {
        let cost = self.cost_of(signal);
        let left = self.available.checked_sub(cost)?;
        self.available = left;
        Some(cost)
    }

    /// A call succeeded: refunds `last_retry_cost` if it needed retries,
    /// otherwise the success reward. Never exceeds the capacity.
    pub fn on_success(&mut self, last_retry_cost: Option<u32>) {
        let refund = last_retry_cost.unwrap_or(self.config.success_reward);
        self.available = self
            .available
            .saturating_add(refund)
            .min(self.config.capacity);
    }
}

/// Any strategy with a retry budget beside it: a retry the budget cannot pay
/// for becomes [`Next::GiveUp`].
#[derive(Clone, Debug)]
pub struct WithBudget<S> {
    inner: S,
    budget: RetryBudget,
    last_cost: Option<u32>,
}

impl<S: Strategy> WithBudget<S> {
    /// `inner`, limited by `budget`.
    pub fn new(inner: S, budget: RetryBudget) -> Self {
        WithBudget {
            inner,
            budget,
            last_cost: None,
        }
    }

    /// The budget.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// The wrapped strategy.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Strategy> Strategy for WithBudget<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        self.last_cost = None;
        self.inner.before_call(now)
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        let next = self.inner.after_attempt(now, outcome);
        match next {
            Next::Retry(_) => match self.budget.try_acquire(outcome.signal) {
                Some(cost) => {
                    self.last_cost = Some(cost);
                    next
                }
                None => Next::GiveUp,
            },
            Next::Done if outcome.signal == Signal::Success => {
                self.budget.on_success(self.last_cost.take());
                next
            }
            _ => next,
        }
    }

    forward_gauges_to_inner!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::{BackoffConfig, BackoffStrategy};

    #[test]
    fn aws_standard_costs_and_refunds() {
        let mut b = RetryBudget::new(RetryBudgetConfig::default()).unwrap();
        assert_eq!(b.available(), 500);
        assert_eq!(b.try_acquire(Signal::Throttled), Some(5));
        assert_eq!(b.try_acquire(Signal::Timeout), Some(10));
        assert_eq!(b.available(), 485);
        b.on_success(Some(10));
        assert_eq!(b.available(), 495);
        b.on_success(None);
        assert_eq!(b.available(), 496);
        for _ in 0..10 {
            b.on_success(Some(5));
        }
        assert_eq!(b.available(), 500, "capped");
        // 100 throttling retries drain it exactly; the next cannot pay.
        for _ in 0..100 {
            assert!(b.try_acquire(Signal::Throttled).is_some());
        }
        assert_eq!(b.try_acquire(Signal::Throttled), None);
        assert_eq!(b.available(), 0);
    }

    #[test]
    fn with_budget_fails_fast_when_empty_and_refunds() {
        let cfg = RetryBudgetConfig {
            capacity: 10,
            ..RetryBudgetConfig::default()
        };
        let inner =
            BackoffStrategy::new(BackoffConfig::constant(Duration::from_millis(1)), 0).unwrap();
        let mut s = WithBudget::new(inner, RetryBudget::new(cfg).unwrap());
        let t = Timestamp::ZERO;
        s.before_call(t);
        assert!(matches!(
            s.after_attempt(t, &Outcome::throttled()),
            Next::Retry(_)
        ));
        assert!(matches!(
            s.after_attempt(t, &Outcome::throttled()),
            Next::Retry(_)
        ));
        assert_eq!(s.after_attempt(t, &Outcome::throttled()), Next::GiveUp);
        assert_eq!(s.budget().available(), 0);
        s.before_call(t);
        let timeout = Outcome::new(Signal::Timeout);
        assert_eq!(
            s.after_attempt(t, &timeout),
            Next::GiveUp,
            "a timeout retry costs 10"
        );
        assert_eq!(s.after_attempt(t, &Outcome::success()), Next::Done);
        assert_eq!(s.budget().available(), 1);
    }
}
