//! What `cohort bench --cluster` measured: the local bench's throughput
//! and latency keys, the client process's CPU per write, and, where
//! `--metrics` addresses were given, the nodes' own figures from their
//! `/metrics` deltas under the local bench's names. A table for people, one
//! JSON line for scripts; server keys are `null` when no node was scraped,
//! so every run has the same keys.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::scrape::ServerCounters;
use crate::bench::process::ProcessUsage;
use crate::bench::report::{load_average, percentile};

/// The nodes' figures over the window, every scraped node together.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ServerFigures {
    /// Nodes scraped before and after the window.
    pub nodes: usize,
    /// Write calls on peer sockets per write.
    pub socket_writes_per_write: f64,
    /// Syncs of every kind per write.
    pub fsyncs_per_write: f64,
    /// Log syncs per write-ahead log flush (K3: one).
    pub syncs_per_flush: f64,
    /// Frames and messages dropped.
    pub dropped_messages: u64,
    /// Ops applied to state machines per write (every member applies each:
    /// about the replication factor, if only the bench wrote).
    pub ops_applied_per_write: f64,
}

/// The figures of one run over the network.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NetworkReport {
    /// The client-port addresses driven.
    pub addresses: Vec<String>,
    /// Groups (0..groups).
    pub groups: usize,
    /// Writers.
    pub writers: usize,
    /// Bytes per write.
    pub op_size_bytes: usize,
    /// Writes acknowledged in the window.
    pub writes: u64,
    /// The window's length.
    pub window_secs: f64,
    /// Writes per second of the window.
    pub writes_per_sec: f64,
    /// Median submit-to-acknowledgement latency, retries included.
    pub latency_p50_us: u64,
    /// 99th percentile.
    pub latency_p99_us: u64,
    /// 99.9th percentile.
    pub latency_p999_us: u64,
    /// The client process's CPU time (user + system, every thread) per write.
    pub cpu_us_per_write: f64,
    /// The client process's context switches per write.
    pub context_switches_per_write: f64,
    /// Writes refused for good (a healthy run has none).
    pub refused_writes: u64,
    /// Attempts that failed and were retried (timeouts, busy, unreachable).
    pub retries: u64,
    /// The nodes' figures, if any node was scraped.
    pub server: Option<ServerFigures>,
    /// The 1-minute load average when the window ended.
    pub load_average: f64,
}

/// What a run measured, before it is summed up.
pub(super) struct Measured {
    pub addresses: Vec<String>,
    pub groups: usize,
    pub writers: usize,
    pub op_size_bytes: usize,
    pub window: Duration,
    pub latencies_us: Vec<u64>,
    pub usage: ProcessUsage,
    pub refused_writes: u64,
    pub retries: u64,
    /// Nodes scraped at both ends, and their summed deltas.
    pub server: Option<(usize, ServerCounters)>,
}

impl NetworkReport {
    pub(super) fn new(mut measured: Measured) -> NetworkReport {
        measured.latencies_us.sort_unstable();
        let latencies = &measured.latencies_us;
        let writes = latencies.len() as u64;
        let per_write = |count: f64| count / writes.max(1) as f64;
        let server = measured.server.map(|(nodes, counters)| ServerFigures {
            nodes,
            socket_writes_per_write: per_write(counters.socket_writes),
            fsyncs_per_write: per_write(counters.syncs),
            syncs_per_flush: counters.log_syncs / counters.flushes.max(1.0),
            dropped_messages: counters.dropped as u64,
            ops_applied_per_write: per_write(counters.ops_applied),
        });
        NetworkReport {
            addresses: measured.addresses,
            groups: measured.groups,
            writers: measured.writers,
            op_size_bytes: measured.op_size_bytes,
            writes,
            window_secs: measured.window.as_secs_f64(),
            writes_per_sec: writes as f64 / measured.window.as_secs_f64().max(0.001),
            latency_p50_us: percentile(latencies, 50.0),
            latency_p99_us: percentile(latencies, 99.0),
            latency_p999_us: percentile(latencies, 99.9),
            cpu_us_per_write: per_write(measured.usage.cpu_us as f64),
            context_switches_per_write: per_write(measured.usage.context_switches as f64),
            refused_writes: measured.refused_writes,
            retries: measured.retries,
            server,
            load_average: load_average(),
        }
    }

    /// One JSON object with every figure; the server's are `null` if no
    /// node was scraped.
    pub(crate) fn json(&self) -> String {
        let server = self.server.as_ref();
        json!({
            "addresses": self.addresses,
            "groups": self.groups,
            "writers": self.writers,
            "op_size_bytes": self.op_size_bytes,
            "writes": self.writes,
            "window_secs": self.window_secs,
            "writes_per_sec": self.writes_per_sec,
            "latency_p50_us": self.latency_p50_us,
            "latency_p99_us": self.latency_p99_us,
            "latency_p999_us": self.latency_p999_us,
            "cpu_us_per_write": self.cpu_us_per_write,
            "context_switches_per_write": self.context_switches_per_write,
            "refused_writes": self.refused_writes,
            "retries": self.retries,
            "metrics_nodes": server.map_or(0, |server| server.nodes),
            "socket_writes_per_write": server.map(|server| server.socket_writes_per_write),
            "fsyncs_per_write": server.map(|server| server.fsyncs_per_write),
            "syncs_per_flush": server.map(|server| server.syncs_per_flush),
            "dropped_messages": server.map(|server| server.dropped_messages),
            "ops_applied_per_write": server.map(|server| server.ops_applied_per_write),
            "load_average": self.load_average,
        })
        .to_string()
    }

    /// The table.
    pub(crate) fn table(&self) -> String {
        let mut rows: Vec<(&str, String)> = vec![
            (
                "cluster",
                format!(
                    "{} ({} groups, {} writers, {} B writes)",
                    self.addresses.join(","),
                    self.groups,
                    self.writers,
                    self.op_size_bytes
                ),
            ),
            ("writes", format!("{} in {:.1} s", self.writes, self.window_secs)),
            ("writes/s", format!("{:.0} (load average {:.2})", self.writes_per_sec, self.load_average)),
            (
                "latency p50 / p99 / p99.9",
                format!("{} / {} / {} us", self.latency_p50_us, self.latency_p99_us, self.latency_p999_us),
            ),
            ("client CPU per write", format!("{:.2} us", self.cpu_us_per_write)),
            ("client context switches per write", format!("{:.3}", self.context_switches_per_write)),
            ("refused writes", self.refused_writes.to_string()),
            ("retried attempts", self.retries.to_string()),
        ];
        match &self.server {
            Some(server) => rows.extend([
                ("nodes scraped", server.nodes.to_string()),
                ("socket writes per write", format!("{:.3}", server.socket_writes_per_write)),
                (
                    "syncs per write",
                    format!("{:.3} ({:.2} per flush)", server.fsyncs_per_write, server.syncs_per_flush),
                ),
                ("ops applied per write", format!("{:.2}", server.ops_applied_per_write)),
                ("dropped messages", server.dropped_messages.to_string()),
            ]),
            None => rows.push(("server figures", "none (give --metrics with each node's admin port)".into())),
        }
        let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (name, value) in rows {
            let _ = writeln!(out, "  {name:<width$}  {value}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(server: Option<(usize, ServerCounters)>) -> Measured {
        Measured {
            addresses: vec!["127.0.0.1:7201".into()],
            groups: 2,
            writers: 4,
            op_size_bytes: 8,
            window: Duration::from_secs(2),
            latencies_us: vec![300, 100, 200, 400],
            usage: ProcessUsage { cpu_us: 400, context_switches: 8 },
            refused_writes: 0,
            retries: 1,
            server,
        }
    }

    #[test]
    fn c2_the_network_report_has_the_local_keys_and_null_server_figures_without_metrics() {
        let report = NetworkReport::new(measured(None));
        assert_eq!((report.writes, report.latency_p50_us, report.latency_p99_us), (4, 200, 400));
        assert_eq!((report.writes_per_sec, report.cpu_us_per_write), (2.0, 100.0));
        let json: serde_json::Value = serde_json::from_str(&report.json()).expect("JSON");
        assert!(json["fsyncs_per_write"].is_null() && json["metrics_nodes"] == 0, "{json}");
        assert!(report.table().contains("--metrics"));
    }

    #[test]
    fn c2_server_figures_are_per_write() {
        let counters = ServerCounters {
            socket_writes: 8.0,
            syncs: 12.0,
            log_syncs: 6.0,
            flushes: 6.0,
            dropped: 0.0,
            ops_applied: 12.0,
        };
        let report = NetworkReport::new(measured(Some((3, counters))));
        let server = report.server.clone().expect("scraped");
        assert_eq!((server.nodes, server.fsyncs_per_write, server.syncs_per_flush), (3, 3.0, 1.0));
        let json: serde_json::Value = serde_json::from_str(&report.json()).expect("JSON");
        assert_eq!(json["ops_applied_per_write"], 3.0);
        assert!(report.table().contains("nodes scraped"));
    }
}
