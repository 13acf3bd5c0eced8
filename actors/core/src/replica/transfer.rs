//! Directed view change (C4): the primary hands its group to a chosen voter.
//!
//! The primary of view v is member `v mod n`, so handing the group to member
//! `m` means moving it to the smallest view above the current one that `m`
//! leads: less than n views ahead, so never past
//! [`crate::CoreConfig::view_jump_max_views`] (at least `GROUP_MEMBERS_MAX`,
//! checked by `CoreConfig::validate`). The primary starts that view change
//! itself ([`Replica::start_view_change`]); the new primary collects
//! DoViewChanges as in any election. VR's safety does not depend on who
//! leads the next view, so the rules below only keep the outage short and
//! the error useful: only the normal primary, not sealing, to a voter other
//! than itself that has acknowledged (PrepareOk, in this view) every op up to
//! the primary's commit point, so the new primary can commit at once.
//!
//! # Why backups need not wait for their leases (V7)
//! A normal backup does not join a view change while the lease it granted
//! the primary of its view runs (see `view_change`). A StartViewChange or
//! DoViewChange for a later view from that very primary releases it at
//! once: the lease holder gave the view up itself. That is safe because
//! such a message shows that its sender serves no read in that view any
//! more:
//! - it sent the message from a later view, and reads need normal status in
//!   the primary's own view, so its last read there came before the message;
//! - it never comes back to the view. Views only grow while a process runs.
//!   Across a restart: the backup follows the view only after its StartView,
//!   which leaves once the primary's superblock naming the view as its log
//!   view is durable (view 0 needs none: a member without a later superblock
//!   recovers in view 0), and a member that recovers as the normal primary
//!   of its view starts a view change instead of leading it (V4);
//! - a message that left before it was durable (the StartViewChange a
//!   lagging backup sends to ask for the StartView, `request_start_view`)
//!   names a view that already has a primary, and once a view exists no
//!   primary of an earlier one is confirmed by a quorum again (Qv + Qr > n,
//!   and a DoViewChange leaves only once its view is durable), so it serves
//!   no read there either.
//!
//! So every read the old primary served in the view came before the
//! backup joined, hence before any later view could exist. The lease
//! granted to a primary of an earlier view needs nothing: the backup's
//! current view exists, so that older primary's window had closed (the
//! usual V7 argument). A view-change message from any other member still
//! waits for the lease. No wire change is needed: both messages name their
//! sender's member index, and the door checks that the sending node is that
//! member.

use cohort_messages::{GroupId, MemberIndex, NodeId, Op, View};

use super::Context;
use super::Replica;
use crate::refusal::VIEW_ACCEPTED_MAX;

/// Why a primary transfer was refused. Nothing changed in the group.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// The group is not hosted on this shard.
    #[error("{0} is not on this shard; call transfer_primary on a node that hosts it")]
    UnknownGroup(GroupId),
    /// Only the normal primary of a view hands it over.
    #[error(
        "{group}: this replica is not the normal primary (it is in {view}); call transfer_primary on the group's primary"
    )]
    NotPrimary {
        /// The group.
        group: GroupId,
        /// The view this replica is in.
        view: View,
    },
    /// The incarnation is sealed (or sealing) for a member change.
    #[error("{0}: its incarnation is sealed for a member change; transfer in the next incarnation once it runs")]
    Sealing(GroupId),
    /// The chosen node is no voter of the group (a learner, or no member).
    #[error("{group}: {node} is not a voting member; choose one of its voters")]
    NotAVoter {
        /// The group.
        group: GroupId,
        /// The chosen node.
        node: NodeId,
    },
    /// The chosen node is this primary.
    #[error("{group}: {node} already is the primary; nothing to transfer")]
    SameNode {
        /// The group.
        group: GroupId,
        /// This node.
        node: NodeId,
    },
    /// The chosen node has not acknowledged every committed op yet.
    #[error(
        "{group}: {to} has acknowledged up to {acked}, behind the commit point {commit}; retry once it has caught up"
    )]
    Behind {
        /// The group.
        group: GroupId,
        /// The chosen node.
        to: NodeId,
        /// The highest op it acknowledged in this view.
        acked: Op,
        /// The primary's commit point.
        commit: Op,
    },
    /// The view the chosen node leads is past what peers accept
    /// ([`VIEW_ACCEPTED_MAX`]); no group gets there in practice.
    #[error("{group}: {view} is past the highest view peers accept; the group cannot change view any more")]
    ViewsExhausted {
        /// The group.
        group: GroupId,
        /// The view the chosen node would lead.
        view: View,
    },
}

impl Replica {
    /// C4: hand this group's primary role to voter `to` by a view change to
    /// the next view it leads (see the module docs for the rules). On `Ok`
    /// this replica is in that view change and serves nothing until it ends.
    pub(crate) fn transfer_primary(&mut self, to: NodeId, now: u64, cx: &mut Context<'_>) -> Result<(), TransferError> {
        let (member, view) = self.transfer_target(to)?;
        let jump = u64::from(view.0) - u64::from(self.view.0);
        debug_assert!(jump < self.spec.members.len() as u64, "the next view {member} leads is less than n ahead");
        debug_assert!(jump <= u64::from(self.config.view_jump_max_views), "T5: no member refuses the jump");
        cx.metrics.primary_transfers_started += 1;
        self.start_view_change(view, now, cx);
        debug_assert!(self.primary_index() == member && !self.is_primary(), "the election of `to`'s view is under way");
        Ok(())
    }

    /// The member index of `to` and the next view it leads, if this primary
    /// may hand the group to it now.
    fn transfer_target(&self, to: NodeId) -> Result<(MemberIndex, View), TransferError> {
        let group = self.spec.group;
        if !self.is_primary() {
            return Err(TransferError::NotPrimary { group, view: self.view });
        }
        if self.is_sealing() {
            return Err(TransferError::Sealing(group));
        }
        let member = match self.spec.index_of(to) {
            Some(member) if self.spec.is_voter(member) => member,
            _ => return Err(TransferError::NotAVoter { group, node: to }),
        };
        if member == self.spec.me {
            return Err(TransferError::SameNode { group, node: to });
        }
        let (acked, commit) = (self.lead().acked[member.0 as usize], self.commit_max);
        if acked < commit {
            return Err(TransferError::Behind { group, to, acked, commit });
        }
        let view = self.next_view_led_by(member);
        if view > VIEW_ACCEPTED_MAX {
            return Err(TransferError::ViewsExhausted { group, view });
        }
        Ok((member, view))
    }

    /// The smallest view above the current one that `member` leads.
    fn next_view_led_by(&self, member: MemberIndex) -> View {
        let members = self.spec.members.len() as u64;
        let view = u64::from(self.view.0);
        let ahead = (u64::from(member.0) + members - view % members) % members;
        let ahead = if ahead == 0 { members } else { ahead };
        // Views above VIEW_ACCEPTED_MAX are refused before they are used.
        let next = View(u32::try_from(view + ahead).unwrap_or(u32::MAX));
        debug_assert!(next == View(u32::MAX) || self.primary_index_of(next) == member, "{next} is led by {member}");
        next
    }
}
