//! What a replica's handler reaches outside its replica.
//!
//! A shard owns one output buffer, one set of counters and one view of
//! its peers' links, for all of its replicas; a handler gets borrows of
//! them for one input, together with the tick by value. Handlers that only
//! emit effects take the buffer alone (`&mut Effects`); those that count,
//! refuse or send Prepares take a [`Context`]. The quiescence pairs (Z3)
//! are not in it: the few handlers that touch them get them by name.

use std::collections::BTreeSet;

use cohort_messages::{CommitReplyEntry, NodeId, Prepare};

use crate::effect::FlushId;
use crate::effects::Effects;
use crate::metrics::ShardMetrics;
use crate::refusal::{Refusal, Refusals};

/// The shard's parts one input of a replica may touch. See the module docs.
pub(crate) struct Context<'a> {
    /// The output buffer.
    pub(crate) out: &'a mut Effects,
    /// The shard's counters (R19, R32).
    pub(crate) metrics: &'a mut ShardMetrics,
    /// T5: peer messages refused, by reason.
    pub(crate) refused: &'a mut Refusals,
    /// K4: peers whose link is congested: Prepares to them are held back
    /// (the primary sends them again once the link drains).
    pub(crate) congested: &'a BTreeSet<NodeId>,
}

impl Context<'_> {
    /// Count a refused peer message (T5).
    pub(crate) fn refuse(&mut self, refusal: Refusal) {
        self.refused.count(refusal);
    }

    /// Send a Prepare once flush `after` is durable, unless `to`'s link is
    /// congested then (K4): see [`Effects::send_prepare_after`].
    pub(crate) fn send_prepare_after(&mut self, to: NodeId, prepare: Prepare, after: FlushId) {
        self.out.send_prepare_after(to, prepare, after, self.congested, self.metrics);
    }

    /// Queue a CommitReply for `to` (R27); one past a full batch is
    /// refused and counted (T5, see [`Effects::queue_reply`]).
    pub(crate) fn queue_reply(&mut self, to: NodeId, entry: CommitReplyEntry) {
        if let Err(refusal) = self.out.queue_reply(to, entry) {
            self.refuse(refusal);
        }
    }
}
