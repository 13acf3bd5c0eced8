//! The peer link: one actor per shard and peer node, on the shard's own
//! thread, owning that shard's connections to the peer's same-index shard.
//!
//! Why per shard, on the shard's thread: every node runs the same shard
//! count, so a group lives on the same-index shard of every node, and what
//! one shard sends to a peer is only for that peer's same-index shard. With
//! the connection driven on the shard's own arbiter, a Prepare goes from the
//! shard's turn to the socket, and from the peer's socket to its shard,
//! without crossing to another thread (K2: one socket write per peer per
//! shard turn, no network thread in between).
//!
//! Each shard dials each peer and sends only on its own connection: a writer
//! task connects (retrying with exponential backoff), sends the Handshake
//! (revision, cluster, node, shard count; R18) and [`LinkShard`] (which
//! shard), then writes what the outbox hands over, every turn queued by
//! then in one write. The peer's link to us reads the connection the peer
//! dialed: the listener checks its Handshake, and hands it over
//! ([`AdoptConnection`]), and the reader runs here, routing what it reads to
//! this node's shards (one message per read and shard).
//!
//! The actor never blocks. What it holds unsent is bounded in bytes
//! ([`LINK_QUEUE_MAX_BYTES`]); beyond that, and for a peer that is not
//! connected, frames are dropped and counted (the protocol re-sends what
//! matters: heartbeats, repairs; a dropped reply batch is replaced by the
//! next, R30). Connectivity is shared with the shard so each group can
//! record it after a batch (R25).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::*;
use bytes::{Bytes, BytesMut};
use cohort_messages::{ClusterId, Handshake, LinkShard, Message, NodeId, TraceContext, WIRE_REVISION};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::drops::Drops;
use crate::inbound::ConnectionReader;
use crate::metrics::{DropReason, Mailbox, NodeMetrics, Port};

/// Frames to write to the peer, in order, encoded one after another.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SendFrames {
    /// The frames' bytes.
    pub bytes: Bytes,
    /// How many frames they are (what a drop counts).
    pub frames: u64,
}

impl SendFrames {
    /// One message as a frame from `sender`.
    pub fn one(message: &Message, cluster: ClusterId, sender: NodeId) -> SendFrames {
        let mut bytes = BytesMut::new();
        message.encode_into(cluster, sender, TraceContext::NONE, &mut bytes);
        SendFrames { bytes: bytes.freeze(), frames: 1 }
    }
}

/// Bytes a link holds unsent, at most, before it drops what comes (K4).
pub const LINK_QUEUE_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Unsent bytes past which a link is congested: its shard holds Prepares
/// back (K4: slow what goes to that peer rather than drop it).
pub const LINK_CONGESTED_BYTES: usize = 8 * 1024 * 1024;
/// Unsent bytes below which a congested link has drained.
pub const LINK_DRAINED_BYTES: usize = 1024 * 1024;

const _: () = assert!(LINK_DRAINED_BYTES < LINK_CONGESTED_BYTES && LINK_CONGESTED_BYTES < LINK_QUEUE_MAX_BYTES);

/// What a link tells its shard, without a message: whether it is connected
/// (R25) and whether it is congested (K4). Written by the link, read by the
/// shard, both on the shard's thread.
#[derive(Debug, Default)]
pub struct LinkState {
    /// The outbound connection is up and greeted.
    pub connected: AtomicBool,
    /// The unsent bytes passed [`LINK_CONGESTED_BYTES`] and have not yet
    /// gone below [`LINK_DRAINED_BYTES`].
    pub congested: AtomicBool,
}
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Who a link is.
#[derive(Clone, Debug)]
pub struct LinkIdentity {
    /// Our cluster.
    pub cluster: ClusterId,
    /// This node.
    pub node: NodeId,
    /// This node's shard count.
    pub shard_count: u16,
    /// The shard this link belongs to.
    pub shard: u16,
    /// The peer.
    pub peer: NodeId,
    /// Where the peer listens.
    pub address: SocketAddr,
}

/// The peer link actor.
pub struct PeerLink {
    identity: LinkIdentity,
    queue: Option<mpsc::UnboundedSender<Bytes>>,
    /// Bytes handed to the writer and not yet written (only this shard's
    /// thread touches it).
    unsent_bytes: Arc<AtomicUsize>,
    state: Arc<LinkState>,
    drops: Arc<Drops>,
    /// The reader of the connection the peer dialed, if one is adopted.
    reader: Option<SpawnHandle>,
}

impl PeerLink {
    /// The link of `identity.shard` to `identity.peer`.
    pub fn new(identity: LinkIdentity, state: Arc<LinkState>, drops: Arc<Drops>) -> PeerLink {
        PeerLink { identity, queue: None, unsent_bytes: Arc::new(AtomicUsize::new(0)), state, drops, reader: None }
    }

    /// The peer this link writes to.
    pub fn peer(&self) -> NodeId {
        self.identity.peer
    }

    /// The frames that open a connection: Handshake, then LinkShard.
    fn hello(&self) -> Bytes {
        let LinkIdentity { cluster, node, shard_count, shard, .. } = self.identity;
        let mut bytes = BytesMut::new();
        let handshake = Handshake { revision: WIRE_REVISION, cluster, node, shard_count };
        Message::Handshake(handshake).encode_into(cluster, node, TraceContext::NONE, &mut bytes);
        Message::LinkShard(LinkShard { shard }).encode_into(cluster, node, TraceContext::NONE, &mut bytes);
        bytes.freeze()
    }
}

impl Actor for PeerLink {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        let (sender, receiver) = mpsc::unbounded_channel();
        self.queue = Some(sender);
        let writer = Writer {
            address: self.identity.address,
            hello: self.hello(),
            state: Arc::clone(&self.state),
            unsent_bytes: Arc::clone(&self.unsent_bytes),
            metrics: Arc::clone(self.drops.metrics()),
        };
        ctx.spawn(writer.run(receiver).into_actor(self));
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.state.connected.store(false, Ordering::Relaxed);
        self.state.congested.store(false, Ordering::Relaxed);
    }
}

impl Handler<SendFrames> for PeerLink {
    type Result = ();

    fn handle(&mut self, send: SendFrames, _ctx: &mut Self::Context) {
        let count = send.frames;
        if !self.state.connected.load(Ordering::Relaxed) {
            self.drops.add(Mailbox::PeerLink, DropReason::PeerDisconnected, count);
            return;
        }
        let unsent = self.unsent_bytes.load(Ordering::Relaxed);
        if unsent + send.bytes.len() > LINK_QUEUE_MAX_BYTES {
            self.drops.add(Mailbox::PeerLink, DropReason::MailboxFull, count);
            return;
        }
        let length = send.bytes.len();
        match self.queue.as_ref().map(|queue| queue.send(send.bytes)) {
            Some(Ok(())) => {
                if unsent + length > LINK_CONGESTED_BYTES {
                    self.state.congested.store(true, Ordering::Relaxed);
                }
                self.unsent_bytes.fetch_add(length, Ordering::Relaxed);
            }
            _ => self.drops.add(Mailbox::PeerLink, DropReason::MailboxClosed, count),
        }
    }
}

/// The writing half of a link: dial, greet, write; redial on failure.
struct Writer {
    address: SocketAddr,
    hello: Bytes,
    state: Arc<LinkState>,
    unsent_bytes: Arc<AtomicUsize>,
    metrics: Arc<NodeMetrics>,
}

impl Writer {
    async fn run(self, mut queue: mpsc::UnboundedReceiver<Bytes>) {
        let mut backoff = BACKOFF_MIN;
        loop {
            let mut stream = match TcpStream::connect(self.address).await {
                Ok(stream) => stream,
                Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            if self.write(&mut stream, &self.hello).await.is_err() {
                continue;
            }
            backoff = BACKOFF_MIN;
            // Frames queued while disconnected are stale: drop them.
            while let Ok(stale) = queue.try_recv() {
                self.written(stale.len());
            }
            self.state.connected.store(true, Ordering::Relaxed);
            loop {
                let Some(first) = queue.recv().await else {
                    self.state.connected.store(false, Ordering::Relaxed);
                    return;
                };
                // Every turn queued by now leaves in the same write.
                let bytes = match queue.try_recv() {
                    Err(_) => first,
                    Ok(next) => {
                        let mut joined = BytesMut::with_capacity(first.len() + next.len());
                        joined.extend_from_slice(&first);
                        joined.extend_from_slice(&next);
                        while let Ok(next) = queue.try_recv() {
                            joined.extend_from_slice(&next);
                        }
                        joined.freeze()
                    }
                };
                let result = self.write(&mut stream, &bytes).await;
                self.written(bytes.len());
                if result.is_err() {
                    break;
                }
            }
            self.state.connected.store(false, Ordering::Relaxed);
        }
    }

    fn written(&self, length: usize) {
        // Written only after it was counted in, by the same thread.
        let unsent = self.unsent_bytes.load(Ordering::Relaxed).saturating_sub(length);
        self.unsent_bytes.store(unsent, Ordering::Relaxed);
        if unsent < LINK_DRAINED_BYTES {
            self.state.congested.store(false, Ordering::Relaxed);
        }
    }

    /// Write all of `bytes`, counting each write call (K2).
    async fn write(&self, stream: &mut TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            self.metrics.inc_socket_writes(Port::Peer);
            let written = stream.write(bytes).await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[written..];
        }
        Ok(())
    }
}

/// A connection the peer dialed, past its Handshake and LinkShard, from the
/// listener: read it here, on this shard's thread.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AdoptConnection(pub ConnectionReader);

impl Handler<AdoptConnection> for PeerLink {
    type Result = ();

    fn handle(&mut self, AdoptConnection(reader): AdoptConnection, ctx: &mut Self::Context) {
        let Some(reader) = reader() else { return };
        // A newer connection from the peer replaces the older one.
        if let Some(old) = self.reader.take() {
            ctx.cancel_future(old);
        }
        self.reader = Some(ctx.spawn(reader.into_actor(self)));
    }
}
