//! The metadata scenario's pieces that are not the simulation loop: the
//! metadata group's state machine as the simulator hosts it, the settings
//! of each node's [`MetadataAgent`], and what its shell keeps beside it
//! ([`AgentShell`]: the schedule and the request route the runtime's agent
//! actor uses, and the clock the simulator gives them).
//!
//! The agent must be given the *applied* metadata of the node's own metadata
//! replica every tick. The core keeps that state inside the shard, behind the
//! `StateMachine` trait object, and offers no accessor, so the simulator wraps
//! the production [`MetadataStateMachine`] in [`MirroredMetadata`], which
//! delegates every call and mirrors the state into a shared cell after each
//! apply or restore (the same way the kv state machine reports its applies
//! through an `ApplySink`). The core's API stays as it is.

use crate::shared::Shared;
use std::time::Duration;

use bytes::Bytes;
use cohort_core::metadata::{
    AgentConfig, BootstrapGroup, ExpiredPolicy, Metadata, MetadataAgent, MetadataStateMachine, RequestRoute,
    ScanSchedule,
};
use cohort_core::{GroupSpec, StateMachine};
use cohort_messages::replication::Replication;
use cohort_messages::{ClientId, GroupId, Op};

use crate::kv::{ApplySink, digest};
use crate::node::node_id;

/// The applied metadata of one node's metadata replica, shared with the harness.
pub type MetadataMirror = Shared<Metadata>;

/// M2: what the step-gate check found in one node's applies, shared with
/// the harness, which moves it to the checkers after each turn.
pub type StepGateLog = Shared<Vec<String>>;

/// A keepalive leaves every second (10 ticks of 100 ms, the core's tick).
pub const KEEPALIVE_INTERVAL_TICKS: u64 = 10;

/// Six seconds of silence end a session: six keepalive intervals, so a few
/// lost keepalives never expire a live node, and well under the long pause
/// fault (over 130 ticks), so a paused node's session expires (S5).
pub const SESSION_TIMEOUT_TICKS: u64 = 60;
/// F2: the wait after a failed reconnect attempt, doubling after each
/// further one (attempts span 3 x 20 + 40 + 80 = 180 ticks with 3 attempts).
pub const RECONNECT_BACKOFF_TICKS: u64 = 40;

/// An unanswered metadata request is sent again (to the next node) after this long.
pub const REQUEST_RETRY_TICKS: u64 = 20;

/// A hosted group placed elsewhere is unloaded after this long (S4).
pub const UNLOAD_GRACE_TICKS: u64 = 100;

/// C5: the metadata primary's balancer asks for at most one primary
/// transfer per tick (the agent sends one request per tick here anyway).
pub const BALANCE_TRANSFERS_PER_TICK: u32 = 1;

/// How long an "operator" takes to restart a node that stopped itself (S3).
pub const STOPPED_DOWN_TICKS: u64 = 300;

/// The kind name of the simulator's kv groups in the metadata.
pub const KV_KIND: &str = "kv";

const _: () = assert!(SESSION_TIMEOUT_TICKS > 2 * KEEPALIVE_INTERVAL_TICKS);

/// The production metadata state machine, mirrored into a [`MetadataMirror`]
/// and reporting every apply to an [`ApplySink`] like the kv groups, so the
/// agreement checker covers the metadata log too (M1).
pub struct MirroredMetadata {
    inner: MetadataStateMachine,
    mirror: MetadataMirror,
    sink: ApplySink,
    gates: StepGateLog,
}

impl MirroredMetadata {
    /// An empty metadata state mirrored into `mirror`; each apply's step
    /// gates are checked (M2) into `gates`.
    pub fn new(mirror: MetadataMirror, sink: ApplySink, gates: StepGateLog) -> MirroredMetadata {
        *mirror.borrow_mut() = Metadata::default();
        MirroredMetadata { inner: MetadataStateMachine::default(), mirror, sink, gates }
    }

    fn mirror(&self) {
        self.mirror.borrow_mut().clone_from(self.inner.state());
    }
}

impl StateMachine for MirroredMetadata {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.sink.borrow_mut().push((op, digest(operation)));
        let result = self.inner.apply(op, operation);
        // The mirror still holds the state before this apply.
        let violations = crate::check::step_gates::check_apply(&self.mirror.borrow(), self.inner.state());
        self.gates.borrow_mut().extend(violations);
        self.mirror();
        result
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.inner.read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.inner.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.inner.restore(snapshot)?;
        self.mirror();
        Ok(())
    }

    fn admit(
        &self,
        sender: cohort_messages::NodeId,
        members: &[cohort_messages::NodeId],
        operation: &[u8],
    ) -> Result<(), String> {
        self.inner.admit(sender, members, operation)
    }
}

/// The metadata group's spec for node `index` of `nodes`: every node is a
/// member, in node order (node 0 is view 0's primary).
pub fn metadata_spec(nodes: usize, voters: usize, template: &GroupSpec) -> GroupSpec {
    let voters = voters.clamp(1, nodes);
    let quorums = cohort_core::Quorums::new(voters, None).expect("a metadata group of 1 to 64 nodes");
    GroupSpec {
        group: GroupId::METADATA,
        members: (0..voters).map(node_id).collect(),
        // The other nodes follow the metadata log as learners (non-voting).
        learners: (voters..nodes).map(node_id).collect(),
        quorums,
        ..template.clone()
    }
}

/// The length of a core tick the agent's timing is measured in: the
/// default node's (the agent's settings above assume it too).
pub const TICK: Duration = Duration::from_millis(100);

/// The modelled cost of one hosted group in a scan of the agent: about what
/// a node measured (17 ms for 10,000 groups, rounded up). The node spaces
/// its scans by their measured duration (Z2); the simulator has no wall
/// clock, so it passes this times the groups scanned, which is
/// deterministic and grows with the groups as the real cost does. With the
/// few groups of a simulated node the spacing stays far below a tick, so
/// the agent scans whenever a scan is due, as a node with a few thousand
/// groups does.
pub const SCAN_COST_PER_GROUP: Duration = Duration::from_micros(2);

/// The agent's clock when its timer fires in tick `now`: the start of the tick.
pub fn timer_clock(now: u64) -> Duration {
    TICK * u32::try_from(now).unwrap_or(u32::MAX)
}

/// The agent's clock when a frame reaches it in tick `now`: the middle of
/// the tick. The simulator delivers a tick's frames after its timers, and a
/// node's frames arrive some time after its last tick, not at the same
/// instant: a reply then finds the last scan behind it, and a due scan runs
/// at once (the after-reply rule), as on a node.
pub fn delivery_clock(now: u64) -> Duration {
    timer_clock(now) + TICK / 2
}

/// A running node's agent with what the runtime's agent actor keeps beside
/// it: the [`ScanSchedule`] that times its scans, the [`RequestRoute`] of
/// its requests, and the count of role and hosting changes the shards give
/// as their cheap answer (Z3; a node's shards count them in
/// `GetHostedChanges`).
#[derive(Debug)]
pub struct AgentShell {
    /// The agent.
    pub agent: MetadataAgent,
    /// When it scans, ticks idle and judges keepalives.
    pub schedule: ScanSchedule,
    /// Where its requests go.
    pub route: RequestRoute,
}

/// A fresh agent for node `index` on its `restarts`-th start at tick `now`.
/// Its client id is new on every start (a restarted agent must not reuse
/// request numbers) and derived from the seed, so runs stay reproducible;
/// the top bit keeps it apart from the simulated clients' ids.
pub fn agent_shell(
    seed: u64,
    index: usize,
    restarts: u64,
    policy: ExpiredPolicy,
    kv_specs: &[GroupSpec],
    now: u64,
) -> AgentShell {
    AgentShell {
        agent: agent(seed, index, restarts, policy, kv_specs),
        schedule: ScanSchedule::new(timer_clock(now), TICK),
        route: RequestRoute::new(node_id(index)),
    }
}

/// The agent of [`agent_shell`].
pub fn agent(seed: u64, index: usize, restarts: u64, policy: ExpiredPolicy, kv_specs: &[GroupSpec]) -> MetadataAgent {
    let client = ClientId((u128::from(seed) << 64) | (1 << 63) | ((index as u128) << 32) | u128::from(restarts));
    let config = AgentConfig {
        node: node_id(index),
        address: format!("sim-node-{index}"),
        client,
        metadata_group: GroupId::METADATA,
        policy,
        keepalive_interval_ticks: KEEPALIVE_INTERVAL_TICKS,
        reconnect_backoff_ticks: RECONNECT_BACKOFF_TICKS,
        session_timeout_ticks: SESSION_TIMEOUT_TICKS,
        request_retry_ticks: REQUEST_RETRY_TICKS,
        unload_grace_ticks: UNLOAD_GRACE_TICKS,
        bootstrap_groups: kv_specs.iter().map(bootstrap_group).collect(),
        balance_transfers_per_tick: Some(BALANCE_TRANSFERS_PER_TICK),
    };
    if let Err(error) = config.validate() {
        panic!("the simulator's agent settings are invalid: {error}");
    }
    MetadataAgent::new(config)
}

/// How the metadata records a kv group the nodes are configured with: a
/// majority quorum stays unset, so it follows the members (see
/// `Replication::quorum_for`).
fn bootstrap_group(spec: &GroupSpec) -> BootstrapGroup {
    let majority = spec.members.len() / 2 + 1;
    let quorum = (spec.quorums.replication != majority).then_some(spec.quorums.replication as u8);
    BootstrapGroup {
        group: spec.group,
        kind: KV_KIND.to_string(),
        members: spec.members.clone(),
        replication: Replication { quorum, write_mode: spec.write_mode },
    }
}
