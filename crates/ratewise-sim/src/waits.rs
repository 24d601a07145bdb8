//! The per-call waits of a run, summarised in bounded memory.
//!
//! A run records how long each call waited before its final attempt. The
//! first [`EXACT_WAITS`] values are kept as they are, so every shipped
//! scenario's percentiles are exact (nearest rank, as
//! [`percentile`]). Past that, a run with a
//! hundred thousand clients would hold hundreds of megabytes of waits, so
//! the values move into a histogram of 1,024 buckets per power of two
//! (each bucket at most 0.1 % wide), with zero and the largest wait kept
//! exactly: memory stays under a megabyte whatever the run's length or
//! client count, and a percentile is off by at most 0.05 %.
//!
//! ```
//! use ratewise_sim::waits::Waits;
//!
//! let mut w = Waits::new();
//! for v in [0.0, 0.0, 1.5, 3.0] {
//!     w.push(v);
//! }
//! assert_eq!(w.percentile(50.0), 0.0);
//! assert_eq!(w.percentile(99.0), 3.0);
//! assert_eq!(w.max(), 3.0);
//! ```

/// Nearest-rank percentile of sorted values; 0 for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or(0.0)
}

/// How many waits are kept exactly before they move into the histogram.
pub const EXACT_WAITS: usize = 1 << 18;

/// Bucket width: the top 10 bits of the mantissa (1,024 per octave).
const SHIFT: u32 = 52 - 10;

/// Bucket index of the smallest and largest positive waits told apart:
/// 2⁻³⁰ s (about 1 ns) and 2³⁰ s (34 years). Outside, values share the end
/// buckets.
fn low() -> u64 {
    2f64.powi(-30).to_bits() >> SHIFT
}

fn high() -> u64 {
    2f64.powi(30).to_bits() >> SHIFT
}

/// Per-call waits, seconds.
#[derive(Clone, Debug, Default)]
pub struct Waits {
    exact: Vec<f64>,
    sorted: bool,
    histogram: Option<Histogram>,
    count: u64,
    max: f64,
}

#[derive(Clone, Debug)]
struct Histogram {
    zeros: u64,
    counts: Vec<u64>,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            zeros: 0,
            counts: vec![0; (high() - low() + 1) as usize],
        }
    }

    fn add(&mut self, v: f64) {
        if v > 0.0 {
            let b = (v.to_bits() >> SHIFT).clamp(low(), high()) - low();
            self.counts[b as usize] += 1;
        } else {
            self.zeros += 1;
        }
    }

    /// The middle of the bucket holding the `rank`th value (1-based).
    fn value_at(&self, rank: u64) -> f64 {
        if rank <= self.zeros {
            return 0.0;
        }
        let mut seen = self.zeros;
        for (b, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let bits = (b as u64 + low()) << SHIFT;
                let (lo, hi) = (f64::from_bits(bits), f64::from_bits(bits + (1 << SHIFT)));
                return (lo + hi) / 2.0;
            }
        }
        f64::NAN
    }
}

impl Waits {
    /// No waits yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one call's wait (seconds; negative or NaN counts as 0).
    pub fn push(&mut self, wait_s: f64) {
        let v = if wait_s > 0.0 { wait_s } else { 0.0 };
        self.count += 1;
        self.max = self.max.max(v);
        match &mut self.histogram {
            Some(h) => h.add(v),
            None if self.exact.len() < EXACT_WAITS => {
                self.exact.push(v);
                self.sorted = false;
            }
            None => {
                let mut h = Histogram::new();
                for &x in &self.exact {
                    h.add(x);
                }
                h.add(v);
                self.exact = Vec::new();
                self.histogram = Some(h);
            }
        }
    }

    /// How many waits were recorded.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether the values are still kept exactly.
    pub fn is_exact(&self) -> bool {
        self.histogram.is_none()
    }

    /// The largest wait, exactly; 0 with none.
    pub fn max(&self) -> f64 {
        self.max
    }

    /// The `p`th percentile (0–100, nearest rank); 0 with no wait. Exact
    /// while [`Waits::is_exact`], else the middle of its 0.1 % bucket, never
    /// above [`Waits::max`].
    pub fn percentile(&mut self, p: f64) -> f64 {
        match &self.histogram {
            None => {
                if !self.sorted {
                    self.exact.sort_by(f64::total_cmp);
                    self.sorted = true;
                }
                percentile(&self.exact, p)
            }
            Some(h) => {
                let rank = ((p / 100.0) * self.count as f64).ceil() as u64;
                h.value_at(rank.clamp(1, self.count)).min(self.max)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Each case pushes a quarter of a million values.
        #![proptest_config(ProptestConfig::with_cases(12))]
        /// Past the exact limit, every percentile is within 0.05 % of the
        /// exact nearest-rank value (zero exactly), and the maximum is exact.
        #[test]
        fn the_histogram_is_within_its_bucket_of_the_exact_value(
            values in proptest::collection::vec(prop_oneof![Just(0.0), 1e-6f64..1e6], 1..2_000),
            p in 0.0f64..=100.0,
        ) {
            let mut w = Waits::new();
            // Repeat the values until past the limit; the exact percentile
            // of the repeated list is that of the list.
            let reps = EXACT_WAITS / values.len() + 1;
            for _ in 0..reps {
                for &v in &values {
                    w.push(v);
                }
            }
            prop_assert!(!w.is_exact());
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let mut all: Vec<f64> = Vec::new();
            for &v in &sorted {
                all.extend(std::iter::repeat_n(v, reps));
            }
            let want = percentile(&all, p);
            let got = w.percentile(p);
            if want == 0.0 {
                prop_assert_eq!(got, 0.0);
            } else {
                prop_assert!((got - want).abs() <= want * 5e-4, "{got} vs {want}");
            }
            prop_assert_eq!(w.max(), sorted[sorted.len() - 1]);
            prop_assert_eq!(w.len(), (reps * values.len()) as u64);
        }
    }

    proptest! {
        /// Up to the limit the values are exact.
        #[test]
        fn small_runs_are_exact(values in proptest::collection::vec(0.0f64..100.0, 0..300), p in 0.0f64..=100.0) {
            let mut w = Waits::new();
            for &v in &values {
                w.push(v);
            }
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            prop_assert!(w.is_exact());
            prop_assert_eq!(w.percentile(p), percentile(&sorted, p));
        }
    }

    #[test]
    fn memory_stays_bounded_past_the_limit() {
        let mut w = Waits::new();
        for i in 0..(EXACT_WAITS as u64 * 3) {
            w.push(i as f64 * 1e-3);
        }
        assert!(w.exact.capacity() == 0 && !w.is_exact());
        assert_eq!(w.len(), EXACT_WAITS as u64 * 3);
    }
}
