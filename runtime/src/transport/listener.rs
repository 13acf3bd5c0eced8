//! Inbound connections: handshake check, frame reading and routing.
//!
//! The first frame on a connection must be a Handshake on our revision and
//! cluster (R18), or the connection is closed with the reason logged. After
//! it, frames are split by [`FrameDecoder`]: a bad body checksum drops that
//! frame only (R15), a bad header closes the connection (the stream lost its
//! framing). Single-group messages go to the shard that owns the group;
//! Commit and CommitReply batches are split by shard, each bad entry rejected
//! alone (R17, R29), and each shard gets one message per frame (R16).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use cohort_actors::core::routing::{route, shard_of};
use cohort_messages::{ClusterId, Frame, FrameDecoder, Message, NodeId};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::shard::Inbound;

/// Counters of what inbound connections refused or dropped.
#[derive(Debug, Default)]
pub struct InboundStats {
    /// Connections refused at the handshake (R18).
    pub handshakes_refused: AtomicU64,
    /// Frames dropped as bad (R15, bad bodies).
    pub frames_rejected: AtomicU64,
    /// Batch entries rejected alone (R17, R29).
    pub entries_rejected: AtomicU64,
    /// Messages dropped because a shard's mailbox was full.
    pub mailbox_full: AtomicU64,
}

/// Where inbound traffic goes.
#[derive(Clone)]
pub struct Router {
    /// Our cluster.
    pub cluster: ClusterId,
    /// Shards by index (replaced on restart).
    pub shards: Arc<crate::node::Directory>,
    /// Counters.
    pub stats: Arc<InboundStats>,
    /// Exported metrics (rejected frames by kind).
    pub metrics: Arc<crate::telemetry::NodeMetrics>,
    /// Dropped messages.
    pub drops: Arc<crate::telemetry::Drops>,
    /// Numbers connections, as the source of their reject counts.
    pub next_connection: Arc<AtomicU64>,
}

/// Accept connections forever, each served by its own task.
pub async fn serve(listener: TcpListener, router: Router) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                actix::spawn(read_connection(stream, router.clone()));
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
}

async fn read_connection(mut stream: TcpStream, router: Router) {
    let connection = router.next_connection.fetch_add(1, Ordering::Relaxed) as usize;
    let mut rejects = cohort_messages::RejectCounters::default();
    let mut decoder = FrameDecoder::new(router.cluster);
    let mut buffer = BytesMut::with_capacity(64 * 1024);
    let mut peer: Option<NodeId> = None;
    loop {
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(frame)) => {
                    if !router.handle(&mut peer, frame, &mut rejects, connection) {
                        return;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    router.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                    rejects.frame(&error);
                    router.metrics.record_rejected(connection, &rejects);
                    if error.closes_connection() {
                        if matches!(
                            error,
                            cohort_messages::FrameError::Revision { .. }
                                | cohort_messages::FrameError::ClusterMismatch { .. }
                        ) {
                            router.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                        }
                        eprintln!("cohort: closing connection from {:?}: {error}", peer);
                        return;
                    }
                }
            }
        }
        match stream.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

impl Router {
    /// Handle one frame; false closes the connection.
    fn handle(
        &self,
        peer: &mut Option<NodeId>,
        frame: Frame,
        rejects: &mut cohort_messages::RejectCounters,
        connection: usize,
    ) -> bool {
        let message = match frame.message() {
            Ok(message) => message,
            Err(error) => {
                self.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                rejects.body(&error);
                self.metrics.record_rejected(connection, rejects);
                return true;
            }
        };
        let Some(from) = *peer else {
            return match message {
                Message::Handshake(handshake) => match handshake.check_peer(self.cluster) {
                    Ok(()) if handshake.node == frame.header.sender => {
                        *peer = Some(handshake.node);
                        true
                    }
                    Ok(()) => {
                        self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                    Err(error) => {
                        self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                        eprintln!("cohort: refusing node {}: {error}", handshake.node);
                        false
                    }
                },
                _ => {
                    self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                    false
                }
            };
        };
        if frame.header.sender != from {
            self.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let shards = self.shards.shard_count();
        match message {
            Message::Commit(batch) => {
                let routed = route(&batch, shards);
                self.count_entry_rejects(&routed.rejected, rejects, connection);
                for (index, entries) in routed.per_shard.into_iter().enumerate() {
                    if !entries.is_empty() {
                        self.deliver(index, Inbound::Commits { from, entries });
                    }
                }
            }
            Message::CommitReply(batch) => {
                let routed = route(&batch, shards);
                self.count_entry_rejects(&routed.rejected, rejects, connection);
                for (index, entries) in routed.per_shard.into_iter().enumerate() {
                    if !entries.is_empty() {
                        self.deliver(index, Inbound::Replies { from, entries });
                    }
                }
            }
            message => {
                if let Some(group) = message.group() {
                    self.deliver(shard_of(group, shards), Inbound::Message { from, message });
                }
            }
        }
        true
    }

    fn count_entry_rejects(
        &self,
        rejected: &[cohort_messages::EntryError],
        rejects: &mut cohort_messages::RejectCounters,
        connection: usize,
    ) {
        if rejected.is_empty() {
            return;
        }
        self.stats.entries_rejected.fetch_add(rejected.len() as u64, Ordering::Relaxed);
        for error in rejected {
            rejects.entry(error);
        }
        self.metrics.record_rejected(connection, rejects);
    }

    fn deliver(&self, shard: usize, inbound: Inbound) {
        if let Some(addr) = self.shards.shard(shard)
            && addr.try_send(inbound).is_err()
        {
            self.stats.mailbox_full.fetch_add(1, Ordering::Relaxed);
            self.drops.add(crate::telemetry::DropReason::MailboxFull, 1);
        }
    }
}
