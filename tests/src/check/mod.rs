//! Invariant checkers, run after every step, one per file. Each records
//! violations as text with the tick; the run reports them with its seed.
//!
//! - [`single_primary`]: P1, at most one primary per group and view.
//! - [`agreement`]: P2/P3, every member applies the same op sequence, and
//!   what was committed is never replaced.
//! - [`acknowledged`]: no acknowledged write lost.
//! - [`reply_order`]: each client's replies come in request order.
//! - [`learners`]: P4, a learner is never primary and never electing.
//! - [`applied_stream`]: what a custom group actor is told (`Applied`,
//!   `Restored`) is exactly what the state machine applied, in order, once.
//! - [`owner_primary`] (metadata scenario): P1 against the metadata, every
//!   recorded owner was primary in the recorded view, and a node's recorded
//!   owner view never goes back.
//! - [`owner_session`] (metadata scenario): S2, an owner always holds the
//!   live session it reported under.
//! - [`metadata_epochs`] (metadata scenario): M1, every node's metadata is
//!   the same state at the same epoch, and epochs only go forward.
//! - [`placement`] (metadata scenario): M2–M5, no step leaves a group below
//!   its voters, a cancelled operation leaves the placement as it found it.
//! - [`incarnations`] (metadata scenario): H3, a group created again under
//!   the same id never serves data of its earlier lives; P2/P3 are kept per
//!   life.
//! - [`footprint`]: T5, what input can make a shard hold stays under
//!   bounds that do not grow with the input.
//! - [`step_gates`] (metadata scenario): M2, each step of an operation
//!   applied only behind a majority of acks of the previous one, and every
//!   recorded ack true.
//! - [`quiet_rules`] (with quiescence): Z3, a pair's contact only from a
//!   matching reply, and a quiesced backup follows only its view's primary.
//! - [`exactly_once`]: no client write applied at two ops (the client
//!   table, eviction included).
//! - [`window`]: R24/V7, a primary's quorum window never outlives its view.
//! - `crate::linearizability`: the client history is linearizable per key
//!   (porcupine), checked at the end of a run.

pub mod acknowledged;
pub mod agreement;
pub mod applied_stream;
pub mod exactly_once;
pub mod footprint;
pub mod incarnations;
pub mod learners;
pub mod metadata_epochs;
pub mod owner_primary;
pub mod owner_session;
pub mod placement;
pub mod quiet_rules;
pub mod reply_order;
pub mod single_primary;
pub mod step_gates;
pub mod window;

use cohort_core::metadata::Metadata;
use cohort_messages::{GroupId, Incarnation, Op, RequestNumber, View};

/// All per-step checkers of a run.
#[derive(Debug, Default)]
pub struct Checkers {
    primaries: single_primary::SinglePrimary,
    agreement: agreement::Agreement,
    replies: reply_order::ReplyOrder,
    applied_stream: applied_stream::AppliedStream,
    owners: owner_primary::OwnerPrimary,
    metadata_epochs: metadata_epochs::MetadataEpochs,
    placement: placement::Placement,
    /// H3: the lives of the groups the operator creates.
    pub lives: incarnations::Lives,
    acks: step_gates::AckTruth,
    /// Z3: matched pair replies delivered (see [`quiet_rules`]).
    pub quiet: quiet_rules::QuietRules,
    exactly_once: exactly_once::ExactlyOnce,
    window: window::Window,
    /// Violations found, in order.
    pub violations: Vec<String>,
    /// Views in which some member became primary (after view 0).
    pub view_changes: u64,
}

impl Checkers {
    /// P1: `node` became primary of `group` in `view`.
    pub fn primary(&mut self, tick: u64, group: GroupId, incarnation: Incarnation, view: View, node: usize) {
        match self.primaries.record(group, incarnation, view, node) {
            Ok(true) if view.0 > 0 => self.view_changes += 1,
            Ok(_) => {}
            Err(violation) => self.violations.push(format!("tick {tick}: {violation}")),
        }
    }

    /// P4: `node` reported `role` for `group`; `learner` if it is one.
    pub fn role(&mut self, tick: u64, group: GroupId, node: usize, role: cohort_core::Role, learner: bool) {
        if let Err(violation) = learners::check(group, node, role, learner) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// P2/P3: `node`'s replica of `group` at `incarnation` applied `op`
    /// with this digest (agreed per life of the group id, H3).
    pub fn applied(&mut self, tick: u64, node: usize, group: GroupId, incarnation: Incarnation, op: Op, digest: u64) {
        let key = self.lives.agreement_key(group, incarnation);
        if let Err(violation) = self.agreement.record(node, key, op, digest) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
        if let Err(violation) = self.applied_stream.state_machine_applied(node, group, op, digest) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
        if let Err(violation) = self.exactly_once.applied(group, op, digest) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// H5: `node`'s replica of `group` applied the registration at `op`
    /// (`digest` names its client): agreed on like any op, but no state
    /// machine apply, so no other checker hears of it.
    pub fn registration_applied(
        &mut self,
        tick: u64,
        node: usize,
        group: GroupId,
        incarnation: Incarnation,
        op: Op,
        digest: u64,
    ) {
        let key = self.lives.agreement_key(group, incarnation);
        if let Err(violation) = self.agreement.record(node, key, op, digest) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// `client` sent as `request` a write of `group` whose operation has `digest`.
    pub fn write_sent(
        &mut self,
        group: GroupId,
        digest: u64,
        client: cohort_messages::ClientId,
        request: RequestNumber,
    ) {
        self.exactly_once.sent(group, digest, client, request);
    }

    /// M2: violations of the step gate that node `node`'s metadata applies showed.
    pub fn step_gates(&mut self, tick: u64, node: usize, violations: impl IntoIterator<Item = String>) {
        self.violations
            .extend(violations.into_iter().map(|violation| format!("tick {tick}: node {node}: {violation}")));
    }

    /// R24: no confirmed primary on the running shard `shard` of node
    /// `node` leads a view older than one whose primary was confirmed.
    pub fn window(&mut self, tick: u64, node: usize, shard: &cohort_core::Shard) {
        let violations = self.window.check(node, shard);
        self.violations.extend(violations.into_iter().map(|violation| format!("tick {tick}: {violation}")));
    }

    /// Z3: every quiet rule (see [`quiet_rules`]) for the running shard
    /// `shard` of node `node`.
    pub fn quiet_rules(&mut self, tick: u64, node: usize, shard: &cohort_core::Shard) {
        let pairs = shard.quiet_pairs();
        let mut violations = self.quiet.check_contacts(node, pairs.shard_index(), pairs);
        for replica in shard.replicas() {
            violations.extend(self.quiet.check_follow(node, replica, &self.primaries));
        }
        self.violations.extend(violations.into_iter().map(|violation| format!("tick {tick}: {violation}")));
    }

    /// `node` reported applied ops of `group` for a custom group actor.
    pub fn applied_reported(&mut self, tick: u64, node: usize, group: GroupId, ops: &[(Op, u64)], through: Op) {
        if let Err(violation) = self.applied_stream.reported(node, group, ops, through) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// `node` reported that `group`'s state machine was restored at `op`.
    pub fn restored(&mut self, tick: u64, node: usize, group: GroupId, op: Op) {
        if let Err(violation) = self.applied_stream.restored(node, group, op) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// `node` crashed: its applied streams end, and its next process
    /// rebuilds its metadata from storage.
    pub fn crashed(&mut self, node: usize) {
        self.applied_stream.crashed(node);
        self.owners.crashed(node);
        self.placement.crashed(node);
        self.metadata_epochs.crashed(node);
        self.lives.crashed(node);
    }

    /// H3: `node`'s replica of `group` at `incarnation` answered the
    /// operator with `value` ([`incarnations::Lives::answered`]).
    pub fn answered(&mut self, tick: u64, node: usize, group: GroupId, incarnation: Incarnation, value: u64) {
        if let Err(violation) = self.lives.answered(node, group, incarnation, value, tick) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// `node` unloaded `group`: its applied stream of it ends (a later
    /// replica there starts a new one).
    pub fn unloaded(&mut self, node: usize, group: GroupId) {
        self.applied_stream.unloaded(node, group);
    }

    /// Metadata scenario: `node`'s metadata replica holds `metadata` (after
    /// a turn that may have applied commands). Checked when its epoch moved.
    pub fn metadata_applied(&mut self, tick: u64, node: usize, metadata: &Metadata) {
        let mut violations = match self.metadata_epochs.observed(node, metadata) {
            Ok(false) => return,
            Ok(true) => Vec::new(),
            Err(violation) => vec![violation],
        };
        violations.extend(self.owners.check(node, metadata, &self.primaries));
        violations.extend(owner_session::check(node, metadata));
        violations.extend(self.placement.check(node, metadata));
        violations.extend(self.acks.observed(crate::node::node_id(node), metadata));
        self.violations.extend(violations.into_iter().map(|violation| format!("tick {tick}: {violation}")));
    }

    /// At the end of a run: every apply was reported.
    pub fn finish(&mut self) {
        let unmatched = self.applied_stream.unmatched();
        self.violations.extend(unmatched);
    }

    /// A client was told its write committed at `op`.
    pub fn acknowledged(&mut self, tick: u64, group: GroupId, op: Op, digest: u64) {
        if let Err(violation) = acknowledged::check(&self.agreement, group, op, digest) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// A client's request completed with a reply.
    pub fn replied(&mut self, tick: u64, client: usize, group: GroupId, request: RequestNumber) {
        if let Err(violation) = self.replies.record(client, group, request) {
            self.violations.push(format!("tick {tick}: {violation}"));
        }
    }

    /// `client` goes on under a fresh id: its writes are numbered anew.
    pub fn client_restarted(&mut self, client: usize) {
        self.replies.restarted(client);
    }

    /// The digest agreed for `op` of `group`, if any member applied it.
    pub fn committed_digest(&self, group: GroupId, op: Op) -> Option<u64> {
        self.agreement.digest(group, op)
    }

    /// Ops applied somewhere, over all groups.
    pub fn ops_committed(&self) -> u64 {
        self.agreement.ops()
    }
}
