//! What a correct peer would answer to something the shard sent.
//!
//! Random messages rarely carry the exact view, op and member index a
//! replica is waiting for, so without help the fuzzer would spend its time
//! in refusals. An answer step picks one of the shard's recent sends and
//! returns what its recipient, following the protocol, sends back: a
//! PrepareOk for a Prepare, a StartView for a DoViewChange, a CommitReply
//! for each Commit, a snapshot chunk for a state-transfer request. Those
//! carry groups through commits, snapshots and view changes, so that the
//! arbitrary steps around them start from deep states.

use cohort_core::{Effect, Shard};
use cohort_messages::{
    CommitEntry, CommitReplyEntry, DoViewChange, HeartbeatState, Message, NodeId, Op, PrepareOk, StartView, StateChunk,
    Timestamp,
};

use super::build::KnownSnapshot;

/// One input for the shard: a peer message, or a batch's entries.
pub enum Answer {
    Message(NodeId, Message),
    Commits(NodeId, Vec<CommitEntry>),
    Replies(NodeId, Vec<CommitReplyEntry>),
}

/// The answer of `sent`'s recipient, if the protocol has one.
pub fn answer(shard: &Shard, sent: &Effect, snapshots: &[KnownSnapshot]) -> Option<Answer> {
    match sent {
        Effect::Send { to, message } => answer_message(shard, *to, message, snapshots),
        Effect::SendCommitBatch { to, entries } => {
            let replies = entries
                .iter()
                .filter_map(|entry| {
                    let replica = shard.replica(entry.group)?.spec_index_of(*to)?;
                    Some(CommitReplyEntry {
                        group: entry.group,
                        partition_incarnation: entry.partition_incarnation,
                        view: entry.view,
                        timestamp_monotonic: entry.timestamp_monotonic,
                        replica,
                    })
                })
                .collect();
            Some(Answer::Replies(*to, replies))
        }
        _ => None,
    }
}

fn answer_message(shard: &Shard, to: NodeId, message: &Message, snapshots: &[KnownSnapshot]) -> Option<Answer> {
    let group = message.group()?;
    let replica = shard.replica(group)?;
    let them = replica.spec_index_of(to)?;
    let answer = match message {
        Message::Prepare(prepare) => Message::PrepareOk(PrepareOk {
            group,
            incarnation: prepare.incarnation,
            view: prepare.view,
            op: prepare.entry.op,
            replica: them,
        }),
        Message::StartView(start) if start.op > Op(0) => Message::PrepareOk(PrepareOk {
            group,
            incarnation: start.incarnation,
            view: start.view,
            op: start.op,
            replica: them,
        }),
        // The new primary (them) takes our log and starts the view.
        Message::DoViewChange(dvc) => Message::StartView(StartView {
            group,
            incarnation: dvc.incarnation,
            view: dvc.view,
            op: dvc.op,
            commit: dvc.commit,
            replica: them,
            log: dvc.log.clone(),
        }),
        // They join our election: their log is empty past our applied point.
        Message::StartViewChange(svc) => Message::DoViewChange(DoViewChange {
            group,
            incarnation: svc.incarnation,
            view: svc.view,
            log_view: replica.log_view().min(cohort_messages::View(svc.view.0.saturating_sub(1))),
            op: replica.commit_min(),
            commit: replica.commit_min(),
            replica: them,
            log: Vec::new(),
        }),
        // The primary (them) tells us the new commit point with a heartbeat.
        Message::PrepareOk(ok) => {
            let entry = CommitEntry {
                group,
                partition_incarnation: ok.incarnation,
                view: ok.view,
                commit: ok.op,
                timestamp_monotonic: Timestamp(shard.now().saturating_mul(16).saturating_add(15)),
                heartbeat_state: HeartbeatState::Busy,
                replica: them,
            };
            return Some(Answer::Commits(to, vec![entry]));
        }
        Message::RequestStateTransfer(request) => {
            let known = snapshots.iter().rev().find(|known| known.group == group)?;
            Message::StateChunk(StateChunk {
                group,
                incarnation: request.incarnation,
                view: request.view,
                replica: them,
                snapshot_op: known.op,
                snapshot_view: known.view,
                offset_bytes: 0,
                total_size_bytes: known.data.len() as u64,
                chunk: known.data.clone(),
            })
        }
        _ => return None,
    };
    Some(Answer::Message(to, answer))
}

/// A member index by node, through the public spec accessors.
trait SpecIndex {
    fn spec_index_of(&self, node: NodeId) -> Option<cohort_messages::MemberIndex>;
}

impl SpecIndex for cohort_core::Replica {
    fn spec_index_of(&self, node: NodeId) -> Option<cohort_messages::MemberIndex> {
        let voters = self.members().iter();
        let position = voters.chain(self.learner_nodes()).position(|member| *member == node)?;
        Some(cohort_messages::MemberIndex(position as u8))
    }
}
