//! Z5: what following the metadata log costs a node past the voters,
//! measured on the production core (`cohort-sim follow`).
//!
//! Before Z5, a real node past the metadata group's five voters read the
//! whole metadata state from its primary every 5 ticks, so what it received
//! grew with the state: at 100,000 groups, megabytes per second per node.
//! Now every such node hosts a learner replica, which receives the log's
//! Prepares and the group's Commit heartbeats like a backup. This module
//! shows that on a cluster of `nodes` that hosts only the metadata group:
//! the first five vote, the next ones are learners (up to `REPLICAS_MAX`
//! replicas in all), and any node past those reads the whole state every
//! [`POLLED_READ_INTERVAL_TICKS`], as a real node past them does. Each node is a
//! production [`Shard`] run by the node's own driver ([`ShardDriver`]) over
//! [`MemoryStorage`], with the simulator's storage worker; every frame is encoded with the real codec, delivered a
//! tick later, and counted in bytes by the node that receives it.
//!
//! A run first fills the metadata the way a cluster does: every node
//! registers and opens a session, the groups are created in batches of
//! [`METADATA_BATCH_ENTRIES_MAX`] on three nodes each, and each group's
//! first member reports owning it. Once every learner has applied all of it
//! (checked: its state equals the primary's), it measures each rate in turn:
//! `seconds` of ownership reports, each a one-group failover report by a
//! member, at that many per second. The state size never crosses the
//! network; the bytes a learner receives per second follow the rate.

use crate::shared::Shared;
use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use cohort_core::client::Sequence;
use cohort_core::driver::{DriverConfig, LinksUp, ShardDriver, StorageJob, route_peer_frame};
use cohort_core::metadata::{MetadataStateMachine, metadata_learners, metadata_members};
use cohort_core::replica::Placement;
use cohort_core::storage::Storage;
use cohort_core::storage::memory::MemoryStorage;
use cohort_core::{CoreConfig, GroupSpec, Shard, StateMachine};
use cohort_messages::metadata::{GroupCreation, METADATA_BATCH_ENTRIES_MAX, MetadataCommand, OwnedGroup, encode_value};
use cohort_messages::replication::Replication;
use cohort_messages::{
    ClientId, Frame, GroupId, Incarnation, Message, NodeId, Op, Outcome, Request, RequestKind, RequestNumber,
    TraceContext, View,
};

use crate::node::{CLUSTER, TICK_MICROS, node_id, node_index};
use crate::rng::Rng;
use crate::worker::StorageWorker;

/// The polled read Z5 replaced: the whole state, every this many ticks.
pub const POLLED_READ_INTERVAL_TICKS: u64 = 5;

/// Client ids per node: how many of its commands may be unanswered at once.
const CLIENTS_PER_NODE: usize = 8;

/// Ticks allowed for loading the metadata and for every learner to apply it.
const LOAD_TICKS_MAX: u64 = 20_000;

/// What to measure.
#[derive(Clone, Debug)]
pub struct FollowConfig {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Groups recorded in the metadata.
    pub groups: usize,
    /// Simulated seconds measured per rate.
    pub seconds: u64,
    /// Metadata changes per second to measure, in turn.
    pub rates: Vec<u64>,
    /// Milliseconds per tick (the core's default 100 ms).
    pub tick_ms: u64,
}

/// One rate's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct FollowRate {
    /// Metadata changes committed per second (asked for).
    pub changes_per_sec: u64,
    /// Changes the metadata applied in the window.
    pub changes_applied: u64,
    /// Bytes per second a learner received: mean over learners.
    pub learner_bytes_per_sec: f64,
    /// The same, the busiest learner.
    pub learner_bytes_per_sec_max: f64,
    /// Bytes per second a voter other than the primary received: mean.
    pub voter_bytes_per_sec: f64,
    /// Bytes per second a node without a replica received (its polled
    /// reads), mean; 0 if every node hosts one.
    pub poller_bytes_per_sec: f64,
}

/// The measurement.
#[derive(Clone, Debug)]
pub struct FollowReport {
    /// The configuration measured.
    pub config: FollowConfig,
    /// The metadata state's encoded size after loading.
    pub state_bytes: u64,
    /// Per rate, in the order asked.
    pub rates: Vec<FollowRate>,
    /// Frames the receiver refused: polled reads of a state larger than a
    /// reply may carry (`OPERATION_SIZE_MAX_BYTES`).
    pub frames_refused: u64,
}

impl FollowReport {
    /// What each learner received per second under the polled read Z5
    /// replaced: the whole state every [`POLLED_READ_INTERVAL_TICKS`].
    pub fn polled_bytes_per_sec(&self) -> f64 {
        let reads_per_sec = 1000.0 / (self.config.tick_ms * POLLED_READ_INTERVAL_TICKS) as f64;
        self.state_bytes as f64 * reads_per_sec
    }

    /// The metadata group's voters.
    pub fn voters(&self) -> usize {
        metadata_members(nodes(self.config.nodes)).len()
    }

    /// Its learners (Z5): the nodes past the voters, up to the replica limit.
    pub fn learners(&self) -> usize {
        metadata_learners(nodes(self.config.nodes)).len()
    }

    /// A learner's bytes per applied change beyond the first rate's (which
    /// should be 0), for each rate after it.
    pub fn bytes_per_change(&self) -> Vec<f64> {
        let Some(idle) = self.rates.first() else { return Vec::new() };
        let seconds = self.config.seconds as f64;
        self.rates
            .iter()
            .skip(1)
            .map(|rate| {
                let applied_per_sec = (rate.changes_applied as f64 / seconds).max(f64::MIN_POSITIVE);
                (rate.learner_bytes_per_sec - idle.learner_bytes_per_sec) / applied_per_sec
            })
            .collect()
    }

    /// The table and the summary line.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let (count, voters, learners) = (self.config.nodes, self.voters(), self.learners());
        let _ = writeln!(
            out,
            "{count} nodes: {voters} voters, {learners} learners, {} reading the whole state every {} ticks; {} groups; \
             state {} bytes (a polled read of it: {:.0} bytes/s per node)",
            count - voters - learners,
            POLLED_READ_INTERVAL_TICKS,
            self.config.groups,
            self.state_bytes,
            self.polled_bytes_per_sec()
        );
        let _ = writeln!(
            out,
            "{:>10} {:>10} {:>18} {:>18} {:>16} {:>16}",
            "changes/s", "applied", "learner bytes/s", "learner max B/s", "voter bytes/s", "poller bytes/s"
        );
        for rate in &self.rates {
            let _ = writeln!(
                out,
                "{:>10} {:>10} {:>18.0} {:>18.0} {:>16.0} {:>16.0}",
                rate.changes_per_sec,
                rate.changes_applied,
                rate.learner_bytes_per_sec,
                rate.learner_bytes_per_sec_max,
                rate.voter_bytes_per_sec,
                rate.poller_bytes_per_sec
            );
        }
        let per_change: Vec<String> = self.bytes_per_change().iter().map(|bytes| format!("{bytes:.0}")).collect();
        let _ = write!(
            out,
            "state_bytes={} polled_bytes_per_sec={:.0} frames_refused={} learner_bytes_per_sec={} \
             learner_bytes_per_change={}",
            self.state_bytes,
            self.polled_bytes_per_sec(),
            self.frames_refused,
            self.rates.iter().map(|rate| format!("{:.0}", rate.learner_bytes_per_sec)).collect::<Vec<_>>().join(","),
            per_change.join(",")
        );
        out
    }
}

fn nodes(count: usize) -> impl Iterator<Item = NodeId> {
    (0..count).map(node_id)
}

/// Usage of the `follow` subcommand.
pub const USAGE: &str = "usage: cohort-sim follow [--nodes 100] [--groups 100000] [--seconds 20] [--rates 0,10,100]";

/// Parse the `follow` subcommand's arguments.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<FollowConfig, String> {
    let mut config = FollowConfig { nodes: 100, groups: 100_000, seconds: 20, rates: vec![0, 10, 100], tick_ms: 100 };
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |text: &str| text.parse::<u64>().map_err(|_| format!("{flag}: {text:?} is not a number"));
        match flag.as_str() {
            "--nodes" => config.nodes = number(&value)? as usize,
            "--groups" => config.groups = number(&value)? as usize,
            "--seconds" => config.seconds = number(&value)?,
            "--rates" => config.rates = value.split(',').map(number).collect::<Result<_, _>>()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if config.nodes < 4 || config.nodes > 400 || config.groups == 0 || config.seconds == 0 || config.rates.is_empty() {
        return Err("follow needs 4 to 400 nodes, at least 1 group, 1 second and 1 rate".into());
    }
    Ok(config)
}

/// The metadata state machine behind a shared cell, so the harness reads
/// the very state the replica applies into (as `SharedMetadata` does on a
/// real node), with nothing copied per apply.
struct Followed(Shared<MetadataStateMachine>);

impl StateMachine for Followed {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.0.borrow_mut().apply(op, operation)
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.0.borrow().read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.0.borrow().snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0.borrow_mut().restore(snapshot)
    }

    fn admit(&self, sender: NodeId, members: &[NodeId], operation: &[u8]) -> Result<(), String> {
        self.0.borrow().admit(sender, members, operation)
    }
}

/// A node's metadata replica: its shard, storage and applied state.
struct Follower {
    driver: ShardDriver,
    storage: MemoryStorage,
    worker: StorageWorker,
    state: Shared<MetadataStateMachine>,
}

/// One node: its metadata replica (none past the group's replica limit)
/// and the client ids its commands go out under.
struct FollowNode {
    replica: Option<Follower>,
    /// Each client id's writes, and whether a request of it is unanswered.
    clients: Vec<(Sequence, bool)>,
    /// A node without a replica: its polled read's client id and next number.
    reader: (ClientId, u64),
}

impl FollowNode {
    fn idle(&self) -> bool {
        self.clients.iter().all(|(_, outstanding)| !outstanding)
    }
}

/// The cluster and its wire.
struct Cluster {
    nodes: Vec<FollowNode>,
    now: u64,
    /// (due tick, receiving node index, frame).
    wire: VecDeque<(u64, usize, Bytes)>,
    received_bytes: Vec<u64>,
    /// Frames whose body the receiver refused.
    frames_refused: u64,
}

impl Cluster {
    fn new(count: usize) -> Cluster {
        let members = metadata_members(nodes(count));
        let learners = metadata_learners(nodes(count));
        let placement = Placement {
            group: GroupId::METADATA,
            incarnation: Incarnation(1),
            members,
            learners,
            replication_quorum: None,
            write_mode: cohort_core::WriteMode::Sync,
        };
        let config = CoreConfig { clients_max: (count * (CLIENTS_PER_NODE + 1)).max(64), ..CoreConfig::default() };
        let nodes = (0..count)
            .map(|index| {
                let replica = GroupSpec::of_node(&placement, node_id(index)).ok().map(|spec| {
                    let mut storage = MemoryStorage::new();
                    storage.recover().expect("a fresh memory storage recovers");
                    let mut shard = Shard::new(node_id(index), config.clone());
                    shard.set_pair_identity(0, 0);
                    let state = Shared::new(MetadataStateMachine::default());
                    shard.create_group(spec, Box::new(Followed(Shared::clone(&state)))).expect("a fresh group");
                    let peers = (0..count).map(node_id);
                    let driver = ShardDriver::new(shard, DriverConfig::for_tick(TICK_MICROS), peers);
                    Follower { driver, storage, worker: StorageWorker::default(), state }
                });
                let client = |number: usize| ClientId((1 << 100) | ((index as u128) << 16) | number as u128);
                let clients = (0..CLIENTS_PER_NODE)
                    .map(|number| (Sequence::new(client(number), GroupId::METADATA), false))
                    .collect();
                FollowNode { replica, clients, reader: (client(CLIENTS_PER_NODE), 1) }
            })
            .collect();
        Cluster { nodes, now: 0, wire: VecDeque::new(), received_bytes: vec![0; count], frames_refused: 0 }
    }

    /// The primary's applied state (node 0 leads view 0; no fault moves it).
    fn primary_state(&self) -> std::sync::MutexGuard<'_, MetadataStateMachine> {
        self.nodes[0].replica.as_ref().expect("node 0 is a voter").state.borrow()
    }

    fn send(&mut self, from: usize, to: usize, message: Message) {
        let frame = message.encode(CLUSTER, node_id(from), TraceContext::NONE).to_bytes();
        self.wire.push_back((self.now + 1, to, frame));
    }

    /// Node `index` sends `command` to the metadata primary as a `Request`
    /// frame, as its agent would. False if every client of the node waits
    /// for an answer, or if the client it took sent its registration instead.
    fn ask(&mut self, index: usize, command: &MetadataCommand) -> bool {
        let node = &mut self.nodes[index];
        let Some((writes, outstanding)) = node.clients.iter_mut().find(|(_, outstanding)| !*outstanding) else {
            return false;
        };
        *outstanding = true;
        // H5: a client's request 1 is its registration, which carries no
        // command; the command waits for the client's next turn.
        let registration = writes.registration();
        let registering = registration.is_some();
        let request = registration.unwrap_or_else(|| writes.write(command.encode()));
        self.send(index, 0, Message::Request(request));
        !registering
    }

    /// Every node without a replica reads the whole state from the primary,
    /// as such a node's agent does every [`POLLED_READ_INTERVAL_TICKS`].
    fn poll(&mut self) {
        for index in 0..self.nodes.len() {
            let node = &mut self.nodes[index];
            if node.replica.is_some() {
                continue;
            }
            let (client, next) = node.reader;
            node.reader.1 += 1;
            let request = Request {
                client,
                request: RequestNumber(next),
                group: GroupId::METADATA,
                kind: RequestKind::Read,
                operation: Bytes::new(),
            };
            self.send(index, 0, Message::Request(request));
        }
    }

    fn step(&mut self) {
        self.now += 1;
        let now = self.now;
        if now.is_multiple_of(POLLED_READ_INTERVAL_TICKS) {
            self.poll();
        }
        for index in 0..self.nodes.len() {
            if let Some(replica) = &mut self.nodes[index].replica {
                replica.driver.on_clock(now);
                self.drain(index);
            }
        }
        while self.wire.front().is_some_and(|(due, _, _)| *due <= now) {
            let Some((_, to, bytes)) = self.wire.pop_front() else { break };
            self.received_bytes[to] += bytes.len() as u64;
            self.deliver(to, bytes);
        }
        for index in 0..self.nodes.len() {
            while let Some(replica) = &mut self.nodes[index].replica {
                match replica.worker.complete(&mut replica.storage, now) {
                    Ok(Some(id)) => {
                        replica.driver.on_flushed(id);
                        replica.worker.pump(&mut replica.storage, now, || 1).expect("memory storage never fails");
                        self.drain(index);
                    }
                    Ok(None) => break,
                    Err(error) => panic!("memory storage failed: {error}"),
                }
            }
        }
    }

    fn deliver(&mut self, to: usize, bytes: Bytes) {
        let Ok(frame) = Frame::decode(bytes, CLUSTER) else { panic!("the harness encoded a bad frame") };
        let sender = frame.header.sender;
        let Ok(message) = frame.message() else {
            // A polled read's answer larger than OPERATION_SIZE_MAX_BYTES is
            // refused by the receiver, as a real node's listener refuses it.
            self.frames_refused += 1;
            return;
        };
        if let Message::Reply(reply) = &message {
            if reply.client == self.nodes[to].reader.0 {
                return; // a polled read refused before the primary's first quorum is simply read again
            }
            assert!(matches!(reply.outcome, Outcome::Ok(_)), "a metadata write failed: {reply:?}");
            let clients = self.nodes[to].clients.iter_mut();
            if let Some((writes, outstanding)) = clients.into_iter().find(|(writes, _)| writes.client() == reply.client)
            {
                *outstanding = false;
                // H5: writes are numbered after the op of the registration.
                if writes.registration().is_some_and(|registration| registration.request == reply.request) {
                    writes.registered(reply.op);
                }
            }
            return;
        }
        let Some(replica) = &mut self.nodes[to].replica else { return };
        for (_, input) in route_peer_frame(sender, message, TraceContext::NONE, 1).inputs {
            replica.driver.on_peer(input);
        }
        self.drain(to);
    }

    /// End node `index`'s turn and carry out what its driver asks, until
    /// it asks nothing (every link up: this measurement has no faults).
    fn drain(&mut self, index: usize) {
        let now = self.now;
        loop {
            let Some(replica) = &mut self.nodes[index].replica else { return };
            let turn = replica.driver.end_turn(&LinksUp);
            if turn.is_empty() {
                return;
            }
            if !turn.storage.is_empty() {
                replica.worker.queue(StorageJob::Run(turn.storage));
                replica.worker.pump(&mut replica.storage, now, || 1).expect("memory storage never fails");
            }
            // D2: the metadata state machine applies inline.
            assert!(turn.applies.is_empty(), "the metadata group lends no run");
            // Every request came from a node, so every answer is in a peer's batch.
            debug_assert!(turn.notes.iter().all(|note| !matches!(note, cohort_core::driver::Note::Answer(_))));
            for batch in turn.peers {
                let messages = batch.messages.into_iter().map(|message| (message, TraceContext::NONE)).collect();
                for (message, _) in cohort_messages::batch_view_changes(messages) {
                    self.send(index, node_index(batch.to), message);
                }
            }
        }
    }

    /// Step until every replica's state is the primary's and nothing is asked.
    fn settle(&mut self, deadline: u64) {
        while self.now < deadline {
            // A copy: node 0's state is among the replicas' (one lock each
            // at a time).
            let primary = self.primary_state().state().clone();
            let replicas = || self.nodes.iter().filter_map(|node| node.replica.as_ref());
            let settled = self.nodes.iter().all(FollowNode::idle)
                && replicas().all(|replica| replica.state.borrow().state().epoch == primary.epoch)
                && replicas().all(|replica| *replica.state.borrow().state() == primary);
            if settled {
                return;
            }
            self.step();
        }
        panic!("the metadata did not settle on every replica by tick {deadline}");
    }
}

/// The commands that fill the metadata with `groups` groups on `count`
/// nodes, per node that sends them: registrations and sessions first (one
/// round), then creations from node 0, then ownership reports.
fn load(cluster: &mut Cluster, groups: usize) {
    let count = cluster.nodes.len();
    let deadline = cluster.now + LOAD_TICKS_MAX;
    let round = |cluster: &mut Cluster, what: &str, commands: Vec<(usize, MetadataCommand)>| {
        eprintln!("follow: tick {}: {} {what}", cluster.now, commands.len());
        let mut pending: VecDeque<(usize, MetadataCommand)> = commands.into();
        while let Some((index, command)) = pending.pop_front() {
            if !cluster.ask(index, &command) {
                pending.push_front((index, command));
                cluster.step();
                assert!(cluster.now < deadline, "loading the metadata took past tick {deadline}");
            }
        }
        cluster.settle(deadline);
    };
    let address = |index: usize| format!("follow-node-{index}");
    round(
        cluster,
        "registrations",
        (0..count)
            .map(|index| (index, MetadataCommand::RegisterNode { node: node_id(index), address: address(index) }))
            .collect(),
    );
    round(
        cluster,
        "session opens",
        (0..count).map(|index| (index, MetadataCommand::OpenSession { node: node_id(index) })).collect(),
    );
    let creations: Vec<GroupCreation> = (0..groups)
        .map(|group| GroupCreation {
            group: GroupId(group as u64),
            kind: "kv".to_string(),
            members: members_of(group, count),
            replication: Replication::default(),
        })
        .collect();
    let creates = creations
        .chunks(METADATA_BATCH_ENTRIES_MAX)
        .map(|chunk| (0, MetadataCommand::CreateGroups { groups: chunk.to_vec() }))
        .collect();
    round(cluster, "group creations", creates);
    let mut reports = Vec::new();
    for index in 0..count {
        let session = session_of(cluster, index);
        let owned: Vec<OwnedGroup> = (index..groups)
            .step_by(count)
            .map(|group| OwnedGroup { group: GroupId(group as u64), incarnation: Incarnation(1), view: View(1) })
            .collect();
        for chunk in owned.chunks(METADATA_BATCH_ENTRIES_MAX) {
            reports.push((
                index,
                MetadataCommand::ReportOwnerships { node: node_id(index), session, reports: chunk.to_vec() },
            ));
        }
    }
    round(cluster, "ownership reports", reports);
}

/// Group `group`'s members: three consecutive nodes, the first its owner.
fn members_of(group: usize, count: usize) -> Vec<NodeId> {
    (0..3).map(|offset| node_id((group + offset) % count)).collect()
}

fn session_of(cluster: &Cluster, index: usize) -> cohort_messages::SessionId {
    let state = cluster.primary_state();
    state.state().nodes[&node_id(index)].session.expect("every node opened a session")
}

/// Fill the metadata, then measure every rate in turn.
pub fn measure(config: &FollowConfig) -> FollowReport {
    let mut cluster = Cluster::new(config.nodes);
    load(&mut cluster, config.groups);
    let state_bytes = encode_value(cluster.primary_state().state()).len() as u64;
    let voters = metadata_members(nodes(config.nodes)).len();
    let ticks_per_sec = 1000 / config.tick_ms.max(1);
    let mut rng = Rng::new(0x2F0_110);
    // The view each group's owner reports next: one past the last report.
    let mut views: BTreeMap<usize, u32> = BTreeMap::new();
    let mut rates = Vec::new();
    for &changes_per_sec in &config.rates {
        eprintln!("follow: tick {}: {changes_per_sec} changes/s for {} s", cluster.now, config.seconds);
        let epoch_before = cluster.primary_state().state().epoch;
        cluster.received_bytes.iter_mut().for_each(|bytes| *bytes = 0);
        let ticks = config.seconds * ticks_per_sec;
        let mut due = 0u64;
        let mut asked = 0u64;
        for tick in 0..ticks {
            // Changes due by this tick, spread evenly over the window.
            let target = (tick + 1) * changes_per_sec / ticks_per_sec;
            due = due.max(target);
            while asked < due {
                let group = rng.below(config.groups as u64) as usize;
                let owner = group % config.nodes;
                let view = views.entry(group).or_insert(1);
                let command = MetadataCommand::ReportOwnership {
                    group: GroupId(group as u64),
                    incarnation: Incarnation(1),
                    node: node_id(owner),
                    session: session_of(&cluster, owner),
                    view: View(*view + 1),
                };
                if !cluster.ask(owner, &command) {
                    break; // that owner's last report is unanswered: next tick
                }
                *view += 1;
                asked += 1;
            }
            cluster.step();
        }
        let seconds = config.seconds as f64;
        let per_sec = |index: usize| cluster.received_bytes[index] as f64 / seconds;
        let followers = voters + metadata_learners(nodes(config.nodes)).len();
        let learners: Vec<f64> = (voters..followers).map(per_sec).collect();
        let voter_rates: Vec<f64> = (1..voters).map(per_sec).collect();
        let poller_rates: Vec<f64> = (followers..config.nodes).map(per_sec).collect();
        rates.push(FollowRate {
            changes_per_sec,
            changes_applied: cluster.primary_state().state().epoch.0 - epoch_before.0,
            learner_bytes_per_sec: mean(&learners),
            learner_bytes_per_sec_max: learners.iter().copied().fold(0.0, f64::max),
            voter_bytes_per_sec: mean(&voter_rates),
            poller_bytes_per_sec: mean(&poller_rates),
        });
        cluster.settle(cluster.now + LOAD_TICKS_MAX);
    }
    FollowReport { config: config.clone(), state_bytes, rates, frames_refused: cluster.frames_refused }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}
