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
//!
//! F1, why a link watches its connection: during a partition TCP keeps
//! retransmitting with a doubling timer, so after the heal an old
//! connection can sit for many seconds on a send queue of stale frames,
//! and a write into a socket with room in its buffer never fails. So a
//! connection is replaced once it makes no progress for
//! [`LinkTiming::stall_timeout`]: a write the socket does not take, data
//! or keepalive probes TCP does not see acknowledged (`TCP_USER_TIMEOUT`
//! with keepalive, on both ends), or the peer closing it. The kernel may
//! hold at most [`LinkTiming::socket_unsent_max_bytes`] unsent
//! (`TCP_NOTSENT_LOWAT`); the rest waits in the link's own queue, where
//! it counts towards congestion and is dropped on a redial, not delivered
//! late. A dial that does not finish within [`LinkTiming::connect_timeout`]
//! fails, and the next starts after a backoff that doubles up to
//! [`LinkTiming::redial_backoff_max`], so a healed link is back within
//! about that long plus one round trip.
//!
//! O1, why a connection that ends at once counts as a failed dial: a peer
//! that refuses our Handshake (another cluster id, shard count or
//! certificate) closes the connection right after reading it, and the dial
//! itself succeeded. Redialing at once made one misconfigured node dial each
//! peer about 1,500 times a second. A connection that ends within
//! [`LinkTiming::connect_timeout`] of its greeting is therefore treated as
//! a failed dial: the next one waits the same doubling backoff. Only a
//! connection that lasted longer (it was proven) resets the backoff, and
//! only then is the link logged as up, and later as down; refusals and dial
//! failures are warnings, logged once per window with a count
//! (`crate::repeats`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::*;
use bytes::{Bytes, BytesMut};
use cohort_messages::{
    ClusterId, Handshake, LinkMode, LinkShard, Message, NodeId, Preamble, TraceContext, WIRE_REVISION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::drops::Drops;
use crate::inbound::ConnectionReader;
use crate::metrics::{DropReason, LinkEvent, Mailbox, NodeMetrics, Port};
use crate::tls::{NodeTls, Stream};

/// Frames to write to the peer, in order, encoded one after another.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SendFrames {
    /// The frames' bytes, in buffers written one after another (a large
    /// state chunk's payload is a buffer of its own, not copied behind its
    /// frame's head: [`Message::encode_into_parts`]).
    pub parts: Vec<Bytes>,
    /// How many frames they are (what a drop counts).
    pub frames: u64,
}

impl SendFrames {
    /// One message as a frame from `sender`.
    pub fn one(message: &Message, cluster: ClusterId, sender: NodeId) -> SendFrames {
        let mut bytes = BytesMut::new();
        message.encode_into(cluster, sender, TraceContext::NONE, &mut bytes);
        SendFrames { parts: vec![bytes.freeze()], frames: 1 }
    }

    /// The bytes it holds.
    pub fn size_bytes(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }
}

/// Bytes a link holds unsent, at most, before it drops what comes (K4).
pub(crate) const LINK_QUEUE_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Unsent bytes past which a link is congested: its shard holds Prepares
/// back (K4: slow what goes to that peer rather than drop it).
pub(crate) const LINK_CONGESTED_BYTES: usize = 8 * 1024 * 1024;
/// Unsent bytes below which a congested link has drained.
pub(crate) const LINK_DRAINED_BYTES: usize = 1024 * 1024;

const _: () = assert!(LINK_DRAINED_BYTES < LINK_CONGESTED_BYTES && LINK_CONGESTED_BYTES < LINK_QUEUE_MAX_BYTES);
// A repair answer (one turn's Prepares to one peer) fits the queue several
// times over: a turn's frames beyond the queue are dropped whole.
const _: () = assert!(4 * cohort_core::replica::REPAIR_ANSWER_SIZE_MAX_BYTES as usize <= LINK_QUEUE_MAX_BYTES);

/// What a link tells its shard, without a message: whether it is connected
/// (R25) and whether it is congested (K4). Written by the link, read by the
/// shard, both on the shard's thread.
#[derive(Debug, Default)]
pub struct LinkState {
    /// The outbound connection is up and greeted.
    pub connected: AtomicBool,
    /// The unsent bytes passed `LINK_CONGESTED_BYTES` and have not yet
    /// gone below `LINK_DRAINED_BYTES`.
    pub congested: AtomicBool,
}
/// The first wait between two dials; it doubles up to
/// [`LinkTiming::redial_backoff_max`].
pub const REDIAL_BACKOFF_MIN: Duration = Duration::from_millis(20);

/// How a link notices a dead connection and how fast it dials again (F1).
/// Local to each node (peers need not agree); see `[links]` in the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkTiming {
    /// A connection that makes no progress this long is closed and redialed.
    pub stall_timeout: Duration,
    /// How long one dial may take.
    pub connect_timeout: Duration,
    /// The longest wait between two dials.
    pub redial_backoff_max: Duration,
    /// Unsent bytes the kernel may hold for one connection (`TCP_NOTSENT_LOWAT`).
    pub socket_unsent_max_bytes: u32,
}

impl Default for LinkTiming {
    fn default() -> Self {
        LinkTiming {
            stall_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            redial_backoff_max: Duration::from_secs(1),
            socket_unsent_max_bytes: 128 * 1024,
        }
    }
}

impl LinkTiming {
    /// Set the options that bound a peer connection (both ends): TCP
    /// keepalive probes an idle connection, `TCP_USER_TIMEOUT` aborts it
    /// once data or probes stay unacknowledged for the stall timeout, and
    /// `TCP_NOTSENT_LOWAT` bounds what the kernel holds unsent.
    pub fn tune(&self, stream: &TcpStream) -> std::io::Result<()> {
        stream.set_nodelay(true)?;
        let socket = socket2::SockRef::from(stream);
        let probe_every = (self.stall_timeout / 4).max(Duration::from_millis(100));
        let keepalive = socket2::TcpKeepalive::new()
            .with_time((self.stall_timeout / 2).max(Duration::from_secs(1)))
            .with_interval(probe_every.max(Duration::from_secs(1)));
        socket.set_tcp_keepalive(&keepalive)?;
        socket.set_tcp_user_timeout(Some(self.stall_timeout))?;
        socket.set_tcp_notsent_lowat(self.socket_unsent_max_bytes)
    }
}

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
    timing: LinkTiming,
    tls: Option<NodeTls>,
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
    /// `tls`: `None` only for a cluster configured `insecure` (plaintext).
    pub fn new(
        identity: LinkIdentity,
        timing: LinkTiming,
        tls: Option<NodeTls>,
        state: Arc<LinkState>,
        drops: Arc<Drops>,
    ) -> PeerLink {
        PeerLink {
            identity,
            timing,
            tls,
            queue: None,
            unsent_bytes: Arc::new(AtomicUsize::new(0)),
            state,
            drops,
            reader: None,
        }
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
            peer: self.identity.peer,
            shard: self.identity.shard,
            node: self.identity.node,
            tls: self.tls.clone(),
            timing: self.timing,
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
        let length = send.size_bytes();
        if unsent + length > LINK_QUEUE_MAX_BYTES {
            self.drops.add(Mailbox::PeerLink, DropReason::MailboxFull, count);
            return;
        }
        // The parts go into the queue one after another: the writer takes
        // them in order.
        let queued = self.queue.as_ref().map(|queue| send.parts.into_iter().try_for_each(|part| queue.send(part)));
        match queued {
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

/// The writing half of a link: dial, greet, write; redial on failure or stall.
struct Writer {
    address: SocketAddr,
    peer: NodeId,
    /// This node (what its log lines name).
    node: NodeId,
    shard: u16,
    tls: Option<NodeTls>,
    timing: LinkTiming,
    hello: Bytes,
    state: Arc<LinkState>,
    unsent_bytes: Arc<AtomicUsize>,
    metrics: Arc<NodeMetrics>,
}

/// Why a connection ended.
enum Ended {
    /// The link stopped: its queue closed.
    Stopped,
    /// A write failed, or the peer closed or reset the connection.
    Closed,
    /// No progress for the stall timeout.
    Stalled,
}

impl Writer {
    async fn run(self, mut queue: mpsc::UnboundedReceiver<Bytes>) {
        let mut backoff = REDIAL_BACKOFF_MIN;
        loop {
            let mut stream = match self.dial().await {
                Ok(stream) => stream,
                Err(why) => {
                    self.metrics.inc_link_event(LinkEvent::DialFailed);
                    self.dial_failed(&why, backoff);
                    tokio::time::sleep(backoff).await;
                    backoff = self.next_backoff(backoff);
                    continue;
                }
            };
            // Frames queued while disconnected are stale: drop them.
            while let Ok(stale) = queue.try_recv() {
                self.written(stale.len());
            }
            self.metrics.inc_link_event(LinkEvent::Connected);
            self.state.connected.store(true, Ordering::Relaxed);
            let greeted = tokio::time::Instant::now();
            let ended = self.serve(&mut stream, &mut queue, greeted).await;
            self.state.connected.store(false, Ordering::Relaxed);
            match ended {
                Ended::Stopped => return,
                Ended::Closed => self.metrics.inc_link_event(LinkEvent::Closed),
                Ended::Stalled => self.metrics.inc_link_event(LinkEvent::Stalled),
            }
            if greeted.elapsed() < self.timing.connect_timeout {
                // Refused after the greeting, most likely: a failed dial.
                self.refused(backoff);
                tokio::time::sleep(backoff).await;
                backoff = self.next_backoff(backoff);
            } else {
                self.lost(&ended);
                backoff = REDIAL_BACKOFF_MIN;
            }
        }
    }

    /// The wait after `backoff`: doubled, up to the longest.
    fn next_backoff(&self, backoff: Duration) -> Duration {
        let next = (backoff * 2).min(self.timing.redial_backoff_max.max(REDIAL_BACKOFF_MIN));
        debug_assert!(next >= backoff.min(self.timing.redial_backoff_max), "a backoff never shrinks by doubling");
        next
    }

    /// Log a connection that lasted past the connect timeout: the link is up.
    /// Shard 0's links speak at `info` (one line per peer), the others at
    /// `debug`.
    fn up(&self) {
        let (node, peer, shard, address) = (self.node.0, self.peer.0, self.shard, self.address);
        if shard == 0 {
            tracing::info!(node, peer, shard, %address, "peer link up: node {peer} at {address}");
        } else {
            tracing::debug!(node, peer, shard, %address, "peer link up: node {peer} at {address}");
        }
    }

    /// Log a proven connection that ended; the link redials at once.
    fn lost(&self, ended: &Ended) {
        let (node, peer, shard, address) = (self.node.0, self.peer.0, self.shard, self.address);
        let why = match ended {
            Ended::Stalled => "it made no progress for the stall timeout",
            Ended::Closed | Ended::Stopped => "the peer closed it, or a write failed",
        };
        if shard == 0 {
            tracing::info!(node, peer, shard, %address, why, "peer link down: node {peer} at {address}: {why}; redialing");
        } else {
            tracing::debug!(node, peer, shard, %address, why, "peer link down: node {peer} at {address}: {why}; redialing");
        }
    }

    /// A connection ended right after its greeting (within the connect
    /// timeout): the peer refused it. Logged once per window for the peer.
    fn refused(&self, backoff: Duration) {
        let (node, peer, shard, address) = (self.node.0, self.peer.0, self.shard, self.address);
        if crate::repeats::admit("peer link refused by the peer", &format!("{} to {}", self.node, self.peer)) {
            let backoff_ms = backoff.as_millis() as u64;
            tracing::warn!(
                node,
                peer,
                shard,
                %address,
                backoff_ms,
                "peer link to node {peer} at {address}: the peer closed the connection right after our Handshake, so it \
                 refuses us (compare both nodes' [node] cluster_id, shard count and certificates; the peer's log names \
                 the reason); dialing again after a backoff, now {backoff_ms} ms"
            );
        }
    }

    /// A dial failed: logged once per window for the peer.
    fn dial_failed(&self, why: &str, backoff: Duration) {
        let (node, peer, shard, address) = (self.node.0, self.peer.0, self.shard, self.address);
        if crate::repeats::admit("peer link cannot dial", &format!("{} to {}", self.node, self.peer)) {
            let backoff_ms = backoff.as_millis() as u64;
            tracing::warn!(
                node,
                peer,
                shard,
                %address,
                why,
                backoff_ms,
                "peer link to node {peer} at {address}: cannot dial: {why}; dialing again after a backoff, now {backoff_ms} ms"
            );
        }
    }

    /// Connect within the connect timeout, bound the socket, send the
    /// preamble, run the TLS handshake (checking the answer is the peer we
    /// dialed, T1), and greet; or say what failed.
    async fn dial(&self) -> Result<Stream, String> {
        let connect_timeout = self.timing.connect_timeout;
        let connect = tokio::time::timeout(connect_timeout, TcpStream::connect(self.address));
        let mut tcp = match connect.await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(error)) => return Err(format!("connect: {error}")),
            Err(_) => return Err(format!("connect: no answer within {} ms", connect_timeout.as_millis())),
        };
        // Without the bounds a partition could stall this link for long
        // after the heal (see the module doc): refuse to run unbounded.
        self.timing.tune(&tcp).map_err(|error| format!("socket options: {error}"))?;
        let mode = if self.tls.is_some() { LinkMode::Tls } else { LinkMode::Plaintext };
        let preamble = Preamble::new(self.shard, mode).encode();
        match tokio::time::timeout(self.timing.stall_timeout, tcp.write_all(&preamble)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(format!("sending the preamble: {error}")),
            Err(_) => return Err("sending the preamble: no progress within the stall timeout".into()),
        }
        let mut stream: Stream = match &self.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let handshake = tls.connector.connect(crate::tls::server_name_of(self.peer), tcp);
                match tokio::time::timeout(connect_timeout, handshake).await {
                    Ok(Ok(stream)) => Box::new(stream),
                    Ok(Err(error)) => return Err(format!("TLS handshake: {error}")),
                    Err(_) => {
                        return Err(format!("TLS handshake: not done within {} ms", connect_timeout.as_millis()));
                    }
                }
            }
        };
        match self.write(&mut stream, &self.hello).await {
            Ok(()) => Ok(stream),
            Err(_) => Err("sending the Handshake: the connection closed or stalled".into()),
        }
    }

    /// Write what the link hands over until the connection ends; once it
    /// has lasted the connect timeout since `greeted`, say the link is up.
    async fn serve(
        &self,
        stream: &mut Stream,
        queue: &mut mpsc::UnboundedReceiver<Bytes>,
        greeted: tokio::time::Instant,
    ) -> Ended {
        let proven = tokio::time::sleep_until(greeted + self.timing.connect_timeout);
        tokio::pin!(proven);
        let mut up = false;
        loop {
            let first = match self.next_turn(stream, queue, proven.as_mut(), &mut up).await {
                Ok(first) => first,
                Err(ended) => return ended,
            };
            // Every turn queued by now leaves in the same write; the usual
            // single turn without a list of its own.
            let (length, result) = match queue.try_recv() {
                Err(_) => (first.len(), self.write_all(stream, std::slice::from_ref(&first)).await),
                Ok(second) => {
                    let mut turns = vec![first, second];
                    while let Ok(more) = queue.try_recv() {
                        turns.push(more);
                    }
                    let length = turns.iter().map(Bytes::len).sum();
                    (length, self.write_all(stream, &joined(turns)).await)
                }
            };
            self.written(length);
            if let Err(ended) = result {
                return ended;
            }
        }
    }

    /// Wait for the next turn's bytes, watching the connection meanwhile,
    /// and the time at which it counts as up (`proven`, once).
    async fn next_turn(
        &self,
        stream: &mut Stream,
        queue: &mut mpsc::UnboundedReceiver<Bytes>,
        mut proven: std::pin::Pin<&mut tokio::time::Sleep>,
        up: &mut bool,
    ) -> Result<Bytes, Ended> {
        let mut probe = [0u8; 64];
        loop {
            tokio::select! {
                next = queue.recv() => return next.ok_or(Ended::Stopped),
                () = proven.as_mut(), if !*up => {
                    *up = true;
                    self.up();
                }
                // The peer sends nothing on the connection we dialed: a read
                // ends only when it closes it or TCP gives up on it
                // (`TCP_USER_TIMEOUT`: a stall).
                read = stream.read(&mut probe) => match read {
                    Err(error) if error.kind() == std::io::ErrorKind::TimedOut => return Err(Ended::Stalled),
                    Ok(0) | Err(_) => return Err(Ended::Closed),
                    Ok(_) => continue,
                },
            }
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

    /// Write all of `bytes`, counting each write call (K2), and flush (TLS
    /// holds records until then). A write or flush that makes no progress
    /// for the stall timeout ends the connection (F1).
    async fn write(&self, stream: &mut Stream, bytes: &Bytes) -> Result<(), Ended> {
        self.write_all(stream, std::slice::from_ref(bytes)).await
    }

    /// [`Writer::write`] for several buffers, one after another, with one
    /// flush at the end.
    async fn write_all(&self, stream: &mut Stream, parts: &[Bytes]) -> Result<(), Ended> {
        let stalled = |error: &std::io::Error| error.kind() == std::io::ErrorKind::TimedOut;
        for part in parts {
            self.metrics.add_peer_bytes_sent(self.peer, part.len());
            let mut bytes = &part[..];
            while !bytes.is_empty() {
                self.metrics.inc_socket_writes(Port::Peer);
                let written = match tokio::time::timeout(self.timing.stall_timeout, stream.write(bytes)).await {
                    Err(_) => return Err(Ended::Stalled),
                    Ok(Err(error)) if stalled(&error) => return Err(Ended::Stalled),
                    Ok(Err(_)) | Ok(Ok(0)) => return Err(Ended::Closed),
                    Ok(Ok(written)) => written,
                };
                bytes = &bytes[written..];
            }
        }
        match tokio::time::timeout(self.timing.stall_timeout, stream.flush()).await {
            Err(_) => Err(Ended::Stalled),
            Ok(Err(error)) if stalled(&error) => Err(Ended::Stalled),
            Ok(Err(_)) => Err(Ended::Closed),
            Ok(Ok(())) => Ok(()),
        }
    }
}

/// Turns of at most this size are joined into one buffer before they are
/// written (K2: what is queued leaves in one write); a larger one (a state
/// chunk's frame) is written as it is rather than copied.
const JOIN_SIZE_MAX_BYTES: usize = 256 * 1024;

/// The queued turns as the buffers to write: each run of small ones
/// joined, large ones as they are, in order.
fn joined(turns: Vec<Bytes>) -> Vec<Bytes> {
    if turns.len() == 1 {
        return turns;
    }
    let mut parts = Vec::new();
    let mut run: Vec<Bytes> = Vec::new();
    let flush_run = |run: &mut Vec<Bytes>, parts: &mut Vec<Bytes>| match run.len() {
        0 => {}
        1 => parts.extend(run.pop()),
        _ => {
            let mut joined = BytesMut::with_capacity(run.iter().map(Bytes::len).sum());
            for turn in run.drain(..) {
                joined.extend_from_slice(&turn);
            }
            parts.push(joined.freeze());
        }
    };
    for turn in turns {
        if turn.len() > JOIN_SIZE_MAX_BYTES {
            flush_run(&mut run, &mut parts);
            parts.push(turn);
        } else {
            run.push(turn);
        }
    }
    flush_run(&mut run, &mut parts);
    parts
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

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(size_bytes: usize, byte: u8) -> Bytes {
        Bytes::from(vec![byte; size_bytes])
    }

    /// K2: small turns queued together leave in one buffer; a large one
    /// (a state chunk's payload) is written as it is, in its place.
    #[test]
    fn k2_small_turns_are_joined_and_a_large_one_is_not_copied() {
        let large = turn(JOIN_SIZE_MAX_BYTES + 1, 9);
        let turns = vec![turn(10, 1), turn(20, 2), large.clone(), turn(30, 3)];
        let parts = joined(turns.clone());
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].len(), 30);
        assert_eq!(parts[1].as_ptr(), large.as_ptr(), "the large turn is the same buffer");
        assert_eq!(parts[2], turns[3], "a lone small turn is not copied either");
        assert_eq!(parts.concat(), turns.concat(), "the bytes and their order are kept");
        let one = vec![large.clone()];
        assert_eq!(joined(one)[0].as_ptr(), large.as_ptr());
    }
}
