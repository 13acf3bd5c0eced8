//! A run's settings, with the defaults the binary and the test share. One
//! value holds every knob so a report can print exactly what ran.

use std::path::PathBuf;
use std::time::Duration;

use crate::jepsen::lifecycle;
use crate::jepsen::nemesis::{Phase, Timing};
use crate::jepsen::nodes::SessionSettings;
use crate::jepsen::workload::Timeouts;

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The nemesis seed (same seed, same schedule).
    pub seed: u64,
    /// Length of the workload, final heal included.
    pub seconds: u64,
    /// Nodes (processes, namespaces).
    pub nodes: usize,
    /// Keys = partition groups `0..groups` (`[groups] partitions`), and
    /// the group of `recreate`.
    pub groups: u64,
    /// H3: a group created at run time, then deleted and created again
    /// during the workload; `None`: no such group.
    pub recreate: Option<lifecycle::Settings>,
    /// Where the configs, data, logs, history, summary and picture go.
    pub out: PathBuf,
    /// The `cohort` binary; `None`: see [`crate::jepsen::preflight::find_binary`].
    pub binary: Option<PathBuf>,
    /// Logical clients of the configured groups.
    pub processes: usize,
    /// Target ops/s over those clients.
    pub rate_per_s: f64,
    /// Reads per thousand ops.
    pub reads_per_mille: u64,
    /// The nemesis's phase lengths.
    pub timing: Timing,
    /// An explicit schedule instead of the seeded one (a scripted experiment,
    /// e.g. F1's heal test); its phases must tile `0..seconds` and end with
    /// the final heal.
    pub phases: Option<Vec<Phase>>,
    /// Every node's `[session]`.
    pub session: SessionSettings,
    /// The workload's client timeouts.
    pub timeouts: Timeouts,
    /// How long the final read of each key may take.
    pub final_read_timeout: Duration,
    /// How long the cluster may take to answer a read on every key at start.
    pub ready_timeout: Duration,
    /// Bound of the linearizability search, per key.
    pub check_timeout: Duration,
    /// Print progress on stderr.
    pub progress: bool,
}

impl Config {
    /// The workload's keys: the configured groups, then the re-created one.
    pub fn keys(&self) -> Vec<u64> {
        let recreated = self.recreate.map(|recreate| recreate.group);
        (0..self.groups).chain(recreated).collect()
    }

    /// Logical clients over all keys (those of the re-created group too).
    pub fn clients(&self) -> usize {
        self.processes + self.recreate.map_or(0, |recreate| recreate.clients)
    }

    /// The defaults for a `seconds`-long run of `seed` writing into `out`.
    pub fn new(seed: u64, seconds: u64, out: PathBuf) -> Config {
        let session = SessionSettings { timeout_ms: 2000, keepalive_interval_ms: 250, reconnect_attempts: 3 };
        Config {
            seed,
            seconds,
            nodes: 3,
            groups: 6,
            recreate: Some(lifecycle::Settings {
                group: 100,
                clients: 2,
                // About what each configured group gets (150 ops/s over 6).
                rate_per_s: 25.0,
                first_ms: (12_000, 20_000),
                interval_ms: (20_000, 30_000),
                before_heal_ms: 10_000,
                // Past an old primary's quorum window (the 2 s heartbeat timeout).
                gap_ms: 3_000,
                give_up_ms: 60_000,
            }),
            out,
            binary: None,
            processes: 6,
            rate_per_s: 150.0,
            reads_per_mille: 400,
            timing: Timing {
                warmup_ms: 5_000,
                fault_ms: (8_000, 14_000),
                healthy_ms: (6_000, 10_000),
                final_min_ms: 20_000,
                // Well past the session timeout, and past failover (2 s heartbeat timeout).
                pause_ms: session.timeout_ms * 2 + 1_000,
            },
            phases: None,
            session,
            timeouts: Timeouts { op: Duration::from_secs(3), attempt: Duration::from_secs(1) },
            final_read_timeout: Duration::from_secs(60),
            ready_timeout: Duration::from_secs(60),
            check_timeout: Duration::from_secs(60),
            progress: true,
        }
    }
}
