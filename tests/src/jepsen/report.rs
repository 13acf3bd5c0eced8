//! The run's summary: op counts, the checkers' verdicts, availability and
//! recovery per nemesis phase, node exits, and the paths of the history,
//! the picture and the JSON. Built from the history alone (plus what the
//! nemesis did), printed as a table and written as JSON.
//!
//! - **Availability** of a phase: `ok` ops that completed in it, per second.
//! - **Longest gap**: the longest time within the phase in which some key
//!   completed no `ok` op; a stalled group shows here even if others go on.
//! - **Recovery** of a phase that follows a fault, and of the final heal:
//!   the time from its start to the first `ok` op on every key
//!   (the largest over keys); `None` if some key had none in the phase. The
//!   final heal's is the run's recovery time.
//!
//! These figures are over the configured groups: the re-created group is
//! out of service between its delete and its creation by design. Its
//! re-creations (H3) and the wipes (H1) have their own lists.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::jepsen::checker::{CheckReport, KeyCheck, Verdict};
use crate::jepsen::config::Config;
use crate::jepsen::history::{OpRecord, Recreation, seconds};
use crate::jepsen::nemesis::{Phase, PhaseKind};
use crate::jepsen::nodes::NodeExit;
use crate::jepsen::runner::NemesisEvent;
use crate::jepsen::wipe::WipeReport;

/// Ops by completion.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct OpCounts {
    /// Completed ok.
    pub ok: usize,
    /// Completed fail.
    pub fail: usize,
    /// Completed info (unknown).
    pub info: usize,
    /// Reads among them.
    pub reads: usize,
    /// Writes among them.
    pub writes: usize,
}

impl OpCounts {
    fn of<'a>(ops: impl IntoIterator<Item = &'a OpRecord>) -> OpCounts {
        let mut counts = OpCounts::default();
        for op in ops {
            counts.ok += usize::from(op.is_ok());
            counts.fail += usize::from(op.is_fail());
            counts.info += usize::from(op.is_info());
            counts.writes += usize::from(op.written().is_some());
            counts.reads += usize::from(op.written().is_none());
        }
        counts
    }
}

/// One phase's figures.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseReport {
    /// What it was.
    pub label: String,
    /// The phase as scheduled.
    pub kind: PhaseKind,
    /// Start (s).
    pub start_s: f64,
    /// End (s).
    pub end_s: f64,
    /// Ops that completed in it.
    pub ops: OpCounts,
    /// Availability: ok ops completed per second.
    pub ok_per_s: f64,
    /// Median latency of its ok ops (ms).
    pub latency_p50_ms: Option<f64>,
    /// Largest latency of its ok ops (ms).
    pub latency_max_ms: Option<f64>,
    /// After a fault: time to the first ok op on every key (s); None: some key had none.
    pub recovery_s: Option<f64>,
    /// After a fault: keys with no ok op in the phase.
    pub keys_unrecovered: Vec<u64>,
    /// The longest time in the phase without an ok op completing on some
    /// key (s), and that key: a stall shows here even when other keys go on.
    pub longest_gap: (f64, u64),
    /// F1: time from the phase's start to the first ok *write* on every key
    /// (s); a read can be served by an old primary within its quorum
    /// window, a write needs a quorum. `None`: some key had none.
    pub write_recovery_s: Option<f64>,
    /// Like `longest_gap`, counting ok writes only.
    pub longest_write_gap: (f64, u64),
}

/// A run's summary.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The nemesis seed.
    pub seed: u64,
    /// Planned seconds.
    pub seconds: u64,
    /// Nodes.
    pub nodes: usize,
    /// Configured keys (= groups `0..groups`).
    pub groups: u64,
    /// The group deleted and created again during the run (H3), a key too.
    pub recreated_group: Option<u64>,
    /// Logical clients, over all keys.
    pub processes: usize,
    /// The node binary.
    pub binary: String,
    /// The run's subnet.
    pub subnet: String,
    /// Every op.
    pub ops: OpCounts,
    /// Linearizable on every key?
    pub linearizable: Verdict,
    /// Acknowledged writes lost (final-read check).
    pub lost_acked_writes: usize,
    /// Keys whose final read got no answer.
    pub keys_without_final_read: Vec<u64>,
    /// H3: reads of a re-created group that returned a value of an earlier life.
    pub earlier_life_reads: usize,
    /// H3: the group deleted and created again, each time.
    pub recreations: Vec<Recreation>,
    /// H1: the nodes wiped, and how long each took to recover.
    pub wipes: Vec<WipeReport>,
    /// Per key.
    pub keys: Vec<KeyCheck>,
    /// Per phase.
    pub phases: Vec<PhaseReport>,
    /// When the final heal began (s).
    pub final_heal_at_s: f64,
    /// Time from the final heal to the first ok op on every key (s).
    pub recovery_after_final_heal_s: Option<f64>,
    /// Per key: time from the final heal to its first ok op (s).
    pub recovery_per_key_s: Vec<(u64, Option<f64>)>,
    /// Node exits (kills by the nemesis and exits on their own).
    pub node_exits: Vec<NodeExit>,
    /// What the nemesis did and saw.
    pub nemesis: Vec<NemesisEvent>,
    /// The picture.
    pub svg: String,
    /// The history (Jepsen event lines).
    pub history: String,
    /// This summary as JSON.
    pub summary: String,
    /// Linearizable, nothing lost, no earlier life seen, every key read at the end.
    pub passed: bool,
}

/// What the report is built from.
pub struct Facts<'a> {
    /// The run's config.
    pub config: &'a Config,
    /// The node binary.
    pub binary: &'a Path,
    /// The subnet.
    pub subnet: String,
    /// The schedule.
    pub phases: &'a [Phase],
    /// The history.
    pub ops: &'a [OpRecord],
    /// The re-creations.
    pub recreations: Vec<Recreation>,
    /// The wipes.
    pub wipes: Vec<WipeReport>,
    /// The nemesis's events.
    pub events: Vec<NemesisEvent>,
    /// Node exits.
    pub exits: Vec<NodeExit>,
    /// The checkers' result.
    pub check: CheckReport,
    /// The picture's path.
    pub svg: PathBuf,
    /// The history's path.
    pub history: PathBuf,
    /// The summary's path.
    pub summary: PathBuf,
}

/// Build the summary.
pub fn build(facts: Facts<'_>) -> Report {
    let keys: Vec<u64> = (0..facts.config.groups).collect();
    let phases: Vec<PhaseReport> = facts
        .phases
        .iter()
        .enumerate()
        .map(|(index, phase)| {
            let after_fault = phase.kind == PhaseKind::FinalHeal
                || (index > 0 && matches!(facts.phases[index - 1].kind, PhaseKind::Fault(_)));
            phase_report(phase, facts.ops, &keys, after_fault)
        })
        .collect();
    let final_phase = facts.phases.iter().rev().find(|phase| phase.kind == PhaseKind::FinalHeal);
    let final_heal_ms = final_phase.map_or(0, |phase| phase.start_ms);
    let recovery_per_key_s: Vec<(u64, Option<f64>)> =
        keys.iter().map(|key| (*key, first_ok_after(facts.ops, *key, final_heal_ms * 1_000_000))).collect();
    let recovery_after_final_heal_s =
        recovery_per_key_s.iter().map(|(_, at)| *at).try_fold(0.0f64, |max, at| at.map(|at| max.max(at)));
    Report {
        seed: facts.config.seed,
        seconds: facts.config.seconds,
        nodes: facts.config.nodes,
        groups: facts.config.groups,
        recreated_group: facts.config.recreate.map(|recreate| recreate.group),
        processes: facts.config.clients(),
        binary: facts.binary.display().to_string(),
        subnet: facts.subnet,
        ops: OpCounts::of(facts.ops),
        linearizable: facts.check.linearizable,
        lost_acked_writes: facts.check.lost_acked_writes,
        keys_without_final_read: facts.check.keys_without_final_read.clone(),
        earlier_life_reads: facts.check.earlier_life_reads,
        recreations: facts.recreations,
        wipes: facts.wipes,
        passed: facts.check.passed(),
        keys: facts.check.keys,
        phases,
        final_heal_at_s: final_heal_ms as f64 / 1000.0,
        recovery_after_final_heal_s,
        recovery_per_key_s,
        node_exits: facts.exits,
        nemesis: facts.events,
        svg: facts.svg.display().to_string(),
        history: facts.history.display().to_string(),
        summary: facts.summary.display().to_string(),
    }
}

fn phase_report(phase: &Phase, ops: &[OpRecord], keys: &[u64], after_fault: bool) -> PhaseReport {
    let (start_ns, end_ns) = (phase.start_ms * 1_000_000, phase.end_ms * 1_000_000);
    let inside: Vec<&OpRecord> = ops
        .iter()
        .filter(|op| op.complete_ns >= start_ns && op.complete_ns < end_ns && keys.contains(&op.key))
        .collect();
    let counts = OpCounts::of(inside.iter().copied());
    let mut latencies: Vec<f64> = inside.iter().filter(|op| op.is_ok()).map(|op| op.latency_s() * 1000.0).collect();
    latencies.sort_by(f64::total_cmp);
    let (recovery_s, keys_unrecovered) = if after_fault {
        let firsts: Vec<(u64, Option<f64>)> = keys
            .iter()
            .map(|key| (*key, first_ok_after(ops, *key, start_ns).filter(|at| *at < phase.seconds())))
            .collect();
        let unrecovered: Vec<u64> = firsts.iter().filter(|(_, at)| at.is_none()).map(|(key, _)| *key).collect();
        let recovery = firsts.iter().map(|(_, at)| *at).try_fold(0.0f64, |max, at| at.map(|at| max.max(at)));
        (recovery, unrecovered)
    } else {
        (None, Vec::new())
    };
    PhaseReport {
        label: phase.label(),
        kind: phase.kind,
        start_s: phase.start_ms as f64 / 1000.0,
        end_s: phase.end_ms as f64 / 1000.0,
        ops: counts,
        ok_per_s: counts.ok as f64 / phase.seconds().max(1e-3),
        latency_p50_ms: latencies.get(latencies.len() / 2).copied(),
        latency_max_ms: latencies.last().copied(),
        recovery_s,
        keys_unrecovered,
        longest_gap: longest_gap(&inside, keys, start_ns, end_ns),
        write_recovery_s: keys
            .iter()
            .map(|key| first_write_after(ops, *key, start_ns).filter(|at| *at < phase.seconds()))
            .try_fold(0.0f64, |max, at| at.map(|at| max.max(at))),
        longest_write_gap: {
            let writes: Vec<&OpRecord> = inside.iter().copied().filter(|op| op.written().is_some()).collect();
            longest_gap(&writes, keys, start_ns, end_ns)
        },
    }
}

/// The longest interval of `[start_ns, end_ns)` with no ok op on some key, and the key.
fn longest_gap(inside: &[&OpRecord], keys: &[u64], start_ns: u64, end_ns: u64) -> (f64, u64) {
    let mut longest = (0.0, keys.first().copied().unwrap_or(0));
    for key in keys {
        let mut times: Vec<u64> =
            inside.iter().filter(|op| op.key == *key && op.is_ok()).map(|op| op.complete_ns).collect();
        times.push(start_ns);
        times.push(end_ns);
        times.sort_unstable();
        let gap = times.windows(2).map(|pair| pair[1] - pair[0]).max().unwrap_or(0);
        if seconds(gap) > longest.0 {
            longest = (seconds(gap), *key);
        }
    }
    longest
}

/// Seconds from `from_ns` to the first ok write on `key` that completed after it.
fn first_write_after(ops: &[OpRecord], key: u64, from_ns: u64) -> Option<f64> {
    ops.iter()
        .filter(|op| op.key == key && op.is_ok() && op.written().is_some() && op.complete_ns >= from_ns)
        .map(|op| op.complete_ns)
        .min()
        .map(|at| seconds(at - from_ns))
}

/// Seconds from `from_ns` to the first ok op on `key` that completed after it.
fn first_ok_after(ops: &[OpRecord], key: u64, from_ns: u64) -> Option<f64> {
    ops.iter()
        .filter(|op| op.key == key && op.is_ok() && op.complete_ns >= from_ns)
        .map(|op| op.complete_ns)
        .min()
        .map(|at| seconds(at - from_ns))
}

fn or_dash(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{value:.2}{unit}"))
}

impl Report {
    /// The summary as one JSON line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
    }

    /// The summary as indented JSON.
    pub fn json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
    }

    /// The summary as a table.
    pub fn table(&self) -> String {
        let mut text = String::new();
        let line = |text: &mut String, name: &str, value: String| text.push_str(&format!("  {name:<34} {value}\n"));
        line(&mut text, "seed", self.seed.to_string());
        line(
            &mut text,
            "duration",
            format!(
                "{} s, {} nodes, {} keys{}, {} clients",
                self.seconds,
                self.nodes,
                self.groups,
                self.recreated_group.map_or(String::new(), |group| format!(" and the re-created group {group}")),
                self.processes
            ),
        );
        line(&mut text, "ops ok / fail / info", format!("{} / {} / {}", self.ops.ok, self.ops.fail, self.ops.info));
        let per_key: Vec<String> =
            self.keys.iter().map(|key| format!("{}:{}", key.key, key.linearizable.word())).collect();
        line(&mut text, "linearizable", format!("{} ({})", self.linearizable.word(), per_key.join(" ")));
        line(&mut text, "lost acknowledged writes", self.lost_acked_writes.to_string());
        line(&mut text, "reads of an earlier life (H3)", self.earlier_life_reads.to_string());
        let given_up = self.recreations.iter().filter(|recreation| !recreation.is_done()).count();
        line(
            &mut text,
            "re-creations (H3)",
            format!("{} done, {given_up} given up", self.recreations.len() - given_up),
        );
        for recreation in &self.recreations {
            let time = |ns: Option<u64>| or_dash(ns.map(seconds), " s");
            text.push_str(&format!(
                "    group {} at {:.1} s: deleted {}, create sent {}, {} {} ({} commands){}\n",
                recreation.key,
                seconds(recreation.invoke_ns),
                time(recreation.deleted_ns),
                time(recreation.create_invoke_ns),
                if recreation.is_done() { "created at" } else { "given up at" },
                time(Some(recreation.complete_ns)),
                recreation.commands,
                match (recreation.incarnation, &recreation.detail) {
                    (Some(incarnation), _) => format!(", incarnation {incarnation}"),
                    (None, Some(detail)) => format!(": {detail}"),
                    (None, None) => String::new(),
                }
            ));
        }
        line(&mut text, "wipes (H1)", self.wipes.len().to_string());
        for wipe in &self.wipes {
            text.push_str(&format!(
                "    n{} at {:.1} s ({} bytes moved): {}\n",
                wipe.node,
                wipe.at_s,
                wipe.size_bytes,
                match wipe.recovered_after_s {
                    Some(after) => format!("every member recovered after {after:.2} s ({} groups)", wipe.groups_hosted),
                    None => format!(
                        "not seen recovered ({} of {} members when last asked)",
                        wipe.members_recovered, wipe.groups_hosted
                    ),
                }
            ));
        }
        if !self.keys_without_final_read.is_empty() {
            line(&mut text, "keys without a final read", format!("{:?}", self.keys_without_final_read));
        }
        line(&mut text, "recovery after final heal", or_dash(self.recovery_after_final_heal_s, " s"));
        text.push_str("  phases (availability = ok ops/s):\n");
        for phase in &self.phases {
            text.push_str(&format!(
                "    {:>6.1}-{:<6.1} {:<20} ok/s {:>6.1}  ok {:>5} fail {:>4} info {:>4}  p50 {:>9}  gap {:>5.2} s (key {})  write gap {:>5.2} s  recovery {}  write recovery {}\n",
                phase.start_s,
                phase.end_s,
                phase.label,
                phase.ok_per_s,
                phase.ops.ok,
                phase.ops.fail,
                phase.ops.info,
                or_dash(phase.latency_p50_ms, " ms"),
                phase.longest_gap.0,
                phase.longest_gap.1,
                phase.longest_write_gap.0,
                match (phase.recovery_s, phase.keys_unrecovered.is_empty()) {
                    (Some(at), _) => format!("{at:.2} s"),
                    (None, false) => format!("none for keys {:?}", phase.keys_unrecovered),
                    (None, true) => "-".to_string(),
                },
                or_dash(phase.write_recovery_s, " s"),
            ));
        }
        if self.node_exits.is_empty() {
            line(&mut text, "node exits", "none".to_string());
        }
        for exit in &self.node_exits {
            text.push_str(&format!("  node exit: n{} at {:.1} s: {}\n", exit.node, exit.at_s, exit.cause));
            if !exit.by_nemesis {
                for stderr in &exit.last_stderr {
                    text.push_str(&format!("      | {stderr}\n"));
                }
            }
        }
        for key in self.keys.iter().filter(|key| {
            key.detail.is_some() || !key.lost_acked_writes.is_empty() || !key.earlier_life_reads.is_empty()
        }) {
            text.push_str(&format!(
                "  key {}: {} lost {:?} final read {:?} earlier-life reads (value, s) {:?}\n",
                key.key,
                key.detail.as_deref().unwrap_or(""),
                key.lost_acked_writes,
                key.final_read,
                key.earlier_life_reads
            ));
        }
        line(&mut text, "picture", self.svg.clone());
        line(&mut text, "history", self.history.clone());
        line(&mut text, "summary", self.summary.clone());
        text
    }
}
