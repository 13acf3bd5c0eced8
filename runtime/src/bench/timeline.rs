//! The window's timeline (D5): one sample every `--timeline-secs`, so that
//! a long run shows how throughput, latency and memory move as the state
//! grows, where the window's totals would average a slowdown away.
//!
//! [`Schedule`] decides when a sample is due and which interval it covers;
//! it takes the elapsed time as an argument and keeps no clock, so its
//! arithmetic is tested without waiting. The bench reads the rest (writes
//! and latencies of the interval, state bytes, RSS) when a sample is due.

use std::time::Duration;

use super::latency::LatencyHistogram;

/// Bytes in the MB of every `MB/s` and `MB` the bench prints (10^6).
pub(crate) const BYTES_PER_MB: f64 = 1_000_000.0;

/// The most samples a run may take (`--seconds` / `--timeline-secs`).
pub(crate) const TIMELINE_SAMPLES_MAX: u64 = 100_000;

/// One interval of the window.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TimelineSample {
    /// Seconds from the window's start to the interval's end.
    pub elapsed_secs: f64,
    /// Writes acknowledged in the interval.
    pub writes: u64,
    /// Writes per second of the interval.
    pub writes_per_sec: f64,
    /// Bytes of those writes' operations per second, in MB (10^6 bytes).
    pub mb_per_sec: f64,
    /// Median latency of the interval's writes.
    pub latency_p50_us: u64,
    /// 99th percentile.
    pub latency_p99_us: u64,
    /// The largest state of any replica at the interval's end.
    pub state_bytes: u64,
    /// The process's resident memory at the interval's end.
    pub rss_bytes: u64,
}

impl TimelineSample {
    /// The sample of `interval`, in which `latencies` were acknowledged,
    /// each a request of `batch_ops` writes (K5).
    pub(crate) fn new(
        interval: Interval,
        latencies: &LatencyHistogram,
        (op_size_bytes, batch_ops): (usize, usize),
        state_bytes: u64,
        rss_bytes: u64,
    ) -> TimelineSample {
        let writes = latencies.count() * batch_ops as u64;
        let (writes_per_sec, mb_per_sec) = rates(writes, op_size_bytes, interval.length());
        TimelineSample {
            elapsed_secs: interval.end.as_secs_f64(),
            writes,
            writes_per_sec,
            mb_per_sec,
            latency_p50_us: latencies.percentile(50.0),
            latency_p99_us: latencies.percentile(99.0),
            state_bytes,
            rss_bytes,
        }
    }

    /// The line printed to stderr while the bench runs.
    pub(crate) fn line(&self) -> String {
        format!(
            "timeline {:.1} s: {:.0} writes/s, {:.2} MB/s, p50 {} us, p99 {} us, state {:.1} MB, RSS {:.1} MB",
            self.elapsed_secs,
            self.writes_per_sec,
            self.mb_per_sec,
            self.latency_p50_us,
            self.latency_p99_us,
            self.state_bytes as f64 / BYTES_PER_MB,
            self.rss_bytes as f64 / BYTES_PER_MB,
        )
    }
}

/// Writes per second and MB per second of `writes` of `op_size_bytes` each
/// over `length` (0 for an empty interval).
pub(crate) fn rates(writes: u64, op_size_bytes: usize, length: Duration) -> (f64, f64) {
    let secs = length.as_secs_f64();
    if secs <= 0.0 {
        return (0.0, 0.0);
    }
    let writes_per_sec = writes as f64 / secs;
    (writes_per_sec, writes_per_sec * op_size_bytes as f64 / BYTES_PER_MB)
}

/// A stretch of the window, both ends counted from its start.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Interval {
    pub start: Duration,
    pub end: Duration,
}

impl Interval {
    pub(crate) fn length(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }
}

/// When samples are due: at every multiple of `every` from the window's
/// start, and once more at its end for what the last multiple left over.
/// A sample covers the time since the previous one, however late it is
/// taken; a tick that comes after several multiples takes one sample and
/// the next is due at the next multiple, so the schedule never drifts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Schedule {
    every: Duration,
    next_due: Duration,
    last_at: Duration,
}

impl Schedule {
    /// Every `every_secs` seconds; `None` for 0 (no timeline).
    pub(crate) fn new(every_secs: u64) -> Option<Schedule> {
        let every = Duration::from_secs(every_secs);
        (!every.is_zero()).then_some(Schedule { every, next_due: every, last_at: Duration::ZERO })
    }

    /// At `elapsed` from the window's start (`window_over` once it has
    /// ended): the interval to sample now, if one is due.
    pub(crate) fn due(&mut self, elapsed: Duration, window_over: bool) -> Option<Interval> {
        let tail = window_over && elapsed > self.last_at;
        if elapsed < self.next_due && !tail {
            return None;
        }
        let interval = Interval { start: self.last_at, end: elapsed };
        self.last_at = elapsed;
        while self.next_due <= elapsed {
            self.next_due += self.every;
        }
        debug_assert!(self.next_due > self.last_at);
        Some(interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(value: f64) -> Duration {
        Duration::from_secs_f64(value)
    }

    fn interval(start: f64, end: f64) -> Option<Interval> {
        Some(Interval { start: secs(start), end: secs(end) })
    }

    #[test]
    fn d5_zero_seconds_turns_the_timeline_off() {
        assert_eq!(Schedule::new(0), None);
    }

    #[test]
    fn d5_samples_are_due_at_each_multiple_and_cover_the_time_since_the_last() {
        let mut schedule = Schedule::new(2).expect("on");
        assert_eq!(schedule.due(secs(1.8), false), None);
        assert_eq!(schedule.due(secs(2.1), false), interval(0.0, 2.1));
        assert_eq!(schedule.due(secs(3.9), false), None);
        // Due at 4 s, not at 2.1 + 2 s: a late sample does not shift the schedule.
        assert_eq!(schedule.due(secs(4.0), false), interval(2.1, 4.0));
    }

    #[test]
    fn d5_a_late_tick_takes_one_sample_and_the_next_is_due_at_the_next_multiple() {
        let mut schedule = Schedule::new(1).expect("on");
        assert_eq!(schedule.due(secs(3.5), false), interval(0.0, 3.5));
        assert_eq!(schedule.due(secs(3.9), false), None);
        assert_eq!(schedule.due(secs(4.0), false), interval(3.5, 4.0));
    }

    #[test]
    fn d5_the_windows_end_samples_the_rest_once() {
        // A 5 s window sampled every 2 s: 2, 4, then the last second.
        let mut schedule = Schedule::new(2).expect("on");
        assert_eq!(schedule.due(secs(2.0), false), interval(0.0, 2.0));
        assert_eq!(schedule.due(secs(4.0), false), interval(2.0, 4.0));
        assert_eq!(schedule.due(secs(5.0), true), interval(4.0, 5.0));
        assert_eq!(schedule.due(secs(5.0), true), None, "nothing left");
        // A window that ends on a multiple gets that one sample, no empty tail.
        let mut schedule = Schedule::new(1).expect("on");
        assert_eq!(schedule.due(secs(1.0), false), interval(0.0, 1.0));
        assert_eq!(schedule.due(secs(2.0), true), interval(1.0, 2.0));
        assert_eq!(schedule.due(secs(2.0), true), None);
    }

    #[test]
    fn d5_rates_divide_by_the_intervals_own_length() {
        let (writes_per_sec, mb_per_sec) = rates(6_000, 4096, secs(2.0));
        assert_eq!(writes_per_sec, 3_000.0);
        assert_eq!(mb_per_sec, 3_000.0 * 4096.0 / 1e6);
        assert_eq!(rates(10, 8, Duration::ZERO), (0.0, 0.0), "an empty interval");
    }

    #[test]
    fn d5_a_sample_holds_the_intervals_writes_percentiles_and_sizes() {
        let mut latencies = LatencyHistogram::default();
        (1..=100).for_each(|latency| latencies.record(latency));
        let sample = TimelineSample::new(Interval { start: secs(1.0), end: secs(3.0) }, &latencies, (1000, 1), 77, 99);
        assert_eq!(
            sample,
            TimelineSample {
                elapsed_secs: 3.0,
                writes: 100,
                writes_per_sec: 50.0,
                mb_per_sec: 0.05,
                latency_p50_us: 50,
                latency_p99_us: 99,
                state_bytes: 77,
                rss_bytes: 99,
            }
        );
        assert!(sample.line().starts_with("timeline 3.0 s: 50 writes/s, 0.05 MB/s, p50 50 us, p99 99 us"));
    }
}
