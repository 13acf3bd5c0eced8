//! One simulated run: N nodes × G groups on the production core, seeded
//! faults for a fault phase, then a healed liveness phase in which every
//! group must commit a new write within a tick budget. With `learners`,
//! extra nodes are learners (P4) of every kv group: they take
//! every fault the voters take, their applies are checked for agreement, they
//! must never be primary or electing, and after healing each must catch up
//! with its group's commit point. In the metadata
//! scenario every node also hosts the metadata group and runs its metadata
//! agent (`agents.rs`). With `forger`, a forging peer takes part
//! (`forger.rs`, T6); every run checks what input can grow (`bounds.rs`, T5)
//! and, unless switched off, moves primaries at random in the fault phase
//! (`transfers.rs`, C4).

mod agents;
mod bounds;
mod faults;
mod forger;
mod inbound;
mod operator;
mod reconfigure;
mod transfers;

pub use faults::{FaultProfile, Faults};
pub use forger::ForgerMode;
pub use transfers::TransferCounts;

use std::collections::{BTreeMap, HashMap};

use cohort_core::client_table::is_registration;
use cohort_core::driver::{ClientAnswer, LinkStatus, Links, Note, Turn};
use cohort_core::metadata::{AgentCounters, ExpiredPolicy};
use cohort_core::{CoreConfig, GroupSpec, Quorums, Role, TimingConfig};
use cohort_messages::{
    Frame, GroupId, Incarnation, MemberIndex, Message, NodeId, Op, Outcome, Reply, ReplyError, TraceContext,
};

use crate::check::Checkers;
use crate::client::{HistoryOp, Send, SimClient};
use crate::kv::{KvOp, digest};
use crate::network::{Endpoint, Network, NetworkFaults, Packet};
use crate::node::{CLUSTER, NodeSetup, SimNode, node_id, node_index};
use crate::rng::Rng;
use crate::storage::{StateKind, StorageKind};

/// A shard's links as the simulator sees them at the end of a turn (see `Sim::links_of`).
struct SimLinks(Vec<(NodeId, LinkStatus)>);

impl Links for SimLinks {
    fn status(&self, peer: NodeId) -> Option<LinkStatus> {
        self.0.iter().find(|(node, _)| *node == peer).map(|(_, status)| *status)
    }
}

/// What a run exercises besides the kv groups.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Scenario {
    /// The kv groups alone.
    #[default]
    Default,
    /// The kv groups plus the metadata group on every node, each node's
    /// metadata agent (sessions, expiry, re-owning), and pauses in most seeds.
    Metadata,
    /// The kv groups, and an operator that changes their members under the
    /// faults: each change seals an incarnation and switches its next
    /// members to the next one (see `sim/reconfigure.rs`).
    Reconfigure,
}

impl Scenario {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Default => "default",
            Scenario::Metadata => "metadata",
            Scenario::Reconfigure => "reconfigure",
        }
    }
}

/// A run's shape.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// Voting nodes (every group has every one as a member).
    pub nodes: usize,
    /// Learner nodes (P4): indexes `nodes..nodes + learners`, learners
    /// of every kv group from the start. Default scenario only.
    pub learners: usize,
    /// False: the learner nodes start hosting nothing, and a scenario
    /// makes them learners later with [`Sim::set_learners`].
    pub learners_from_start: bool,
    /// Groups.
    pub groups: usize,
    /// Shards per node (F4): groups go to shards by `routing::shard_of`.
    pub shards: usize,
    /// The storage every shard runs (F4: `FileStorage` on the simulated disk).
    pub storage: StorageKind,
    /// D1: where the kv groups' state machines keep their state.
    pub state: StateKind,
    /// Metadata scenario: voters of the metadata group, the first nodes
    /// (None: every node); the others follow its log as learners (M6).
    pub metadata_voters: Option<usize>,
    /// Voters of each kv group (None: every node; the metadata scenario
    /// uses one node fewer, so operations have somewhere to move replicas).
    pub group_size: Option<usize>,
    /// Replication quorum (None: majority).
    pub replication_quorum: Option<usize>,
    /// Clients.
    pub clients: usize,
    /// Ticks with faults.
    pub fault_ticks: u64,
    /// Ticks allowed after healing for every group to commit a new write.
    pub liveness_ticks: u64,
    /// Faults (None: drawn from the seed).
    pub faults: Option<Faults>,
    /// The family the seed draws its faults from (None: drawn too).
    pub profile: Option<FaultProfile>,
    /// The core's configuration.
    pub core: CoreConfig,
    /// Q4: write mode of every group. Acknowledged async writes may be lost
    /// by design, so only scenarios use `Async`.
    pub write_mode: cohort_core::WriteMode,
    /// What runs besides the kv groups.
    pub scenario: Scenario,
    /// Metadata scenario: every agent's S3 policy (None: drawn from the seed).
    pub expired_policy: Option<ExpiredPolicy>,
    /// T6: the forging peer of the run, if any (see `sim/forger.rs`).
    pub forger: Option<ForgerMode>,
    /// C4: random primary transfers in the fault phase (see `sim/transfers.rs`).
    pub transfers: bool,
    /// K5: the kv groups' state machines take op batches, and every kv
    /// write is one (see `KvOp::operation`).
    pub op_batches: bool,
}

impl SimConfig {
    /// A default run for `seed`.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            nodes: 3,
            learners: 0,
            learners_from_start: true,
            groups: 4,
            shards: 2,
            storage: StorageKind::File,
            state: StateKind::Memory,
            group_size: None,
            metadata_voters: None,
            replication_quorum: None,
            clients: 6,
            fault_ticks: 1500,
            liveness_ticks: 1500,
            faults: None,
            profile: None,
            core: CoreConfig {
                timing: TimingConfig::default(),
                pipeline_max_ops: 8,
                snapshot_interval_ops: 16,
                snapshot_interval_bytes: 1 << 20,
                clients_max: 64,
                request_queue_max: 64,
                // D1: a backlog of a few snapshot intervals of the run's
                // small writes, shared by a shard's groups: a short stop
                // repairs from it, a longer one (or a busier shard) takes
                // a state transfer, so the runs cover both and the drop
                // of the oldest entries at the budget.
                backlog_size_max_bytes: 512,
                ..CoreConfig::default()
            },
            write_mode: cohort_core::WriteMode::Sync,
            scenario: Scenario::Default,
            expired_policy: None,
            forger: None,
            transfers: true,
            op_batches: false,
        }
    }

    /// The metadata scenario's run for `seed`.
    pub fn metadata(seed: u64) -> SimConfig {
        SimConfig { scenario: Scenario::Metadata, ..SimConfig::new(seed) }
    }
}

/// Multi-step operations of a metadata-scenario run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OperationCounts {
    /// Started by the operator.
    pub started: u64,
    /// Every step applied (the most any node's metadata shows).
    pub completed: u64,
    /// Cancelled and fully reverted.
    pub reverted: u64,
    /// Starts and cancels the metadata refused (overlaps, no target, ...).
    pub refused: u64,
    /// C3: groups created and deleted at run time.
    pub groups_created: u64,
    /// C3: groups deleted.
    pub groups_deleted: u64,
    /// H3: groups created again under the id of a deleted one.
    pub groups_recreated: u64,
    /// H3: the operator's probes of its groups answered, given up, and
    /// answered by a replica of a life already ended (before its node
    /// applied the delete; never of an earlier life than the replica's).
    pub probes: (u64, u64, u64),
    /// C4: the operator's transfers the metadata accepted.
    pub transfers_asked: u64,
    /// C4/C5: directed view changes the shards started for the agents
    /// (the operator's transfers and the balancer's).
    pub transfers_started: u64,
    /// Freezes, and changes refused while frozen.
    pub freezes: (u64, u64),
    /// Z6: switches of the metadata group's own voters (the highest
    /// incarnation any node's metadata records for it, less one).
    pub metadata_switches: u64,
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Violations, with ticks.
    pub violations: Vec<String>,
    /// Ops applied (agreed sequence length over all groups).
    pub ops_committed: u64,
    /// Writes acknowledged to clients.
    pub writes_acknowledged: u64,
    /// K5: of them, op batches of two or more puts.
    pub batches_acknowledged: u64,
    /// Views with a new primary after view 0.
    pub view_changes: u64,
    /// Node crashes.
    pub crashes: u64,
    /// H5: crashes after which the node's data was gone (a new disk, or
    /// one shard's directory emptied).
    pub wipes: u64,
    /// D1: the state machines' checkpoints (state on disk), summed over
    /// nodes.
    pub checkpoints: crate::disk_kv::CheckpointCounts,
    /// Frames sent.
    pub frames_sent: u64,
    /// Frames dropped by a receiver as bad.
    pub frames_rejected: u64,
    /// The client history.
    pub history: Vec<HistoryOp>,
    /// Metadata scenario: the agents' counters, summed over every node and
    /// every start of it.
    pub agents: AgentCounters,
    /// Reconfigure scenario: member changes started and completed.
    pub reconfigurations: (u64, u64),
    /// Metadata scenario: operations started, completed, reverted, and
    /// requests the metadata refused.
    pub operations: OperationCounts,
    /// Metadata scenario: nodes that stopped themselves (S3).
    pub node_stops: u64,
    /// The disks, summed over every node.
    pub disks: crate::disk::DiskStats,
    /// Starts that failed because recovery met a disk fault (the node
    /// tried again later).
    pub starts_refused: u64,
    /// T5: peer messages the nodes' shards refused, by reason, over every
    /// start of every node.
    pub refusals: cohort_core::Refusals,
    /// T6: frames the forging peer sent.
    pub forged_frames: u64,
    /// T5: the largest footprint any shard had after a step (each figure
    /// on its own).
    pub footprint_max: cohort_core::Footprint,
    /// C4: the random primary transfers of the fault phase.
    pub random_transfers: TransferCounts,
    /// Z3: quiescence counters, summed over every node and every start.
    pub quiet: crate::node::QuietCounts,
    /// Z4: StartViews primaries withheld, having sent the member one within
    /// a repair timeout, summed over every node and every start.
    pub start_views_withheld: u64,
    /// D1: bytes of operations primaries served lagging members from
    /// their backlogs, summed over every node and every start.
    pub backlog_bytes_served: u64,
    /// D2: runs lent to apply workers, and requests that waited for a
    /// state machine away, summed over every node and every start.
    pub apply_runs_lent: u64,
    /// D2: see `apply_runs_lent`.
    pub requests_waited_for_state: u64,
    /// H5: writes refused because a group's client table had evicted the
    /// client, which then started again under a fresh id.
    pub evicted_clients: u64,
}

/// A simulation in progress.
pub struct Sim {
    /// The configuration.
    pub config: SimConfig,
    /// H5: per (node, group), the applied point up to which the log was
    /// read for registrations (they apply nothing, so the state machine
    /// never reports them to the agreement checker).
    registrations_read: HashMap<(usize, GroupId), Op>,
    faults: Faults,
    specs: Vec<GroupSpec>,
    /// Metadata scenario: the metadata group (every node a member).
    metadata_spec: Option<GroupSpec>,
    /// Metadata scenario: the agents' S3 policy.
    policy: ExpiredPolicy,
    /// Counters of agents that are gone (their node crashed or stopped).
    retired_agents: AgentCounters,
    node_stops: u64,
    /// Reconfigure scenario: the member-change operator.
    reconfigurations: reconfigure::Reconfigurations,
    /// Metadata scenario: the operator of multi-step operations.
    operator: operator::Operator,
    /// The nodes.
    pub nodes: Vec<SimNode>,
    /// The network.
    pub network: Network,
    clients: Vec<SimClient>,
    /// The client history.
    pub history: Vec<HistoryOp>,
    /// The checkers.
    pub checkers: Checkers,
    /// Frames sent between nodes: (from, to, command) -> (frames, entries, bytes).
    pub frame_log: BTreeMap<(usize, usize, cohort_messages::Command), (u64, u64, u64)>,
    /// Messages sent between nodes by their own command, whether alone in a
    /// frame or in a ViewChangeBatch (Z4): (from, to, command) -> messages.
    pub message_log: BTreeMap<(usize, usize, cohort_messages::Command), u64>,
    /// Quorum waits that ended: (node, wait, result).
    pub wait_results: Vec<(usize, cohort_core::WaitId, Result<(), cohort_core::QuorumWaitError>)>,
    rng: Rng,
    /// The current tick.
    pub now: u64,
    healed: bool,
    /// K4: congested links: (node, shard, peer, tick it drains).
    congested: Vec<(usize, usize, usize, u64)>,
    /// Network faults of the fault phase in force.
    cuts: Vec<faults::Cut>,
    /// Full disks: (node, tick they have room again).
    disks_full: Vec<(usize, u64)>,
    /// True while the storm of the fault phase lasts.
    storming: bool,
    starts_refused: u64,
    evicted_clients: u64,
    crashes: u64,
    wipes: u64,
    frames_rejected: u64,
    entries_rejected: u64,
    writes_acknowledged: u64,
    batches_acknowledged: u64,
    value_counter: u64,
    /// T6: the forging peer.
    forger: Option<forger::Forger>,
    /// T5: the bounds every shard's footprint is checked against.
    footprints: crate::check::footprint::FootprintBounds,
    /// C4: the random primary transfers.
    transfers: transfers::Transfers,
}

const RETRY_TICKS: u64 = 40;

/// D3: the state chunk size of runs with `--state disk` (a simulated
/// group's state is a few KiB).
pub const SIM_STATE_CHUNK_SIZE_BYTES: usize = 64;

impl Sim {
    /// Build the cluster of `config`.
    pub fn new(mut config: SimConfig) -> Sim {
        if config.state == StateKind::Disk {
            // D3: streamed transfers in many chunks, so that every fault
            // (a dropped message, a crash, a disk error) can cut one
            // between any two of them.
            config.core.state_chunk_size_bytes = SIM_STATE_CHUNK_SIZE_BYTES;
        }
        // The metadata code takes its mutant from the thread (M2's gate).
        cohort_core::mutants::Mutant::set_metadata(&config.core);
        let mut rng = Rng::new(config.seed);
        let mut faults = config.faults.clone().unwrap_or_else(|| {
            let profile = config.profile.unwrap_or_else(|| FaultProfile::draw(&mut rng, config.scenario));
            Faults::draw(&mut rng, config.fault_ticks, profile)
        });
        let mut policy = ExpiredPolicy::Reconnect { attempts: 3 };
        if config.scenario == Scenario::Metadata {
            if config.faults.is_none() {
                // S5: most seeds see several pauses longer than the session timeout.
                faults.pause_per_mille = rng.range(2, 5);
            }
            policy = config.expired_policy.unwrap_or_else(|| {
                if rng.chance(200) { ExpiredPolicy::Shutdown } else { ExpiredPolicy::Reconnect { attempts: 3 } }
            });
        }
        assert!(
            config.learners == 0 || config.scenario == Scenario::Default,
            "learners run in the default scenario only"
        );
        let default_size = if config.scenario == Scenario::Metadata { config.nodes - 1 } else { config.nodes };
        let group_size = config.group_size.unwrap_or(default_size).clamp(1, config.nodes);
        let replication = config.replication_quorum.map(|q| q.min(group_size));
        let quorums = Quorums::new(group_size, replication).expect("valid quorum");
        let learners: Vec<_> = (config.nodes..config.nodes + config.learners)
            .filter(|_| config.learners_from_start)
            .map(node_id)
            .collect();
        let specs: Vec<GroupSpec> = (0..config.groups)
            .map(|g| {
                let members = (0..group_size).map(|i| node_id((g + i) % config.nodes)).collect();
                GroupSpec {
                    group: GroupId(g as u64),
                    incarnation: Incarnation(1),
                    members,
                    learners: learners.clone(),
                    me: MemberIndex(0),
                    quorums,
                    write_mode: config.write_mode,
                    report_applied: true,
                }
            })
            .collect();
        let metadata_spec = (config.scenario == Scenario::Metadata).then(|| {
            let voters = config.metadata_voters.unwrap_or(config.nodes);
            crate::metadata::metadata_spec(config.nodes, voters, &specs[0])
        });
        let setup = NodeSetup {
            shards: config.shards,
            storage: config.storage,
            state: config.state,
            op_batches: config.op_batches,
        };
        let node_count = config.nodes + config.learners;
        let nodes = (0..node_count)
            .map(|index| {
                let specs = node_specs(&specs, metadata_spec.as_ref(), index);
                let mut node = SimNode::new(index, node_count, setup, &config.core, &specs, rng.fork());
                // Slower and faster shard threads, from the seed alone (the
                // run's draws stay as they were): 50 to 400 µs per input, so
                // a burst of 25 to 200 inputs keeps a turn open past the
                // driver's limit and ends it early.
                node.input_cost_micros = 50 + (config.seed.wrapping_add(index as u64 * 7) % 8) * 50;
                node
            })
            .collect();
        let clients = (0..config.clients).map(|index| SimClient::new(index, config.seed, config.op_batches)).collect();
        let mut network = Network::default();
        network.faults = faults.network.clone();
        let operator = operator::Operator::new(config.seed);
        let transfers = transfers::Transfers::new(config.seed);
        let mut sim = Sim {
            config,
            faults,
            specs,
            metadata_spec,
            policy,
            retired_agents: AgentCounters::default(),
            node_stops: 0,
            reconfigurations: reconfigure::Reconfigurations::default(),
            operator,
            nodes,
            network,
            clients,
            history: Vec::new(),
            checkers: Checkers::default(),
            wait_results: Vec::new(),
            frame_log: BTreeMap::new(),
            message_log: BTreeMap::new(),
            rng,
            now: 0,
            healed: false,
            congested: Vec::new(),
            cuts: Vec::new(),
            disks_full: Vec::new(),
            storming: false,
            starts_refused: 0,
            evicted_clients: 0,
            crashes: 0,
            wipes: 0,
            frames_rejected: 0,
            entries_rejected: 0,
            writes_acknowledged: 0,
            batches_acknowledged: 0,
            registrations_read: HashMap::new(),
            value_counter: 0,
            forger: None,
            footprints: crate::check::footprint::FootprintBounds::default(),
            transfers,
        };
        sim.forger = sim.config.forger.map(|mode| forger::Forger::new(mode, sim.config.seed, sim.nodes.len()));
        sim.footprints = crate::check::footprint::FootprintBounds::new(&sim.config.core, &sim.specs, sim.nodes.len());
        sim.draw_flush_latencies();
        sim.draw_apply_latencies();
        for index in 0..sim.nodes.len() {
            sim.start_agent(index);
            sim.drain(index);
        }
        sim
    }

    /// Run the fault phase and the liveness phase.
    pub fn run(mut self) -> Report {
        for _ in 0..self.config.fault_ticks {
            self.step(true);
        }
        self.heal();
        let start = self.now;
        let groups: Vec<GroupId> = self.specs.iter().map(|spec| spec.group).collect();
        let mut live: BTreeMap<GroupId, bool> = groups.iter().map(|group| (*group, false)).collect();
        let acked_before = self.history.len();
        while self.now < start + self.config.liveness_ticks && live.values().any(|done| !done) {
            self.step(false);
            for op in &self.history[acked_before..] {
                if op.returned_tick.is_some() && !matches!(op.op, KvOp::Get { .. }) {
                    live.insert(op.group, true);
                }
            }
        }
        if self.config.scenario == Scenario::Metadata {
            self.settle_operations();
            self.settle_created_groups();
        }
        for (group, done) in live {
            if !done {
                self.checkers.violations.push(format!(
                    "liveness: {group} committed no new write within {} ticks after healing",
                    self.config.liveness_ticks
                ));
            }
        }
        self.check_learners_catch_up();
        self.check_members_recover();
        for index in 0..self.nodes.len() {
            self.collect_applies(index);
        }
        self.check_refusals();
        self.checkers.finish();
        let linearizability = crate::linearizability::check(self.config.seed, &self.history);
        self.checkers.violations.extend(linearizability.iter().map(ToString::to_string));
        self.report()
    }

    fn report(self) -> Report {
        let metrics = self.nodes.iter().fold(cohort_core::ShardMetrics::default(), |mut total, node| {
            total.add(&node.shard_metrics());
            total
        });
        let mut quiet = crate::node::QuietCounts::default();
        quiet.add(&metrics);
        Report {
            seed: self.config.seed,
            violations: self.checkers.violations.clone(),
            ops_committed: self.checkers.ops_committed(),
            writes_acknowledged: self.writes_acknowledged,
            batches_acknowledged: self.batches_acknowledged,
            view_changes: self.checkers.view_changes,
            crashes: self.crashes,
            wipes: self.wipes,
            checkpoints: self.nodes.iter().fold(
                Default::default(),
                |mut sum: crate::disk_kv::CheckpointCounts, node| {
                    let counts = *node.checkpoints.borrow();
                    sum.taken += counts.taken;
                    sum.failed += counts.failed;
                    sum.rebuilt += counts.rebuilt;
                    sum.streamed += counts.streamed;
                    sum.resumed += counts.resumed;
                    sum
                },
            ),
            frames_sent: self.network.stats.sent,
            frames_rejected: self.frames_rejected + self.entries_rejected,
            agents: self.agent_counters(),
            node_stops: self.node_stops,
            reconfigurations: (self.reconfigurations.started, self.reconfigurations.completed),
            operations: self.operation_counts(),
            disks: self.disk_stats(),
            starts_refused: self.starts_refused,
            refusals: self.refusals(),
            forged_frames: self.forger.as_ref().map_or(0, |forger| forger.sent),
            footprint_max: self.footprints.observed,
            random_transfers: self.transfers.counts,
            quiet,
            start_views_withheld: metrics.start_views_withheld,
            backlog_bytes_served: metrics.backlog_bytes_served,
            apply_runs_lent: metrics.apply_runs_lent,
            requests_waited_for_state: metrics.requests_waited_for_state,
            evicted_clients: self.evicted_clients,
            history: self.history,
        }
    }

    /// Metadata scenario: after healing, every operation in flight finishes
    /// (completes, or finishes reverting) within the liveness budget.
    fn settle_operations(&mut self) {
        let in_flight = |sim: &Sim| {
            sim.nodes
                .iter()
                .filter(|node| node.is_up())
                .map(|node| node.metadata.borrow().operations.keys().copied().collect::<Vec<_>>())
                .max_by_key(Vec::len)
                .unwrap_or_default()
        };
        let deadline = self.now + self.config.liveness_ticks;
        while self.now < deadline && !in_flight(self).is_empty() {
            self.step(false);
        }
        for id in in_flight(self) {
            self.checkers
                .violations
                .push(format!("liveness: {id} still in flight {} ticks after healing", self.config.liveness_ticks));
        }
    }

    fn operation_counts(&self) -> OperationCounts {
        let totals = self
            .nodes
            .iter()
            .map(|node| node.metadata.borrow().operation_totals)
            .max_by_key(|totals| (totals.completed, totals.reverted))
            .unwrap_or_default();
        OperationCounts {
            started: self.operator.started,
            completed: totals.completed,
            reverted: totals.reverted,
            refused: self.operator.refused,
            groups_created: self.operator.groups_created,
            groups_deleted: self.operator.groups_deleted,
            groups_recreated: self.operator.groups_recreated,
            probes: (
                self.operator.probes_answered,
                self.operator.probes_given_up,
                self.checkers.lives.answers_from_ended_life,
            ),
            transfers_asked: self.operator.transfers_asked,
            transfers_started: self.operator.transfers_started,
            freezes: (self.operator.freezes, self.operator.refused_frozen),
            metadata_switches: self
                .nodes
                .iter()
                .filter_map(|node| node.metadata.borrow().groups.get(&GroupId::METADATA).map(|r| r.incarnation.0))
                .max()
                .map_or(0, |incarnation| incarnation.saturating_sub(1)),
        }
    }

    /// Remove every fault; restart and resume every node.
    pub fn heal(&mut self) {
        self.healed = true;
        self.network.faults = NetworkFaults::default();
        self.heal_disks_and_links();
        for index in 0..self.nodes.len() {
            if !self.nodes[index].is_up() {
                self.nodes[index].down_until = self.now;
            }
            self.nodes[index].paused_until = self.nodes[index].paused_until.min(self.now);
        }
        for entry in &mut self.congested {
            entry.3 = entry.3.min(self.now);
        }
    }

    /// One tick: faults, restarts, ticks, deliveries, flush completions,
    /// clients, checks.
    pub fn step(&mut self, faults: bool) {
        self.now += 1;
        let now = self.now;
        if faults {
            self.inject_faults();
        }
        self.drain_congested_links();
        for index in 0..self.nodes.len() {
            if !self.nodes[index].is_up() && now >= self.nodes[index].down_until {
                self.start_node(index);
            }
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index].is_running(now) {
                // The node's tick timer: every tick since the last one this
                // process ran (after a pause, up to the driver's limit late).
                for shard in &mut self.nodes[index].shards {
                    shard.driver.on_clock(now);
                }
                self.drain(index);
                self.tick_agent(index);
            }
        }
        while let Some(packet) = self.network.pop_due(now) {
            self.deliver(packet);
        }
        // Every node has handled what reached it this tick: its open turns end.
        for index in 0..self.nodes.len() {
            self.drain(index);
        }
        for index in 0..self.nodes.len() {
            self.complete_flushes(index);
            self.complete_applies(index);
        }
        if self.config.scenario == Scenario::Reconfigure {
            self.drive_reconfigurations(faults);
        }
        if self.config.scenario == Scenario::Metadata {
            self.drive_operator(faults);
        }
        self.drive_transfers(faults);
        self.run_clients();
        self.run_forger();
        for node in &self.nodes {
            for shard in &node.shards {
                shard.core().invariants();
            }
        }
        self.check_footprints();
        self.check_quiet_rules();
    }

    /// R24 on every running shard, and with quiescence on Z3's quiet rules.
    fn check_quiet_rules(&mut self) {
        let quiet = self.config.core.timing.commit_quiesce_timeout_ticks.is_some();
        for node in self.nodes.iter().filter(|node| node.is_up()) {
            // A paused process serves nothing; its clock runs again first.
            let running = node.is_running(self.now);
            for shard in &node.shards {
                if running {
                    self.checkers.window(self.now, node.index, shard.core());
                }
                if quiet {
                    self.checkers.quiet_rules(self.now, node.index, shard.core());
                }
            }
        }
    }

    /// Start node `index` from its storage (V4), or count the refusal and
    /// try again later. A start may only fail because the disk served a
    /// fault during it (a corrupt read, a full disk, a failed sync); and a
    /// corrupt read must make it fail.
    fn start_node(&mut self, index: usize) {
        let now = self.now;
        self.arm_corrupt_read(index);
        let before = self.nodes[index].disk.stats();
        let specs = node_specs(&self.specs, self.metadata_spec.as_ref(), index);
        let started = self.nodes[index].restart(now, &self.config.core, &specs);
        let disk = &self.nodes[index].disk;
        let after = disk.stats();
        disk.set_faults(crate::disk::DiskFaults { corrupt_next_read: false, ..disk.faults() });
        let corrupt_read = after.corrupt_reads > before.corrupt_reads;
        let faulted = corrupt_read
            || after.io_errors > before.io_errors
            || after.writes_refused_full > before.writes_refused_full;
        match started {
            Ok(()) => {
                if corrupt_read {
                    self.checkers.violations.push(format!(
                        "tick {now}: node {index} started on a corrupt read: its storage's recovery did not notice"
                    ));
                }
                self.start_agent(index);
                self.drain(index);
            }
            Err(failure) => {
                if !faulted {
                    self.checkers.violations.push(format!(
                        "tick {now}: node {index} cannot recover shard {} (no disk fault explains it): {}",
                        failure.shard, failure.error
                    ));
                }
                self.starts_refused += 1;
                self.nodes[index].down_until = now + faults::START_RETRY_TICKS;
            }
        }
    }

    /// Complete every flush of node `index` whose sync returns now, and tell
    /// its shard (while the node runs: a paused process completes nothing).
    fn complete_flushes(&mut self, index: usize) {
        let now = self.now;
        for shard in 0..self.nodes[index].shard_count() {
            while self.nodes[index].is_running(now) {
                match self.nodes[index].complete_flush(shard, now) {
                    Ok(Some(id)) => {
                        if let Some(running) = self.nodes[index].shards.get_mut(shard) {
                            running.driver.on_flushed(id);
                        }
                        if let Err(error) = self.nodes[index].pump(shard, now) {
                            self.kill(index, &format!("storage failed: {error}"));
                            return;
                        }
                        self.drain(index);
                    }
                    Ok(None) => break,
                    Err(error) => {
                        self.kill(index, &format!("flush failed: {error}"));
                        return;
                    }
                }
            }
        }
    }

    /// D2: hand back every run of node `index`'s apply workers that is
    /// done by now, and end the turns that follow (while the node runs: a
    /// paused process hands back nothing).
    fn complete_applies(&mut self, index: usize) {
        let now = self.now;
        for shard in 0..self.nodes[index].shard_count() {
            while self.nodes[index].is_running(now) {
                let Some(run) = self.nodes[index].complete_apply(shard, now) else { break };
                if let Some(running) = self.nodes[index].shards.get_mut(shard) {
                    running.driver.on_applied(run.group, run.id, run.state, run.done);
                }
                self.drain(index);
            }
        }
    }

    /// End the turn of every shard of node `index` and carry out what the
    /// driver asks, until no shard has anything left (a storage job can
    /// report failed superblock stages at once, which asks for more).
    fn drain(&mut self, index: usize) {
        for shard in 0..self.nodes[index].shard_count() {
            self.end_turn(index, shard);
        }
    }

    /// End the turn of shard `shard` of node `index` and carry it out, until
    /// the driver asks nothing more.
    fn end_turn(&mut self, index: usize, shard: usize) {
        loop {
            let links = self.links_of(index, shard);
            let Some(running) = self.nodes[index].shards.get_mut(shard) else { return };
            let turn = running.driver.end_turn(&links);
            if turn.is_empty() {
                return;
            }
            if !self.execute(index, shard, turn) {
                return;
            }
        }
    }

    /// What shard `shard` of node `index` knows of its links now: a link is
    /// up while its peer's process runs (a paused one keeps its
    /// connections) and no cut drops frames either way; a congestion fault
    /// congests it until it drains.
    fn links_of(&self, index: usize, shard: usize) -> SimLinks {
        let now = self.now;
        let statuses = (0..self.nodes.len())
            .filter(|peer| *peer != index)
            .map(|peer| {
                let connected = self.nodes[peer].is_up()
                    && !self.network.blocked.contains(&(index, peer))
                    && !self.network.blocked.contains(&(peer, index));
                let congested = self
                    .congested
                    .iter()
                    .any(|&(node, on, to, drains)| (node, on, to) == (index, shard, peer) && drains > now);
                (node_id(peer), LinkStatus { connected, congested })
            })
            .collect();
        SimLinks(statuses)
    }

    fn disk_stats(&self) -> crate::disk::DiskStats {
        let mut total = crate::disk::DiskStats::default();
        for node in &self.nodes {
            let stats = node.disk.stats();
            total.writes += stats.writes;
            total.syncs += stats.syncs;
            total.power_losses += stats.power_losses;
            total.changes_lost += stats.changes_lost;
            total.writes_torn += stats.writes_torn;
            total.writes_refused_full += stats.writes_refused_full;
            total.io_errors += stats.io_errors;
            total.corrupt_reads += stats.corrupt_reads;
            total.wipes += stats.wipes;
            total.segments_cut += stats.segments_cut;
        }
        total
    }

    fn collect_applies(&mut self, index: usize) {
        let now = self.now;
        for (group, sink) in &self.nodes[index].sinks {
            let incarnation = self.nodes[index].replica(*group).map_or(Incarnation(1), |replica| replica.incarnation());
            for (op, digest) in sink.borrow_mut().drain(..) {
                self.checkers.applied(now, index, *group, incarnation, op, digest);
            }
            // H5: a registration is agreed on like any op, read from the log.
            let Some(replica) = self.nodes[index].replica(*group) else { continue };
            let read = self.registrations_read.entry((index, *group)).or_insert(Op(0));
            let applied = replica.commit_min();
            let from = if *read > applied { replica.log_base() } else { (*read).max(replica.log_base()) };
            for op in (from.0 + 1)..=applied.0 {
                let Some(entry) = replica.entry(Op(op)) else { continue };
                if entry.client != cohort_messages::ClientId::SEAL && is_registration(entry.request) {
                    let mut bytes = b"registration".to_vec();
                    bytes.extend_from_slice(&entry.client.0.to_le_bytes());
                    let incarnation = replica.incarnation();
                    self.checkers.registration_applied(now, index, *group, incarnation, Op(op), digest(&bytes));
                }
            }
            *read = applied;
        }
        let step_gates: Vec<String> = self.nodes[index].step_gates.borrow_mut().drain(..).collect();
        self.checkers.step_gates(now, index, step_gates);
        if self.metadata_spec.is_some() && self.nodes[index].is_up() {
            let metadata = self.nodes[index].metadata.borrow();
            // H3: every life of a created group is known before a replica
            // of it applies anything (a node hosts it once its metadata
            // shows the creation, and that node's turn ends here).
            for (group, record) in metadata.groups.range(GroupId(operator::CREATED_GROUPS_FROM)..) {
                self.checkers.lives.node_saw(index, *group, record, now);
            }
            self.checkers.metadata_applied(now, index, &metadata);
            // The replicas of an incarnation have the members the metadata names for it.
            for (group, record) in metadata.groups.iter().filter(|(_, record)| record.live) {
                for node in &self.nodes {
                    let Some(replica) = node.replica(*group) else { continue };
                    if replica.incarnation() == record.incarnation && replica.members() != record.members.as_slice() {
                        let violation = format!(
                            "tick {now}: node {}'s replica of {group} ({}) has members {:?}; node {index}'s \
                             metadata says {:?}",
                            node.index,
                            record.incarnation,
                            replica.members(),
                            record.members
                        );
                        self.checkers.violations.push(violation);
                    }
                }
            }
        }
    }

    /// Carry out one turn of shard `shard` of node `index`, as a node's
    /// shard actor does: the storage job to the shard's worker, each peer's
    /// batch to the network (each run of view-change messages in one frame,
    /// Z4, as a node's outbox packs it), each answer to its client, and the
    /// rest to the checkers. False if the node died of its storage.
    fn execute(&mut self, index: usize, shard: usize, turn: Turn) -> bool {
        let sender = node_id(index);
        let now = self.now;
        if !turn.storage.is_empty()
            && let Err(error) = self.nodes[index].submit(shard, turn.storage, now)
        {
            self.kill(index, &format!("storage failed: {error}"));
            return false;
        }
        for batch in turn.peers {
            let to = Endpoint::Node(node_index(batch.to));
            let messages = batch.messages.into_iter().map(|message| (message, TraceContext::NONE)).collect();
            for (message, _) in cohort_messages::batch_view_changes(messages) {
                self.send_frame(index, sender, to, &message);
            }
        }
        // D2: runs for the apply worker, in the order lent.
        for job in turn.applies {
            self.nodes[index].lend(shard, job, now);
        }
        for note in turn.notes {
            match note {
                Note::Answer(answer) => {
                    let (_, client, _) = answer.key();
                    let Some(endpoint) = self.endpoint_of(client) else { continue };
                    if endpoint == Endpoint::Operator {
                        self.judge_probe_answer(index, &answer);
                    }
                    let message = match answer {
                        ClientAnswer::Reply(reply) => Message::Reply(reply),
                        ClientAnswer::Redirect(redirect) => Message::Redirect(redirect),
                    };
                    self.send_frame(index, sender, endpoint, &message);
                }
                Note::WaitDone { wait, result } => self.wait_results.push((index, wait, result)),
                Note::Role { group, incarnation, view, role } => {
                    // H3: a report of a replica since replaced by another
                    // life of the group id (re-created with other members)
                    // is judged by the members it was given, which are gone.
                    let replaced =
                        self.replica(index, group).is_some_and(|replica| replica.incarnation() != incarnation);
                    if !replaced {
                        let learner = self.is_learner_node(group, index);
                        self.checkers.role(self.now, group, index, role, learner);
                    }
                    if role == Role::Primary {
                        self.checkers.primary(self.now, group, incarnation, view, index);
                    }
                }
                Note::Applied { group, ops, through } => {
                    let ops: Vec<(Op, u64)> = ops.iter().map(|a| (a.op, digest(&a.operation))).collect();
                    self.checkers.applied_reported(self.now, index, group, &ops, through);
                }
                Note::Restored { group, op, .. } => self.checkers.restored(self.now, index, group, op),
                Note::Committed { .. } => {}
            }
        }
        self.collect_applies(index);
        true
    }

    /// H3: node `index` answers the operator; a probe's answer (to a group
    /// the operator created) is judged against the life of the replica
    /// that gave it, now, before the node can host anything else.
    fn judge_probe_answer(&mut self, index: usize, answer: &ClientAnswer) {
        let ClientAnswer::Reply(reply) = answer else { return };
        if reply.group == GroupId::METADATA {
            return;
        }
        let cohort_messages::Outcome::Ok(bytes) = &reply.outcome else { return };
        let Some(value) = crate::kv::result_value(bytes) else { return };
        let Some(incarnation) = self.nodes[index].replica(reply.group).map(|replica| replica.incarnation()) else {
            return;
        };
        self.checkers.answered(self.now, index, reply.group, incarnation, value);
    }

    /// Encode `message` as node `index`'s frame and put it on the network.
    fn send_frame(&mut self, index: usize, sender: cohort_messages::NodeId, to: Endpoint, message: &Message) {
        let bytes = message.encode(CLUSTER, sender, TraceContext::NONE).to_bytes();
        self.forger_observe(index, &bytes);
        if let Endpoint::Node(to_index) = to {
            let entries = match message {
                Message::Commit(batch) => batch.len() as u64,
                Message::CommitReply(batch) => batch.len() as u64,
                Message::ViewChangeBatch(batch) => batch.len() as u64,
                _ => 1,
            };
            match message {
                Message::ViewChangeBatch(batch) => {
                    for inner in batch.entries().flatten() {
                        *self.message_log.entry((index, to_index, inner.command())).or_default() += 1;
                    }
                }
                message => *self.message_log.entry((index, to_index, message.command())).or_default() += 1,
            }
            let counter = self.frame_log.entry((index, to_index, message.command())).or_default();
            counter.0 += 1;
            counter.1 += entries;
            counter.2 += bytes.len() as u64;
        }
        self.network.send(self.now, Packet { from: Endpoint::Node(index), to, bytes }, &mut self.rng);
    }

    fn client_of(&self, id: cohort_messages::ClientId) -> Option<usize> {
        self.clients.iter().position(|client| client.id == id)
    }

    /// Where an answer to client `id` goes: a simulated client, or the node
    /// whose running metadata agent uses that id.
    fn endpoint_of(&self, id: cohort_messages::ClientId) -> Option<Endpoint> {
        if let Some(client) = self.client_of(id) {
            return Some(Endpoint::Client(client));
        }
        if self.operator.owns(id) {
            return Some(Endpoint::Operator);
        }
        self.agent_of(id).map(Endpoint::Node)
    }

    fn deliver(&mut self, packet: Packet) {
        let decoded = Frame::decode(packet.bytes.clone(), CLUSTER).map_err(|_| ()).and_then(|frame| {
            let message = frame.message().map_err(|_| ())?;
            Ok((frame.header.sender, message))
        });
        let Ok((sender, message)) = decoded else {
            self.frames_rejected += 1;
            return;
        };
        match packet.to {
            Endpoint::Client(client) => self.deliver_to_client(client, message),
            Endpoint::Operator => self.deliver_to_operator(sender, message),
            Endpoint::Node(index) => {
                // T6: a frame for the non-member forger (no simulated node) is dropped.
                let Some(node) = self.nodes.get(index) else { return };
                if !node.is_up() {
                    return;
                }
                if self.now < node.paused_until {
                    let later = node.paused_until;
                    self.network.defer(later, packet);
                    return;
                }
                self.forger_observe(index, &packet.bytes);
                if let Message::PairHeartbeatReply(reply) = &message {
                    self.checkers.quiet.reply_delivered(index, sender, reply);
                }
                let from_peer = matches!(packet.from, Endpoint::Node(_));
                self.route_inbound(index, sender, message, from_peer);
            }
        }
    }

    fn deliver_to_client(&mut self, index: usize, message: Message) {
        let nodes = self.nodes.len();
        match message {
            Message::Reply(reply) => {
                self.check_not_refused(index, &reply);
                if let Some(done) = self.clients[index].on_reply(self.now, &reply, &mut self.history) {
                    self.checkers.replied(self.now, index, reply.group, reply.request);
                    let entry = &self.history[done];
                    if entry.torn {
                        let violation = format!(
                            "tick {}: K5: the op batch {:?} of client {index} at {:?} was answered with results not of its ops one after another: {:?}",
                            self.now, entry.op, entry.committed_op, reply.outcome
                        );
                        self.checkers.violations.push(violation);
                    }
                    if let Some(op) = entry.committed_op {
                        self.writes_acknowledged += 1;
                        self.batches_acknowledged += u64::from(matches!(entry.op, KvOp::Puts { .. }));
                        self.check_acknowledged(done, op);
                    }
                }
            }
            Message::Redirect(redirect) => {
                if let Some(send) = self.clients[index].on_redirect(&redirect, nodes, &mut self.rng) {
                    self.send_request(index, send);
                }
            }
            _ => {}
        }
    }

    /// Each client retries only its outstanding request, so a refusal of
    /// that request as superseded is a bug: the client would give up on a
    /// write the group still owes it. So is a refusal as unknown, unless
    /// the run has more clients than a group's client table holds (H5's
    /// eviction workload, `--clients-max`): then the table may have evicted
    /// the client, which starts again under a fresh id. A refusal of a write
    /// numbered at or below the op the client registered at again (a late
    /// copy of its registration after the eviction) is the same case.
    fn check_not_refused(&mut self, index: usize, reply: &Reply) {
        let Outcome::Error { code: ReplyError::Superseded, detail } = &reply.outcome else { return };
        let Some(outstanding) = &self.clients[index].outstanding else { return };
        if outstanding.request.request != reply.request || outstanding.request.group != reply.group {
            return;
        }
        // The core's words for a client its table does not know, or knows
        // only from a registration after its eviction (a late copy).
        if self.evictions_possible() && (detail.contains("is not known") || detail.contains("registered again")) {
            self.evicted_clients += 1;
            self.clients[index].evicted(self.now, &mut self.history);
            self.checkers.client_restarted(index);
            return;
        }
        let violation = format!("tick {}: client {index} refused: {detail}", self.now);
        self.checkers.violations.push(violation);
    }

    /// H5: more clients than a group's client table holds, so that
    /// eviction runs.
    fn evictions_possible(&self) -> bool {
        self.config.clients > self.config.core.clients_max
    }

    fn check_acknowledged(&mut self, history: usize, op: Op) {
        if self.config.write_mode == cohort_core::WriteMode::Async {
            return; // Q4: acknowledged on the primary's durable copy, before any apply.
        }
        let entry = &self.history[history];
        let operation = entry.op.operation(self.config.op_batches);
        self.checkers.acknowledged(self.now, entry.group, op, digest(&operation));
    }

    fn send_request(&mut self, client: usize, send: Send) {
        // A registration (H5) is no kv write: it applies nothing.
        if send.request.kind.is_write() && !is_registration(send.request.request) {
            let request = &send.request;
            self.checkers.write_sent(request.group, digest(&request.operation), request.client, request.request);
        }
        let bytes =
            Message::Request(send.request).encode(CLUSTER, node_id(usize::MAX >> 1), TraceContext::NONE).to_bytes();
        self.network.send(
            self.now,
            Packet { from: Endpoint::Client(client), to: Endpoint::Node(send.to), bytes },
            &mut self.rng,
        );
    }

    fn run_clients(&mut self) {
        let nodes = self.nodes.len();
        for index in 0..self.clients.len() {
            if let Some(send) = self.clients[index].retry(self.now, RETRY_TICKS, nodes, &mut self.rng) {
                self.send_request(index, send);
                continue;
            }
            // Clients added by scenarios (past `config.clients`) only retry.
            if index >= self.config.clients
                || self.clients[index].outstanding.is_some()
                || !self.rng.chance(if self.healed { 500 } else { 200 })
            {
                continue;
            }
            let group = GroupId(self.rng.below(self.specs.len() as u64));
            let key = self.rng.below(3);
            self.value_counter += 1;
            // Values are unique, so every write is distinguishable in the history.
            let value = (self.config.seed << 24) ^ self.value_counter;
            let mut op = match self.rng.below(10) {
                0..=3 => KvOp::Get { key },
                4..=7 => KvOp::Put { key, value },
                _ => KvOp::Cas { key, expected: self.last_value(group, key), new: value },
            };
            // K5: a put is half of the time two to four puts of its key in
            // one batch (drawn only with op batches: every other run draws
            // as it did).
            if self.config.op_batches && matches!(op, KvOp::Put { .. }) && self.rng.chance(500) {
                let count = 2 + self.rng.below(3);
                self.value_counter += count - 1;
                op = KvOp::Puts { key, first: value, count };
            }
            if self.resting(group) {
                // Z3: a resting group turns idle and quiesces; a rare read
                // wakes it and is served from the pair-heartbeat quorum window.
                if !self.rng.chance(40) {
                    continue;
                }
                op = KvOp::Get { key };
            }
            if let Some(send) = self.clients[index].start(self.now, group, op, nodes, &mut self.history, &mut self.rng)
            {
                self.send_request(index, send);
            }
        }
    }

    /// Z3: with quiescence on, each group rests (no writes) for
    /// `REST_TICKS` of every `2 * REST_TICKS`, staggered by group, so that it
    /// turns idle and quiesces under the faults. Always false with it off,
    /// which leaves every draw of a seed as it was.
    fn resting(&self, group: GroupId) -> bool {
        const REST_TICKS: u64 = 400;
        self.config.core.timing.commit_quiesce_timeout_ticks.is_some()
            && !self.healed
            && (self.now / REST_TICKS + group.0).is_multiple_of(2)
    }

    fn last_value(&self, group: GroupId, key: u64) -> u64 {
        self.history
            .iter()
            .rev()
            .find(|op| op.group == group && op.op.key() == key && op.returned_tick.is_some())
            .and_then(|op| match op.op {
                KvOp::Get { .. } => op.output,
                write => write.written(),
            })
            .unwrap_or(0)
    }
}

/// Helpers for hand-written scenarios.
impl Sim {
    /// The node that is the normal primary of `group` in the highest view.
    pub fn primary_of(&self, group: GroupId) -> Option<usize> {
        self.nodes
            .iter()
            .filter_map(|node| {
                let replica = node.replica(group)?;
                replica.is_primary().then_some(((replica.incarnation(), replica.view()), node.index))
            })
            .max()
            .map(|(_, index)| index)
    }

    /// A node's replica of `group`, if the node is up.
    pub fn replica(&self, node: usize, group: GroupId) -> Option<&cohort_core::Replica> {
        self.nodes[node].replica(group)
    }

    /// Crash a node's process (kill -9: what it wrote stays in the page
    /// cache); it restarts from its storage after `down_ticks`.
    pub fn crash_node(&mut self, index: usize, down_ticks: u64) {
        self.take_down(index, self.now + down_ticks, false);
    }

    /// Cut a node's power: its disk keeps what was synced and a torn part of
    /// the rest; it restarts from its storage after `down_ticks`.
    pub fn power_off_node(&mut self, index: usize, down_ticks: u64) {
        self.take_down(index, self.now + down_ticks, true);
    }

    /// A new client sends `op` for `group` to node `to`; returns its history index.
    pub fn submit(&mut self, group: GroupId, op: KvOp, to: usize) -> usize {
        let index = self.clients.len();
        let mut client = SimClient::new(index, self.config.seed, self.config.op_batches);
        client.guess.insert(group, to);
        let nodes = self.nodes.len();
        let send =
            client.start(self.now, group, op, nodes, &mut self.history, &mut self.rng).expect("a new client is idle");
        self.clients.push(client);
        self.send_request(index, send);
        self.history.len() - 1
    }

    /// Client `client` (created on first use, never random) sends `op` for
    /// `group` to node `to` if it is idle; returns the history index.
    pub fn submit_as(&mut self, client: usize, group: GroupId, op: KvOp, to: usize) -> Option<usize> {
        while self.clients.len() <= client.max(self.config.clients) {
            let index = self.clients.len();
            self.clients.push(SimClient::new(index, self.config.seed, self.config.op_batches));
        }
        let nodes = self.nodes.len();
        self.clients[client].guess.entry(group).or_insert(to);
        let send = self.clients[client].start(self.now, group, op, nodes, &mut self.history, &mut self.rng)?;
        self.send_request(client, send);
        Some(self.history.len() - 1)
    }

    /// Client `client` (created on first use, never random) sends `op` for
    /// `group` to node `to`, whatever it guessed before, if it is idle;
    /// returns the history index. Its retries follow redirects as usual.
    pub fn submit_to(&mut self, client: usize, group: GroupId, op: KvOp, to: usize) -> Option<usize> {
        while self.clients.len() <= client.max(self.config.clients) {
            let index = self.clients.len();
            self.clients.push(SimClient::new(index, self.config.seed, self.config.op_batches));
        }
        if self.clients[client].outstanding.is_some() {
            return None;
        }
        self.clients[client].guess.insert(group, to);
        self.submit_as(client, group, op, to)
    }

    /// True if client `client` has no request in flight.
    pub fn client_idle(&self, client: usize) -> bool {
        self.clients.get(client).is_none_or(|c| c.outstanding.is_none())
    }

    /// Send the outstanding request of the client of history entry `op` again, to `to`.
    pub fn resend(&mut self, op: usize, to: usize) {
        let client = self.history[op].client;
        let request = match &self.clients[client].outstanding {
            Some(outstanding) => outstanding.request.clone(),
            None => return,
        };
        self.send_request(client, Send { to, request });
    }

    /// Send a raw request from the client of history entry `op` (for retries of a finished request).
    pub fn send_raw(&mut self, op: usize, to: usize, request: cohort_messages::Request) {
        let client = self.history[op].client;
        self.send_request(client, Send { to, request });
    }

    /// The request a client sent for history entry `op` (while outstanding).
    pub fn outstanding_request(&self, op: usize) -> Option<cohort_messages::Request> {
        let client = self.history[op].client;
        self.clients[client].outstanding.as_ref().map(|outstanding| outstanding.request.clone())
    }

    /// The client id of history entry `op`.
    pub fn client_id(&self, op: usize) -> cohort_messages::ClientId {
        self.clients[self.history[op].client].id
    }

    /// Step without faults until `done` holds or `max_ticks` pass; true if it held.
    pub fn run_until(&mut self, max_ticks: u64, done: impl Fn(&Sim) -> bool) -> bool {
        for _ in 0..max_ticks {
            if done(self) {
                return true;
            }
            self.step(false);
        }
        done(self)
    }

    /// Block frames from node `from` to node `to`.
    pub fn block(&mut self, from: usize, to: usize) {
        self.network.blocked.insert((from, to));
    }

    /// Unblock everything.
    pub fn unblock_all(&mut self) {
        self.network.blocked.clear();
    }

    /// P4: make `nodes` the learners of `group`, as a host following the
    /// metadata would: every running replica of the group gets the new list,
    /// a running node that becomes a learner creates an empty learner
    /// replica, and a running learner that is dropped unloads the group. A
    /// crashed node picks up the change when it restarts.
    pub fn set_learners(&mut self, group: GroupId, nodes: &[usize]) {
        let Some(position) = self.specs.iter().position(|spec| spec.group == group) else { return };
        self.specs[position].learners = nodes.iter().map(|node| node_id(*node)).collect();
        let spec = self.specs[position].clone();
        for index in 0..self.nodes.len() {
            let wanted = spec_for(&spec, index);
            let node = &mut self.nodes[index];
            if !node.is_up() {
                continue;
            }
            let hosted = node.replica(group).is_some();
            if wanted.is_some() && !hosted {
                // D2: a learner dropped a moment ago may have a run away.
                node.wait_for_state(group);
            }
            let state = (wanted.is_some() && !hosted).then(|| node.state_machine_for(group));
            if node.shard_for_mut(group).is_none() {
                continue;
            }
            match (wanted, state) {
                (Some(mine), Some(state)) => node.host_empty(mine, state).expect("a new learner replica"),
                (Some(_), None) => {
                    let shard = node.shard_for_mut(group).expect("the node is up");
                    shard.set_learners(group, spec.learners.clone()).expect("a valid list")
                }
                (None, _) if hosted => self.drop_replica(index, group),
                (None, _) => {}
            }
            self.drain(index);
        }
    }

    /// True if node `index` is a learner of `group` (kv groups only).
    pub fn is_learner_node(&self, group: GroupId, index: usize) -> bool {
        // Placed at run time (metadata scenario): what the hosted replica was given.
        if let Some(replica) = self.replica(index, group) {
            return replica.learner_nodes().contains(&node_id(index));
        }
        self.specs.iter().any(|spec| spec.group == group && spec.learners.contains(&node_id(index)))
    }

    /// P4: the primary of `group` says learner node `index` durably holds
    /// the log through its commit point.
    pub fn learner_caught_up(&self, group: GroupId, index: usize) -> bool {
        let Some(primary) = self.primary_of(group) else { return false };
        self.replica(primary, group).is_some_and(|replica| replica.learner_caught_up(node_id(index)))
    }

    /// After the liveness phase: every member of every group that is
    /// recovering (H1) ends its recovery within another liveness budget.
    /// A group can commit while one member stays recovering for good (a
    /// vote it lent to a later view that the others never took, while a
    /// primary of an earlier view led them), and then a second failure
    /// stops it: the liveness phase alone does not see that.
    fn check_members_recover(&mut self) {
        let recovering = |sim: &Sim| -> Vec<(GroupId, usize)> {
            let groups: Vec<GroupId> = sim.specs.iter().map(|spec| spec.group).collect();
            (0..sim.nodes.len())
                .flat_map(|index| groups.iter().map(move |group| (*group, index)))
                .filter(|(group, index)| sim.replica(*index, *group).is_some_and(|replica| replica.is_recovering()))
                .collect()
        };
        let deadline = self.now + self.config.liveness_ticks;
        let mut pending = recovering(self);
        while !pending.is_empty() && self.now < deadline {
            self.step(false);
            pending = recovering(self);
        }
        for (group, index) in pending {
            self.checkers.violations.push(format!(
                "liveness: node {index}'s member of {group} still recovers {} ticks after the liveness phase (H1)",
                self.config.liveness_ticks
            ));
        }
    }

    /// After the liveness phase: every learner of every group catches up
    /// with its primary's commit point within another liveness budget (P4,
    /// V3 for learners). Nothing to do without learners.
    fn check_learners_catch_up(&mut self) {
        let mut pending: Vec<(GroupId, usize)> = self
            .specs
            .iter()
            .flat_map(|spec| spec.learners.iter().map(|node| (spec.group, node_index(*node))))
            .collect();
        let deadline = self.now + self.config.liveness_ticks;
        while !pending.is_empty() && self.now < deadline {
            pending.retain(|(group, index)| !self.learner_caught_up(*group, *index));
            if !pending.is_empty() {
                self.step(false);
            }
        }
        for (group, index) in pending {
            self.checkers.violations.push(format!(
                "liveness: learner node {index} of {group} did not catch up within {} ticks after the liveness phase",
                self.config.liveness_ticks
            ));
        }
    }
}

/// The groups node `index` hosts: every kv group it is a member or a
/// learner of, and the metadata group in the metadata scenario.
fn node_specs(specs: &[GroupSpec], metadata: Option<&GroupSpec>, index: usize) -> Vec<GroupSpec> {
    specs.iter().chain(metadata).filter_map(|spec| spec_for(spec, index)).collect()
}

/// `spec` as node `index`'s replica sees it, if the node is a voter or a
/// learner of the group.
fn spec_for(spec: &GroupSpec, index: usize) -> Option<GroupSpec> {
    Some(GroupSpec { me: spec.index_of(node_id(index))?, ..spec.clone() })
}
