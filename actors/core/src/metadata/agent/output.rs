//! What the agent asks its shell to do ([`AgentOutput`]) and what it counts
//! ([`AgentCounters`]). The agent does no I/O: every effect on the network
//! or on a shard leaves as one of these, in the order the shell must carry
//! them out, and the runtime's actor and the simulator each execute the
//! same list.

use cohort_messages::replication::Replication;
use cohort_messages::seal::Seal;
use cohort_messages::{GroupId, Incarnation, NodeId, Request, SessionExpired, SessionId, SessionKeepalive};

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentOutput {
    /// Submit this request to the metadata group's primary (following
    /// redirects); its reply goes to [`super::MetadataAgent::on_reply`].
    Submit(Request),
    /// Send this keepalive to every member of the metadata group; only the
    /// primary's driver acts on it.
    Keepalive(SessionKeepalive),
    /// Tell `to` that its session is over.
    NotifyExpired {
        /// The node whose session ended.
        to: NodeId,
        /// The notice.
        notice: SessionExpired,
    },
    /// A new session is open and the hosted groups are being re-owned.
    SessionOpened(SessionId),
    /// Stop and remove this group's replica and data (S4).
    Unload(GroupId),
    /// This node's replica is the group's primary and the metadata decided a
    /// member change: seal the incarnation
    /// ([`crate::Shard::propose_seal`]; a refusal is fine, it is asked
    /// again while the change is pending).
    ProposeSeal {
        /// The group.
        group: GroupId,
        /// The seal.
        seal: Seal,
    },
    /// Every next member held the seal and the metadata switched the group:
    /// switch this node's sealed replica ([`crate::Shard::switch_incarnation`]).
    /// For the metadata group (Z6) the committed seal alone says every next
    /// member holds it, so its next members switch on that.
    Switch(GroupId),
    /// Z6: this node learns the metadata group's log and is no next voter:
    /// its replica applied the seal, or heard the next incarnation run
    /// without it, so it goes on as a learner of the next incarnation (from
    /// the same state, or from its applied point by state transfer;
    /// [`crate::Shard::switch_incarnation_as_learner`]).
    SwitchLearner {
        /// The group (the metadata group).
        group: GroupId,
        /// The seal of the switch (as the pending switch names it).
        seal: Seal,
        /// The next incarnation's learners, this node among them.
        learners: Vec<NodeId>,
    },
    /// The metadata names this node a learner of a group it does not host
    /// (at this incarnation): create an empty learner replica with these
    /// members and learners (dropping an older incarnation's replica); it
    /// catches up from the primary (P4).
    HostLearner {
        /// The group.
        group: GroupId,
        /// Its kind.
        kind: String,
        /// Its incarnation.
        incarnation: Incarnation,
        /// Its voting members.
        members: Vec<NodeId>,
        /// Its learners, this node among them.
        learners: Vec<NodeId>,
        /// Its replication quorum (for `members`) and write mode.
        replication: Replication,
    },
    /// C3: the metadata names this node a voting member of a group created
    /// at run time that it hosts no replica of (or only one of an earlier
    /// life of the group id, H3): create the replica empty, in place of
    /// that one and its data (the group never held anything else at this
    /// incarnation).
    HostMember {
        /// The group.
        group: GroupId,
        /// Its kind.
        kind: String,
        /// Its incarnation (the one it was created at).
        incarnation: Incarnation,
        /// Its voting members, this node among them.
        members: Vec<NodeId>,
        /// Its replication quorum and write mode.
        replication: Replication,
    },
    /// C4: this node leads `group` and the metadata asks that `to` lead it:
    /// start the directed view change ([`crate::Shard::transfer_primary`];
    /// refused while `to` is behind, and asked again after a retry period).
    TransferPrimary {
        /// The group.
        group: GroupId,
        /// The member that is to lead.
        to: NodeId,
    },
    /// A hosted replica's learners differ from the metadata's: set them
    /// ([`crate::Shard::set_learners`]).
    SetLearners {
        /// The group.
        group: GroupId,
        /// The learners.
        learners: Vec<NodeId>,
    },
    /// Stop the node (S3), with the reason.
    Stop(&'static str),
}

/// A replica the agent asks the shell to host (a learner or a member of a
/// group created at run time), as [`AgentOutput::placed_replica`] reads it
/// from the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedReplica {
    /// The group as the metadata places it.
    pub placement: crate::replica::Placement,
    /// Its kind.
    pub kind: String,
    /// True for a voting member, false for a learner.
    pub voter: bool,
}

/// Whether a shell hosts a replica placed at incarnation `placed` over
/// what it hosts of the group now, a replica at incarnation `hosted` or
/// none: yes in place of an older incarnation's, and its data (a learner
/// catches up from scratch; a member is placed only at the incarnation its
/// group was created at, so an older replica is from an earlier life of
/// the group id, H3); never over this incarnation or a later one (the
/// agent's metadata may be older than the replica after a restart). The
/// node's shard and the simulator both ask this, so they host by one rule.
pub fn placed_replaces(placed: Incarnation, hosted: Option<Incarnation>) -> bool {
    hosted.is_none_or(|hosted| hosted < placed)
}

impl AgentOutput {
    /// The replica a `HostLearner` or `HostMember` asks for; `None` for
    /// every other output.
    pub fn placed_replica(&self) -> Option<PlacedReplica> {
        let (group, kind, incarnation, members, learners, replication, voter) = match self {
            AgentOutput::HostLearner { group, kind, incarnation, members, learners, replication } => {
                (group, kind, incarnation, members, learners.clone(), replication, false)
            }
            AgentOutput::HostMember { group, kind, incarnation, members, replication } => {
                (group, kind, incarnation, members, Vec::new(), replication, true)
            }
            _ => return None,
        };
        let placement = crate::replica::Placement {
            group: *group,
            incarnation: *incarnation,
            members: members.clone(),
            learners,
            replication_quorum: replication.quorum.map(usize::from),
            write_mode: replication.write_mode,
        };
        Some(PlacedReplica { placement, kind: kind.clone(), voter })
    }
}

/// Counters for tests, metrics and the simulator's report.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentCounters {
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Session expiries this node learned of.
    pub sessions_expired: u64,
    /// Ownership reports accepted.
    pub reports_accepted: u64,
    /// Ownership reports refused (stale view, session or incarnation).
    pub reports_refused: u64,
    /// Expiries this node proposed as metadata primary.
    pub expiries_proposed: u64,
    /// Groups unloaded.
    pub groups_unloaded: u64,
    /// T3: session frames refused because they did not come from whom they
    /// speak for (a keepalive for another node, an expiry notice from a
    /// node outside the metadata group).
    pub frames_refused: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_messages::replication::WriteMode;

    #[test]
    fn c3_a_host_member_places_a_voter_without_learners() {
        let replication = Replication { quorum: Some(2), write_mode: WriteMode::default() };
        let output = AgentOutput::HostMember {
            group: GroupId(7),
            kind: "kv".into(),
            incarnation: Incarnation(3),
            members: vec![NodeId(1), NodeId(2)],
            replication,
        };
        let placement = crate::replica::Placement {
            group: GroupId(7),
            incarnation: Incarnation(3),
            members: vec![NodeId(1), NodeId(2)],
            learners: Vec::new(),
            replication_quorum: Some(2),
            write_mode: WriteMode::default(),
        };
        assert_eq!(output.placed_replica(), Some(PlacedReplica { placement, kind: "kv".into(), voter: true }));
        assert_eq!(AgentOutput::Unload(GroupId(7)).placed_replica(), None);
    }

    #[test]
    fn h3_a_placed_replica_replaces_only_an_older_incarnation_s() {
        let output = AgentOutput::HostMember {
            group: GroupId(7),
            kind: "kv".into(),
            incarnation: Incarnation(3),
            members: vec![NodeId(1)],
            replication: Replication::default(),
        };
        let placed = output.placed_replica().expect("a placed replica").placement.incarnation;
        let replaces: Vec<bool> = [None, Some(2), Some(3), Some(4)]
            .into_iter()
            .map(|hosted| placed_replaces(placed, hosted.map(Incarnation)))
            .collect();
        assert_eq!(replaces, vec![true, true, false, false]);
    }
}
