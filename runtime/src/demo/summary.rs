//! The demo's summary: a table for people, one JSON line for scripts.

use std::fmt::Write as _;

/// What the demo measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DemoSummary {
    /// Nodes.
    pub nodes: usize,
    /// Partition groups.
    pub partitions: usize,
    /// Writes acknowledged to the workload.
    pub committed_ops: u64,
    /// Acknowledged writes per second of workload.
    pub ops_per_sec: f64,
    /// Median submit-to-acknowledgement latency.
    pub latency_p50_us: u64,
    /// 99th percentile latency.
    pub latency_p99_us: u64,
    /// Views in which a new primary started (after the initial ones).
    pub view_changes: u64,
    /// Longest time from the kill to the first commit in a group the killed node led.
    pub failover_ms_max: u64,
    /// Groups the killed node led.
    pub failover_groups: usize,
    /// Of those, the ones idle (R20) when it was killed.
    pub failover_groups_idle: usize,
    /// View-change messages the surviving nodes sent (Z4), and the frames
    /// that carried them.
    pub view_change_messages: u64,
    /// See `view_change_messages`.
    pub view_change_frames: u64,
    /// Of those, the ones whose failover probe committed before the end: a
    /// group missing here never failed over, and no failover figure counts it.
    pub failover_groups_done: usize,
    /// The longest failover of a group that was busy when its primary died.
    pub failover_ms_max_busy: u64,
    /// The longest failover of a group that was idle when its primary died.
    pub failover_ms_max_idle: u64,
    /// The longest time from the kill until a surviving member said it leads
    /// the group (the election alone, without the probe's write), busy and
    /// idle groups.
    pub elected_ms_max_busy: u64,
    /// See `elected_ms_max_busy`.
    pub elected_ms_max_idle: u64,
    /// A busy group's bound: commit_heartbeat_timeout + 2 × commit_broadcast_interval.
    pub failover_bound_ms_busy: u64,
    /// An idle group's bound: commit_idle_heartbeat_timeout + 2 × commit_broadcast_interval.
    pub failover_bound_ms_idle: u64,
    /// From the first node's start to the first committed write.
    pub start_to_first_write_ms: u64,
    /// From the killed node's restart on its recovered data directory to its
    /// links to every peer being up (Z2), at the demo's 200 ms resolution;
    /// 0 if it did not reconnect before the end.
    pub restart_to_connected_ms: u64,
    /// C5: from the killed node's restart to every node leading its share
    /// of the groups again (within 10 % of an even share), at the demo's
    /// 250 ms resolution; `None` if that did not come within the demo's
    /// bound (or there was no restart).
    pub restart_to_balanced_ms: Option<u64>,
    /// The process's resident memory once every node was up and connected.
    pub rss_after_start_bytes: u64,
    /// `rss_after_start_bytes` over the group replicas of all nodes (the
    /// metadata group's included): an upper bound of what one replica costs.
    pub memory_bytes_per_replica: u64,
    /// Commit batch frames sent (R19).
    pub commit_frames: u64,
    /// Commit entries sent (R19).
    pub commit_entries: u64,
    /// CommitReply batch frames sent (R32).
    pub reply_frames: u64,
    /// CommitReply entries sent (R32).
    pub reply_entries: u64,
    /// Acknowledged writes missing when read back at the end.
    pub lost_acked_writes: u64,
    /// Acknowledged writes read back.
    pub verified_writes: u64,
    /// Groups the demo could not read back before its deadline (a cluster
    /// that cannot serve them): their writes are neither found nor lost.
    pub unverified_groups: u64,
    /// Acknowledged writes of those groups.
    pub unverified_writes: u64,
    /// Groups each running node leads at the end, in node order (C5: after
    /// the restart the balancer hands the restarted node its share back).
    pub primaries_per_node: Vec<usize>,
}

impl DemoSummary {
    /// The table.
    pub(crate) fn table(&self) -> String {
        let rows: Vec<(&str, String)> = vec![
            ("cluster", format!("{} nodes, {} partitions", self.nodes, self.partitions)),
            ("committed ops", self.committed_ops.to_string()),
            ("ops/s", format!("{:.0}", self.ops_per_sec)),
            ("latency p50", format!("{:.2} ms", self.latency_p50_us as f64 / 1000.0)),
            ("latency p99", format!("{:.2} ms", self.latency_p99_us as f64 / 1000.0)),
            ("view changes", self.view_changes.to_string()),
            (
                "failover (max over groups)",
                format!(
                    "{} ms over {} groups ({} failed over)",
                    self.failover_ms_max, self.failover_groups, self.failover_groups_done
                ),
            ),
            (
                "failover of busy groups",
                format!(
                    "{} ms max over {} groups (bound {} ms)",
                    self.failover_ms_max_busy,
                    self.failover_groups - self.failover_groups_idle.min(self.failover_groups),
                    self.failover_bound_ms_busy
                ),
            ),
            (
                "failover of idle groups",
                format!(
                    "{} ms max over {} groups (bound {} ms)",
                    self.failover_ms_max_idle, self.failover_groups_idle, self.failover_bound_ms_idle
                ),
            ),
            ("start to first write", format!("{} ms", self.start_to_first_write_ms)),
            ("restart to connected", format!("{} ms", self.restart_to_connected_ms)),
            (
                "restart to balanced",
                self.restart_to_balanced_ms.map_or_else(|| "not within the bound".to_string(), |ms| format!("{ms} ms")),
            ),
            (
                "memory after start",
                format!(
                    "{:.1} MiB, {} bytes per replica",
                    self.rss_after_start_bytes as f64 / (1024.0 * 1024.0),
                    self.memory_bytes_per_replica
                ),
            ),
            ("Commit frames / entries sent", format!("{} / {}", self.commit_frames, self.commit_entries)),
            (
                "view-change frames / messages sent",
                format!("{} / {}", self.view_change_frames, self.view_change_messages),
            ),
            ("CommitReply frames / entries sent", format!("{} / {}", self.reply_frames, self.reply_entries)),
            ("lost acknowledged writes", self.lost_text()),
            ("primaries per node (end)", self.primaries_text()),
        ];
        let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (name, value) in rows {
            let _ = writeln!(out, "  {name:<width$}  {value}");
        }
        out
    }

    /// One JSON object with the keys the issue names.
    pub(crate) fn json(&self) -> String {
        format!(
            concat!(
                "{{\"committed_ops\":{},\"ops_per_sec\":{:.1},\"latency_p50_us\":{},\"latency_p99_us\":{},",
                "\"view_changes\":{},\"failover_ms_max\":{},\"commit_frames\":{},\"commit_entries\":{},",
                "\"reply_frames\":{},\"reply_entries\":{},\"lost_acked_writes\":{},\"primaries_per_node\":[{}],",
                "\"failover_ms_max_busy\":{},\"failover_ms_max_idle\":{},\"failover_bound_ms_busy\":{},",
                "\"failover_bound_ms_idle\":{},\"start_to_first_write_ms\":{},\"rss_after_start_bytes\":{},",
                "\"memory_bytes_per_replica\":{},\"failover_groups\":{},\"failover_groups_idle\":{},",
                "\"failover_groups_done\":{},\"view_change_messages\":{},\"view_change_frames\":{},",
                "\"restart_to_connected_ms\":{},\"elected_ms_max_busy\":{},\"elected_ms_max_idle\":{},",
                "\"unverified_groups\":{},\"unverified_writes\":{},\"restart_to_balanced_ms\":{}}}"
            ),
            self.committed_ops,
            self.ops_per_sec,
            self.latency_p50_us,
            self.latency_p99_us,
            self.view_changes,
            self.failover_ms_max,
            self.commit_frames,
            self.commit_entries,
            self.reply_frames,
            self.reply_entries,
            self.lost_acked_writes,
            self.primaries_per_node.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            self.failover_ms_max_busy,
            self.failover_ms_max_idle,
            self.failover_bound_ms_busy,
            self.failover_bound_ms_idle,
            self.start_to_first_write_ms,
            self.rss_after_start_bytes,
            self.memory_bytes_per_replica,
            self.failover_groups,
            self.failover_groups_idle,
            self.failover_groups_done,
            self.view_change_messages,
            self.view_change_frames,
            self.restart_to_connected_ms,
            self.elected_ms_max_busy,
            self.elected_ms_max_idle,
            self.unverified_groups,
            self.unverified_writes,
            self.restart_to_balanced_ms.map_or_else(|| "null".to_string(), |ms| ms.to_string())
        )
    }

    fn lost_text(&self) -> String {
        let mut text = format!("{} (of {} read back)", self.lost_acked_writes, self.verified_writes);
        if self.unverified_groups > 0 {
            let _ = write!(
                text,
                "; NOT READ BACK: {} writes in {} groups that did not answer in time",
                self.unverified_writes, self.unverified_groups
            );
        }
        text
    }

    fn primaries_text(&self) -> String {
        let counts: Vec<String> = self
            .primaries_per_node
            .iter()
            .enumerate()
            .map(|(index, count)| format!("node {}: {count}", index + 1))
            .collect();
        counts.join(", ")
    }
}

/// The value at `percentile` (0–100) of sorted samples.
pub(crate) fn percentile(sorted: &[u64], percentile: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((percentile / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_every_key() {
        let json = DemoSummary::default().json();
        for key in [
            "committed_ops",
            "ops_per_sec",
            "latency_p50_us",
            "latency_p99_us",
            "view_changes",
            "failover_ms_max",
            "commit_frames",
            "commit_entries",
            "reply_frames",
            "reply_entries",
            "lost_acked_writes",
            "primaries_per_node",
            "failover_ms_max_busy",
            "failover_ms_max_idle",
            "failover_bound_ms_busy",
            "failover_bound_ms_idle",
            "start_to_first_write_ms",
            "rss_after_start_bytes",
            "memory_bytes_per_replica",
            "failover_groups",
            "failover_groups_idle",
            "failover_groups_done",
            "view_change_messages",
            "view_change_frames",
            "restart_to_connected_ms",
            "elected_ms_max_busy",
            "elected_ms_max_idle",
            "unverified_groups",
            "unverified_writes",
            "restart_to_balanced_ms",
        ] {
            assert!(json.contains(&format!("\"{key}\":")), "{key} in {json}");
        }
    }

    #[test]
    fn percentiles() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&samples, 50.0), 51);
        assert_eq!(percentile(&samples, 99.0), 99);
        assert_eq!(percentile(&[], 99.0), 0);
    }
}
