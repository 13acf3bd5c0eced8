//! Inbound connections: handshake check, frame reading and routing.
//!
//! The listener accepts a connection and reads its first frame, which must be
//! a Handshake on our revision and cluster, with our shard count, from a
//! known peer (R18), and its second, a LinkShard naming the peer's shard,
//! or the connection is closed with the reason logged. It then hands the
//! connection to this node's same-index shard's link to that peer
//! ([`InboundRoutes::adopt`]), which reads the rest on its shard's thread
//! ([`read_frames`]): the link owns both directions of its peer's traffic.
//! Frames are split by [`FrameDecoder`]: a bad body checksum drops that
//! frame only (R15), a bad header closes the connection (the stream lost its
//! framing). Single-group messages go to the shard that owns the group;
//! Commit and CommitReply batches are split by shard, each bad entry rejected
//! alone (R17, R29), and each shard gets one message per frame (R16).
//! Session frames carry no group: `SessionKeepalive` and `SessionExpired`, and
//! the metadata group's `Reply`/`Redirect` to a request a peer's agent
//! forwarded, go to the node's metadata agent (S1).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use cohort_core::routing::{route, shard_of};
use cohort_messages::{ClusterId, Frame, FrameDecoder, Message, NodeId};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::inbound::{AgentInbound, ConnectionReader, Inbound, InboundBatch, InboundRoutes};

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
    /// Shards by index and peer links (replaced on restart).
    pub routes: Arc<dyn InboundRoutes>,
    /// Counters.
    pub stats: Arc<InboundStats>,
    /// Exported metrics (rejected frames by kind).
    pub metrics: Arc<crate::metrics::NodeMetrics>,
    /// Dropped messages.
    pub drops: Arc<crate::drops::Drops>,
    /// Numbers connections, as the source of their reject counts.
    pub next_connection: Arc<AtomicU64>,
    /// The node's metadata agent: session frames (which carry no group) and
    /// the metadata group's answers to the agent's forwarded requests.
    pub agent: Option<actix::Recipient<AgentInbound>>,
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

/// Read one inbound connection until its Handshake names a known peer (R18),
/// then hand the connection to that peer's link, which reads the rest.
async fn read_connection(mut stream: TcpStream, router: Router) {
    let mut inbound = Connection {
        connection: router.next_connection.fetch_add(1, Ordering::Relaxed) as usize,
        rejects: cohort_messages::RejectCounters::default(),
        decoder: FrameDecoder::new(router.cluster),
        buffer: BytesMut::with_capacity(64 * 1024),
    };
    let Some(frame) = inbound.next_frame(&mut stream, &router, None).await else { return };
    let mut peer = None;
    let mut pending = Pending::default();
    if !router.handle(&mut peer, frame, &mut inbound.rejects, inbound.connection, &mut pending) {
        return;
    }
    let Some(peer) = peer else { return };
    if !router.routes.knows(peer) {
        router.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
        eprintln!("cohort: refusing {peer}: not a peer of this node");
        return;
    }
    // The second frame names the peer's shard this connection carries.
    let Some(frame) = inbound.next_frame(&mut stream, &router, Some(peer)).await else { return };
    let shard = match frame.message() {
        Ok(Message::LinkShard(link)) if frame.header.sender == peer => usize::from(link.shard),
        _ => {
            router.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
            eprintln!("cohort: refusing {peer}: its second frame is not a LinkShard");
            return;
        }
    };
    // The socket moves to the link's thread, whose runtime then drives it.
    let Ok(stream) = stream.into_std() else { return };
    let routes = Arc::clone(&router.routes);
    let stats = Arc::clone(&router.stats);
    let reader: ConnectionReader = Box::new(move || {
        let stream = TcpStream::from_std(stream).ok()?;
        Some(Box::pin(read_frames(stream, inbound, peer, router)))
    });
    if let Err(refused) = routes.adopt(peer, shard, reader) {
        stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
        eprintln!("cohort: refusing {peer}: not a peer of this node, or no shard {shard} here");
        drop(refused);
    }
}

/// What a connection has read so far; moves with it to the peer link.
pub struct Connection {
    connection: usize,
    rejects: cohort_messages::RejectCounters,
    decoder: FrameDecoder,
    buffer: BytesMut,
}

impl Connection {
    /// The next frame with good checksums, reading from `stream` as needed.
    /// Bad frames are counted and skipped (R15); `None` once the connection
    /// ends or its framing is lost.
    async fn next_frame(&mut self, stream: &mut TcpStream, router: &Router, peer: Option<NodeId>) -> Option<Frame> {
        loop {
            match self.decoder.decode(&mut self.buffer) {
                Ok(Some(frame)) => return Some(frame),
                Ok(None) => match stream.read_buf(&mut self.buffer).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                },
                Err(error) => {
                    router.reject_frame(self, &error, peer);
                    if error.closes_connection() {
                        return None;
                    }
                }
            }
        }
    }
}

/// Read frames from a connection whose Handshake named `peer`, and route
/// them, until the connection closes or goes bad. Runs in the peer link's
/// context, so a restarted link starts from a fresh connection. Every
/// complete frame of one read is routed before the next read, and each
/// shard gets what the read held for it in one message.
pub async fn read_frames(mut stream: TcpStream, mut inbound: Connection, peer: NodeId, router: Router) {
    let mut known = Some(peer);
    let mut pending = Pending::default();
    loop {
        loop {
            match inbound.decoder.decode(&mut inbound.buffer) {
                Ok(Some(frame)) => {
                    if !router.handle(&mut known, frame, &mut inbound.rejects, inbound.connection, &mut pending) {
                        return router.flush(&mut pending);
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    router.reject_frame(&mut inbound, &error, known);
                    if error.closes_connection() {
                        return router.flush(&mut pending);
                    }
                }
            }
        }
        router.flush(&mut pending);
        match stream.read_buf(&mut inbound.buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// What one read holds for each shard, until it is handed over.
#[derive(Default)]
struct Pending {
    per_shard: Vec<Vec<Inbound>>,
}

impl Router {
    fn reject_frame(&self, inbound: &mut Connection, error: &cohort_messages::FrameError, peer: Option<NodeId>) {
        self.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
        inbound.rejects.frame(error);
        self.metrics.record_rejected(inbound.connection, &inbound.rejects);
        if error.closes_connection() {
            if matches!(
                error,
                cohort_messages::FrameError::Revision { .. } | cohort_messages::FrameError::ClusterMismatch { .. }
            ) {
                self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
            }
            eprintln!("cohort: closing connection from {peer:?}: {error}");
        }
    }

    /// Handle one frame; false closes the connection.
    fn handle(
        &self,
        peer: &mut Option<NodeId>,
        frame: Frame,
        rejects: &mut cohort_messages::RejectCounters,
        connection: usize,
        pending: &mut Pending,
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
                    Ok(()) if usize::from(handshake.shard_count) != self.routes.shard_count() => {
                        self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                        eprintln!(
                            "cohort: refusing node {}: it runs {} shards, this node {}; every node of a cluster runs the same shard count",
                            handshake.node,
                            handshake.shard_count,
                            self.routes.shard_count()
                        );
                        false
                    }
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
        let shards = self.routes.shard_count();
        match message {
            Message::Commit(batch) => {
                let routed = route(&batch, shards);
                self.count_entry_rejects(&routed.rejected, rejects, connection);
                for (index, entries) in routed.per_shard.into_iter().enumerate() {
                    if !entries.is_empty() {
                        pending.push(index, Inbound::Commits { from, entries });
                    }
                }
            }
            Message::CommitReply(batch) => {
                let routed = route(&batch, shards);
                self.count_entry_rejects(&routed.rejected, rejects, connection);
                for (index, entries) in routed.per_shard.into_iter().enumerate() {
                    if !entries.is_empty() {
                        pending.push(index, Inbound::Replies { from, entries });
                    }
                }
            }
            message @ (Message::SessionKeepalive(_) | Message::SessionExpired(_)) => self.to_agent(from, message),
            Message::Reply(reply) if reply.group == cohort_messages::GroupId::METADATA => {
                self.to_agent(from, Message::Reply(reply))
            }
            Message::Redirect(redirect) if redirect.group == cohort_messages::GroupId::METADATA => {
                self.to_agent(from, Message::Redirect(redirect))
            }
            message => {
                if let Some(group) = message.group() {
                    let trace = frame.header.trace;
                    pending.push(shard_of(group, shards), Inbound::Message { from, message, trace });
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

    /// Session frames go to the metadata agent (dropped and counted if its
    /// mailbox is full: keepalives repeat, and the agent re-sends requests).
    fn to_agent(&self, from: NodeId, message: Message) {
        let Some(agent) = &self.agent else { return };
        if agent.try_send(AgentInbound { from, message }).is_err() {
            self.stats.mailbox_full.fetch_add(1, Ordering::Relaxed);
            self.drops.add(crate::metrics::Mailbox::Agent, crate::metrics::DropReason::MailboxFull, 1);
        }
    }

    /// Hand each shard what is pending for it, in one message.
    fn flush(&self, pending: &mut Pending) {
        for (shard, items) in pending.per_shard.iter_mut().enumerate() {
            if items.is_empty() {
                continue;
            }
            let items = std::mem::take(items);
            let count = items.len() as u64;
            if let Some(inbox) = self.routes.shard(shard)
                && inbox.try_send(InboundBatch(items)).is_err()
            {
                self.stats.mailbox_full.fetch_add(count, Ordering::Relaxed);
                self.drops.add(crate::metrics::Mailbox::Shard, crate::metrics::DropReason::MailboxFull, count);
            }
        }
    }
}

impl Pending {
    fn push(&mut self, shard: usize, inbound: Inbound) {
        if self.per_shard.len() <= shard {
            self.per_shard.resize_with(shard + 1, Vec::new);
        }
        self.per_shard[shard].push(inbound);
    }
}
