//! A simulated node: the production [`Shard`] with a [`MemoryStorage`],
//! driven exactly as the driving contract on `Shard` says, and in the
//! metadata scenario the node's [`MetadataAgent`] next to it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::rc::Rc;

use cohort_core::metadata::MetadataAgent;
use cohort_core::storage::memory::MemoryStorage;
use cohort_core::storage::{self, Executed, Storage};
use cohort_core::{CoreConfig, Effect, FlushId, GroupSpec, Shard, StateMachine};
use cohort_messages::{ClusterId, GroupId, NodeId, Request};

use crate::kv::{ApplySink, Kv};
use crate::metadata::{MetadataMirror, MirroredMetadata};

/// The simulated cluster id.
pub const CLUSTER: ClusterId = ClusterId(0xC0_4087);

/// One node.
pub struct SimNode {
    /// Index and node id (`NodeId(index + 1)`).
    pub index: usize,
    /// The shard, `None` while crashed.
    pub shard: Option<Shard>,
    /// The disk.
    pub storage: MemoryStorage,
    /// Paused until this tick (exclusive).
    pub paused_until: u64,
    /// Crashed until this tick, then restarted.
    pub down_until: u64,
    /// Flushes waiting to complete: (tick, id).
    pub flushes: VecDeque<(u64, FlushId)>,
    /// Apply reports per group.
    pub sinks: HashMap<GroupId, ApplySink>,
    /// Times this node restarted.
    pub restarts: u64,
    /// The applied metadata of this node's metadata replica (metadata scenario).
    pub metadata: MetadataMirror,
    /// The metadata agent of the running process (metadata scenario).
    pub agent: Option<MetadataAgent>,
    /// The node the agent's requests go to: its guess of the metadata primary.
    pub agent_target: usize,
    /// The agent's last request, resent on a redirect.
    pub agent_last: Option<Request>,
    /// Groups the agent unloaded (S4): not hosted again after a restart.
    pub unloaded: BTreeSet<GroupId>,
    /// Learner replicas created while running (P4), by group: recovered
    /// with this spec after a restart (storage upgrades it if the group
    /// switched incarnation since).
    pub extra_specs: std::collections::BTreeMap<GroupId, cohort_core::GroupSpec>,
}

/// The node id of node `index`.
pub fn node_id(index: usize) -> NodeId {
    NodeId(index as u64 + 1)
}

/// The index of a node id.
pub fn node_index(node: NodeId) -> usize {
    (node.0 - 1) as usize
}

impl SimNode {
    /// A node hosting `specs`, with fresh storage.
    pub fn new(index: usize, config: &CoreConfig, specs: &[GroupSpec]) -> SimNode {
        let mut node = SimNode {
            index,
            shard: None,
            storage: MemoryStorage::new(),
            paused_until: 0,
            down_until: 0,
            flushes: VecDeque::new(),
            sinks: HashMap::new(),
            restarts: 0,
            metadata: MetadataMirror::default(),
            agent: None,
            agent_target: index,
            agent_last: None,
            unloaded: BTreeSet::new(),
            extra_specs: std::collections::BTreeMap::new(),
        };
        let mut shard = Shard::new(node_id(index), config.clone());
        for spec in specs {
            let state = node.state_machine(spec.group);
            shard.create_group(spec.clone(), state).expect("fresh group");
        }
        node.shard = Some(shard);
        node
    }

    fn sink(&mut self, group: GroupId) -> ApplySink {
        Rc::clone(self.sinks.entry(group).or_default())
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
            Box::new(MirroredMetadata::new(Rc::clone(&self.metadata), sink))
        } else {
            Box::new(Kv::new(sink))
        }
    }

    /// True if the node runs and is not paused at `now`.
    pub fn is_running(&self, now: u64) -> bool {
        self.shard.is_some() && now >= self.paused_until
    }

    /// Crash: the process dies; an interrupted flush keeps a seeded prefix.
    pub fn crash(&mut self, until: u64, seed: u64) {
        if self.flushes.is_empty() {
            self.storage.crash();
        } else {
            self.storage.crash_mid_flush(seed);
        }
        self.shard = None;
        self.agent = None;
        self.agent_last = None;
        self.flushes.clear();
        self.down_until = until;
        self.paused_until = 0;
    }

    /// Restart from storage (V4).
    pub fn restart(&mut self, now: u64, config: &CoreConfig, specs: &[GroupSpec]) {
        let mut recovered = match self.storage.recover() {
            Ok(recovered) => recovered,
            Err(error) => panic!("node {} cannot recover its storage: {error}", self.index),
        };
        let mut shard = Shard::new(node_id(self.index), config.clone());
        shard.on_tick(now);
        let mut all: Vec<GroupSpec> =
            specs.iter().filter(|spec| !self.extra_specs.contains_key(&spec.group)).cloned().collect();
        all.extend(self.extra_specs.values().cloned());
        for spec in all {
            if self.unloaded.contains(&spec.group) {
                continue;
            }
            let group_id = spec.group;
            let state = self.state_machine(group_id);
            let group = recovered.groups.remove(&group_id).unwrap_or_default();
            match shard.recover_group(spec, state, group) {
                Ok(()) => {}
                // Switched away before the restart (a member change): drop it.
                Err(cohort_core::ShardError::NotInIncarnation(_)) => {
                    self.unloaded.insert(group_id);
                }
                Err(error) => panic!("node {} cannot recover {group_id}: {error}", self.index),
            }
        }
        self.shard = Some(shard);
        self.agent_target = self.index;
        self.restarts += 1;
    }

    /// Execute the storage effects of a turn (with the core's one storage
    /// executor, as a node's storage worker does) and return the rest, in
    /// order. A storage error other than a superblock stage (R12) kills the node.
    pub fn run_storage(
        &mut self,
        effects: Vec<Effect>,
        now: u64,
        flush_delay_ticks: u64,
    ) -> Result<Vec<Effect>, String> {
        let mut rest = Vec::with_capacity(effects.len());
        let mut failed_superblocks = Vec::new();
        for effect in effects {
            match storage::execute(&mut self.storage, effect).map_err(|e| e.to_string())? {
                Executed::Done => {}
                Executed::Flush(id) => {
                    let at = self.flushes.back().map_or(now, |(tick, _)| *tick).max(now + flush_delay_ticks);
                    self.flushes.push_back((at, id));
                }
                Executed::SuperblockFailed(group) => failed_superblocks.push(group),
                Executed::NotStorage(other) => rest.push(other),
            }
        }
        if let Some(shard) = self.shard.as_mut() {
            for group in failed_superblocks {
                shard.on_superblock_failed(group);
            }
        }
        Ok(rest)
    }

    /// The next flush due at `now`, made durable.
    pub fn complete_flush(&mut self, now: u64) -> Result<Option<FlushId>, String> {
        match self.flushes.front() {
            Some((tick, _)) if *tick <= now => {}
            _ => return Ok(None),
        }
        let Some((_, id)) = self.flushes.pop_front() else { return Ok(None) };
        self.storage.flush().map_err(|e| e.to_string())?;
        Ok(Some(id))
    }
}
