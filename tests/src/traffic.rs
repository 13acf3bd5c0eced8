//! `cohort-sim traffic`: heartbeat traffic per node pair, measured in the
//! simulator (deterministic, in ticks), for the batched schedule of R1–R32,
//! for the same with quiescence on (Z3, opt-in: `commit_quiesce_timeout`),
//! and for the unbatched behaviour batching replaces, in the same run.
//! Quiesced traffic counts the shard-pair heartbeats and their replies
//! beside the Commit and CommitReply frames.
//!
//! The unbatched model is the schedule before batching: every group sends its own
//! 256-byte Commit frame to each backup on every broadcast interval (no idle
//! state), and each backup answers every accepted Commit with its own
//! 256-byte CommitReply frame. It is measured by running the same cluster
//! with the idle state switched off and counting each Commit and CommitReply
//! entry as one 256-byte frame.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cohort_messages::{Command, GroupId};

use crate::kv::KvOp;
use crate::sim::{Faults, Sim, SimConfig};

/// Bytes of one Commit or CommitReply frame before batching.
pub const UNBATCHED_FRAME_BYTES: u64 = 256;

/// Which groups get writes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// No writes at all.
    Idle,
    /// Every group gets a write whenever its previous one finished.
    Busy,
    /// One group in ten is busy, the rest idle.
    Mixed,
}

impl Workload {
    /// Parse `idle|busy|mixed`.
    pub fn parse(text: &str) -> Option<Workload> {
        match text {
            "idle" => Some(Workload::Idle),
            "busy" => Some(Workload::Busy),
            "mixed" => Some(Workload::Mixed),
            _ => None,
        }
    }

    fn busy(&self, group: usize) -> bool {
        match self {
            Workload::Idle => false,
            Workload::Busy => true,
            Workload::Mixed => group.is_multiple_of(10),
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct TrafficConfig {
    /// Nodes.
    pub nodes: usize,
    /// Partition groups.
    pub partitions: usize,
    /// Simulated seconds measured (after a warm-up).
    pub seconds: u64,
    /// Workload.
    pub workload: Workload,
    /// Milliseconds per tick (the default config's 100 ms).
    pub tick_ms: u64,
    /// Z3: the quiesced run's `commit_quiesce_timeout_ticks`.
    pub quiesce_ticks: u64,
}

/// Which schedule one measurement runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Mode {
    /// Seed 000's batched heartbeats.
    Batched,
    /// The same with quiescence on.
    Quiesced(u64),
    /// The model of per-group frames before batching.
    Unbatched,
}

/// Per ordered node pair, per second.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairRates {
    /// Commit frames/s.
    pub commit_frames: f64,
    /// Commit entries/s.
    pub commit_entries: f64,
    /// CommitReply frames/s.
    pub reply_frames: f64,
    /// CommitReply entries/s.
    pub reply_entries: f64,
    /// Z3: shard-pair heartbeat and reply frames/s.
    pub pair_frames: f64,
    /// Commit, CommitReply and shard-pair heartbeat and reply bytes/s.
    pub bytes: f64,
}

/// The measurement.
#[derive(Clone, Debug)]
pub struct TrafficReport {
    /// Per ordered pair (from, to), batched.
    pub pairs: BTreeMap<(usize, usize), PairRates>,
    /// Per ordered pair, the unbatched model.
    pub unbatched: BTreeMap<(usize, usize), PairRates>,
    /// Per ordered pair, batched with quiescence on (Z3).
    pub quiesced: BTreeMap<(usize, usize), PairRates>,
    /// Send ticks in the measured window.
    pub send_ticks: u64,
    /// Seconds measured.
    pub seconds: u64,
}

fn measure_once(config: &TrafficConfig, mode: Mode) -> (BTreeMap<(usize, usize), PairRates>, u64) {
    let unbatched = mode == Mode::Unbatched;
    let mut sim_config = SimConfig::new(1);
    sim_config.faults = Some(Faults::default());
    sim_config.nodes = config.nodes;
    sim_config.groups = config.partitions;
    sim_config.clients = 0;
    sim_config.core.clients_max = 16;
    if unbatched {
        // Today's behaviour has no idle state: heartbeats every interval.
        let timing = &mut sim_config.core.timing;
        timing.commit_idle_heartbeat_interval_ticks = timing.commit_broadcast_interval_ticks;
    }
    if let Mode::Quiesced(ticks) = mode {
        sim_config.core.timing.commit_quiesce_timeout_ticks = Some(ticks);
    }
    let broadcast = sim_config.core.timing.commit_broadcast_interval_ticks;
    let mut sim = Sim::new(sim_config);
    let ticks_per_second = 1000 / config.tick_ms;
    // Warm up past the idle transition (and quiescence) so the window shows
    // the steady state.
    let timing = &sim.config.core.timing;
    let warmup = timing.commit_heartbeat_timeout_ticks * 2
        + timing
            .commit_quiesce_timeout_ticks
            .map_or(0, |ticks| ticks + 4 * timing.commit_idle_heartbeat_interval_ticks);
    let measured = config.seconds * ticks_per_second;
    let mut value = 0u64;
    for tick in 0..warmup + measured {
        if tick == warmup {
            sim.frame_log.clear();
        }
        for group in 0..config.partitions {
            if config.workload.busy(group) && sim.client_idle(group) {
                let group_id = GroupId(group as u64);
                if let Some(primary) = sim.primary_of(group_id) {
                    value += 1;
                    sim.submit_as(group, group_id, KvOp::Put { key: 0, value }, primary);
                }
            }
        }
        sim.step(false);
    }
    let seconds = config.seconds as f64;
    let mut pairs: BTreeMap<(usize, usize), PairRates> = BTreeMap::new();
    for (&(from, to, command), &(frames, entries, bytes)) in &sim.frame_log {
        let rates = pairs.entry((from, to)).or_default();
        let (frames, bytes) = if unbatched { (entries, entries * UNBATCHED_FRAME_BYTES) } else { (frames, bytes) };
        match command {
            Command::Commit => {
                rates.commit_frames += frames as f64 / seconds;
                rates.commit_entries += entries as f64 / seconds;
                rates.bytes += bytes as f64 / seconds;
            }
            Command::CommitReply => {
                rates.reply_frames += frames as f64 / seconds;
                rates.reply_entries += entries as f64 / seconds;
                rates.bytes += bytes as f64 / seconds;
            }
            Command::PairHeartbeat | Command::PairHeartbeatReply => {
                rates.pair_frames += frames as f64 / seconds;
                rates.bytes += bytes as f64 / seconds;
            }
            _ => {}
        }
    }
    (pairs, measured / broadcast)
}

/// Run the batched schedule, the same with quiescence on, and the
/// unbatched model on the same cluster.
pub fn measure(config: &TrafficConfig) -> TrafficReport {
    let (pairs, send_ticks) = measure_once(config, Mode::Batched);
    let (quiesced, _) = measure_once(config, Mode::Quiesced(config.quiesce_ticks));
    let (unbatched, _) = measure_once(config, Mode::Unbatched);
    TrafficReport { pairs, unbatched, quiesced, send_ticks, seconds: config.seconds }
}

impl TrafficReport {
    /// Mean over pairs of (Commit + CommitReply frames) per send tick.
    pub fn frames_per_pair_per_send_tick(&self) -> f64 {
        let per_pair: Vec<f64> = self
            .pairs
            .values()
            .map(|r| (r.commit_frames + r.reply_frames) * self.seconds as f64 / self.send_ticks as f64)
            .collect();
        per_pair.iter().sum::<f64>() / per_pair.len().max(1) as f64
    }

    /// Mean heartbeat bytes/s per pair.
    pub fn bytes_per_sec_per_pair(&self) -> f64 {
        self.pairs.values().map(|r| r.bytes).sum::<f64>() / self.pairs.len().max(1) as f64
    }

    /// Z3: mean bytes/s per ordered pair with quiescence on.
    pub fn quiesced_bytes_per_sec_per_pair(&self) -> f64 {
        self.quiesced.values().map(|r| r.bytes).sum::<f64>() / self.quiesced.len().max(1) as f64
    }

    /// Z3: the most bytes/s of any node pair (both directions together)
    /// with quiescence on.
    pub fn quiesced_bytes_per_sec_per_node_pair_max(&self) -> f64 {
        let mut pairs: BTreeMap<(usize, usize), f64> = BTreeMap::new();
        for ((from, to), rates) in &self.quiesced {
            *pairs.entry(((*from).min(*to), (*from).max(*to))).or_default() += rates.bytes;
        }
        pairs.values().copied().fold(0.0, f64::max)
    }

    /// Unbatched bytes over batched bytes.
    pub fn unbatched_bytes_ratio(&self) -> f64 {
        let batched: f64 = self.pairs.values().map(|r| r.bytes).sum();
        let unbatched: f64 = self.unbatched.values().map(|r| r.bytes).sum();
        if batched == 0.0 { f64::INFINITY } else { unbatched / batched }
    }

    /// The table and the summary line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<8} {:>14} {:>15} {:>14} {:>15} {:>12} | {:>14} {:>12} | {:>12} {:>12}",
            "pair",
            "commit fr/s",
            "commit ent/s",
            "reply fr/s",
            "reply ent/s",
            "bytes/s",
            "unbatched fr/s",
            "unb bytes/s",
            "quiesced fr/s",
            "qui bytes/s"
        );
        for ((from, to), rates) in &self.pairs {
            let old = self.unbatched.get(&(*from, *to)).cloned().unwrap_or_default();
            let quiet = self.quiesced.get(&(*from, *to)).cloned().unwrap_or_default();
            let _ = writeln!(
                out,
                "{:<8} {:>14.1} {:>15.1} {:>14.1} {:>15.1} {:>12.0} | {:>14.1} {:>12.0} | {:>12.1} {:>12.0}",
                format!("{from}->{to}"),
                rates.commit_frames,
                rates.commit_entries,
                rates.reply_frames,
                rates.reply_entries,
                rates.bytes,
                old.commit_frames + old.reply_frames,
                old.bytes,
                quiet.commit_frames + quiet.reply_frames + quiet.pair_frames,
                quiet.bytes
            );
        }
        let _ = write!(
            out,
            "frames_per_pair_per_send_tick={:.2} bytes_per_sec_per_pair={:.0} unbatched_bytes_ratio={:.1} \
             quiesced_bytes_per_sec_per_pair={:.0} quiesced_bytes_per_sec_per_node_pair_max={:.0}",
            self.frames_per_pair_per_send_tick(),
            self.bytes_per_sec_per_pair(),
            self.unbatched_bytes_ratio(),
            self.quiesced_bytes_per_sec_per_pair(),
            self.quiesced_bytes_per_sec_per_node_pair_max()
        );
        out
    }
}

/// Z3: the quiesced run's default `commit_quiesce_timeout_ticks` (5 s).
pub const QUIESCE_TICKS_DEFAULT: u64 = 50;

/// Usage of the `traffic` subcommand.
pub const USAGE: &str = "usage: cohort-sim traffic [--nodes 3] [--partitions 1000] [--seconds 60] [--workload idle|busy|mixed] [--quiesce-ticks 50] [--unbatched]";

/// Parse the `traffic` subcommand's arguments. `--unbatched` is accepted for
/// the command line the issue names; both modes are always measured.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<TrafficConfig, String> {
    let mut config = TrafficConfig {
        nodes: 3,
        partitions: 1000,
        seconds: 60,
        workload: Workload::Idle,
        tick_ms: 100,
        quiesce_ticks: QUIESCE_TICKS_DEFAULT,
    };
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--unbatched" {
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|_| format!("{flag}: {value:?} is not a number"));
        match flag.as_str() {
            "--nodes" => config.nodes = number()? as usize,
            "--partitions" => config.partitions = number()? as usize,
            "--seconds" => config.seconds = number()?,
            "--quiesce-ticks" => config.quiesce_ticks = number()?.max(1),
            "--workload" => {
                config.workload = Workload::parse(&value)
                    .ok_or_else(|| format!("--workload: {value:?} is not idle, busy or mixed"))?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if config.nodes < 2 || config.partitions == 0 || config.seconds == 0 {
        return Err("traffic needs at least 2 nodes, 1 partition and 1 second".into());
    }
    Ok(config)
}
