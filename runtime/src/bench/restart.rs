//! `cohort bench --restart`: a node of a grown state stops and starts
//! again with its disk, while the writes go on (D1).
//!
//! A restart must not cost time in proportion to the state: the storage
//! replays its log (at most one checkpoint interval per group), and a
//! persistent state machine opens its files without reading them. The
//! phase reports two times from the stop: until the node's start returned
//! (its shards opened their storage and hosted their groups), and until
//! its replicas applied something past the state they stopped with and
//! hold as much as those of the node that holds least among the others (it
//! replayed its log and caught up on the writes it missed, so it takes
//! part in its groups again). It also reports what the node took by state
//! transfer meanwhile: a node that fell further behind than the primary's
//! log reaches gets the state streamed (D3), the whole of it unless the
//! transfer resumes one staged before. A gap within what the primary's
//! backlog keeps (`backlog_size_max_bytes`) is repaired from there instead,
//! and the phase reports those bytes too.

use std::time::{Duration, Instant};

use super::Bench;

/// How long the node may take to catch up before the bench gives up.
const RESTART_TIMEOUT: Duration = Duration::from_secs(180);

/// How often the phase looks at the node's state.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// What the phase measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RestartReport {
    /// The restarted node's state (all its replicas) when it stopped.
    pub state_bytes: u64,
    /// Seconds from the stop until the node's start returned.
    pub open_seconds: f64,
    /// Seconds from the stop until the node held as much state as the
    /// others (the least of them); `None` if it did not within the
    /// phase's time limit.
    pub caught_up_seconds: Option<f64>,
    /// Streams the node installed, and the chunk bytes it took, meanwhile.
    pub streams_installed: u64,
    pub chunk_bytes_taken: u64,
    /// Bytes of operations the other nodes served the node from their
    /// backlogs meanwhile (D1).
    pub backlog_bytes_served: u64,
    /// Resident memory of the process once it caught up.
    pub rss_bytes: u64,
}

impl RestartReport {
    /// The report as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "state_bytes": self.state_bytes,
            "open_seconds": self.open_seconds,
            "caught_up_seconds": self.caught_up_seconds,
            "streams_installed": self.streams_installed,
            "chunk_bytes_taken": self.chunk_bytes_taken,
            "backlog_bytes_served": self.backlog_bytes_served,
            "rss_bytes": self.rss_bytes,
        })
    }

    /// The report's line.
    pub(crate) fn lines(&self) -> String {
        let caught_up = match self.caught_up_seconds {
            Some(seconds) => format!("caught up in {seconds:.2} s"),
            None => format!("NOT caught up within {} s", RESTART_TIMEOUT.as_secs()),
        };
        format!(
            "node of {:.1} MB of state stopped and started: open in {:.2} s, {caught_up}; {} streams installed, \
             {:.1} MB taken by state transfer, {:.1} MB served from backlogs; RSS {:.0} MB",
            self.state_bytes as f64 / 1e6,
            self.open_seconds,
            self.streams_installed,
            self.chunk_bytes_taken as f64 / 1e6,
            self.backlog_bytes_served as f64 / 1e6,
            self.rss_bytes as f64 / 1e6,
        )
    }
}

impl Bench {
    /// The phase (see the module docs); `restart(false)` stops the last
    /// node and starts it again, its disk kept.
    pub(super) async fn restart(
        &self,
        restart: &mut impl FnMut(bool) -> Result<(), String>,
    ) -> Result<RestartReport, String> {
        let last = self.options.nodes - 1;
        let state_bytes = self.sizes.node_bytes(last);
        eprintln!(
            "restart: node {} stopped and started again with {:.1} MB of state",
            last + 1,
            state_bytes as f64 / 1e6
        );
        let served = || (0..last).map(|node| self.node_counter(node, "backlog_bytes_served")).sum::<u64>();
        let served_before = served();
        let stopped = Instant::now();
        restart(false)?;
        let open_seconds = stopped.elapsed().as_secs_f64();
        let mut reported = Instant::now();
        let report = |caught_up_seconds| RestartReport {
            state_bytes,
            open_seconds,
            caught_up_seconds,
            streams_installed: self.node_counter(last, "state_streams_installed"),
            chunk_bytes_taken: self.node_counter(last, "state_chunk_bytes_taken"),
            backlog_bytes_served: served().saturating_sub(served_before),
            rss_bytes: super::process::resident_bytes(),
        };
        loop {
            let mine = self.sizes.node_bytes(last);
            let others = (0..last).map(|node| self.sizes.node_bytes(node)).min().unwrap_or(0);
            // Past what it stopped with (it applies again), and level with
            // the others (the writes go on).
            if mine > state_bytes && mine >= others {
                return Ok(report(Some(stopped.elapsed().as_secs_f64())));
            }
            if reported.elapsed() >= Duration::from_secs(1) {
                eprintln!(
                    "restart: {:.1} s, node {} holds {:.1} MB, the others at least {:.1} MB; {} streams installed, {:.1} MB taken",
                    stopped.elapsed().as_secs_f64(),
                    last + 1,
                    mine as f64 / 1e6,
                    others as f64 / 1e6,
                    self.node_counter(last, "state_streams_installed"),
                    self.node_counter(last, "state_chunk_bytes_taken") as f64 / 1e6,
                );
                reported = Instant::now();
            }
            if stopped.elapsed() > RESTART_TIMEOUT {
                eprintln!("restart: node {} not caught up within {} s", last + 1, RESTART_TIMEOUT.as_secs());
                return Ok(report(None));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}
