//! A simulated node: several production [`Shard`]s, each run by the node's
//! own [`ShardDriver`] (the one a real node's shard actor runs) with its own
//! storage and storage worker; groups go to shards by
//! `cohort_core::routing::shard_of`, as on a real node. In the metadata
//! scenario the node's metadata agent (`cohort_core::metadata::MetadataAgent`, with the node's scan schedule) runs next to them.
//!
//! The node's disk outlives its processes: one [`SimDisk`] per node holds a
//! directory per shard, and every start (the first one too) opens each
//! shard's `FileStorage` on it and runs the real recovery. With
//! [`StorageKind::Memory`] each shard keeps a `MemoryStorage` instead.

use crate::shared::Shared;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use cohort_core::driver::{DriverConfig, ShardDriver, StorageJob};
use cohort_core::routing::shard_of;
use cohort_core::storage::memory::MemoryStorage;
use cohort_core::storage::{Recovered, RecoveredGroup, Storage, StorageError};
use cohort_core::{CoreConfig, Effect, FlushId, GroupSpec, Replica, Shard, ShardError, StateMachine};
use cohort_messages::{ClusterId, GroupId, NodeId};
use cohort_wal::FileStorage;

use crate::apply_worker::{AppliedRun, ApplyWorker};
use crate::disk::SimDisk;
use crate::disk_kv::DiskKv;
use crate::kv::{ApplySink, Kv};
use crate::metadata::{AgentShell, MetadataMirror, MirroredMetadata, StepGateLog};
use crate::rng::Rng;
use crate::storage::{Backend, SimStorage, StateKind, StorageKind, file_config};
use crate::worker::StorageWorker;

/// The simulated cluster id.
pub const CLUSTER: ClusterId = ClusterId(0xC0_4087);

/// The length of a simulated tick, in microseconds (the default tick of a
/// real node), for the driver's turn length.
pub const TICK_MICROS: u64 = 100_000;

/// One shard of a running node.
pub struct SimShard {
    /// The shard, run by the node's driver.
    pub driver: ShardDriver,
    /// Its storage.
    pub storage: SimStorage,
    worker: StorageWorker,
    /// D2: its apply worker, with the runs away.
    pub applies: ApplyWorker,
    /// H1: this process's recovery created the storage (as a node's shard
    /// actor keeps it): a voter hosted empty joins, recovering.
    pub formatted: bool,
}

impl SimShard {
    /// A shard of node `index` among `nodes`, with no groups yet.
    fn new(index: usize, nodes: usize, shard: usize, config: &CoreConfig, epoch: u64, storage: SimStorage) -> Self {
        let mut driver = driver_of(index, nodes, config);
        driver.set_pair_identity(shard as u16, epoch);
        SimShard {
            driver,
            storage,
            worker: StorageWorker::default(),
            applies: ApplyWorker::default(),
            formatted: false,
        }
    }

    /// Host `spec` empty, as a node's shard does: a voter joins,
    /// recovering, on a storage this process created (H1), and starts as
    /// a new member on one that was there.
    pub fn host_empty(&mut self, spec: GroupSpec, state: Box<dyn StateMachine>) -> Result<(), ShardError> {
        if self.formatted { self.driver.join_group(spec, state) } else { self.driver.create_group(spec, state) }
    }

    /// The shard's core.
    pub fn core(&self) -> &Shard {
        self.driver.shard()
    }
}

/// The driver of a shard of node `index` among `nodes`, with no groups yet,
/// built as the simulator builds every shard.
fn driver_of(index: usize, nodes: usize, config: &CoreConfig) -> ShardDriver {
    let peers = (0..nodes).filter(|peer| *peer != index).map(node_id);
    shard_driver(node_id(index), peers, config, DriverConfig::for_tick(TICK_MICROS))
}

/// A shard driver of `node` with these peers and limits, with no groups
/// yet: how the simulator builds every shard (and the recorded-trace test
/// a real node's, to replay it).
pub fn shard_driver(
    node: NodeId,
    peers: impl IntoIterator<Item = NodeId>,
    config: &CoreConfig,
    limits: DriverConfig,
) -> ShardDriver {
    ShardDriver::new(Shard::new(node, config.clone()), limits, peers)
}

/// How a node is built.
#[derive(Copy, Clone, Debug)]
pub struct NodeSetup {
    /// Shards per node.
    pub shards: usize,
    /// The storage each shard runs.
    pub storage: StorageKind,
    /// D1: where the kv groups' state machines keep their state.
    pub state: StateKind,
    /// K5: the kv groups' state machines take op batches.
    pub op_batches: bool,
}

/// Why a node could not start: a storage refused to open or recover.
#[derive(Clone, Debug)]
pub struct StartFailure {
    /// The shard.
    pub shard: usize,
    /// The storage's error.
    pub error: StorageError,
}

/// One node.
pub struct SimNode {
    /// H5: its disk (or a shard's directory) was replaced while it held
    /// data, and some replica of it has not yet durably taken its
    /// primary's log back (the fault injector clears it).
    pub lost_data: bool,
    /// Index and node id (`NodeId(index + 1)`).
    pub index: usize,
    /// The shards of the running process; empty while it is down.
    pub shards: Vec<SimShard>,
    setup: NodeSetup,
    /// The node's disk (every shard's directory on it).
    pub disk: SimDisk,
    /// `StorageKind::Memory`: each shard's storage while the node is down.
    memory: Vec<Option<MemoryStorage>>,
    /// Each flush takes between these many ticks (inclusive).
    pub flush_latency_ticks: (u64, u64),
    /// D2: each run lent to an apply worker comes back after between
    /// these many ticks (inclusive).
    pub apply_latency_ticks: (u64, u64),
    /// Nodes in the run (voters and learners): this node's peers are the others.
    pub nodes: usize,
    /// What handling one input costs this node's shard thread, in
    /// microseconds: the clock the driver's turn length is judged by moves
    /// this much per input within a tick.
    pub input_cost_micros: u64,
    /// Inputs handled so far in the current tick, and that tick.
    inputs_in_tick: (u64, u64),
    rng: Rng,
    /// Paused until this tick (exclusive).
    pub paused_until: u64,
    /// Crashed until this tick, then restarted.
    pub down_until: u64,
    /// Apply reports per group.
    pub sinks: HashMap<GroupId, ApplySink>,
    /// Times this node restarted.
    pub restarts: u64,
    /// D1: its state machines' checkpoints, and replicas rebuilt for want
    /// of one.
    pub checkpoints: crate::disk_kv::CheckpointSink,
    /// The applied metadata of this node's metadata replica (metadata scenario).
    pub metadata: MetadataMirror,
    /// M2: step-gate violations its metadata replica's applies showed
    /// (`check::step_gates`), collected after each turn.
    pub step_gates: StepGateLog,
    /// The metadata agent of the running process, with what its shell
    /// keeps beside it (metadata scenario).
    pub agent: Option<AgentShell>,
    /// Groups the agent unloaded (S4): not hosted again after a restart.
    pub unloaded: BTreeSet<GroupId>,
    /// Learner replicas created while running (P4), by group: recovered
    /// with this spec after a restart (storage upgrades it if the group
    /// switched incarnation since).
    pub extra_specs: BTreeMap<GroupId, GroupSpec>,
    /// T5: what the shards of earlier processes refused (a crash loses the
    /// shards, not the count).
    pub refusals_retired: cohort_core::Refusals,
    /// The counters of earlier processes' shards (a crash loses the shards,
    /// not the counts).
    pub metrics_retired: cohort_core::ShardMetrics,
}

/// Z3: quiescence counters of a node, over all its starts.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct QuietCounts {
    /// Group members quiesced.
    pub quiesced: u64,
    /// Quiesced group members woken, on either end.
    pub woken: u64,
    /// Digest mismatches.
    pub mismatches: u64,
    /// Shard-pair heartbeats sent.
    pub heartbeats: u64,
}

impl QuietCounts {
    /// Add one shard's counters.
    pub fn add(&mut self, metrics: &cohort_core::ShardMetrics) {
        self.quiesced += metrics.quiesced;
        self.woken += metrics.quiet_woken;
        self.mismatches += metrics.quiet_mismatches;
        self.heartbeats += metrics.pair_heartbeats_sent;
    }

    /// Add another node's counts.
    pub fn sum(&mut self, other: QuietCounts) {
        self.quiesced += other.quiesced;
        self.woken += other.woken;
        self.mismatches += other.mismatches;
        self.heartbeats += other.heartbeats;
    }
}

/// The node id of node `index`.
pub fn node_id(index: usize) -> NodeId {
    NodeId(index as u64 + 1)
}

/// The index of a node id.
pub fn node_index(node: NodeId) -> usize {
    (node.0 - 1) as usize
}

/// The directory of shard `shard` on a node's disk.
pub fn shard_dir(shard: usize) -> PathBuf {
    PathBuf::from(format!("/cohort/shard-{shard}"))
}

impl SimNode {
    /// A node hosting `specs` on fresh storage, started (its storage
    /// recovered empty) at tick 0. `rng` drives its disk's choices.
    pub fn new(
        index: usize,
        nodes: usize,
        setup: NodeSetup,
        config: &CoreConfig,
        specs: &[GroupSpec],
        mut rng: Rng,
    ) -> SimNode {
        assert!(setup.shards > 0, "a node has at least one shard");
        let memory = match setup.storage {
            StorageKind::Memory => (0..setup.shards).map(|_| Some(MemoryStorage::new())).collect(),
            StorageKind::File => Vec::new(),
        };
        let mut node = SimNode {
            lost_data: false,
            index,
            shards: Vec::new(),
            setup,
            disk: SimDisk::new(rng.next_u64()),
            memory,
            flush_latency_ticks: (1, 1),
            apply_latency_ticks: (0, 2),
            nodes,
            input_cost_micros: 100,
            inputs_in_tick: (0, 0),
            rng,
            paused_until: 0,
            down_until: 0,
            sinks: HashMap::new(),
            restarts: 0,
            checkpoints: Default::default(),
            metadata: MetadataMirror::default(),
            step_gates: StepGateLog::default(),
            agent: None,
            unloaded: BTreeSet::new(),
            extra_specs: BTreeMap::new(),
            refusals_retired: cohort_core::Refusals::default(),
            metrics_retired: cohort_core::ShardMetrics::default(),
        };
        let opened = node.open_storages().unwrap_or_else(|failure| {
            panic!("node {index} cannot open fresh storage: shard {}: {}", failure.shard, failure.error)
        });
        let mut shards: Vec<SimShard> = opened
            .into_iter()
            .enumerate()
            .map(|(shard, (storage, recovered))| {
                let mut running = SimShard::new(index, nodes, shard, config, 0, storage);
                running.formatted = recovered.may_have_lost_data();
                running
            })
            .collect();
        for spec in specs {
            let state = node.state_machine(spec.group);
            let shard = &mut shards[shard_of(spec.group, setup.shards)];
            shard.host_empty(spec.clone(), state).expect("fresh group");
        }
        node.shards = shards;
        node
    }

    /// This node's shard counters, over all its starts.
    pub fn shard_metrics(&self) -> cohort_core::ShardMetrics {
        let mut total = self.metrics_retired.clone();
        for shard in &self.shards {
            total.add(shard.core().metrics());
        }
        total
    }

    /// Z3: this node's quiescence counters, over all its starts.
    pub fn quiet_counts(&self) -> QuietCounts {
        let mut total = QuietCounts::default();
        total.add(&self.shard_metrics());
        total
    }

    /// T5: every peer message this node's shards refused, over all its starts.
    pub fn refusals(&self) -> cohort_core::Refusals {
        let mut total = self.refusals_retired.clone();
        for shard in &self.shards {
            total.add(shard.core().refused());
        }
        total
    }

    /// Shards per node.
    pub fn shard_count(&self) -> usize {
        self.setup.shards
    }

    /// The shard that hosts `group` (whether or not it does now).
    pub fn shard_index(&self, group: GroupId) -> usize {
        shard_of(group, self.setup.shards)
    }

    /// True while the process runs (paused or not).
    pub fn is_up(&self) -> bool {
        !self.shards.is_empty()
    }

    /// True if the node runs and is not paused at `now`.
    pub fn is_running(&self, now: u64) -> bool {
        self.is_up() && now >= self.paused_until
    }

    /// The shard core that hosts `group`, if the node is up.
    pub fn shard_for(&self, group: GroupId) -> Option<&Shard> {
        self.shards.get(self.shard_index(group)).map(SimShard::core)
    }

    /// Host `spec` empty on its shard, as a node does (H1: see
    /// [`SimShard::host_empty`]).
    pub fn host_empty(&mut self, spec: GroupSpec, state: Box<dyn StateMachine>) -> Result<(), ShardError> {
        let index = self.shard_index(spec.group);
        match self.shards.get_mut(index) {
            Some(shard) => shard.host_empty(spec, state),
            None => Err(ShardError::Recovery(format!("node {} is down", self.index))),
        }
    }

    /// D2: hand shard `shard`'s apply worker a run the driver lent at
    /// `now`; it comes back after a seeded number of ticks.
    pub fn lend(&mut self, shard: usize, job: cohort_core::driver::ApplyJob, now: u64) {
        let (low, high) = self.apply_latency_ticks;
        let due_tick = now + self.rng.range(low, high.max(low));
        if let Some(running) = self.shards.get_mut(shard) {
            running.applies.lend(job, now, due_tick);
        }
    }

    /// D2: shard `shard`'s oldest run away, applied, if it is due by `now`.
    pub fn complete_apply(&mut self, shard: usize, now: u64) -> Option<AppliedRun> {
        let running = self.shards.get_mut(shard)?;
        let driver = &running.driver;
        running.applies.complete(now, |group| driver.state_away(group))
    }

    /// D2: wait for shard `shard`'s apply worker until no removed replica
    /// of `group` has its state machine away (a shell that must host the
    /// group again now). Returns the runs handed back.
    pub fn wait_for_state(&mut self, group: GroupId) -> usize {
        let index = self.shard_index(group);
        let Some(shard) = self.shards.get_mut(index) else { return 0 };
        let mut handed = 0;
        while shard.driver.state_away(group) {
            let driver = &shard.driver;
            let Some(run) = shard.applies.complete_now(|group| driver.state_away(group)) else { break };
            shard.driver.on_applied(run.group, run.id, run.state, run.done);
            handed += 1;
        }
        handed
    }

    /// The driver of the shard that hosts `group`, if the node is up: what
    /// changes the shard goes through it, as on a node.
    pub fn shard_for_mut(&mut self, group: GroupId) -> Option<&mut ShardDriver> {
        let index = self.shard_index(group);
        self.shards.get_mut(index).map(|shard| &mut shard.driver)
    }

    /// The node's replica of `group`, if the node is up and hosts it.
    pub fn replica(&self, group: GroupId) -> Option<&Replica> {
        self.shard_for(group)?.replica(group)
    }

    /// Every replica of the running process.
    pub fn replicas(&self) -> impl Iterator<Item = &Replica> {
        self.shards.iter().flat_map(|shard| shard.core().replicas())
    }

    /// D3: true if one of its replicas fetches a streamed state that its
    /// state machine stages.
    pub fn staging_a_stream(&self) -> bool {
        self.replicas().any(Replica::staging_a_stream)
    }

    fn sink(&mut self, group: GroupId) -> ApplySink {
        Shared::clone(self.sinks.entry(group).or_default())
    }

    /// A fresh state machine for `group` (see `state_machine`), for a
    /// replica the harness creates on a running node.
    pub fn state_machine_for(&mut self, group: GroupId) -> Box<dyn StateMachine> {
        self.state_machine(group)
    }

    /// A fresh state machine for `group`: the mirrored metadata state
    /// machine for the metadata group, the kv map for the others.
    fn state_machine(&mut self, group: GroupId) -> Box<dyn StateMachine> {
        let sink = self.sink(group);
        if group == GroupId::METADATA {
            Box::new(MirroredMetadata::new(Shared::clone(&self.metadata), sink, Shared::clone(&self.step_gates)))
        } else if self.setup.state == StateKind::Disk {
            let kv = Kv::new(sink).op_batches(self.setup.op_batches);
            Box::new(DiskKv::open(self.disk.clone(), group, kv, Shared::clone(&self.checkpoints)))
        } else {
            Box::new(Kv::new(sink).op_batches(self.setup.op_batches))
        }
    }

    /// Open every shard's storage and run its recovery, as a starting node
    /// does. On failure every storage opened so far is closed again.
    fn open_storages(&mut self) -> Result<Vec<(SimStorage, Recovered)>, StartFailure> {
        let mut opened = Vec::with_capacity(self.setup.shards);
        for shard in 0..self.setup.shards {
            let backend = match self.setup.storage {
                StorageKind::File => match FileStorage::open_on(self.disk.clone(), shard_dir(shard), file_config()) {
                    Ok(file) => Backend::File(Box::new(file)),
                    Err(error) => panic!("the simulator's storage config is invalid: {error}"),
                },
                StorageKind::Memory => Backend::Memory(self.memory[shard].take().unwrap_or_default()),
            };
            let mut storage = SimStorage::new(backend);
            match storage.recover() {
                Ok(recovered) => opened.push((storage, recovered)),
                Err(error) => {
                    self.put_back(storage, shard);
                    for (index, (storage, _)) in opened.into_iter().enumerate() {
                        self.put_back(storage, index);
                    }
                    return Err(StartFailure { shard, error });
                }
            }
        }
        Ok(opened)
    }

    /// A process is gone: its memory storage goes back to the node (a file
    /// storage is simply closed; its data is on the disk).
    fn put_back(&mut self, storage: SimStorage, shard: usize) {
        if let Backend::Memory(mut memory) = storage.backend {
            // A fresh MemoryStorage must recover again before use.
            memory.crash();
            self.memory[shard] = Some(memory);
        }
    }

    /// Restart from storage (V4): every shard's storage recovers, then each
    /// shard rebuilds the groups it hosts. On failure the node stays down.
    pub fn restart(&mut self, now: u64, config: &CoreConfig, specs: &[GroupSpec]) -> Result<(), StartFailure> {
        let opened = self.open_storages()?;
        let mut all: Vec<GroupSpec> =
            specs.iter().filter(|spec| !self.extra_specs.contains_key(&spec.group)).cloned().collect();
        all.extend(self.extra_specs.values().cloned());
        let mut shards = Vec::with_capacity(opened.len());
        let mut recovered_groups = Vec::with_capacity(opened.len());
        for (shard, (storage, recovered)) in opened.into_iter().enumerate() {
            // Z3: each process of a node has its own epoch.
            let mut running = SimShard::new(self.index, self.nodes, shard, config, self.restarts + 1, storage);
            // A new process starts at the present, as a node's clock starts at its start.
            running.driver.start_at(now);
            running.formatted = recovered.may_have_lost_data();
            // H2: records the storage reports lost count as a lost disk for
            // the fault injector's tolerance, whatever lost them (a cut it
            // made, or a crash that kept a failed write's cut-back but not
            // the length restored after it: see docs/storage.md).
            self.lost_data |= recovered.lost_synced_records;
            shards.push(running);
            recovered_groups.push(recovered);
        }
        for spec in all {
            if self.unloaded.contains(&spec.group) {
                continue;
            }
            let group_id = spec.group;
            let index = self.shard_index(group_id);
            let state = self.state_machine(group_id);
            let spec_again = spec.clone();
            let mut data = recovered_groups[index].groups.remove(&group_id);
            if recovered_groups[index].lost_synced_records
                && data.as_ref().is_some_and(|data| data.superblock.is_none())
            {
                // H2: its superblock may be among the lost records: its
                // leftovers go and it is hosted empty, as a node's shard does.
                shards[index].worker.queue(StorageJob::RemoveGroup(group_id));
                data = None;
            }
            let hosted = match data {
                Some(group) => shards[index].driver.recover_group(spec, state, group),
                // H1: nothing of it here; as a node's shard hosts it.
                None if shards[index].formatted => shards[index].driver.join_group(spec, state),
                None => shards[index].driver.recover_group(spec, state, RecoveredGroup::default()),
            };
            let hosted = match hosted {
                // H3: data left from before the replica was placed here
                // empty: removed, and the replica hosted empty, as a node does.
                Err(cohort_core::ShardError::EarlierLife { .. }) => {
                    shards[index].worker.queue(StorageJob::RemoveGroup(group_id));
                    let state = self.state_machine(group_id);
                    shards[index].host_empty(spec_again, state)
                }
                // D1: the state machine lost state storage's log no longer
                // holds: joined empty, its storage reset to the superblock
                // it staged, as a node does.
                Err(cohort_core::ShardError::StateMachineBehind { .. }) => {
                    self.checkpoints.borrow_mut().rebuilt += 1;
                    let state = self.state_machine(group_id);
                    shards[index].driver.rebuild_group(spec_again, state).map(|reset| shards[index].worker.queue(reset))
                }
                other => other,
            };
            match hosted {
                Ok(()) => {}
                // Switched away before the restart (a member change): drop it.
                Err(cohort_core::ShardError::NotInIncarnation(_)) => {
                    self.unloaded.insert(group_id);
                }
                // D1: a state machine that cannot clear (a disk fault) fails
                // the start, as a node's shard does; it is tried again.
                Err(error @ cohort_core::ShardError::StateMachine { .. }) => {
                    for (shard, running) in shards.into_iter().enumerate() {
                        self.put_back(running.storage, shard);
                    }
                    // The replicas built so far replayed their logs into
                    // state machines this failed start drops: those applies
                    // are no process's that ran.
                    for sink in self.sinks.values() {
                        sink.borrow_mut().clear();
                    }
                    self.step_gates.borrow_mut().clear();
                    let (operation, path) = ("clearing a state machine", crate::disk_kv::state_dir());
                    let io =
                        StorageError::Io { operation, path: path.display().to_string(), reason: error.to_string() };
                    return Err(StartFailure { shard: index, error: io });
                }
                Err(error) => panic!("node {} cannot host {group_id}: {error}", self.index),
            }
        }
        self.shards = shards;
        self.restarts += 1;
        Ok(())
    }

    /// H1, H5: the node's data is gone while it is down: every shard's
    /// (a new disk) or one shard's (an emptied directory). It restarts on
    /// empty storage, which its recovery formats.
    pub fn wipe(&mut self, shard: Option<usize>) {
        assert!(self.shards.is_empty(), "H5: a disk is replaced only while its node is down");
        let shards: Vec<usize> = match shard {
            Some(shard) => vec![shard],
            None => (0..self.setup.shards).collect(),
        };
        for shard in shards {
            self.disk.wipe(&shard_dir(shard));
            if let Some(memory) = self.memory.get_mut(shard) {
                *memory = None;
            }
        }
        // A new disk takes the state machines' checkpoints (D1) with it.
        if shard.is_none() && self.setup.state == StateKind::Disk {
            self.disk.wipe(&crate::disk_kv::state_dir());
        }
    }

    /// D1: the state machines' checkpoints are gone while the node is
    /// down (their directory emptied), its log and snapshots kept: every
    /// replica whose snapshot needs its state machine's is rebuilt from
    /// the other members. False unless the kv state is on disk.
    pub fn wipe_state(&mut self) -> bool {
        assert!(self.shards.is_empty(), "D1: state is lost only while its node is down");
        if self.setup.state != StateKind::Disk {
            return false;
        }
        self.disk.wipe(&crate::disk_kv::state_dir());
        true
    }

    /// D1: where the kv groups' state machines keep their state.
    pub fn state_kind(&self) -> StateKind {
        self.setup.state
    }

    /// H2, H5: the newest log segment of shard `shard` is cut short while
    /// the node is down (see [`SimDisk::cut_newest_segment`]). False with
    /// memory storage, or with no records to cut.
    pub fn cut_newest_segment(&mut self, shard: usize, rng: &mut Rng) -> bool {
        assert!(self.shards.is_empty(), "H5: a segment is cut only while its node is down");
        self.memory.is_empty() && self.disk.cut_newest_segment(&shard_dir(shard), rng)
    }

    /// The process dies until `until`. A flush in flight is cut: its writes
    /// reach the page cache and the power (or the process) goes before its
    /// sync returns. With `power_loss` the disk then loses what was not
    /// synced (torn writes); without, it keeps what was written.
    pub fn crash(&mut self, until: u64, power_loss: bool) {
        let shards = std::mem::take(&mut self.shards);
        for shard in &shards {
            self.refusals_retired.add(shard.core().refused());
            self.metrics_retired.add(shard.core().metrics());
        }
        for (index, mut shard) in shards.into_iter().enumerate() {
            if shard.worker.in_flight().is_some() {
                match &mut shard.storage.backend {
                    Backend::File(file) => {
                        // Cut before the writes (a third of the time), at
                        // the first sync, or at the second (a rotation).
                        if !self.rng.chance(333) {
                            self.disk.cut_power_after_syncs(self.rng.below(2) as u32);
                            let _ = file.flush();
                        }
                    }
                    Backend::Memory(memory) => {
                        let seed = self.rng.next_u64();
                        memory.crash_mid_flush(seed);
                    }
                }
            }
            self.put_back(shard.storage, index);
        }
        self.disk.crash(power_loss, &mut self.rng);
        self.agent = None;
        self.down_until = until;
        self.paused_until = 0;
    }

    /// Hand shard `shard` one turn's storage effects; an idle worker runs
    /// them at once. `Err` means the node must stop.
    pub fn submit(&mut self, shard: usize, effects: Vec<Effect>, now: u64) -> Result<(), StorageError> {
        if effects.is_empty() {
            return Ok(());
        }
        let Some(running) = self.shards.get_mut(shard) else { return Ok(()) };
        running.worker.queue(StorageJob::Run(effects));
        self.pump(shard, now)
    }

    /// Let shard `shard`'s worker take its queued jobs if it is idle.
    pub fn pump(&mut self, shard: usize, now: u64) -> Result<(), StorageError> {
        let (low, high) = self.flush_latency_ticks;
        let rng = &mut self.rng;
        let Some(running) = self.shards.get_mut(shard) else { return Ok(()) };
        let failed = running.worker.pump(&mut running.storage, now, || rng.range(low, high.max(low)))?;
        for group in failed {
            running.driver.on_superblock_failed(group);
        }
        Ok(())
    }

    /// Shard `shard`'s flush, if its sync returns by `now`. `Err` means the
    /// node must stop.
    pub fn complete_flush(&mut self, shard: usize, now: u64) -> Result<Option<FlushId>, StorageError> {
        let Some(running) = self.shards.get_mut(shard) else { return Ok(None) };
        running.worker.complete(&mut running.storage, now)
    }

    /// Stop hosting `group`: the shard forgets it and its worker removes its
    /// data after the jobs queued before. False if it was not hosted; its
    /// data, if any is left (a restart that did not host it), goes all the
    /// same, as a node's shard does.
    pub fn remove_group(&mut self, group: GroupId, now: u64) -> Result<bool, StorageError> {
        let index = self.shard_index(group);
        let Some(shard) = self.shards.get_mut(index) else { return Ok(false) };
        let hosted = shard.driver.remove_group(group);
        shard.worker.queue(StorageJob::RemoveGroup(group));
        self.pump(index, now)?;
        Ok(hosted)
    }

    /// Q1: start a quorum wait on the shard of `group`, through its driver
    /// as a node's shard actor does (`None`: too many open, or the node is down).
    pub fn wait_quorum(
        &mut self,
        group: GroupId,
        op: cohort_messages::Op,
        quorum: usize,
        timeout_ticks: u64,
    ) -> Option<cohort_core::WaitId> {
        let index = self.shard_index(group);
        self.shards.get_mut(index)?.driver.wait_quorum(group, op, quorum, timeout_ticks)
    }

    /// Q2: cancel a quorum wait on the shard of `group`.
    pub fn cancel_wait(&mut self, group: GroupId, wait: cohort_core::WaitId) -> bool {
        let index = self.shard_index(group);
        self.shards.get_mut(index).is_some_and(|shard| shard.driver.cancel_wait(wait))
    }

    /// The time on this node's clock for the next input it handles at tick
    /// `now`: the tick's start plus what the inputs before it in the tick
    /// cost ([`SimNode::input_cost_micros`]).
    pub fn input_clock_micros(&mut self, now: u64) -> u64 {
        if self.inputs_in_tick.1 != now {
            self.inputs_in_tick = (0, now);
        }
        self.inputs_in_tick.0 += 1;
        now * TICK_MICROS + self.inputs_in_tick.0 * self.input_cost_micros
    }

    /// The next write to this node's storage fails (a failed device). On a
    /// memory storage: the next append of a random shard.
    pub fn fail_next_write(&mut self) {
        match self.setup.storage {
            StorageKind::File => {
                let mut faults = self.disk.faults();
                faults.write_failures += 1;
                self.disk.set_faults(faults);
            }
            StorageKind::Memory => {
                let shard = self.rng.below(self.setup.shards as u64) as usize;
                if let Some(SimShard { storage: SimStorage { backend: Backend::Memory(memory), .. }, .. }) =
                    self.shards.get_mut(shard)
                {
                    memory.fail_next_appends(1);
                }
            }
        }
    }

    /// The next superblock stage of `group` fails (R12), if the node is up.
    pub fn fail_next_superblock_stage(&mut self, group: GroupId) {
        let index = self.shard_index(group);
        if let Some(shard) = self.shards.get_mut(index) {
            shard.storage.fail_next_superblock_stage(group);
        }
    }
}
