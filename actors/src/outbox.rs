//! One outbox per (shard, peer node): it turns a shard's turn of messages for
//! one peer into frames and hands them to the peer link in one message.
//!
//! The core already assembles the batches (one Commit batch and one
//! CommitReply batch per peer per tick, R11 and R27); the outbox encodes them
//! and the turn's Prepares and view-change messages off the shard actor's
//! handler (each run of view-change messages as one ViewChangeBatch frame,
//! Z4), and never blocks: if the link's mailbox is full the frames are
//! dropped and counted (R30: a dropped reply batch is replaced by the next).
//!
//! Each message comes with the trace context the shard chose for it (the
//! span that sent it, see `super::traces`), which goes in its frame header;
//! most messages carry [`TraceContext::NONE`].

use std::sync::Arc;

use actix::prelude::*;
use bytes::BytesMut;
use cohort_messages::{ClusterId, Message, NodeId, TraceContext};

use crate::drops::Drops;
use crate::metrics::{DropReason, Mailbox, NodeMetrics};
use crate::peer_link::{PeerLink, SendFrames};

/// One shard turn's messages for one peer.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Outgoing {
    /// In the order the core emitted them, each with its frame header's
    /// trace context.
    pub messages: Vec<(Message, TraceContext)>,
}

/// The outbox actor.
pub struct Outbox {
    cluster: ClusterId,
    node: NodeId,
    link: Addr<PeerLink>,
    drops: Arc<Drops>,
    metrics: Arc<NodeMetrics>,
}

impl Outbox {
    /// An outbox of `node` writing to `link`; drops are counted in `drops`,
    /// view-change messages and their frames in `metrics` (Z4).
    pub fn new(
        cluster: ClusterId,
        node: NodeId,
        link: Addr<PeerLink>,
        drops: Arc<Drops>,
        metrics: Arc<NodeMetrics>,
    ) -> Outbox {
        Outbox { cluster, node, link, drops, metrics }
    }
}

impl Actor for Outbox {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
    }
}

impl Handler<Outgoing> for Outbox {
    type Result = ();

    fn handle(&mut self, outgoing: Outgoing, _ctx: &mut Self::Context) {
        // K2: the turn's frames, one after another in one buffer, leave in one socket write.
        // Z4: runs of view-change messages share a frame.
        let is_view_change = |message: &Message| cohort_messages::view_change_batch::is_view_change(message.command());
        let view_changes = outgoing.messages.iter().filter(|(message, _)| is_view_change(message)).count() as u64;
        let messages = cohort_messages::batch_view_changes(outgoing.messages);
        let mut bytes = BytesMut::new();
        let mut parts = Vec::new();
        let mut view_change_frames = 0;
        for (message, trace) in &messages {
            // D3: a state chunk's payload is not copied behind its head.
            if let Some(payload) = message.encode_into_parts(self.cluster, self.node, *trace, &mut bytes) {
                parts.push(bytes.split().freeze());
                parts.push(payload);
            }
            view_change_frames += u64::from(is_view_change(message) || matches!(message, Message::ViewChangeBatch(_)));
        }
        if !bytes.is_empty() {
            parts.push(bytes.freeze());
        }
        self.metrics.add_view_changes_sent(view_changes, view_change_frames);
        let count = messages.len() as u64;
        match self.link.try_send(SendFrames { parts, frames: count }) {
            Ok(()) => {}
            Err(SendError::Full(_)) => self.drops.add(Mailbox::PeerLink, DropReason::MailboxFull, count),
            Err(SendError::Closed(_)) => self.drops.add(Mailbox::PeerLink, DropReason::MailboxClosed, count),
        }
    }
}

/// The peer link was re-created by the supervisor: write to this one now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReplaceLink(pub Addr<PeerLink>);

impl Handler<ReplaceLink> for Outbox {
    type Result = ();

    fn handle(&mut self, replace: ReplaceLink, _ctx: &mut Self::Context) {
        self.link = replace.0;
    }
}

/// Make the receiving actor panic, to test supervision (not a stable API).
#[doc(hidden)]
#[derive(Message)]
#[rtype(result = "()")]
pub struct PanicForTest;

impl Handler<PanicForTest> for Outbox {
    type Result = ();

    fn handle(&mut self, _: PanicForTest, _ctx: &mut Self::Context) {
        panic!("outbox panicked on request (PanicForTest)");
    }
}
