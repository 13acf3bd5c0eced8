//! The nodes' own counters, read from their `/metrics` before and after
//! the window of `cohort bench --cluster`, so a run against a real cluster
//! reports what the servers spent per write beside what the client saw.
//!
//! Why `/metrics` and not a new endpoint: it is the interface operators
//! already scrape, and it needs no admin token. Only counters are read, and
//! only their deltas are used, so a node that ran before the bench (or
//! serves other clients meanwhile) is measured over the window alone, less
//! whatever the other clients did.

use std::time::Duration;

use crate::cli::http::{Call, exchange};

/// How long one scrape may take.
pub(crate) const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);

/// One node's counters at one moment (or a difference of two).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct ServerCounters {
    /// `cohort_socket_writes_total{port="peer"}`.
    pub socket_writes: f64,
    /// `cohort_syncs_total`, every kind.
    pub syncs: f64,
    /// `cohort_syncs_total{kind="log"}`.
    pub log_syncs: f64,
    /// `cohort_wal_flushes_total`.
    pub flushes: f64,
    /// `cohort_frames_dropped_total`, every mailbox and reason.
    pub dropped: f64,
    /// `cohort_ops_applied_total`, every kind but the metadata group's.
    pub ops_applied: f64,
}

impl ServerCounters {
    /// The counters in a `/metrics` answer (Prometheus text).
    pub(crate) fn parse(text: &str) -> ServerCounters {
        let samples: Vec<Sample<'_>> = text.lines().filter_map(Sample::parse).collect();
        let sum = |name: &str, keep: &dyn Fn(&Sample<'_>) -> bool| -> f64 {
            samples.iter().filter(|sample| sample.name == name && keep(sample)).map(|sample| sample.value).sum()
        };
        let metadata = format!("kind=\"{}\"", cohort_core::metadata::METADATA_KIND);
        ServerCounters {
            socket_writes: sum("cohort_socket_writes_total", &|sample| sample.has("port=\"peer\"")),
            syncs: sum("cohort_syncs_total", &|_| true),
            log_syncs: sum("cohort_syncs_total", &|sample| sample.has("kind=\"log\"")),
            flushes: sum("cohort_wal_flushes_total", &|_| true),
            dropped: sum("cohort_frames_dropped_total", &|_| true),
            ops_applied: sum("cohort_ops_applied_total", &|sample| !sample.has(&metadata)),
        }
    }

    /// What grew since `earlier` (a restarted node's counters start over:
    /// its difference is then not negative but from zero).
    pub(crate) fn since(self, earlier: ServerCounters) -> ServerCounters {
        let grown = |now: f64, then: f64| if now >= then { now - then } else { now };
        ServerCounters {
            socket_writes: grown(self.socket_writes, earlier.socket_writes),
            syncs: grown(self.syncs, earlier.syncs),
            log_syncs: grown(self.log_syncs, earlier.log_syncs),
            flushes: grown(self.flushes, earlier.flushes),
            dropped: grown(self.dropped, earlier.dropped),
            ops_applied: grown(self.ops_applied, earlier.ops_applied),
        }
    }

    /// The sum of two nodes' counters.
    pub(crate) fn plus(self, other: ServerCounters) -> ServerCounters {
        ServerCounters {
            socket_writes: self.socket_writes + other.socket_writes,
            syncs: self.syncs + other.syncs,
            log_syncs: self.log_syncs + other.log_syncs,
            flushes: self.flushes + other.flushes,
            dropped: self.dropped + other.dropped,
            ops_applied: self.ops_applied + other.ops_applied,
        }
    }
}

/// One line of Prometheus text: `name{labels} value`.
struct Sample<'a> {
    name: &'a str,
    labels: &'a str,
    value: f64,
}

impl<'a> Sample<'a> {
    fn parse(line: &'a str) -> Option<Sample<'a>> {
        if line.starts_with('#') {
            return None;
        }
        let (series, value) = line.rsplit_once(' ')?;
        let value = value.trim().parse().ok()?;
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.strip_suffix('}')?),
            None => (series, ""),
        };
        Some(Sample { name, labels, value })
    }

    /// Whether one of its labels is exactly `label` (`key="value"`).
    fn has(&self, label: &str) -> bool {
        self.labels.split(',').any(|pair| pair == label)
    }
}

/// Scrape `address` (`HOST:PORT` of an admin port or `[admin]
/// metrics_listen`, or a port alone for loopback). Blocking: run it off
/// the async threads.
pub(crate) fn scrape(address: &str) -> Result<ServerCounters, String> {
    let answer = exchange(address, Call::Get, "/metrics", None, SCRAPE_TIMEOUT).map_err(|error| error.to_string())?;
    if answer.code != 200 {
        return Err(format!("{address} answered {:?} to GET /metrics", answer.line));
    }
    Ok(ServerCounters::parse(&answer.body))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP cohort_syncs_total K3\n\
        # TYPE cohort_syncs_total counter\n\
        cohort_syncs_total{kind=\"log\"} 10\n\
        cohort_syncs_total{kind=\"superblock\"} 2\n\
        cohort_wal_flushes_total 10\n\
        cohort_socket_writes_total{port=\"peer\"} 40\n\
        cohort_socket_writes_total{port=\"client\"} 0\n\
        cohort_frames_dropped_total{mailbox=\"shard\",reason=\"mailbox_full\"} 1\n\
        cohort_frames_dropped_total{mailbox=\"outbox\",reason=\"mailbox_full\"} 2\n\
        cohort_ops_applied_total{kind=\"default\"} 30\n\
        cohort_ops_applied_total{kind=\"cohort.metadata\"} 5\n\
        cohort_syncs_total_not{kind=\"log\"} 99\n";

    #[test]
    fn c2_counters_are_read_from_prometheus_text_by_name_and_label() {
        let counters = ServerCounters::parse(TEXT);
        assert_eq!(
            counters,
            ServerCounters {
                socket_writes: 40.0,
                syncs: 12.0,
                log_syncs: 10.0,
                flushes: 10.0,
                dropped: 3.0,
                ops_applied: 30.0
            }
        );
        assert_eq!(ServerCounters::parse("garbage\n{\n"), ServerCounters::default());
    }

    #[test]
    fn c2_deltas_grow_and_a_restarted_node_counts_from_zero() {
        let before = ServerCounters { syncs: 10.0, flushes: 4.0, ..ServerCounters::default() };
        let after = ServerCounters { syncs: 15.0, flushes: 1.0, ..ServerCounters::default() };
        let grown = after.since(before);
        assert_eq!((grown.syncs, grown.flushes), (5.0, 1.0));
        assert_eq!(grown.plus(grown).syncs, 10.0);
    }

    #[test]
    fn c2_an_unreachable_metrics_address_is_named() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let error = scrape(&port.to_string()).expect_err("nothing listens");
        assert!(error.contains(&port.to_string()), "{error}");
    }
}
