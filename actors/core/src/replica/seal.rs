//! Sealing an incarnation, and switching to the next one (member changes).
//!
//! A group's voting members never change inside a running incarnation: every
//! quorum of an incarnation is computed over one fixed member set. To change
//! members, the primary prepares a *seal* entry (client [`ClientId::SEAL`],
//! operation a [`Seal`] naming the next incarnation and its members). It is
//! the last entry of the incarnation's log:
//! - nothing is prepared after it, in this view or any later one (a new
//!   primary whose adopted log ends with a seal commits it and stops), so
//!   every op the incarnation ever commits is at or before the seal;
//! - from the moment a seal is in a replica's log it answers no more reads
//!   or writes (clients retry and reach the next incarnation): a primary
//!   stops reading before any backup holds the seal, so backups may give up
//!   their leases and follow a member that moved to a later view (a member
//!   stuck alone in a later view would otherwise never reach the seal);
//! - once a replica applies it, the replica's state is final: it takes no
//!   snapshot past the seal (a restart replays it), and keeps serving repair
//!   so lagging members of the next incarnation can reach it.
//!
//! The seal commits only once every member of the next incarnation holds it
//! durably, as well as a replication quorum of this one (Z6): so a next
//! member that crashed before it learned the commit point still has the seal
//! in its log, and the first frame of the next incarnation it hears from a
//! next member (a Commit, or an election's message) tells it the seal
//! committed ([`Replica::on_next_incarnation_commit`]). The
//! metadata group, whose own log is the one sealed, switches its replicas on
//! that alone; a partition group's host also waits until every next member
//! reported the seal durable through the metadata.
//!
//! The host switches a sealed replica to the next incarnation only once every
//! member of the next incarnation has applied the seal, so all of them start
//! from the same state: the switched replica keeps
//! the state machine and client table (exactly-once survives the switch),
//! starts at view 0 with its log based at the seal's op, and saves a snapshot
//! there, so a restart recovers the new incarnation from it. Frames of one
//! incarnation are refused by replicas of the other, as for a re-created
//! group.

use cohort_messages::seal::Seal;
use cohort_messages::{
    ClientId, Incarnation, MemberIndex, Message, NodeId, Op, ReplyError, Request, RequestKind, RequestNumber,
    RequestPrepares, View,
};

use super::Context;
use super::{GroupSpec, Replica, RoleState, snapshot};
use crate::effect::Effect;
use crate::effects::Effects;
use crate::log::Log;
use crate::quorum::Quorums;
use crate::storage::RecoveredGroup;
use snapshot::SnapshotMembership;

/// The seal a replica applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// The seal's op: the last op of this incarnation.
    pub op: Op,
    /// What it says.
    pub seal: Seal,
}

/// Why a seal or a switch was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Only the primary prepares a seal.
    #[error("{0}: only the primary seals its log; this replica is not it")]
    NotPrimary(cohort_messages::GroupId),
    /// A seal is already queued, in the log, or applied.
    #[error("{0}: already sealed (or a seal is on its way)")]
    AlreadySealed(cohort_messages::GroupId),
    /// The seal itself is invalid for this group.
    #[error("{group}: bad seal: {reason}")]
    Invalid {
        /// The group.
        group: cohort_messages::GroupId,
        /// Why.
        reason: String,
    },
    /// No seal applied yet: nothing to switch to.
    #[error("{0}: no seal applied yet")]
    NotSealed(cohort_messages::GroupId),
    /// This node is not a member of the next incarnation.
    #[error("{group}: {node} is not a member of incarnation {incarnation}; unload the group instead")]
    NotNextMember {
        /// The group.
        group: cohort_messages::GroupId,
        /// This node.
        node: NodeId,
        /// The next incarnation.
        incarnation: u64,
    },
    /// D2: a run of the replica is on the apply worker; the switch takes
    /// its state machine along, so it waits for the run (ask again).
    #[error("{0}: a run of its state machine is on the apply worker; switch once it is back")]
    StateAway(cohort_messages::GroupId),
}

impl Replica {
    /// The seal this replica applied, if any: its state is final.
    pub fn sealed(&self) -> Option<&Sealed> {
        self.sealed.as_deref()
    }

    /// The applied seal, once this member holds it durably: the log through
    /// the seal and a superblock whose commit point covers it, so a restart
    /// applies the seal again without asking anyone. The host switches the
    /// group only when every next member reports this (a member that lost
    /// its seal in a crash could not catch up once the others switched).
    pub fn seal_durable(&self) -> Option<&Sealed> {
        self.sealed
            .as_deref()
            .filter(|sealed| self.durable_op >= sealed.op && self.superblock_durable_commit >= sealed.op)
    }

    /// Z6: whether a Commit of the next incarnation reached this replica
    /// (the group switched without it: a learner that missed the seal).
    pub fn outpaced(&self) -> bool {
        self.outpaced
    }

    /// Whether the log ends with a seal (committed or not).
    pub(crate) fn seal_in_log(&self) -> bool {
        self.log.op() > self.log.base() && self.log.get(self.log.op()).is_some_and(|e| e.client == ClientId::SEAL)
    }

    fn seal_queued(&self) -> bool {
        self.request_queue.iter().any(|request| request.client == ClientId::SEAL)
    }

    /// Prepare a seal: the primary queues it ahead of every request (Q3 still
    /// holds: it enters the log only after the inherited ops committed).
    pub(crate) fn propose_seal(&mut self, seal: Seal, cx: &mut Context<'_>) -> Result<(), SealError> {
        let group = self.spec.group;
        if !self.is_primary() {
            return Err(SealError::NotPrimary(group));
        }
        if self.sealed.is_some() || self.seal_in_log() || self.seal_queued() {
            return Err(SealError::AlreadySealed(group));
        }
        seal.validate().map_err(|error| SealError::Invalid { group, reason: error.to_string() })?;
        if seal.incarnation.0 != self.spec.incarnation.0 + 1 {
            let reason = format!("it names incarnation {}, not {}", seal.incarnation.0, self.spec.incarnation.0 + 1);
            return Err(SealError::Invalid { group, reason });
        }
        // Z6: the seal commits once every next member holds it, so each must
        // receive this incarnation's log (a voter or a learner of it).
        if let Some(stranger) =
            seal.members.iter().find(|node| !self.spec.members.contains(node) && !self.spec.learners.contains(node))
        {
            let reason =
                format!("next member {stranger} neither votes in nor learns incarnation {}", self.spec.incarnation.0);
            return Err(SealError::Invalid { group, reason });
        }
        let request = Request {
            client: ClientId::SEAL,
            request: RequestNumber(0),
            group,
            kind: RequestKind::Write,
            operation: seal.encode(),
        };
        self.request_queue.push_front(request);
        self.prepare_queued(cx);
        assert!(self.seal_queued() || self.seal_in_log(), "{self:?}: the seal is on its way into the log");
        Ok(())
    }

    /// The seal at the end of the log and its op, while it is not committed.
    pub(crate) fn uncommitted_seal(&self) -> Option<(Op, Seal)> {
        let op = self.log.op();
        if !self.seal_in_log() || self.commit_max >= op {
            return None;
        }
        let entry = self.log.get(op)?;
        Seal::decode(&entry.operation).ok().map(|seal| (op, seal))
    }

    /// Z6, primary: the highest op the commit point may reach given the
    /// acknowledgements so far. An uncommitted seal at `op` waits until
    /// every next member (a voter or a learner of this incarnation)
    /// acknowledged holding it; everything before it commits as usual.
    pub(crate) fn seal_commit_cap(&self) -> Op {
        let Some((op, seal)) = self.uncommitted_seal() else { return self.log.op() };
        let me = self.node_of(self.spec.me);
        let primary = self.lead();
        let holds = |node: &NodeId| {
            if *node == me {
                return self.durable_op >= op;
            }
            if let Some(index) = self.spec.members.iter().position(|member| member == node) {
                return primary.acked.get(index).is_some_and(|acked| *acked >= op);
            }
            primary.learners.iter().any(|track| track.node == *node && track.acked >= op)
        };
        if seal.members.iter().all(holds) { op } else { Op(op.0 - 1) }
    }

    /// Z6: a group message of another incarnation from `from`, refused at
    /// the door. One of the next incarnation may say this one's seal
    /// committed ([`Replica::on_next_incarnation_commit`]); true if it did.
    /// One of the previous incarnation from a voter of this one comes from a
    /// next voter still in the old incarnation, whose log ends with the
    /// seal but who never heard that it committed: the members it calls on
    /// left that incarnation, and this one has no primary without it. It
    /// gets a frame of this incarnation, which tells it.
    pub(crate) fn on_other_incarnation(&mut self, from: NodeId, incarnation: Incarnation, out: &mut Effects) -> bool {
        assert_ne!(incarnation, self.spec.incarnation, "a frame of this incarnation passes the door");
        if incarnation.0 == self.spec.incarnation.0 + 1 {
            return self.on_next_incarnation_commit(from, incarnation, out);
        }
        if incarnation.0 + 1 == self.spec.incarnation.0
            && let Some(index) = self.spec.members.iter().position(|member| *member == from)
            && self.spec.me.0 as usize != index
        {
            let nudge = RequestPrepares {
                group: self.spec.group,
                incarnation: self.spec.incarnation,
                view: self.view,
                replica: self.spec.me,
                op_min: self.commit_min.next(),
                op_max: self.commit_min.next(),
            };
            out.send(from, Message::RequestPrepares(nudge));
        }
        false
    }

    /// Z6: a frame of the next incarnation from `from` (a Commit entry, or
    /// any group message: an election's too). That incarnation runs only
    /// once the seal committed, and the seal committed only once every next
    /// member, this one among them, held it: no replica enters it before
    /// (a voter applies the seal first, a learner the seal or what a
    /// replica of the next incarnation sent it). So if this replica's log
    /// ends with that seal and `from` is a node of the group (a member or
    /// learner of either incarnation), the seal committed: apply it.
    /// Anything else is a frame of another incarnation.
    pub(crate) fn on_next_incarnation_commit(
        &mut self,
        from: NodeId,
        incarnation: Incarnation,
        out: &mut Effects,
    ) -> bool {
        assert_eq!(incarnation.0, self.spec.incarnation.0 + 1, "Z6: a frame of the next incarnation");
        let Some((op, seal)) = self.uncommitted_seal() else { return false };
        let of_the_group =
            seal.members.contains(&from) || self.spec.members.contains(&from) || self.spec.learners.contains(&from);
        if seal.incarnation != incarnation || !of_the_group {
            return false;
        }
        let me = self.node_of(self.spec.me);
        if !seal.members.contains(&me) || self.durable_op < op {
            return false;
        }
        self.commit_max = op;
        self.apply_committed(out);
        debug_assert!(self.sealed.is_some(), "the seal at the end of the log applied");
        true
    }

    /// Apply the seal at `op` (called from apply in place of the state machine).
    pub(crate) fn apply_seal(&mut self, op: Op, operation: &[u8], out: &mut Effects) {
        // A seal that does not decode cannot come from a valid Prepare (they
        // are validated); every member holds the same bytes, so every member
        // skips it the same way.
        debug_assert_eq!(self.commit_min, op, "the seal is applied in op order");
        if let Ok(seal) = Seal::decode(operation) {
            self.sealed = Some(Box::new(Sealed { op, seal }));
            self.refuse_queued(out);
            assert!(self.is_sealing(), "nothing more enters the incarnation's log");
        }
    }

    /// Answer every queued request: nothing more enters this incarnation's log.
    pub(crate) fn refuse_queued(&mut self, out: &mut Effects) {
        while let Some(request) = self.request_queue.pop_front() {
            if request.client != ClientId::SEAL {
                self.refuse_sealed(&request, out);
            }
        }
        assert!(self.request_queue.is_empty(), "every queued request is answered");
    }

    /// A request reached a sealed incarnation: retry, the next one serves it.
    pub(crate) fn refuse_sealed(&self, request: &Request, out: &mut Effects) {
        let detail = format!(
            "{}: incarnation {} is sealed for a member change; retry shortly",
            self.spec.group, self.spec.incarnation.0
        );
        self.reply_error(request, ReplyError::ViewChange, detail, out);
    }

    /// True if requests must be refused because the incarnation is sealed
    /// (the seal is in the log, or applied): a sealing primary serves no
    /// reads, so its leases no longer hold anyone back.
    pub fn is_sealing(&self) -> bool {
        self.sealed.is_some() || self.seal_in_log()
    }

    /// The next incarnation's spec for `node`, from the applied seal.
    pub fn next_spec(&self, node: NodeId) -> Result<GroupSpec, SealError> {
        let group = self.spec.group;
        let sealed = self.sealed.as_ref().ok_or(SealError::NotSealed(group))?;
        let members = sealed.seal.members.clone();
        let me = members.iter().position(|member| *member == node).ok_or(SealError::NotNextMember {
            group,
            node,
            incarnation: sealed.seal.incarnation.0,
        })?;
        let quorums = Quorums::new(members.len(), Some(usize::from(sealed.seal.replication_quorum)))
            .map_err(|error| SealError::Invalid { group, reason: error.to_string() })?;
        Ok(GroupSpec {
            group,
            incarnation: sealed.seal.incarnation,
            members,
            // The next incarnation starts without learners; the host adds
            // any the metadata names with `Shard::set_learners`.
            learners: Vec::new(),
            me: MemberIndex(me as u8),
            quorums,
            write_mode: self.spec.write_mode,
            report_applied: self.spec.report_applied,
        })
    }

    /// Z6: the spec for `node` as one of the `learners` of the incarnation
    /// `seal` opens (a node that learns the metadata group's log and is no
    /// next voter). A replica that applied a seal must name that one; one
    /// that did not must have heard the next incarnation already
    /// ([`Replica::outpaced`]): it goes on from its applied point and
    /// catches up by state transfer.
    pub fn next_learner_spec(&self, node: NodeId, seal: &Seal, learners: Vec<NodeId>) -> Result<GroupSpec, SealError> {
        let group = self.spec.group;
        match &self.sealed {
            Some(sealed) if sealed.seal != *seal => {
                let reason = format!("this replica applied the seal of {:?}, not {seal:?}", sealed.seal);
                return Err(SealError::Invalid { group, reason });
            }
            Some(_) => {}
            None if self.outpaced => {}
            None => return Err(SealError::NotSealed(group)),
        }
        // A replica that applied no seal may have missed several switches.
        let next = seal.incarnation.0 == self.spec.incarnation.0 + 1;
        if !next && (self.sealed.is_some() || seal.incarnation <= self.spec.incarnation) {
            let reason = format!("it names incarnation {}, not {}", seal.incarnation.0, self.spec.incarnation.0 + 1);
            return Err(SealError::Invalid { group, reason });
        }
        let not_learner = || SealError::NotNextMember { group, node, incarnation: seal.incarnation.0 };
        let at = learners.iter().position(|learner| *learner == node).ok_or_else(not_learner)?;
        let members = seal.members.clone();
        if members.contains(&node) {
            return Err(SealError::Invalid { group, reason: format!("{node} is a next voter, not a learner") });
        }
        let quorums = Quorums::new(members.len(), Some(usize::from(seal.replication_quorum)))
            .map_err(|error| SealError::Invalid { group, reason: error.to_string() })?;
        let spec = GroupSpec {
            group,
            incarnation: seal.incarnation,
            me: MemberIndex((members.len() + at) as u8),
            members,
            learners,
            quorums,
            write_mode: self.spec.write_mode,
            report_applied: self.spec.report_applied,
        };
        spec.validate().map_err(|error| SealError::Invalid { group, reason: error.to_string() })?;
        Ok(spec)
    }

    /// The replica of the next incarnation, from this sealed one, with
    /// `spec` from [`Replica::next_spec`] (see the module docs). Waits on
    /// this replica end as not primary.
    pub(crate) fn into_next_incarnation(mut self, spec: GroupSpec, now: u64, cx: &mut Context<'_>) -> Replica {
        assert!(self.lent.is_none(), "{self:?}: D2: a switch takes the state machine along, so never while it is away");
        assert!(self.sealed.is_some() || self.outpaced, "{self:?}: a switch needs the seal, or the switch done");
        assert!(spec.incarnation > self.spec.incarnation, "{self:?}: a switch goes to a later incarnation");
        let op = self.sealed.as_ref().map_or(self.commit_min, |sealed| sealed.op);
        // Z6: a learner that missed the seal goes on from its applied point;
        // the entries of this incarnation past it must not come back after a
        // restart as the next incarnation's log (see `Replica::recover`).
        if self.log.op() > op {
            cx.out.stage(self.spec.group, Effect::Truncate { group: self.spec.group, after: op });
        }
        let waits = self.role.take_waits();
        self.fail_waits(waits, cx.out);
        self.refuse_queued(cx.out);
        let Replica { state, clients, config, .. } = self;
        let mut next = Replica::blank(spec, config, state, now);
        next.clients = clients;
        next.log = Log::new(op, View(0));
        next.commit_min = op;
        next.commit_max = op;
        next.durable_op = op;
        // The new incarnation's recovery starts here: the old log's entries
        // belong to other views of another incarnation.
        // D1: a persistent state machine takes it as a checkpoint (the
        // state encoded here if that fails).
        let snapshot = match next.persistent() {
            true => next.checkpoint(op, View(0)).unwrap_or_else(|_| {
                next.checkpoint_failed(cx.out);
                next.encode_whole(op, View(0))
            }),
            false => next.encode_whole(op, View(0)),
        };
        let save = Effect::SaveSnapshot { group: next.spec.group, snapshot: snapshot.clone(), deferrable: false };
        cx.out.stage(next.spec.group, save);
        next.snapshot = Some(snapshot);
        next.start_view_zero(now, cx);
        let flush = next.superblock_flush;
        if let RoleState::Primary(primary) = &mut next.role {
            primary.lead_after_flush = flush;
        }
        assert!(next.view == View(0) && next.commit_min == op && next.log.base() == op, "{next:?}: starts at the seal");
        next
    }
}

impl GroupSpec {
    /// On recovery: if what survived belongs to a later incarnation (the
    /// group switched before the restart), that incarnation's members and
    /// quorum replace the configured ones. The newest of the superblock and
    /// the snapshot's recorded membership wins: the snapshot a switch saves
    /// may be durable before the superblock that follows it. `Err` if this
    /// node is not a member of it (the host should drop the group).
    pub fn adopt_recovered(mut self, recovered: &RecoveredGroup, node: NodeId) -> Result<GroupSpec, SealError> {
        let from_superblock = recovered.superblock.as_ref().map(|superblock| SnapshotMembership {
            incarnation: superblock.incarnation,
            replication_quorum: superblock.replication_quorum,
            members: superblock.members.clone(),
        });
        let from_snapshot =
            recovered.snapshot.as_ref().and_then(|snapshot| snapshot::snapshot_membership(&snapshot.data));
        let newest = [from_superblock, from_snapshot].into_iter().flatten().max_by_key(|m| m.incarnation);
        let Some(newest) = newest.filter(|membership| membership.incarnation > self.incarnation) else {
            return Ok(self);
        };
        let group = self.group;
        let voter = newest.members.iter().position(|member| *member == node);
        // Z5, Z6: every node past the metadata group's voters learns its
        // log, so a node that is no voter of the newer incarnation goes on
        // as its learner (its agent sets the full list once it applied it).
        let me = match voter {
            Some(me) => me,
            None if group == cohort_messages::GroupId::METADATA => newest.members.len(),
            None => return Err(SealError::NotNextMember { group, node, incarnation: newest.incarnation.0 }),
        };
        self.quorums = Quorums::new(newest.members.len(), Some(usize::from(newest.replication_quorum)))
            .map_err(|error| SealError::Invalid { group, reason: error.to_string() })?;
        self.incarnation = newest.incarnation;
        self.learners = if voter.is_some() { Vec::new() } else { vec![node] };
        self.members = newest.members;
        self.me = MemberIndex(me as u8);
        Ok(self)
    }

    /// H3: the incarnation `recovered` was written at (the newest its
    /// superblock and snapshot name), if that is older than this spec's.
    /// A replica stages its superblock at its own incarnation before
    /// anything else, so such data is not this replica's: it was left from
    /// a replica hosted here before this one was placed empty (a group
    /// deleted and created again, a learner replacing an older
    /// incarnation's replica) and its removal did not reach the disk.
    pub(crate) fn earlier_life(&self, recovered: &RecoveredGroup) -> Option<Incarnation> {
        let from_superblock = recovered.superblock.as_ref().map(|superblock| superblock.incarnation);
        let from_snapshot = recovered
            .snapshot
            .as_ref()
            .and_then(|snapshot| snapshot::snapshot_membership(&snapshot.data))
            .map(|membership| membership.incarnation);
        let newest = from_superblock.into_iter().chain(from_snapshot).max()?;
        (newest < self.incarnation).then_some(newest)
    }
}
