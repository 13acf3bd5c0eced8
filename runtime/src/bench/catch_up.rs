//! `cohort bench --catch-up`: a new replica of a grown state, while the
//! writes go on (D3).
//!
//! After the measured window, the bench stops the last node, removes its
//! whole data directory (log and state: a node that never held the
//! groups), and starts it again. Each of its replicas recovers empty (H1)
//! and fetches the group's state from the primary: with `--state
//! disk-log` a stream of the primary's newest checkpoint, staged chunk by
//! chunk on the new node's disk. The phase ends once every group streamed
//! its state to the node, and reports the stream's bytes, how long they
//! took (from the node's start, and from its first chunk to its last), the
//! rate beside the disk's floor for 4 MiB synced writes (the chunk size)
//! measured in the same run (the faster of writes through the page cache
//! and past it, `O_DIRECT`) and beside each node's share of that floor (it
//! over the nodes, as the bytes floor of writes is), the cores the process
//! kept busy, and the bytes the primaries sent beyond the stream's size. With `--catch-up-interrupt` the node is
//! stopped again (its disk kept) once half the bytes went out, and started
//! at once: the transfer resumes from its staged length, so the bytes sent
//! twice stay within a chunk or two per group.

use std::time::{Duration, Instant};

use cohort_messages::STATE_CHUNK_SIZE_MAX_BYTES;

use super::Bench;
use super::floor;

/// How long the phase may take before the bench gives up.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(3600);
/// How often the phase reads the nodes' counters.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// A progress line every this many polls (a second).
const PROGRESS_EVERY_POLLS: u64 = 10;

/// What the phase measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct CatchUpReport {
    /// The largest replica's state when the node was wiped.
    pub state_bytes: u64,
    /// Chunk bytes the primaries sent to the new node.
    pub chunk_bytes_sent: u64,
    /// Chunk bytes the new node took (each byte of its transfers once).
    pub chunk_bytes_taken: u64,
    /// Stream bytes the primaries sent twice.
    pub chunk_bytes_resent: u64,
    /// Seconds from the new node's start to the last stream installed.
    pub seconds: f64,
    /// `chunk_bytes_taken` over `seconds`.
    pub bytes_per_sec: u64,
    /// Seconds from the first chunk bytes taken to the last, as the
    /// phase's polls saw them (every 100 ms; the node publishes its
    /// counters about once a second): the stream alone, without the new
    /// node's start and recovery before it or the install after it.
    pub streaming_seconds: f64,
    /// The bytes taken in that time over it.
    pub streaming_bytes_per_sec: u64,
    /// The disk's synced write rate for one 4 MiB chunk at a time: the
    /// faster of the two below.
    pub floor_bytes_per_sec: u64,
    /// That rate through the page cache.
    pub floor_page_cache_bytes_per_sec: u64,
    /// That rate past the page cache (`O_DIRECT`; 0 where the file system
    /// refuses it).
    pub floor_direct_bytes_per_sec: u64,
    /// `floor_bytes_per_sec` over the nodes that share the disk: the bytes
    /// floor as the bench defines it for writes (D5), each node's share.
    pub floor_per_node_bytes_per_sec: u64,
    /// CPU time of the whole process in the phase over its length: the
    /// cores busy on average (the machine's count beside it in the docs).
    pub cpu_cores: f64,
    /// The node was stopped and started again halfway.
    pub interrupted: bool,
    /// Resident memory of the process at the end of the phase.
    pub rss_bytes: u64,
}

impl CatchUpReport {
    /// The report as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "state_bytes": self.state_bytes,
            "chunk_bytes_sent": self.chunk_bytes_sent,
            "chunk_bytes_taken": self.chunk_bytes_taken,
            "chunk_bytes_resent": self.chunk_bytes_resent,
            "seconds": self.seconds,
            "bytes_per_sec": self.bytes_per_sec,
            "streaming_seconds": self.streaming_seconds,
            "streaming_bytes_per_sec": self.streaming_bytes_per_sec,
            "floor_bytes_per_sec": self.floor_bytes_per_sec,
            "floor_page_cache_bytes_per_sec": self.floor_page_cache_bytes_per_sec,
            "floor_direct_bytes_per_sec": self.floor_direct_bytes_per_sec,
            "floor_per_node_bytes_per_sec": self.floor_per_node_bytes_per_sec,
            "cpu_cores": self.cpu_cores,
            "interrupted": self.interrupted,
            "rss_bytes": self.rss_bytes,
        })
    }

    /// The report's line.
    pub(crate) fn lines(&self) -> String {
        let percent = |rate: u64, floor: u64| rate as f64 / floor.max(1) as f64 * 100.0;
        format!(
            "{:.1} MB transferred in {:.1} s = {:.1} MB/s, streaming {:.1} MB/s for {:.1} s ({:.0} % of the disk's \
             {:.1} MB/s for synced 4 MiB writes, {:.0} % of each node's share, {:.1} MB/s; {:.1} through the page \
             cache, {:.1} past it); {:.1} MB sent, {} bytes of it twice{}; {:.2} cores busy; RSS {:.0} MB",
            self.chunk_bytes_taken as f64 / 1e6,
            self.seconds,
            self.bytes_per_sec as f64 / 1e6,
            self.streaming_bytes_per_sec as f64 / 1e6,
            self.streaming_seconds,
            percent(self.streaming_bytes_per_sec, self.floor_bytes_per_sec),
            self.floor_bytes_per_sec as f64 / 1e6,
            percent(self.streaming_bytes_per_sec, self.floor_per_node_bytes_per_sec),
            self.floor_per_node_bytes_per_sec as f64 / 1e6,
            self.floor_page_cache_bytes_per_sec as f64 / 1e6,
            self.floor_direct_bytes_per_sec as f64 / 1e6,
            self.chunk_bytes_sent as f64 / 1e6,
            self.chunk_bytes_resent,
            if self.interrupted { ", receiver stopped and restarted halfway" } else { "" },
            self.cpu_cores,
            self.rss_bytes as f64 / 1e6,
        )
    }
}

impl Bench {
    /// The phase (see the module docs); `restart` stops the last node and
    /// starts it again, `wipe` first removing its data directory.
    pub(super) async fn catch_up(
        &self,
        dir: &std::path::Path,
        interrupt: bool,
        restart: &mut impl FnMut(bool) -> Result<(), String>,
    ) -> Result<CatchUpReport, String> {
        let floor_dir = dir.join("catch-up-floor");
        let floor = floor::measure(&floor_dir, STATE_CHUNK_SIZE_MAX_BYTES, 1)?;
        let direct = floor::direct_synced_bytes_per_sec(&floor_dir, STATE_CHUNK_SIZE_MAX_BYTES)?.unwrap_or(0);
        let state_bytes = self.sizes.largest_bytes();
        let groups = self.options.groups as u64;
        let last = self.options.nodes - 1;
        let sent_before = self.shard_counter_total("state_chunk_bytes_sent");
        let resent_before = self.shard_counter_total("state_chunk_bytes_resent");
        eprintln!(
            "catch-up: node {} wiped and started again; {:.1} MB of state per group",
            last + 1,
            state_bytes as f64 / 1e6
        );
        let usage_before = super::process::ProcessUsage::now();
        restart(true)?;
        let started = Instant::now();
        // The new node's counters start at 0 with each of its processes.
        let mut taken_before_restart = 0;
        let mut interrupted = false;
        // (seconds, bytes taken) where the bytes taken first and last moved.
        let mut first_moved: Option<(f64, u64)> = None;
        let mut last_moved = (0.0, 0);
        let mut poll = 0u64;
        loop {
            poll += 1;
            tokio::time::sleep(POLL_INTERVAL).await;
            let sent = self.shard_counter_total("state_chunk_bytes_sent").saturating_sub(sent_before);
            let installed = self.node_counter(last, "state_streams_installed");
            let taken = taken_before_restart + self.node_counter(last, "state_chunk_bytes_taken");
            let elapsed = started.elapsed().as_secs_f64();
            if taken > last_moved.1 && installed < groups {
                first_moved.get_or_insert((elapsed, taken));
                last_moved = (elapsed, taken);
            }
            if poll.is_multiple_of(PROGRESS_EVERY_POLLS) {
                eprintln!(
                    "catch-up: {elapsed:.1} s, {:.1} MB sent, {installed}/{groups} streams installed",
                    sent as f64 / 1e6
                );
            }
            if installed >= groups {
                let seconds = elapsed;
                let (streaming_seconds, streamed) =
                    first_moved.map_or((0.0, 0), |(at, bytes)| (last_moved.0 - at, last_moved.1 - bytes));
                let cpu_us = super::process::ProcessUsage::now()
                    .zip(usage_before)
                    .map_or(0, |(now, before)| now.since(before).cpu_us);
                let floor_bytes_per_sec = floor.disk_synced_bytes_per_sec.max(direct);
                return Ok(CatchUpReport {
                    state_bytes,
                    chunk_bytes_sent: sent,
                    chunk_bytes_taken: taken,
                    chunk_bytes_resent: self
                        .shard_counter_total("state_chunk_bytes_resent")
                        .saturating_sub(resent_before),
                    seconds,
                    bytes_per_sec: (taken as f64 / seconds.max(0.001)) as u64,
                    streaming_seconds,
                    streaming_bytes_per_sec: if streaming_seconds > 0.0 {
                        (streamed as f64 / streaming_seconds) as u64
                    } else {
                        0
                    },
                    floor_bytes_per_sec,
                    floor_page_cache_bytes_per_sec: floor.disk_synced_bytes_per_sec,
                    floor_direct_bytes_per_sec: direct,
                    floor_per_node_bytes_per_sec: floor_bytes_per_sec / self.options.nodes.max(1) as u64,
                    cpu_cores: cpu_us as f64 / 1e6 / seconds.max(0.001),
                    interrupted,
                    rss_bytes: super::process::resident_bytes(),
                });
            }
            if interrupt && !interrupted && sent >= state_bytes * groups / 2 {
                eprintln!("catch-up: node {} stopped and started again, its disk kept", last + 1);
                taken_before_restart += self.node_counter(last, "state_chunk_bytes_taken");
                restart(false)?;
                interrupted = true;
            }
            if started.elapsed() > CATCH_UP_TIMEOUT {
                return Err(format!("catch-up: not done within {} s", CATCH_UP_TIMEOUT.as_secs()));
            }
        }
    }

    /// A shard counter summed over every node.
    pub(super) fn shard_counter_total(&self, name: &str) -> u64 {
        (0..self.options.nodes).map(|index| self.node_counter(index, name)).sum()
    }

    /// A shard counter of node `index`.
    pub(super) fn node_counter(&self, index: usize, name: &str) -> u64 {
        self.handles.borrow()[index].metrics().shard_counter(name).unwrap_or(0)
    }
}
