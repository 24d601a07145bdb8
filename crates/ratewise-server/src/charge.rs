//! One rule a request's descriptor charges, and the verdict on it: what the
//! engine and the Redis store decide, and what the response is built from.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use ratewise::{CheckError, Decision, Reservation, Timestamp};

use crate::config::{Limit, ReportedLimit, Rule};
use crate::counters::Counters;

/// A rule borrowed from the rule set in force, or owned (a `limit`
/// override's rule, made on demand).
pub(crate) enum RuleRef<'a> {
    Borrowed(&'a Rule),
    Owned(Arc<Rule>),
}

impl Deref for RuleRef<'_> {
    type Target = Rule;
    fn deref(&self) -> &Rule {
        match self {
            RuleRef::Borrowed(r) => r,
            RuleRef::Owned(r) => r,
        }
    }
}

/// One rule a descriptor charges.
pub(crate) struct Charge<'a> {
    pub(crate) descriptor: usize,
    pub(crate) rule: RuleRef<'a>,
    pub(crate) key: Box<str>,
    /// Units to charge; 0 only looks.
    pub(crate) hits: u64,
    pub(crate) now: Timestamp,
    pub(crate) verdict: Option<Verdict>,
    pub(crate) reservation: Option<Reservation>,
}

impl Charge<'_> {
    pub(crate) fn counters(&self) -> Option<&Counters> {
        self.rule.counters.as_deref()
    }

    /// Whether this charge can refuse the request by itself.
    pub(crate) fn enforcing(&self) -> bool {
        !self.rule.shadow && !self.rule.quota && self.hits > 0
    }

    /// Whether this charge is in quota mode: it refuses the request only
    /// together with every other such charge ([`quota_refuses`]).
    pub(crate) fn in_quota_mode(&self) -> bool {
        !self.rule.shadow && self.rule.quota && self.hits > 0
    }
}

/// The outcome of one charge of one descriptor.
#[derive(Clone, Debug)]
pub(crate) struct Verdict {
    pub(crate) descriptor: usize,
    pub(crate) reported: Option<ReportedLimit>,
    /// The status is OK (shadow refusals included).
    pub(crate) allowed: bool,
    pub(crate) remaining: u32,
    pub(crate) reset: Duration,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) shadow_refusal: bool,
    /// Counted in the decision metrics (not for unlimited rules).
    pub(crate) counts: bool,
    pub(crate) near_limit: bool,
    /// The request was refused elsewhere: this charge was not made.
    pub(crate) uncharged: bool,
}

impl Verdict {
    pub(crate) fn unlimited(descriptor: usize) -> Verdict {
        Verdict {
            descriptor,
            reported: None,
            allowed: true,
            remaining: u32::MAX,
            reset: Duration::ZERO,
            retry_after: None,
            shadow_refusal: false,
            counts: false,
            near_limit: false,
            uncharged: false,
        }
    }

    pub(crate) fn blocked(descriptor: usize, rule: &Rule, reported: ReportedLimit) -> Verdict {
        Verdict {
            descriptor,
            reported: Some(reported),
            allowed: rule.shadow,
            remaining: 0,
            reset: Duration::ZERO,
            retry_after: None,
            shadow_refusal: rule.shadow,
            counts: true,
            near_limit: false,
            uncharged: false,
        }
    }

    pub(crate) fn counted(
        descriptor: usize,
        rule: &Rule,
        decision: Result<Decision, CheckError>,
        shadow: bool,
    ) -> Verdict {
        let d = decision.unwrap_or_else(|e| never_admitted(&e));
        let refused = !d.allowed;
        Verdict {
            descriptor,
            reported: rule.reported(),
            allowed: !refused || shadow,
            remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
            reset: d.reset_after,
            retry_after: if refused { d.retry_after } else { None },
            shadow_refusal: refused && shadow,
            counts: true,
            near_limit: !refused && d.remaining.saturating_mul(5) < d.limit,
            uncharged: false,
        }
    }

    /// Takes the remaining units and reset time from `d`.
    pub(crate) fn set_evidence(&mut self, d: &Decision) {
        self.remaining = u32::try_from(d.remaining).unwrap_or(u32::MAX);
        self.reset = d.reset_after;
        self.near_limit = d.remaining.saturating_mul(5) < d.limit;
    }

    /// Which of two verdicts of one descriptor its status shows: a refusal
    /// over an admission (the longer wait first), then the fewest units left.
    pub(crate) fn shows_over(&self, other: &Verdict) -> bool {
        match (self.allowed, other.allowed) {
            (false, true) => true,
            (true, false) => false,
            (false, false) => self.retry_after > other.retry_after,
            (true, true) => {
                (self.reported.is_some(), std::cmp::Reverse(self.remaining))
                    > (other.reported.is_some(), std::cmp::Reverse(other.remaining))
            }
        }
    }
}

/// The decision for a request its limit can never admit (heavier than the
/// burst): refused, nothing charged, and no wait that would help.
pub(crate) fn never_admitted(e: &CheckError) -> Decision {
    let burst = match e {
        CheckError::ExceedsBurst { burst, .. } => *burst,
        _ => 0,
    };
    Decision {
        allowed: false,
        limit: burst,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
        delay: Duration::ZERO,
    }
}

/// Whether the request's quota-mode charges refuse it: there is at least
/// one, and every one is over its limit (`over(i)` for charge `i`).
pub(crate) fn quota_refuses(charges: &[Charge<'_>], over: impl Fn(&Charge<'_>) -> bool) -> bool {
    let mut quota = charges.iter().filter(|c| c.in_quota_mode()).peekable();
    quota.peek().is_some() && quota.all(over)
}

/// Whether `c` was decided and refused (its status shows OVER_LIMIT).
pub(crate) fn refused_verdict(c: &Charge<'_>) -> bool {
    c.verdict.as_ref().is_some_and(|v| !v.allowed)
}

/// Whether the request is refused whatever its counters say: a rule that
/// refuses everything (`requests_per_unit: 0`) refuses it, or every
/// quota-mode rule it matched is such a rule.
pub(crate) fn refused_before_counting(charges: &[Charge<'_>]) -> bool {
    let blocked = |c: &Charge<'_>| matches!(c.rule.limit, Limit::Blocked { .. });
    charges.iter().any(|c| c.enforcing() && blocked(c)) || quota_refuses(charges, blocked)
}
