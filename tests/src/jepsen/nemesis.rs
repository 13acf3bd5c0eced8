//! The nemesis's schedule: a pure function of (seed, seconds, nodes), so
//! the same seed gives the same faults at the same times. Phases alternate
//! between a fault and a healthy period; the last phase heals everything
//! and lasts long enough to measure recovery. The fault kinds come in a
//! seeded shuffled order, so a run of seven or more faults sees each kind.
//! Applying a phase is the runner's job ([`crate::jepsen::runner`]).
//!
//! A wipe (H1) takes a node's data, and a group of three tolerates one
//! member without its data, so the schedule never puts two wipes in fault
//! phases next to each other: between two wipes at least one other fault
//! and two healthy phases pass, time for the first wiped node to take its
//! groups' logs back. The runner checks that it did before it wipes
//! another ([`crate::jepsen::runner`]).

use serde::Serialize;

use crate::jepsen::net::Cut;
use crate::rng::Rng;

/// A fault the nemesis injects for one phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "fault")]
pub enum Fault {
    /// Symmetric partition: `node` is cut from every other node, both ways.
    Isolate {
        /// The isolated node (0-based).
        node: usize,
    },
    /// Symmetric partition of one link: `a` and `b` cannot talk; each still reaches the rest.
    CutLink {
        /// One end (0-based).
        a: usize,
        /// The other end (0-based).
        b: usize,
    },
    /// One-way partition: packets from `from` to `to` are dropped, the other way passes.
    OneWay {
        /// Sender whose packets are dropped (0-based).
        from: usize,
        /// Receiver (0-based).
        to: usize,
    },
    /// One-way partition: nothing `node` sends reaches another node; it still hears them.
    Mute {
        /// The muted node (0-based).
        node: usize,
    },
    /// kill -9 `node` at the start of the phase, restart it (same data dir) at the end.
    Kill {
        /// The killed node (0-based).
        node: usize,
    },
    /// SIGSTOP `node` for `pause_ms` (longer than the session timeout), then SIGCONT.
    Pause {
        /// The paused node (0-based).
        node: usize,
        /// How long it stays stopped.
        pause_ms: u64,
    },
    /// H1: kill -9 `node`, move its whole data directory away (as
    /// docs/storage.md's rebuild procedure has an operator do) and start it
    /// at once on an empty one, with the same config and certificates. Its
    /// replicas recover from their peers during the phase.
    Wipe {
        /// The wiped node (0-based).
        node: usize,
    },
}

/// The fault kinds, in the order a seed shuffles.
const KINDS: usize = 7;
/// The kind number of [`Fault::Wipe`] in [`draw`].
const KIND_WIPE: usize = 6;

impl Fault {
    /// The node-to-node cuts of a partition fault (none for the others).
    pub fn cuts(&self, nodes: usize) -> Vec<Cut> {
        let others = |node: usize| (0..nodes).filter(move |other| *other != node);
        match *self {
            Fault::Isolate { node } => {
                others(node).flat_map(|other| [Cut { from: node, to: other }, Cut { from: other, to: node }]).collect()
            }
            Fault::CutLink { a, b } => vec![Cut { from: a, to: b }, Cut { from: b, to: a }],
            Fault::OneWay { from, to } => vec![Cut { from, to }],
            Fault::Mute { node } => others(node).map(|other| Cut { from: node, to: other }).collect(),
            Fault::Kill { .. } | Fault::Pause { .. } | Fault::Wipe { .. } => Vec::new(),
        }
    }

    /// A short label for reports and the picture (node ids 1-based).
    pub fn label(&self) -> String {
        match *self {
            Fault::Isolate { node } => format!("isolate n{}", node + 1),
            Fault::CutLink { a, b } => format!("cut n{}-n{}", a + 1, b + 1),
            Fault::OneWay { from, to } => format!("one-way n{}->n{}", from + 1, to + 1),
            Fault::Mute { node } => format!("mute n{}", node + 1),
            Fault::Kill { node } => format!("kill -9 n{}", node + 1),
            Fault::Pause { node, pause_ms } => format!("SIGSTOP n{} {:.1}s", node + 1, pause_ms as f64 / 1000.0),
            Fault::Wipe { node } => format!("wipe n{}", node + 1),
        }
    }

    /// The node this fault takes down or stops, if it is one of those.
    pub fn node_down(&self) -> Option<usize> {
        match *self {
            Fault::Kill { node } | Fault::Pause { node, .. } | Fault::Wipe { node } => Some(node),
            _ => None,
        }
    }
}

/// What a phase is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PhaseKind {
    /// No fault.
    Healthy,
    /// One fault for the whole phase.
    Fault(Fault),
    /// Everything healed; the run's last phase.
    FinalHeal,
}

/// One phase of the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Phase {
    /// What happens.
    pub kind: PhaseKind,
    /// Start, ms on the run's clock.
    pub start_ms: u64,
    /// End, ms on the run's clock.
    pub end_ms: u64,
}

impl Phase {
    /// A label for reports and the picture.
    pub fn label(&self) -> String {
        match self.kind {
            PhaseKind::Healthy => "healthy".to_string(),
            PhaseKind::Fault(fault) => fault.label(),
            PhaseKind::FinalHeal => "final heal".to_string(),
        }
    }

    /// The length in seconds.
    pub fn seconds(&self) -> f64 {
        (self.end_ms - self.start_ms) as f64 / 1000.0
    }
}

/// The lengths of the schedule's phases.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Timing {
    /// The first healthy phase.
    pub warmup_ms: u64,
    /// A fault phase lasts between these.
    pub fault_ms: (u64, u64),
    /// A healthy phase between faults lasts between these.
    pub healthy_ms: (u64, u64),
    /// The final heal lasts at least this (and a fifth of the run if longer).
    pub final_min_ms: u64,
    /// How long a paused node stays stopped.
    pub pause_ms: u64,
}

/// The schedule of a `seconds`-long run of `nodes` nodes for `seed`.
pub fn schedule(seed: u64, seconds: u64, nodes: usize, timing: Timing) -> Vec<Phase> {
    assert!(nodes >= 2, "faults need two nodes");
    let mut rng = Rng::new(seed ^ 0x004E_454D_4553_4953);
    let total_ms = seconds * 1000;
    let final_ms = timing.final_min_ms.max(total_ms / 5).min(total_ms);
    let heal_at = total_ms - final_ms;
    let mut phases = Vec::new();
    let mut at = timing.warmup_ms.min(heal_at);
    if at > 0 {
        phases.push(Phase { kind: PhaseKind::Healthy, start_ms: 0, end_ms: at });
    }
    let mut kinds: Vec<usize> = Vec::new();
    let mut last_kind = None;
    while at < heal_at {
        if kinds.is_empty() {
            kinds = shuffled(&mut rng);
        }
        let mut kind = kinds.pop().expect("refilled");
        if kind == KIND_WIPE && last_kind == Some(KIND_WIPE) {
            // Never two wipes in a row (see the module docs). Only a new
            // round can open with the kind the last one closed with, so six
            // other kinds are left: take the next and wipe after it.
            let next = kinds.pop().expect("a new round holds six other kinds");
            kinds.push(kind);
            kind = next;
        }
        last_kind = Some(kind);
        let fault = draw(kind, &mut rng, nodes, timing.pause_ms);
        let fault_end = (at + rng.range(timing.fault_ms.0, timing.fault_ms.1)).min(heal_at);
        phases.push(Phase { kind: PhaseKind::Fault(fault), start_ms: at, end_ms: fault_end });
        at = fault_end;
        if at >= heal_at {
            break;
        }
        let healthy_end = (at + rng.range(timing.healthy_ms.0, timing.healthy_ms.1)).min(heal_at);
        phases.push(Phase { kind: PhaseKind::Healthy, start_ms: at, end_ms: healthy_end });
        at = healthy_end;
    }
    phases.push(Phase { kind: PhaseKind::FinalHeal, start_ms: heal_at, end_ms: total_ms });
    debug_assert!(phases.windows(2).all(|pair| pair[0].end_ms == pair[1].start_ms), "phases tile the run");
    debug_assert!(
        faults(&phases).windows(2).all(|pair| !matches!((pair[0], pair[1]), (Fault::Wipe { .. }, Fault::Wipe { .. }))),
        "never two wipes in a row"
    );
    phases
}

/// The faults of `phases`, in order.
pub fn faults(phases: &[Phase]) -> Vec<Fault> {
    phases
        .iter()
        .filter_map(|phase| match phase.kind {
            PhaseKind::Fault(fault) => Some(fault),
            _ => None,
        })
        .collect()
}

fn shuffled(rng: &mut Rng) -> Vec<usize> {
    let mut kinds: Vec<usize> = (0..KINDS).collect();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i as u64 + 1) as usize);
    }
    kinds
}

fn draw(kind: usize, rng: &mut Rng, nodes: usize, pause_ms: u64) -> Fault {
    let node = rng.below(nodes as u64) as usize;
    let other = (node + 1 + rng.below(nodes as u64 - 1) as usize) % nodes;
    match kind {
        0 => Fault::Isolate { node },
        1 => Fault::CutLink { a: node, b: other },
        2 => Fault::OneWay { from: node, to: other },
        3 => Fault::Mute { node },
        4 => Fault::Kill { node },
        5 => Fault::Pause { node, pause_ms },
        _ => Fault::Wipe { node },
    }
}
