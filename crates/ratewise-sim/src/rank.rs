//! The decision: which strategy to use in this scenario, by a stated rule.
//!
//! A table of numbers says what happened; a reader wants to know what to
//! use. [`rank`] orders the strategies of an experiment by one rule,
//! [`RULE`], printed beside every ranking so that it can be disputed:
//!
//! 1. **Pareto tiers of retry rate and time to clear** (both lower is
//!    better; times within [`TIME_TIE`] of each other tie). Tier 1 — the *Pareto front* — holds every strategy no other
//!    strategy beats on both at once (at least as good on both and better on
//!    one); tier 2 is the front of what is left, and so on. A strategy that
//!    never cleared its work counts as infinitely slow.
//! 2. Within a tier, **lower max sleep**, then **higher fairness**, then the
//!    order the strategies were asked for.
//! 3. A strategy flagged [`Flag::NeverWaits`] ranks after all the others:
//!    it answered 429s by sending again at once, so its zero waits and its
//!    fairness are not merits, and a real server would block it.
//!
//! Flags also mark strategies that gave up calls ([`Flag::GaveUp`]); that
//! does not change the rank (a fixed job retries the item in the next call,
//! which the retry rate counts), but it is never hidden.
//!
//! Every metric the outputs show is defined, with its direction, in
//! [`METRICS`].

use crate::{ExperimentResult, StrategyResult};

/// The ranking rule in one sentence, shown beside every ranking.
pub const RULE: &str = "ranked by Pareto tiers of avg retry rate (lower is better) and time to \
clear (lower is better; within 1 % is a tie): tier 1, the Pareto front, holds the strategies no \
other beats on both; within a tier, lower max sleep first, then higher fairness; a strategy that \
never waits ranks last";

/// Which way a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Lower is better.
    Lower,
    /// Higher is better.
    Higher,
}

impl Direction {
    /// `↓` or `↑`.
    pub fn arrow(self) -> &'static str {
        match self {
            Direction::Lower => "↓",
            Direction::Higher => "↑",
        }
    }

    /// "lower is better" or "higher is better".
    pub fn words(self) -> &'static str {
        match self {
            Direction::Lower => "lower is better",
            Direction::Higher => "higher is better",
        }
    }
}

/// A metric as the reports show it.
#[derive(Clone, Copy, Debug)]
pub struct MetricDef {
    /// Key in [`crate::metrics::METRIC_NAMES`].
    pub key: &'static str,
    /// Short column header (fits the 120-column table).
    pub short: &'static str,
    /// Full name.
    pub name: &'static str,
    /// Unit for [`crate::report::cell`]: `" %"`, `" s"`, `""` or `"#"`.
    pub unit: &'static str,
    /// Which way is better.
    pub direction: Direction,
    /// What it measures, exactly.
    pub definition: &'static str,
}

/// Every metric the table and the page show, in column order.
pub const METRICS: [MetricDef; 9] = [
    MetricDef {
        key: "avg_retry_rate_pct",
        short: "Retry",
        name: "Avg retry rate",
        unit: " %",
        direction: Direction::Lower,
        definition: "mean over client threads of each thread's 429s ÷ requests, in %",
    },
    MetricDef {
        key: "time_to_clear_s",
        short: "Clear",
        name: "Time to clear",
        unit: " s",
        direction: Direction::Lower,
        definition: "simulated seconds until every thread finished its work (— when some never did)",
    },
    MetricDef {
        key: "max_sleep_s",
        short: "Max sleep",
        name: "Max sleep",
        unit: " s",
        direction: Direction::Lower,
        definition: "the longest single sleep the strategy asked any client for, in seconds",
    },
    MetricDef {
        key: "fairness",
        short: "Fair",
        name: "Fairness",
        unit: "",
        direction: Direction::Higher,
        definition: "Jain's index over per-thread successes: 1 = equal shares, 1/n = one thread got everything",
    },
    MetricDef {
        key: "stdev_request_count",
        short: "Req sd",
        name: "Stdev req count",
        unit: "",
        direction: Direction::Lower,
        definition: "sample standard deviation of the per-thread request counts (429s included)",
    },
    MetricDef {
        key: "utilization",
        short: "Util",
        name: "Utilization",
        unit: "",
        direction: Direction::Higher,
        definition: "successes ÷ the capacity the server offered during the run",
    },
    MetricDef {
        key: "wait_p99_s",
        short: "Wait p99",
        name: "Wait p99",
        unit: " s",
        direction: Direction::Lower,
        definition: "99th percentile of the time a call slept (before it and between retries), in seconds",
    },
    MetricDef {
        key: "throttled",
        short: "429s",
        name: "429s",
        unit: "#",
        direction: Direction::Lower,
        definition: "throttled responses in total",
    },
    MetricDef {
        key: "failed_calls",
        short: "Failed",
        name: "Failed calls",
        unit: "#",
        direction: Direction::Lower,
        definition: "calls that ended without success: the strategy gave up, or handed the 429 back",
    },
];

/// Why a strategy's numbers must not be read at face value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Flag {
    /// Max sleep 0 although the server throttled it: it answers a 429 by
    /// sending again at once. Its waits and fairness are not merits.
    NeverWaits {
        /// Mean 429s per run.
        throttled: f64,
    },
    /// Some calls ended without success.
    GaveUp {
        /// Mean failed calls per run.
        failed_calls: f64,
    },
}

impl Flag {
    /// One sentence for `strategy`.
    pub fn explain(&self, strategy: &str) -> String {
        match *self {
            Flag::NeverWaits { throttled } => format!(
                "`{strategy}` never waits: it sent again at once after each of its {throttled:.0} 429s, \
                 so its zero waits and its fairness are not merits (shown as n/a) and it ranks last"
            ),
            Flag::GaveUp { failed_calls } => format!(
                "`{strategy}` gave up {failed_calls:.0} calls (ended without success); a fixed job \
                 retries the item in the next call"
            ),
        }
    }
}

/// One strategy's place in the ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    /// Index into [`ExperimentResult::results`].
    pub index: usize,
    /// 1-based rank.
    pub rank: usize,
    /// 1-based Pareto tier of (retry rate, time to clear); 1 is the front.
    pub tier: usize,
    /// Flags, in [`Flag`] order.
    pub flags: Vec<Flag>,
}

impl Ranked {
    /// Whether the strategy never waits (its waits and fairness are n/a).
    pub fn never_waits(&self) -> bool {
        self.flags
            .iter()
            .any(|f| matches!(f, Flag::NeverWaits { .. }))
    }
}

fn mean(r: &StrategyResult, key: &str) -> Option<f64> {
    r.stat(key).map(|s| s.mean)
}

/// The flags of one strategy's results.
pub fn flags(r: &StrategyResult) -> Vec<Flag> {
    let mut flags = Vec::new();
    let throttled = mean(r, "throttled").unwrap_or(0.0);
    if throttled > 0.0 && mean(r, "max_sleep_s").unwrap_or(0.0) == 0.0 {
        flags.push(Flag::NeverWaits { throttled });
    }
    let failed_calls = mean(r, "failed_calls").unwrap_or(0.0);
    if failed_calls > 0.0 {
        flags.push(Flag::GaveUp { failed_calls });
    }
    flags
}

/// `(retry rate, time to clear)`, a strategy that never cleared counting as
/// infinitely slow.
fn objectives(r: &StrategyResult) -> (f64, f64) {
    (
        mean(r, "avg_retry_rate_pct").unwrap_or(f64::INFINITY),
        mean(r, "time_to_clear_s").unwrap_or(f64::INFINITY),
    )
}

/// Times to clear within this fraction of each other count as a tie: a
/// simulated second out of thirteen minutes is noise, not a reason to
/// prefer a strategy with fifty times the retries.
pub const TIME_TIE: f64 = 0.01;

/// Whether `a` Pareto-dominates `b` (both objectives minimised): no more
/// retries, a time to clear no longer (up to [`TIME_TIE`]), and better on
/// one of them (for the time, by more than the tie).
pub fn dominates(a: (f64, f64), b: (f64, f64)) -> bool {
    let t_le = a.1 <= b.1 * (1.0 + TIME_TIE) || a.1 <= b.1;
    let t_lt = a.1 * (1.0 + TIME_TIE) < b.1;
    a.0 <= b.0 && t_le && (a.0 < b.0 || t_lt)
}

/// The 1-based Pareto tier of each point: tier 1 is the set no point
/// dominates, tier k+1 the set no point outside tiers 1..=k dominates.
pub fn pareto_tiers(points: &[(f64, f64)]) -> Vec<usize> {
    let mut tier = vec![0usize; points.len()];
    let mut level = 0;
    while tier.contains(&0) {
        level += 1;
        let open: Vec<usize> = (0..points.len()).filter(|&i| tier[i] == 0).collect();
        let front: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| !open.iter().any(|&j| dominates(points[j], points[i])))
            .collect();
        for i in front {
            tier[i] = level;
        }
    }
    tier
}

/// The strategies of `e`, best first, by [`RULE`].
pub fn rank(e: &ExperimentResult) -> Vec<Ranked> {
    let points: Vec<(f64, f64)> = e.results.iter().map(objectives).collect();
    let tiers = pareto_tiers(&points);
    let mut order: Vec<Ranked> = e
        .results
        .iter()
        .enumerate()
        .map(|(index, r)| Ranked {
            index,
            rank: 0,
            tier: tiers[index],
            flags: flags(r),
        })
        .collect();
    let key = |x: &Ranked| {
        let r = &e.results[x.index];
        (
            x.never_waits(),
            x.tier,
            mean(r, "max_sleep_s").unwrap_or(f64::INFINITY),
            -mean(r, "fairness").unwrap_or(0.0),
        )
    };
    order.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0)
            .then(ka.1.cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then(ka.3.total_cmp(&kb.3))
            .then(a.index.cmp(&b.index))
    });
    for (i, r) in order.iter_mut().enumerate() {
        r.rank = i + 1;
    }
    order
}

/// The strategy the project recommends when nothing is known: ratewise's
/// composed `Throttle`. Highlighted wherever it appears.
pub const DEFAULT_STRATEGY: &str = "throttle";

/// Strategies handed the server's quota by the scenario (a user calling an
/// unknown API has no such number): they may answer, but the answer then
/// also names the best strategy that learns the quota.
pub const HANDED_THE_QUOTA: &[&str] = &["flood-guard"];

/// What the default aims for, "never dominated", defined in one line (a
/// definition, not a claim: each report's answer says whether it holds).
pub const NEVER_DOMINATED: &str = "no strategy that is not handed the server's quota beats \
    the default on both avg retry rate and time to clear with one of them better by more \
    than 10 % (or 1 point of retry rate)";

/// The line every report prints under its rule: the aim, then
/// [`NEVER_DOMINATED`], its definition.
pub fn never_dominated_aim() -> String {
    format!("The default aims to be never dominated: {NEVER_DOMINATED}")
}

/// Whether `a` (retry %, time to clear s) beats the default `d` as
/// [`NEVER_DOMINATED`] forbids: no worse on both, and more than 10 % faster
/// or more than one point of retry rate lower.
pub fn beats_the_default(a: (f64, f64), d: (f64, f64)) -> bool {
    a.0 <= d.0 && a.1 <= d.1 && (d.0 - a.0 > 1.0 || a.1 * 1.10 < d.1)
}

/// The strategies of `e` that break [`NEVER_DOMINATED`]: each with its avg
/// retry rate and time to clear; empty when the default holds (or was not
/// run).
pub fn dominating_the_default(e: &ExperimentResult) -> Vec<(String, f64, f64)> {
    let Some(d) = e.results.iter().find(|r| r.strategy == DEFAULT_STRATEGY) else {
        return Vec::new();
    };
    let d = objectives(d);
    e.results
        .iter()
        .filter(|r| {
            r.strategy != DEFAULT_STRATEGY && !HANDED_THE_QUOTA.contains(&r.strategy.as_str())
        })
        .map(|r| (r.strategy.clone(), objectives(r)))
        .filter(|(_, a)| beats_the_default(*a, d))
        .map(|(n, (retry, clear))| (n, retry, clear))
        .collect()
}

/// The retry rate (%) above which a strategy that learns the quota is not
/// named as the one to use without it, when one at or below it exists.
pub const LEARNER_MAX_RETRY_PCT: f64 = 5.0;

/// The best strategy that is not handed the quota: on the Pareto front of
/// those strategies (flagged never-waiting ones aside), the fastest to
/// clear with at most [`LEARNER_MAX_RETRY_PCT`] retries; the best ranked of
/// them when none is that low.
pub fn best_learner<'a>(e: &ExperimentResult, ranked: &'a [Ranked]) -> Option<&'a Ranked> {
    let learners: Vec<&Ranked> = ranked
        .iter()
        .filter(|r| !HANDED_THE_QUOTA.contains(&e.results[r.index].strategy.as_str()))
        .filter(|r| !r.never_waits())
        .collect();
    let points: Vec<(f64, f64)> = learners
        .iter()
        .map(|r| objectives(&e.results[r.index]))
        .collect();
    let tiers = pareto_tiers(&points);
    learners
        .iter()
        .zip(&points)
        .zip(&tiers)
        .filter(|((_, p), &t)| t == 1 && p.0 <= LEARNER_MAX_RETRY_PCT)
        .min_by(|((_, a), _), ((_, b), _)| a.1.total_cmp(&b.1))
        .map(|((r, _), _)| *r)
        .or_else(|| learners.first().copied())
}

/// One line: the answer (and, when it is handed the server's quota, the
/// best strategy that learns it), the Pareto front, where the default
/// landed and whether it is never dominated here.
pub fn answer(e: &ExperimentResult, ranked: &[Ranked]) -> String {
    let name = |r: &Ranked| e.results[r.index].strategy.as_str();
    let Some(best) = ranked.first() else {
        return "no strategy was run".to_owned();
    };
    let front: Vec<&str> = ranked
        .iter()
        .filter(|r| r.tier == 1 && !r.never_waits())
        .map(name)
        .collect();
    let mut s = if HANDED_THE_QUOTA.contains(&name(best)) {
        match best_learner(e, ranked) {
            Some(learner) => format!(
                "Answer: use `{}` if you know the server's quota (it is handed it); without it, \
                 use `{}`, the best strategy that learns the quota (the fastest of their Pareto \
                 front at ≤ {LEARNER_MAX_RETRY_PCT} % retries).",
                name(best),
                e.results[learner.index].strategy
            ),
            None => format!(
                "Answer: use `{}` (it is handed the server's quota).",
                name(best)
            ),
        }
    } else {
        format!("Answer: use `{}`.", name(best))
    };
    if !front.is_empty() {
        s.push_str(&format!(" Pareto front: {}.", front.join(", ")));
    }
    if let Some(d) = ranked.iter().find(|r| name(r) == DEFAULT_STRATEGY) {
        if d.rank != best.rank {
            s.push_str(&format!(
                " The default `{DEFAULT_STRATEGY}` ranks {} of {} (tier {}).",
                d.rank,
                ranked.len(),
                d.tier
            ));
        }
        let beaten = dominating_the_default(e);
        if beaten.is_empty() {
            s.push_str(" It is never dominated here.");
        } else {
            let who: Vec<String> = beaten.iter().map(|(n, _, _)| format!("`{n}`")).collect();
            s.push_str(&format!(" It is dominated here by {}.", who.join(", ")));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_peel_fronts_off_in_order() {
        // (1,3) and (3,1) are the front; (2,2) too (neither beats it on
        // both); (3,3) is beaten by (2,2); (4,4) by everything.
        let pts = [(1.0, 3.0), (3.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 4.0)];
        assert_eq!(pareto_tiers(&pts), vec![1, 1, 1, 2, 3]);
        // Equal points do not dominate each other.
        assert_eq!(pareto_tiers(&[(1.0, 1.0), (1.0, 1.0)]), vec![1, 1]);
        // Times within 1 % tie: fewer retries then decide.
        assert_eq!(pareto_tiers(&[(50.0, 780.0), (0.0, 781.0)]), vec![2, 1]);
        // Not clearing counts as infinitely slow.
        assert_eq!(
            pareto_tiers(&[(5.0, f64::INFINITY), (5.0, 10.0)]),
            vec![2, 1]
        );
    }

    #[test]
    fn beating_the_default_needs_both_axes_and_a_real_margin() {
        let d = (4.0, 100.0);
        assert!(
            beats_the_default((2.9, 100.0), d),
            "1.1 points fewer retries"
        );
        assert!(beats_the_default((4.0, 90.0), d), "more than 10 % faster");
        assert!(
            !beats_the_default((3.5, 95.0), d),
            "better on both, but by little"
        );
        assert!(!beats_the_default((0.0, 101.0), d), "slower");
        assert!(!beats_the_default((4.1, 10.0), d), "more retries");
        assert!(!beats_the_default((1.0, f64::INFINITY), d), "never cleared");
    }

    #[test]
    fn every_metric_has_a_definition_and_a_direction() {
        for m in METRICS {
            assert!(crate::metrics::METRIC_NAMES.contains(&m.key), "{}", m.key);
            assert!(!m.definition.is_empty());
            assert!(m.short.chars().count() <= 9, "{}", m.short);
        }
    }
}
