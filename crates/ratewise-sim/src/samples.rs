//! Values a run measures many times (waits, latencies), summarised in
//! bounded memory.
//!
//! The first values (up to a limit, [`EXACT_SAMPLES`] unless set) are kept
//! as they are, so every shipped scenario's percentiles are exact (nearest
//! rank, as [`percentile`]). Past the limit, a run with a hundred thousand
//! clients would hold hundreds of megabytes of them, so they move into a
//! histogram of 1,024 buckets per power of two (each at most 0.1 % wide)
//! over the range the values span, with zero and the largest value kept
//! exactly: memory no longer grows with the run's length or client count,
//! and a percentile is off by at most 0.05 %.
//!
//! ```
//! use ratewise_sim::samples::Samples;
//!
//! let mut w = Samples::new();
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

/// How many values [`Samples::new`] keeps exactly before it moves them
/// into the histogram.
pub const EXACT_SAMPLES: usize = 1 << 18;

/// Bucket width: the top 10 bits of the mantissa (1,024 per octave).
const SHIFT: u32 = 52 - 10;

/// The buckets of 2⁻³⁰ and 2³⁰ (a power of two's bits are its biased
/// exponent, 1023 + e, above 52 bits of zero mantissa).
const LOW: u64 = ((1023 - 30) << 52) >> SHIFT;
const HIGH: u64 = ((1023 + 30) << 52) >> SHIFT;

/// Bucket of a positive value. Positive floats order like their bits, so
/// the bits' top part is a log-linear bucket index. Values below 2⁻³⁰ or
/// above 2³⁰ share the end buckets.
fn bucket_of(v: f64) -> u64 {
    (v.to_bits() >> SHIFT).clamp(LOW, HIGH)
}

/// The middle of bucket `b`.
fn middle(b: u64) -> f64 {
    let (lo, hi) = (f64::from_bits(b << SHIFT), f64::from_bits((b + 1) << SHIFT));
    (lo + hi) / 2.0
}

/// Non-negative values (seconds, milliseconds: any one unit).
#[derive(Clone, Debug)]
pub struct Samples {
    exact: Vec<f64>,
    sorted: bool,
    limit: usize,
    histogram: Option<Histogram>,
    count: u64,
    max: f64,
}

impl Default for Samples {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts per bucket over the range of buckets seen so far.
#[derive(Clone, Debug, Default)]
struct Histogram {
    zeros: u64,
    first: u64,
    counts: Vec<u64>,
}

impl Histogram {
    fn add_n(&mut self, v: f64, n: u64) {
        if v > 0.0 {
            self.add_bucket(bucket_of(v), n);
        } else {
            self.zeros += n;
        }
    }

    fn add_bucket(&mut self, b: u64, n: u64) {
        if self.counts.is_empty() {
            self.first = b;
        } else if b < self.first {
            let grow = (self.first - b) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.first = b;
        }
        let i = (b - self.first) as usize;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += n;
    }

    /// The middle of the bucket holding the `rank`th value (1-based).
    fn value_at(&self, rank: u64) -> f64 {
        if rank <= self.zeros {
            return 0.0;
        }
        let mut seen = self.zeros;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return middle(self.first + i as u64);
            }
        }
        f64::NAN
    }
}

impl Samples {
    /// No values yet; exact up to [`EXACT_SAMPLES`].
    pub fn new() -> Self {
        Self::with_exact_limit(EXACT_SAMPLES)
    }

    /// No values yet; exact up to `limit` values.
    pub fn with_exact_limit(limit: usize) -> Self {
        Samples {
            exact: Vec::new(),
            sorted: true,
            limit,
            histogram: None,
            count: 0,
            max: 0.0,
        }
    }

    /// Records one value (negative or NaN counts as 0).
    pub fn push(&mut self, value: f64) {
        let v = if value > 0.0 { value } else { 0.0 };
        self.count += 1;
        self.max = self.max.max(v);
        match &mut self.histogram {
            Some(h) => h.add_n(v, 1),
            None => {
                self.exact.push(v);
                self.sorted = false;
                if self.exact.len() > self.limit {
                    self.move_into_histogram();
                }
            }
        }
    }

    fn move_into_histogram(&mut self) {
        let mut h = Histogram::default();
        for &x in &self.exact {
            h.add_n(x, 1);
        }
        self.exact = Vec::new();
        self.histogram = Some(h);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Samples) {
        if self.histogram.is_none() && other.histogram.is_none() {
            for &v in &other.exact {
                self.push(v);
            }
            return;
        }
        if self.histogram.is_none() {
            self.move_into_histogram();
        }
        let Some(h) = &mut self.histogram else {
            return;
        };
        match &other.histogram {
            Some(o) => {
                h.zeros += o.zeros;
                for (i, &n) in o.counts.iter().enumerate() {
                    if n > 0 {
                        h.add_bucket(o.first + i as u64, n);
                    }
                }
            }
            None => {
                for &v in &other.exact {
                    h.add_n(v, 1);
                }
            }
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    /// How many values were recorded.
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

    /// The largest value, exactly; 0 with none.
    pub fn max(&self) -> f64 {
        self.max
    }

    /// The `p`th percentile (0–100, nearest rank); 0 with no value. Exact
    /// while [`Samples::is_exact`], else the middle of its 0.1 % bucket,
    /// never above [`Samples::max`].
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

    fn exact_percentile(values: &[f64], p: f64) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        percentile(&sorted, p)
    }

    fn close(got: f64, want: f64) -> bool {
        if want == 0.0 {
            got == 0.0
        } else {
            (got - want).abs() <= want * 5e-4
        }
    }

    proptest! {
        /// Past the exact limit every percentile is within 0.05 % of the
        /// exact nearest-rank value (zero exactly), and the maximum and the
        /// count are exact.
        #[test]
        fn the_histogram_is_within_its_bucket_of_the_exact_value(
            values in proptest::collection::vec(prop_oneof![Just(0.0), 1e-6f64..1e6], 1..2_000),
            limit in 0usize..50,
            p in 0.0f64..=100.0,
        ) {
            let mut s = Samples::with_exact_limit(limit);
            for &v in &values {
                s.push(v);
            }
            prop_assert_eq!(s.is_exact(), values.len() <= limit);
            let (got, want) = (s.percentile(p), exact_percentile(&values, p));
            prop_assert!(close(got, want), "{got} vs {want}");
            prop_assert_eq!(s.max(), values.iter().copied().fold(0.0, f64::max));
            prop_assert_eq!(s.len(), values.len() as u64);
        }

        /// Merging gives the percentiles of the values of both, whichever
        /// side holds a histogram.
        #[test]
        fn a_merge_holds_the_values_of_both(
            a in proptest::collection::vec(0.0f64..1e4, 0..300),
            b in proptest::collection::vec(0.0f64..1e4, 0..300),
            limits in (0usize..400, 0usize..400),
            p in 0.0f64..=100.0,
        ) {
            let mut x = Samples::with_exact_limit(limits.0);
            let mut y = Samples::with_exact_limit(limits.1);
            a.iter().for_each(|&v| x.push(v));
            b.iter().for_each(|&v| y.push(v));
            x.merge(&y);
            let both: Vec<f64> = a.iter().chain(&b).copied().collect();
            let (got, want) = (x.percentile(p), exact_percentile(&both, p));
            prop_assert!(close(got, want), "{got} vs {want}");
            prop_assert_eq!(x.len(), both.len() as u64);
        }

        /// Up to the limit the values are exact.
        #[test]
        fn small_runs_are_exact(values in proptest::collection::vec(0.0f64..100.0, 0..300), p in 0.0f64..=100.0) {
            let mut s = Samples::new();
            for &v in &values {
                s.push(v);
            }
            prop_assert!(s.is_exact());
            prop_assert_eq!(s.percentile(p), exact_percentile(&values, p));
        }
    }

    #[test]
    fn the_end_buckets_are_those_of_two_to_the_thirty() {
        assert_eq!(LOW, 2f64.powi(-30).to_bits() >> SHIFT);
        assert_eq!(HIGH, 2f64.powi(30).to_bits() >> SHIFT);
    }

    #[test]
    fn memory_stays_bounded_past_the_limit() {
        let mut s = Samples::with_exact_limit(1_000);
        for i in 0..1_000_000u64 {
            s.push(1.0 + (i % 1_000) as f64 * 1e-3);
        }
        let h = s.histogram.as_ref().map_or(usize::MAX, |h| h.counts.len());
        // One octave, 1,024 buckets at most, however many values.
        assert!(s.exact.capacity() == 0 && h <= 1_025, "{h}");
        assert_eq!(s.len(), 1_000_000);
    }
}
