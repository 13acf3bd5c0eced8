//! The shard under test: which groups it hosts, in which roles, with which
//! configuration, and the state machine they run.
//!
//! One shard of node 1 hosts a group in each role the core has: primary of
//! a three-member synchronous group, backup of another, a learner, and
//! primary of a five-member asynchronous group with a replication quorum of
//! two (so the view-change quorum, four, differs from the majority). The
//! limits are tiny so that short inputs reach snapshots, full pipelines,
//! evictions and timeouts.

use bytes::Bytes;
use cohort_core::quorum::Quorums;
use cohort_core::{CoreConfig, GroupSpec, StateMachine, TimingConfig, WriteMode};
use cohort_messages::{GroupId, Incarnation, MemberIndex, NodeId, Op};

/// The node whose shard is fuzzed.
pub const NODE: NodeId = NodeId(1);

/// One hosted group.
pub struct HostedGroup {
    pub group: GroupId,
    pub members: &'static [u64],
    pub learners: &'static [u64],
    pub replication_quorum: Option<usize>,
    pub write_mode: WriteMode,
    pub report_applied: bool,
    /// K5: its state machine takes op batches.
    pub op_batches: bool,
}

/// The hosted groups, in the order inputs name them.
pub const GROUPS: [HostedGroup; 5] = [
    HostedGroup {
        group: GroupId(1),
        members: &[1, 2, 3],
        learners: &[],
        replication_quorum: None,
        write_mode: WriteMode::Sync,
        report_applied: false,
        op_batches: false,
    },
    HostedGroup {
        group: GroupId(2),
        members: &[2, 1, 3],
        learners: &[],
        replication_quorum: None,
        write_mode: WriteMode::Sync,
        report_applied: true,
        op_batches: false,
    },
    HostedGroup {
        group: GroupId(3),
        members: &[2, 3, 4],
        learners: &[1],
        replication_quorum: None,
        write_mode: WriteMode::Sync,
        report_applied: false,
        op_batches: false,
    },
    HostedGroup {
        group: GroupId(4),
        members: &[1, 2, 3, 4, 5],
        learners: &[],
        replication_quorum: Some(2),
        write_mode: WriteMode::Async,
        report_applied: false,
        op_batches: false,
    },
    // K5: its state machine takes op batches (after the others, so that
    // the seed scripts' group indexes keep their groups).
    HostedGroup {
        group: GroupId(5),
        members: &[1, 2, 3],
        learners: &[],
        replication_quorum: None,
        write_mode: WriteMode::Sync,
        report_applied: false,
        op_batches: true,
    },
];

impl HostedGroup {
    /// This node's spec of the group.
    pub fn spec(&self) -> GroupSpec {
        let members: Vec<NodeId> = self.members.iter().map(|node| NodeId(*node)).collect();
        let learners: Vec<NodeId> = self.learners.iter().map(|node| NodeId(*node)).collect();
        let me = members.iter().chain(&learners).position(|node| *node == NODE).expect("node 1 is in every group");
        GroupSpec {
            group: self.group,
            incarnation: Incarnation(1),
            quorums: Quorums::new(members.len(), self.replication_quorum).expect("valid quorums"),
            members,
            learners,
            me: MemberIndex(me as u8),
            write_mode: self.write_mode,
            report_applied: self.report_applied,
        }
    }
}

/// Small limits and short timeouts (valid by the boot checks).
pub fn config() -> CoreConfig {
    let config = CoreConfig {
        timing: TimingConfig {
            commit_broadcast_interval_ticks: 1,
            commit_heartbeat_timeout_ticks: 4,
            commit_idle_heartbeat_interval_ticks: 2,
            commit_idle_heartbeat_timeout_ticks: 8,
            view_change_timeout_ticks: 3,
            repair_timeout_ticks: 2,
            commit_quiesce_timeout_ticks: None,
        },
        pipeline_max_ops: 4,
        snapshot_interval_ops: 3,
        snapshot_interval_bytes: 64,
        clients_max: 3,
        request_queue_max: 3,
        ..CoreConfig::default()
    };
    config.validate().expect("the fuzz configuration passes the boot checks");
    config
}

/// A state machine whose state is the list of applied operations' lengths
/// and first bytes: deterministic, cheap, with a real snapshot codec.
pub struct Tally {
    applied: Vec<u8>,
    /// K5: it takes op batches.
    op_batches: bool,
}

impl Tally {
    /// The state machine of `hosted`.
    pub fn of(hosted: &HostedGroup) -> Tally {
        Tally { applied: Vec::new(), op_batches: hosted.op_batches }
    }
}

/// The most bytes [`Tally`] keeps (older ones are dropped).
const TALLY_MAX_BYTES: usize = 32;

impl StateMachine for Tally {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        if self.applied.len() >= TALLY_MAX_BYTES {
            self.applied.remove(0);
        }
        self.applied.push(operation.first().copied().unwrap_or(0).wrapping_add(operation.len() as u8));
        Bytes::copy_from_slice(&self.applied)
    }

    fn takes_op_batches(&self) -> bool {
        self.op_batches
    }

    fn read(&self, query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.applied[..query.len().min(self.applied.len())])
    }

    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.applied)
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        if snapshot.len() > TALLY_MAX_BYTES {
            return Err(format!("a tally of {} bytes is over {TALLY_MAX_BYTES}", snapshot.len()));
        }
        self.applied = snapshot.to_vec();
        Ok(())
    }
}
