//! Latencies kept in a histogram of fixed size, so that a bench of hours
//! holds as much bookkeeping as one of seconds (a sample per write would
//! grow by 8 bytes a write: gigabytes over a long run at full speed).
//!
//! The buckets are log-linear: every latency under [`EXACT_BELOW_US`] has a
//! bucket of its own, and above it each power of two is cut into 256
//! buckets, so a bucket is at most 1/256 (0.4 %) of the values it holds
//! wide. A percentile is the nearest rank (as [`super::report::percentile`]
//! computes it on sorted samples) and reports the highest value of its
//! bucket, capped by the largest latency recorded: exact under
//! [`EXACT_BELOW_US`], at most 0.4 % high above it.

/// Latencies under this many microseconds are kept exactly.
pub(crate) const EXACT_BELOW_US: u64 = 1 << SUB_BUCKET_BITS;

/// Latencies above this (about 71 minutes) are counted as this.
pub(crate) const LATENCY_MAX_US: u64 = (1 << MAGNITUDE_MAX_BITS) - 1;

/// log2 of the exact range; each power of two above it has half as many buckets.
const SUB_BUCKET_BITS: u32 = 9;
const SUB_BUCKETS_HALF: usize = 1 << (SUB_BUCKET_BITS - 1);
/// Bits of the largest latency kept.
const MAGNITUDE_MAX_BITS: u32 = 32;
/// The exact buckets, then half a sub-bucket range per power of two above.
const BUCKETS: usize = EXACT_BELOW_US as usize + (MAGNITUDE_MAX_BITS - SUB_BUCKET_BITS) as usize * SUB_BUCKETS_HALF;

const _: () = {
    // The largest latency has the last bucket.
    assert!(BUCKETS == 512 + 23 * 256);
    // The table stays small: two of them (window and interval) under 128 KiB.
    assert!(BUCKETS * 8 * 2 <= 128 * 1024);
};

/// A histogram of latencies in microseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LatencyHistogram {
    counts: Vec<u64>,
    count: u64,
    max_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram { counts: vec![0; BUCKETS], count: 0, max_us: 0 }
    }
}

impl LatencyHistogram {
    /// Count one latency.
    pub(crate) fn record(&mut self, latency_us: u64) {
        let latency_us = latency_us.min(LATENCY_MAX_US);
        self.counts[bucket_of(latency_us)] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(latency_us);
    }

    /// Latencies recorded.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The nearest-rank percentile `p` (0 to 100); 0 if nothing was recorded.
    pub(crate) fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil() as u64;
        let rank = rank.clamp(1, self.count);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return highest_of(bucket).min(self.max_us);
            }
        }
        unreachable!("the counts add up to count ({})", self.count)
    }

    /// Forget every latency (the table stays allocated).
    pub(crate) fn clear(&mut self) {
        self.counts.fill(0);
        self.count = 0;
        self.max_us = 0;
    }
}

/// The bucket of a latency of at most [`LATENCY_MAX_US`].
fn bucket_of(latency_us: u64) -> usize {
    debug_assert!(latency_us <= LATENCY_MAX_US);
    if latency_us < EXACT_BELOW_US {
        return latency_us as usize;
    }
    let magnitude = 63 - latency_us.leading_zeros(); // >= SUB_BUCKET_BITS
    let shift = magnitude - (SUB_BUCKET_BITS - 1);
    let sub = (latency_us >> shift) as usize; // in SUB_BUCKETS_HALF..2 * SUB_BUCKETS_HALF
    EXACT_BELOW_US as usize + (magnitude - SUB_BUCKET_BITS) as usize * SUB_BUCKETS_HALF + (sub - SUB_BUCKETS_HALF)
}

/// The lowest and highest latency of `bucket`.
fn range_of(bucket: usize) -> (u64, u64) {
    debug_assert!(bucket < BUCKETS);
    if bucket < EXACT_BELOW_US as usize {
        return (bucket as u64, bucket as u64);
    }
    let above = bucket - EXACT_BELOW_US as usize;
    let magnitude = SUB_BUCKET_BITS + (above / SUB_BUCKETS_HALF) as u32;
    let sub = (SUB_BUCKETS_HALF + above % SUB_BUCKETS_HALF) as u64;
    let shift = magnitude - (SUB_BUCKET_BITS - 1);
    (sub << shift, ((sub + 1) << shift) - 1)
}

fn highest_of(bucket: usize) -> u64 {
    range_of(bucket).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::percentile;

    /// Values spread over every magnitude, the edges of each included.
    fn probes() -> Vec<u64> {
        let mut values: Vec<u64> = (0..2048).collect();
        for bits in 11..MAGNITUDE_MAX_BITS {
            let power = 1u64 << bits;
            values.extend([power - 1, power, power + 1, power + power / 3, power * 2 - 1]);
        }
        values.push(LATENCY_MAX_US);
        values
    }

    #[test]
    fn d5_every_latency_falls_in_a_bucket_that_holds_it_and_is_at_most_1_in_256_wide() {
        let mut previous = 0;
        for value in probes() {
            let bucket = bucket_of(value);
            assert!(bucket < BUCKETS, "{value} -> {bucket}");
            assert!(bucket >= previous, "buckets follow the values: {value}");
            previous = bucket;
            let (low, high) = range_of(bucket);
            assert!(low <= value && value <= high, "{value} not in {low}..={high}");
            assert!((high - low) * 256 <= value.max(1), "{value}: {low}..={high} too wide");
        }
        assert_eq!(bucket_of(LATENCY_MAX_US), BUCKETS - 1);
        assert_eq!(range_of(BUCKETS - 1).1, LATENCY_MAX_US);
    }

    #[test]
    fn d5_adjacent_buckets_leave_no_gap() {
        for bucket in 1..BUCKETS {
            assert_eq!(range_of(bucket).0, range_of(bucket - 1).1 + 1, "bucket {bucket}");
        }
    }

    #[test]
    fn d5_percentiles_are_the_nearest_rank_exactly_below_512_us() {
        let samples: Vec<u64> = (0..1000).map(|i| (i * 7919) % 500).collect();
        let mut histogram = LatencyHistogram::default();
        samples.iter().for_each(|latency| histogram.record(*latency));
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        for p in [0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            assert_eq!(histogram.percentile(p), percentile(&sorted, p), "p{p}");
        }
        assert_eq!(histogram.count(), 1000);
    }

    #[test]
    fn d5_percentiles_above_512_us_are_at_most_0_4_percent_high() {
        let samples: Vec<u64> = (0..5000).map(|i| 600 + (i * 104_729) % 2_000_000).collect();
        let mut histogram = LatencyHistogram::default();
        samples.iter().for_each(|latency| histogram.record(*latency));
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        for p in [50.0, 99.0, 99.9, 100.0] {
            let (estimate, exact) = (histogram.percentile(p), percentile(&sorted, p));
            assert!(estimate >= exact && (estimate - exact) * 256 <= exact, "p{p}: {estimate} vs {exact}");
        }
        assert_eq!(histogram.percentile(100.0), *sorted.last().expect("samples"), "capped by the largest");
    }

    #[test]
    fn d5_an_empty_or_cleared_histogram_reports_zero_and_huge_latencies_are_capped() {
        let mut histogram = LatencyHistogram::default();
        assert_eq!((histogram.count(), histogram.percentile(50.0)), (0, 0));
        histogram.record(u64::MAX);
        assert_eq!(histogram.percentile(50.0), LATENCY_MAX_US);
        histogram.clear();
        assert_eq!(histogram, LatencyHistogram::default());
    }
}
