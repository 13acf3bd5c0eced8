//! What the node asks of a shard besides protocol input: reports, the
//! replicas it hosts, subscriptions and lookups of group actors, and the
//! supervisor's replacement of an outbox.

use actix::prelude::*;
use cohort_core::metadata::HostedReplica;
use cohort_messages::{GroupId, NodeId};
use tokio::sync::mpsc;

use super::ShardActor;
use crate::group::{GroupActor, GroupEvent, GroupRole, Subscribe};
use crate::outbox::{Outbox, PanicForTest};

/// Ask a shard for its counters and gauges (R19, R32).
#[derive(Message)]
#[rtype(result = "ShardReport")]
pub struct GetReport;

/// A shard's counters and gauges, and the groups it leads.
#[derive(Clone, Debug, Default, MessageResponse)]
pub struct ShardReport {
    /// Counters.
    pub metrics: cohort_core::ShardMetrics,
    /// Groups per heartbeat state.
    pub gauges: cohort_core::HeartbeatGauges,
    /// The host's groups this shard's members lead now (the metadata group is not listed).
    pub primaries: Vec<GroupId>,
    /// The host's groups whose backup here waits the idle heartbeat timeout
    /// before a view change ([`cohort_core::replica::Replica::waits_idle_timeout`]).
    pub idle_backups: Vec<GroupId>,
    /// The host's groups whose member here is recovering (H1: it does not
    /// hold its data yet, and votes and acknowledges nothing; with one of
    /// the other members down too, such a group waits).
    pub recovering: Vec<GroupId>,
}

impl Handler<GetReport> for ShardActor {
    type Result = ShardReport;

    fn handle(&mut self, _: GetReport, _ctx: &mut Self::Context) -> ShardReport {
        let hosted_where = |keep: fn(&cohort_core::replica::Replica) -> bool| -> Vec<GroupId> {
            self.driver
                .shard()
                .replicas()
                .filter(|r| r.group() != GroupId::METADATA && keep(r))
                .map(|r| r.group())
                .collect()
        };
        ShardReport {
            metrics: self.driver.shard().metrics().clone(),
            gauges: self.driver.shard().heartbeat_gauges(),
            primaries: hosted_where(|r| r.is_primary()),
            idle_backups: hosted_where(|r| r.waits_idle_timeout()),
            recovering: hosted_where(|r| r.is_recovering()),
        }
    }
}

/// Ask a shard what its groups' replicas are now (for the metadata agent:
/// which groups this node hosts, leads, and in which view).
#[derive(Message)]
#[rtype(result = "Vec<HostedReplica>")]
pub struct GetHostedReplicas;

impl Handler<GetHostedReplicas> for ShardActor {
    type Result = MessageResult<GetHostedReplicas>;

    fn handle(&mut self, _: GetHostedReplicas, _ctx: &mut Self::Context) -> Self::Result {
        let now = self.driver.shard().now();
        MessageResult(self.driver.shard().hosted_replicas(now).collect())
    }
}

/// Z3: the sum of `HostedReplica::fingerprint` over the groups this shard
/// hosts: the agent scans only when a sum (or the metadata) changed.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct GetHostedFingerprint;

impl Handler<GetHostedFingerprint> for ShardActor {
    type Result = u64;

    fn handle(&mut self, _: GetHostedFingerprint, _ctx: &mut Self::Context) -> u64 {
        let now = self.driver.shard().now();
        self.driver.shard().hosted_fingerprint(now)
    }
}

/// Z3: what can change on a shard between the agent's scans and is cheap to
/// read: its count of role and hosting changes, and whether it hosts the
/// metadata group's primary, confirmed by a quorum now.
#[derive(Message)]
#[rtype(result = "cohort_core::metadata::HostedChanges")]
pub struct GetHostedChanges;

/// Test hook: what the shard's driver recorded since its start (or the
/// last take), with what it was built from, to replay it elsewhere.
#[derive(Message)]
#[rtype(result = "DriverRecording")]
pub struct TakeDriverRecording;

/// A shard driver's recording and what it was built from.
#[derive(Clone, Debug, Default)]
pub struct DriverRecording {
    /// The node.
    pub node: cohort_messages::NodeId,
    /// The core's configuration.
    pub core: cohort_core::CoreConfig,
    /// The driver's limits.
    pub driver: Option<cohort_core::driver::DriverConfig>,
    /// The driver's peers.
    pub peers: Vec<cohort_messages::NodeId>,
    /// Inputs and turns, in order.
    pub recorded: Vec<cohort_core::driver::Recorded>,
}

impl Handler<TakeDriverRecording> for ShardActor {
    type Result = MessageResult<TakeDriverRecording>;

    fn handle(&mut self, _: TakeDriverRecording, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(DriverRecording {
            node: self.node,
            core: self.driver.shard().config().clone(),
            driver: Some(self.driver.config().clone()),
            peers: self.driver.peers().to_vec(),
            recorded: self.driver.take_recording(),
        })
    }
}

impl Handler<GetHostedChanges> for ShardActor {
    type Result = MessageResult<GetHostedChanges>;

    fn handle(&mut self, _: GetHostedChanges, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.driver.hosted_changes())
    }
}

/// Subscribe to a group's role changes and commits (see the group actor);
/// false if the group is not hosted here.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct SubscribeGroup {
    /// The group.
    pub group: GroupId,
    /// Where events go.
    pub events: mpsc::Sender<GroupEvent>,
}

impl Handler<SubscribeGroup> for ShardActor {
    type Result = bool;

    fn handle(&mut self, subscribe: SubscribeGroup, ctx: &mut Self::Context) -> bool {
        if self.group_actor(subscribe.group, ctx).is_none() {
            return false;
        }
        let (Some(replica), Some(link)) =
            (self.driver.shard().replica(subscribe.group), self.groups.get_mut(&subscribe.group))
        else {
            return false;
        };
        let Some(actor) = link.actor.as_mut() else { return false };
        // From now on the group's role changes and commit points go to its actor.
        link.followed = true;
        let role = GroupRole::from_core(replica.role(), replica.view());
        actor.try_send(Subscribe { events: subscribe.events, role, commit: replica.commit_min() })
    }
}

/// Ask for the actor of a hosted group.
#[derive(Message)]
#[rtype(result = "Option<Addr<GroupActor>>")]
pub struct GetGroupActor(pub GroupId);

impl Handler<GetGroupActor> for ShardActor {
    type Result = Option<Addr<GroupActor>>;

    fn handle(&mut self, GetGroupActor(group): GetGroupActor, ctx: &mut Self::Context) -> Self::Result {
        self.group_actor(group, ctx).map(|actor| actor.addr().clone())
    }
}

/// The supervisor re-created the outbox to `peer`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReplaceOutbox {
    /// The peer.
    pub peer: NodeId,
    /// The new outbox.
    pub outbox: Addr<Outbox>,
}

impl Handler<ReplaceOutbox> for ShardActor {
    type Result = ();

    fn handle(&mut self, replace: ReplaceOutbox, _ctx: &mut Self::Context) {
        self.outboxes.insert(replace.peer, replace.outbox);
    }
}

impl Handler<PanicForTest> for ShardActor {
    type Result = ();

    fn handle(&mut self, _: PanicForTest, _ctx: &mut Self::Context) {
        panic!("shard {} panicked on request (PanicForTest)", self.index);
    }
}

/// Block the shard's thread for a while, to test what a late tick does (not
/// a stable API).
#[doc(hidden)]
#[derive(Message)]
#[rtype(result = "()")]
pub struct StallForTest(pub std::time::Duration);

impl Handler<StallForTest> for ShardActor {
    type Result = ();

    fn handle(&mut self, StallForTest(stall): StallForTest, _ctx: &mut Self::Context) {
        std::thread::sleep(stall);
    }
}
