//! What `cohort bench` measured: a table for people, one JSON line for scripts.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::consumers::Consumption;
use super::floor::Floor;
use super::latency::LatencyHistogram;
use super::timeline::{BYTES_PER_MB, TimelineSample, rates};
use super::{BenchOptions, Counters, StateShape};

/// The bench's figures over its measured window.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BenchReport {
    /// Nodes.
    pub nodes: usize,
    /// Groups.
    pub groups: usize,
    /// Writers.
    pub writers: usize,
    /// Shards per node.
    pub shards: usize,
    /// Bytes per write.
    pub op_size_bytes: usize,
    /// K5: writes per request (1: no batches).
    pub batch_ops: usize,
    /// Requests acknowledged in the window (`writes` / `batch_ops`).
    pub requests: u64,
    /// What the groups' state machines keep.
    pub state: StateShape,
    /// D2: a `disk-log` applied on the shard's thread (`--apply-inline`).
    pub apply_inline: bool,
    /// Seconds between timeline samples (0: no timeline).
    pub timeline_secs: u64,
    /// Writes acknowledged in the window.
    pub writes: u64,
    /// The window's length.
    pub window_secs: f64,
    /// Writes per second of the window.
    pub writes_per_sec: f64,
    /// Bytes of the writes' operations per second of the window, in MB (10^6).
    pub mb_per_sec: f64,
    /// Median submit-to-acknowledgement latency.
    pub latency_p50_us: u64,
    /// 99th percentile.
    pub latency_p99_us: u64,
    /// 99.9th percentile.
    pub latency_p999_us: u64,
    /// Process CPU time (user + system, every thread) per write.
    pub cpu_us_per_write: f64,
    /// Write calls on peer sockets per write, every node together.
    pub socket_writes_per_write: f64,
    /// Syncs of every kind (log, superblock, snapshot, directory,
    /// placements) per write, every node together.
    pub fsyncs_per_write: f64,
    /// Syncs of the records of a write-ahead log flush, per flush (K3: one).
    pub syncs_per_flush: f64,
    /// Context switches (voluntary and involuntary) per write.
    pub context_switches_per_write: f64,
    /// Frames and messages dropped in the window, every node together.
    pub dropped_messages: u64,
    /// Drops since start by `mailbox/reason`, for those that dropped.
    pub dropped_by_reason: Vec<(String, u64)>,
    /// Writes refused for good (a healthy run has none).
    pub refused_writes: u64,
    /// Median fdatasync of a 4 KiB append in the data directory.
    pub fdatasync_us: u64,
    /// Median loopback TCP round trip.
    pub round_trip_us: u64,
    /// The physical floor: the two above added.
    pub floor_us: u64,
    /// The disk's bandwidth with an fdatasync after each write of the op
    /// size, in MB/s.
    pub disk_synced_mb_per_sec: f64,
    /// The bytes floor: `disk_synced_mb_per_sec` over the nodes sharing the disk.
    pub bytes_floor_mb_per_sec: f64,
    /// `mb_per_sec` as a fraction of `bytes_floor_mb_per_sec` (0 without a floor).
    pub mb_per_sec_of_floor: f64,
    /// The 1-minute load average when the window ended (the machine is shared).
    pub load_average: f64,
    /// The process's resident memory once every group had a primary.
    pub rss_after_start_bytes: u64,
    /// `rss_after_start_bytes` over the group replicas of all nodes (the
    /// metadata group's included): an upper bound of one replica's cost.
    pub memory_bytes_per_replica: u64,
    /// The largest state of any replica when the window ended.
    pub state_bytes: u64,
    /// The process's resident memory when the window ended.
    pub rss_bytes: u64,
    /// State chunk bytes the replicas took inside the window (D3): a
    /// healthy run with every node up takes none; a backup that fell
    /// behind its primary's log did.
    pub state_chunk_bytes_taken: u64,
    /// A sample every `timeline_secs` of the window.
    pub timeline: Vec<TimelineSample>,
    /// `--catch-up`: the new replica's transfer (D3).
    pub catch_up: Option<super::catch_up::CatchUpReport>,
    /// `--restart`: the last node stopped and started again (D1).
    pub restart: Option<super::restart::RestartReport>,
    /// K7: consumers of the message log (0: none, and the figures below are 0).
    pub consumers: usize,
    /// K7: bytes of the messages the consumers read in the window per
    /// second, in MB (10^6); each consumer's reads count.
    pub consumed_mb_per_sec: f64,
    /// K7: `consumed_mb_per_sec` over `mb_per_sec` times the consumers per
    /// partition: 1.0 when every consumer read as much as was produced.
    pub consumed_of_produced: f64,
    /// K7: at the window's end, the messages acknowledged to producers that
    /// a partition's furthest-behind consumer had not read, the largest over
    /// the partitions.
    pub consumer_lag_messages: u64,
    /// K7: messages retention dropped before a consumer read them.
    pub consumer_skipped_messages: u64,
    /// K7: reads that failed (a healthy run has none).
    pub failed_reads: u64,
    /// K7: a message's end-to-end latency, from when its producer made it
    /// to when a consumer read it: median.
    pub end_to_end_p50_us: u64,
    /// 99th percentile.
    pub end_to_end_p99_us: u64,
    /// 99.9th percentile.
    pub end_to_end_p999_us: u64,
}

impl BenchReport {
    /// The report of a window.
    pub(super) fn new(
        options: &BenchOptions,
        floor: Floor,
        window: Duration,
        latencies: &LatencyHistogram,
        (before, after): (Counters, Counters),
        refused_writes: u64,
        dropped_by_reason: Vec<(String, u64)>,
    ) -> BenchReport {
        // K5: each op of a batch is a write; a request's latency is its ops'.
        let requests = latencies.count();
        let writes = requests * options.batch_ops as u64;
        let (writes_per_sec, mb_per_sec) = rates(writes, options.op_size_bytes, window);
        let per_write = |count: u64| count as f64 / writes.max(1) as f64;
        let usage = after.usage.since(before.usage);
        let syncs = after.syncs.saturating_sub(before.syncs);
        let log_syncs = after.log_syncs.saturating_sub(before.log_syncs);
        let flushes = after.flushes.saturating_sub(before.flushes);
        BenchReport {
            nodes: options.nodes,
            groups: options.groups,
            writers: options.writers,
            shards: options.shards,
            op_size_bytes: options.op_size_bytes,
            batch_ops: options.batch_ops,
            requests,
            state: options.state,
            apply_inline: options.apply_inline,
            timeline_secs: options.timeline_secs,
            writes,
            window_secs: window.as_secs_f64(),
            writes_per_sec,
            mb_per_sec,
            latency_p50_us: latencies.percentile(50.0),
            latency_p99_us: latencies.percentile(99.0),
            latency_p999_us: latencies.percentile(99.9),
            cpu_us_per_write: per_write(usage.cpu_us),
            socket_writes_per_write: per_write(after.socket_writes.saturating_sub(before.socket_writes)),
            fsyncs_per_write: per_write(syncs),
            syncs_per_flush: log_syncs as f64 / flushes.max(1) as f64,
            context_switches_per_write: per_write(usage.context_switches),
            dropped_messages: after.dropped.saturating_sub(before.dropped),
            dropped_by_reason,
            refused_writes,
            fdatasync_us: floor.fdatasync_us,
            round_trip_us: floor.round_trip_us,
            floor_us: floor.total_us(),
            disk_synced_mb_per_sec: floor.disk_synced_bytes_per_sec as f64 / BYTES_PER_MB,
            bytes_floor_mb_per_sec: floor.bytes_per_sec() / BYTES_PER_MB,
            mb_per_sec_of_floor: floor.share_of_bytes(mb_per_sec * BYTES_PER_MB),
            load_average: load_average(),
            rss_after_start_bytes: 0,
            memory_bytes_per_replica: 0,
            state_bytes: 0,
            rss_bytes: 0,
            state_chunk_bytes_taken: 0,
            timeline: Vec::new(),
            catch_up: None,
            restart: None,
            consumers: 0,
            consumed_mb_per_sec: 0.0,
            consumed_of_produced: 0.0,
            consumer_lag_messages: 0,
            consumer_skipped_messages: 0,
            failed_reads: 0,
            end_to_end_p50_us: 0,
            end_to_end_p99_us: 0,
            end_to_end_p999_us: 0,
        }
    }

    /// K7: what the message log's consumers read in the window, and their
    /// lag at its end.
    pub(super) fn add_consumption(&mut self, options: &BenchOptions, consumption: &Consumption, lag_messages: u64) {
        self.consumers = options.consumers;
        if options.consumers == 0 {
            return;
        }
        let window = std::time::Duration::from_secs_f64(self.window_secs);
        let (_, consumed_mb_per_sec) = rates(consumption.bytes, 1, window);
        self.consumed_mb_per_sec = consumed_mb_per_sec;
        let consumers_per_partition = options.consumers as f64 / options.groups.max(1) as f64;
        let produced_for_consumers = self.mb_per_sec * consumers_per_partition.max(1.0);
        self.consumed_of_produced =
            if produced_for_consumers > 0.0 { consumed_mb_per_sec / produced_for_consumers } else { 0.0 };
        self.consumer_lag_messages = lag_messages;
        self.consumer_skipped_messages = consumption.skipped_messages;
        self.failed_reads = consumption.failed_reads;
        self.end_to_end_p50_us = consumption.end_to_end.percentile(50.0);
        self.end_to_end_p99_us = consumption.end_to_end.percentile(99.0);
        self.end_to_end_p999_us = consumption.end_to_end.percentile(99.9);
    }

    /// One JSON object with every figure.
    pub(crate) fn json(&self) -> String {
        let dropped: serde_json::Map<String, serde_json::Value> =
            self.dropped_by_reason.iter().map(|(reason, count)| (reason.clone(), json!(count))).collect();
        let mut report = json!({
            "nodes": self.nodes,
            "groups": self.groups,
            "writers": self.writers,
            "shards": self.shards,
            "op_size_bytes": self.op_size_bytes,
            "batch_ops": self.batch_ops,
            "requests": self.requests,
            "state": self.state.as_str(),
            "apply_inline": self.apply_inline,
            "timeline_secs": self.timeline_secs,
            "writes": self.writes,
            "window_secs": self.window_secs,
            "writes_per_sec": self.writes_per_sec,
            "mb_per_sec": self.mb_per_sec,
            "latency_p50_us": self.latency_p50_us,
            "latency_p99_us": self.latency_p99_us,
            "latency_p999_us": self.latency_p999_us,
            "cpu_us_per_write": self.cpu_us_per_write,
            "socket_writes_per_write": self.socket_writes_per_write,
            "fsyncs_per_write": self.fsyncs_per_write,
            "fsyncs_per_write_per_node": self.fsyncs_per_write / self.nodes.max(1) as f64,
            "syncs_per_flush": self.syncs_per_flush,
            "context_switches_per_write": self.context_switches_per_write,
            "dropped_messages": self.dropped_messages,
            "dropped_by_reason": dropped,
            "refused_writes": self.refused_writes,
            "fdatasync_us": self.fdatasync_us,
            "round_trip_us": self.round_trip_us,
            "floor_us": self.floor_us,
            "disk_synced_mb_per_sec": self.disk_synced_mb_per_sec,
            "bytes_floor_mb_per_sec": self.bytes_floor_mb_per_sec,
            "mb_per_sec_of_floor": self.mb_per_sec_of_floor,
            "load_average": self.load_average,
            "rss_after_start_bytes": self.rss_after_start_bytes,
            "memory_bytes_per_replica": self.memory_bytes_per_replica,
            "state_bytes": self.state_bytes,
            "rss_bytes": self.rss_bytes,
            "state_chunk_bytes_taken": self.state_chunk_bytes_taken,
            "timeline": self.timeline.iter().map(sample_json).collect::<Vec<_>>(),
            "catch_up": self.catch_up.as_ref().map(super::catch_up::CatchUpReport::json),
            "restart": self.restart.as_ref().map(super::restart::RestartReport::json),
        });
        // The message log's figures (K7), beside the others.
        report["consumption"] = self.consumption_json();
        report.to_string()
    }

    /// The table.
    pub(crate) fn table(&self) -> String {
        let rows: Vec<(&str, String)> = vec![
            (
                "cluster",
                format!(
                    "{} nodes x {} shards, {} groups, {} writers, {} B writes, {} state",
                    self.nodes,
                    self.shards,
                    self.groups,
                    self.writers,
                    self.op_size_bytes,
                    self.state.as_str()
                ),
            ),
            ("writes", format!("{} in {:.1} s", self.writes, self.window_secs)),
            ("requests", format!("{} ({} writes each: --batch-ops)", self.requests, self.batch_ops)),
            ("writes/s", format!("{:.0} (load average {:.2})", self.writes_per_sec, self.load_average)),
            (
                "MB/s",
                format!(
                    "{:.2} ({:.2} of the bytes floor {:.2} MB/s: disk {:.2} MB/s synced per {} B request / {} nodes)",
                    self.mb_per_sec,
                    self.mb_per_sec_of_floor,
                    self.bytes_floor_mb_per_sec,
                    self.disk_synced_mb_per_sec,
                    self.op_size_bytes * self.batch_ops,
                    self.nodes
                ),
            ),
            (
                "latency p50 / p99 / p99.9",
                format!("{} / {} / {} us", self.latency_p50_us, self.latency_p99_us, self.latency_p999_us),
            ),
            ("CPU per write", format!("{:.2} us", self.cpu_us_per_write)),
            ("socket writes per write", format!("{:.3}", self.socket_writes_per_write)),
            (
                "syncs per write",
                format!(
                    "{:.3} ({:.3} per node; {:.2} per flush)",
                    self.fsyncs_per_write,
                    self.fsyncs_per_write / self.nodes.max(1) as f64,
                    self.syncs_per_flush
                ),
            ),
            ("context switches per write", format!("{:.3}", self.context_switches_per_write)),
            ("dropped messages", self.dropped_messages.to_string()),
            (
                "state transfers",
                format!(
                    "{:.1} MB of state chunks taken in the window (none with every node up and keeping up)",
                    self.state_chunk_bytes_taken as f64 / BYTES_PER_MB
                ),
            ),
            ("refused writes", self.refused_writes.to_string()),
            (
                "memory after start",
                format!(
                    "{:.1} MiB, {} bytes per replica",
                    self.rss_after_start_bytes as f64 / (1024.0 * 1024.0),
                    self.memory_bytes_per_replica
                ),
            ),
            (
                "at the end",
                format!(
                    "state {} bytes ({:.1} MB, the largest replica's), RSS {:.1} MB",
                    self.state_bytes,
                    self.state_bytes as f64 / BYTES_PER_MB,
                    self.rss_bytes as f64 / BYTES_PER_MB
                ),
            ),
            (
                "floor",
                format!(
                    "{} us (fdatasync {} us + loopback round trip {} us)",
                    self.floor_us, self.fdatasync_us, self.round_trip_us
                ),
            ),
        ];
        let mut rows = rows;
        if self.consumers > 0 {
            rows.push(("consumers (K7)", self.consumption_lines()));
        }
        if let Some(restart) = &self.restart {
            rows.push(("restart (D1)", restart.lines()));
        }
        if let Some(catch_up) = &self.catch_up {
            rows.push(("catch-up (D3)", catch_up.lines()));
        }
        let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (name, value) in rows {
            let _ = writeln!(out, "  {name:<width$}  {value}");
        }
        if !self.timeline.is_empty() {
            out.push_str(&timeline_table(&self.timeline, self.timeline_secs));
        }
        out
    }
}

impl BenchReport {
    /// K7: the consumers' figures as a JSON object, `null` without consumers.
    fn consumption_json(&self) -> serde_json::Value {
        if self.consumers == 0 {
            return serde_json::Value::Null;
        }
        json!({
            "consumers": self.consumers,
            "consumed_mb_per_sec": self.consumed_mb_per_sec,
            "consumed_of_produced": self.consumed_of_produced,
            "consumer_lag_messages": self.consumer_lag_messages,
            "consumer_skipped_messages": self.consumer_skipped_messages,
            "failed_reads": self.failed_reads,
            "end_to_end_p50_us": self.end_to_end_p50_us,
            "end_to_end_p99_us": self.end_to_end_p99_us,
            "end_to_end_p999_us": self.end_to_end_p999_us,
        })
    }

    /// The consumers' row of the table.
    fn consumption_lines(&self) -> String {
        format!(
            "{} consumers read {:.2} MB/s ({:.2} of what was produced for them); end to end p50 / p99 / p99.9 {} / {} / {} us; \
             lag at the end {} messages; {} skipped by retention, {} failed reads",
            self.consumers,
            self.consumed_mb_per_sec,
            self.consumed_of_produced,
            self.end_to_end_p50_us,
            self.end_to_end_p99_us,
            self.end_to_end_p999_us,
            self.consumer_lag_messages,
            self.consumer_skipped_messages,
            self.failed_reads
        )
    }
}

/// One timeline sample as a JSON object.
fn sample_json(sample: &TimelineSample) -> serde_json::Value {
    json!({
        "elapsed_secs": sample.elapsed_secs,
        "writes": sample.writes,
        "writes_per_sec": sample.writes_per_sec,
        "mb_per_sec": sample.mb_per_sec,
        "latency_p50_us": sample.latency_p50_us,
        "latency_p99_us": sample.latency_p99_us,
        "state_bytes": sample.state_bytes,
        "rss_bytes": sample.rss_bytes,
    })
}

/// The timeline as a table, one row per sample.
fn timeline_table(samples: &[TimelineSample], every_secs: u64) -> String {
    let mut out = format!("  timeline, every {every_secs} s of the window:\n");
    let _ = writeln!(
        out,
        "  {:>9}  {:>9}  {:>8}  {:>9}  {:>9}  {:>10}  {:>9}",
        "elapsed s", "writes/s", "MB/s", "p50 us", "p99 us", "state MB", "RSS MB"
    );
    for sample in samples {
        let _ = writeln!(
            out,
            "  {:>9.1}  {:>9.0}  {:>8.2}  {:>9}  {:>9}  {:>10.1}  {:>9.1}",
            sample.elapsed_secs,
            sample.writes_per_sec,
            sample.mb_per_sec,
            sample.latency_p50_us,
            sample.latency_p99_us,
            sample.state_bytes as f64 / BYTES_PER_MB,
            sample.rss_bytes as f64 / BYTES_PER_MB,
        );
    }
    out
}

/// The value at percentile `p` of sorted samples (0 if there are none).
pub(super) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The 1-minute load average, 0 if `/proc/loadavg` cannot be read.
pub(super) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(elapsed_secs: f64, state_bytes: u64) -> TimelineSample {
        TimelineSample {
            elapsed_secs,
            writes: 10,
            writes_per_sec: 5.0,
            mb_per_sec: 0.02,
            latency_p50_us: 700,
            latency_p99_us: 900,
            state_bytes,
            rss_bytes: 1 << 20,
        }
    }

    #[test]
    fn d5_the_report_carries_the_timeline_and_the_bytes_floor_in_json_and_table() {
        let report = BenchReport {
            state: StateShape::Log,
            timeline_secs: 2,
            mb_per_sec: 3.0,
            bytes_floor_mb_per_sec: 6.0,
            mb_per_sec_of_floor: 0.5,
            state_bytes: 4_000_000,
            timeline: vec![sample(2.0, 2_000_000), sample(4.0, 4_000_000)],
            ..BenchReport::default()
        };
        let json: serde_json::Value = serde_json::from_str(&report.json()).expect("JSON");
        assert_eq!((json["state"].as_str(), json["mb_per_sec_of_floor"].as_f64()), (Some("log"), Some(0.5)));
        let timeline = json["timeline"].as_array().expect("an array");
        assert_eq!(timeline.len(), 2);
        assert_eq!(timeline[1]["state_bytes"], 4_000_000);
        assert_eq!(timeline[0]["latency_p99_us"], 900);
        assert_eq!(json["state_chunk_bytes_taken"], 0, "no state transfer in a healthy window");
        let table = report.table();
        assert!(table.contains("timeline, every 2 s of the window"), "{table}");
        assert!(table.contains("state 4000000 bytes (4.0 MB"), "{table}");
        assert_eq!(table.lines().filter(|line| line.trim_start().starts_with("4.0 ")).count(), 1, "{table}");
    }

    #[test]
    fn d5_without_a_timeline_the_table_has_none_and_the_json_an_empty_array() {
        let report = BenchReport::default();
        assert!(!report.table().contains("timeline"));
        let json: serde_json::Value = serde_json::from_str(&report.json()).expect("JSON");
        assert_eq!(json["timeline"].as_array().map(Vec::len), Some(0));
        assert_eq!(json["state"], "register");
    }
}
