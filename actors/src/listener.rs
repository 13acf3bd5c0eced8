//! Inbound connections: preamble, TLS, handshake check, frame reading and
//! routing.
//!
//! The listener accepts a connection and reads its preamble
//! ([`cohort_messages::Preamble`]: revision, shard, TLS or not), then hands
//! the socket to that shard's thread ([`InboundRoutes::spawn_on_shard`]),
//! where the rest happens, so the connection is driven by the thread that
//! reads it (K2) and the TLS session is made where it lives. There the TLS
//! handshake requires a certificate signed by the cluster CA (T1), and the
//! first frame must be a Handshake on our revision and cluster, with our
//! shard count, from a known peer that the certificate names (R18, T1), and
//! the second a LinkShard repeating the preamble's shard, or the connection
//! is closed, the refusal counted by reason and logged with the address it
//! came from (O1: once per window and address, with a count of the
//! repeats; see `crate::repeats`). The connection then
//! goes to this shard's link to that peer ([`InboundRoutes::adopt`]), which
//! reads the rest ([`read_frames`]): the link owns both directions of its
//! peer's traffic, and every frame's sender must be the authenticated peer.
//! Frames are split by [`FrameDecoder`]: a bad body checksum drops that
//! frame only (R15), a bad header closes the connection (the stream lost its
//! framing). Where each frame goes (which shard, as what input, or the
//! node's metadata agent) is the driver's rule,
//! [`cohort_core::driver::route_peer_frame`], which the simulator routes by
//! too; what one read held for a shard reaches it as one message.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use cohort_core::driver::route_peer_frame;
use cohort_messages::{ClusterId, Frame, FrameDecoder, LinkMode, Message, NodeId, PREAMBLE_SIZE_BYTES, Preamble};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::inbound::{AgentInbound, ConnectionReader, Inbound, InboundBatch, InboundRoutes};

use crate::metrics::Port;
use crate::tls::{NodeTls, Stream};

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
    /// This node (what its log lines name).
    pub node: NodeId,
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
    /// How a connection is bounded (F1); also the time a dialer has to send
    /// its preamble, finish TLS, and send its Handshake and LinkShard.
    pub link_timing: crate::peer_link::LinkTiming,
    /// TLS (T1); `None` only for an `insecure` cluster.
    pub tls: Option<NodeTls>,
    /// Connections accepted and not yet adopted by a link or refused (T5:
    /// at most 256, `GREETINGS_MAX`).
    pub greeting: Arc<std::sync::atomic::AtomicUsize>,
    /// The node's metadata agent: session frames (which carry no group) and
    /// the metadata group's answers to the agent's forwarded requests.
    pub agent: Option<actix::Recipient<AgentInbound>>,
}

/// The most peer connections that may be between accept and adoption at
/// once (T5): a flood of connections that never greet costs at most this
/// many small buffers, each for at most the stall timeout.
pub(crate) const GREETINGS_MAX: usize = 256;

/// One connection counted in [`Router::greeting`] until it is dropped.
struct Greeting(Arc<std::sync::atomic::AtomicUsize>);

impl Greeting {
    fn enter(count: &Arc<std::sync::atomic::AtomicUsize>) -> Option<Greeting> {
        let before = count.fetch_add(1, Ordering::Relaxed);
        let greeting = Greeting(Arc::clone(count));
        (before < GREETINGS_MAX).then_some(greeting)
    }
}

impl Drop for Greeting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accept connections forever, each served by its own task.
pub async fn serve(listener: TcpListener, router: Router) {
    loop {
        match listener.accept().await {
            Ok((stream, remote)) => {
                let Some(greeting) = Greeting::enter(&router.greeting) else {
                    router.refuse(remote, None, "connections_max", "too many connections are greeting at once");
                    continue;
                };
                // A connection that cannot be bounded is not served (F1).
                if router.link_timing.tune(&stream).is_ok() {
                    actix::spawn(read_connection(stream, remote, router.clone(), greeting));
                }
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
}

/// Read a new connection's preamble and hand it to the shard it names.
async fn read_connection(mut stream: TcpStream, remote: SocketAddr, router: Router, greeting: Greeting) {
    let deadline = router.link_timing.stall_timeout;
    let mut bytes = [0u8; PREAMBLE_SIZE_BYTES];
    match tokio::time::timeout(deadline, stream.read_exact(&mut bytes)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => return router.refuse(remote, None, "closed_before_preamble", "it closed before its preamble"),
        Err(_) => return router.refuse(remote, None, "no_preamble_in_time", "no preamble within the stall timeout"),
    }
    let preamble = match Preamble::decode(&bytes) {
        Ok(preamble) => preamble,
        Err(error) => {
            let reason = match error {
                cohort_messages::PreambleError::Magic => "bad_preamble",
                cohort_messages::PreambleError::Revision { .. } => "revision",
                cohort_messages::PreambleError::Mode(_) => "bad_preamble",
            };
            return router.refuse(remote, None, reason, &error.to_string());
        }
    };
    let shard = usize::from(preamble.shard);
    if shard >= router.routes.shard_count() {
        return router.refuse(remote, None, "shard_count", &format!("no shard {shard} here"));
    }
    match (preamble.mode, router.tls.is_some()) {
        (LinkMode::Tls, true) | (LinkMode::Plaintext, false) => {}
        (LinkMode::Plaintext, true) => {
            return router.refuse(
                remote,
                None,
                "plaintext",
                "it speaks plaintext, this node requires TLS ([tls] insecure on one node only?)",
            );
        }
        (LinkMode::Tls, false) => {
            return router.refuse(
                remote,
                None,
                "tls_not_configured",
                "it speaks TLS, this node is configured insecure",
            );
        }
    }
    // The socket moves to the shard's thread, whose runtime then drives it.
    let Ok(stream) = stream.into_std() else { return };
    let task = accept_on_shard(stream, remote, router.clone(), shard, greeting);
    if !router.routes.spawn_on_shard(shard, Box::pin(task)) {
        router.refuse(remote, None, "shard_count", &format!("shard {shard} does not run"));
    }
}

/// On shard `shard`'s thread: TLS, then the Handshake and LinkShard, then
/// hand the connection to the shard's link to the peer.
async fn accept_on_shard(
    stream: std::net::TcpStream,
    remote: SocketAddr,
    router: Router,
    shard: usize,
    greeting: Greeting,
) {
    let Ok(tcp) = TcpStream::from_std(stream) else { return };
    let deadline = router.link_timing.stall_timeout;
    let (mut stream, certificate): (Stream, _) = match &router.tls {
        None => (Box::new(tcp), None),
        Some(tls) => match tokio::time::timeout(deadline, tls.acceptor.accept(tcp)).await {
            Ok(Ok(tls_stream)) => {
                let certificate = tls_stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()).cloned();
                (Box::new(tls_stream), certificate)
            }
            Ok(Err(error)) => {
                return router.refuse(remote, None, "tls_handshake", &format!("TLS handshake failed: {error}"));
            }
            Err(_) => return router.refuse(remote, None, "tls_handshake", "no TLS handshake within the stall timeout"),
        },
    };
    // Until the peer is known, only the small greeting frames are accepted (T5).
    let greeting_body_max = cohort_messages::Command::Handshake.body_size_max_bytes();
    let mut inbound = Connection {
        connection: router.next_connection.fetch_add(1, Ordering::Relaxed) as usize,
        remote,
        rejects: cohort_messages::RejectCounters::default(),
        decoder: FrameDecoder::with_body_max(router.cluster, greeting_body_max),
        buffer: BytesMut::with_capacity(4 * 1024),
        metrics: Arc::clone(&router.metrics),
    };
    // A dialer that does not greet within the stall timeout holds nothing.
    // `None`: the dialer closed, or sent a frame already counted as rejected.
    let frame = match tokio::time::timeout(deadline, inbound.next_frame(&mut stream, &router, None)).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return,
        Err(_) => {
            return router.refuse(remote, None, "no_handshake_in_time", "no Handshake within the stall timeout");
        }
    };
    let mut peer = None;
    let mut pending = Pending::default();
    if !router.handle(&mut peer, frame, &mut inbound.rejects, inbound.connection, remote, &mut pending) {
        return;
    }
    let Some(peer) = peer else { return };
    if !router.routes.knows(peer) {
        return router.refuse(remote, Some(peer), "unknown_peer", "not a peer of this node");
    }
    if router.tls.is_some() {
        let named = certificate.as_ref().is_some_and(|certificate| crate::tls::certifies_node(certificate, peer));
        if !named {
            let why = "its certificate does not name it";
            return router.refuse(remote, Some(peer), "certificate_names_another_node", why);
        }
    }
    // The second frame names the peer's shard this connection carries.
    let second = inbound.next_frame(&mut stream, &router, Some(peer));
    let frame = match tokio::time::timeout(deadline, second).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return,
        Err(_) => {
            let why = "no LinkShard within the stall timeout";
            return router.refuse(remote, Some(peer), "no_link_shard_in_time", why);
        }
    };
    match frame.message() {
        Ok(Message::LinkShard(link)) if frame.header.sender == peer && usize::from(link.shard) == shard => {}
        _ => {
            return router.refuse(
                remote,
                Some(peer),
                "bad_link_shard",
                "its second frame is not a LinkShard for the preamble's shard",
            );
        }
    }
    inbound.decoder.set_body_max(cohort_messages::BODY_SIZE_MAX_BYTES);
    drop(greeting);
    let (routes, refusals) = (Arc::clone(&router.routes), router.clone());
    let reader: ConnectionReader = Box::new(move || Some(Box::pin(read_frames(stream, inbound, peer, router))));
    match routes.adopt(peer, shard, reader) {
        Ok(()) => refusals.accepted(peer, shard, remote),
        Err(refused) => {
            // Dropping the reader closes the connection.
            drop(refused);
            refusals.refuse(remote, Some(peer), "no_link", &format!("no link to it on shard {shard}"));
        }
    }
}

/// What a connection has read so far; moves with it to the peer link.
pub(crate) struct Connection {
    connection: usize,
    /// Where it comes from.
    remote: SocketAddr,
    rejects: cohort_messages::RejectCounters,
    decoder: FrameDecoder,
    buffer: BytesMut,
    /// Where its rejects are counted; told to forget it when it closes (T5).
    metrics: Arc<crate::metrics::NodeMetrics>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.metrics.forget_rejected(self.connection);
    }
}

impl Connection {
    /// The next frame with good checksums, reading from `stream` as needed.
    /// Bad frames are counted and skipped (R15); `None` once the connection
    /// ends or its framing is lost.
    async fn next_frame(&mut self, stream: &mut Stream, router: &Router, peer: Option<NodeId>) -> Option<Frame> {
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
pub(crate) async fn read_frames(mut stream: Stream, mut inbound: Connection, peer: NodeId, router: Router) {
    let mut known = Some(peer);
    let mut pending = Pending::default();
    loop {
        loop {
            match inbound.decoder.decode(&mut inbound.buffer) {
                Ok(Some(frame)) => {
                    let (connection, remote) = (inbound.connection, inbound.remote);
                    if !router.handle(&mut known, frame, &mut inbound.rejects, connection, remote, &mut pending) {
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
    /// Count a refused connection by reason (T5), and log it with the
    /// address it came from, once per window and address (O1).
    fn refuse(&self, remote: SocketAddr, peer: Option<NodeId>, reason: &'static str, why: &str) {
        self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
        self.metrics.inc_refused(Port::Peer, reason);
        if !crate::repeats::admit("peer connection refused", &format!("{}, from {}", self.node, remote.ip())) {
            return;
        }
        let node = self.node.0;
        let from = match peer {
            Some(peer) => format!("{remote} (claiming to be {peer})"),
            None => remote.to_string(),
        };
        let peer = peer.map(|peer| peer.0);
        tracing::warn!(node, peer, %remote, reason, why, "refusing a peer connection from {from}: {why}");
    }

    /// Log a connection the peer dialed, adopted by its link. Shard 0's
    /// connections speak at `info` (one line per peer), the others at `debug`.
    fn accepted(&self, peer: NodeId, shard: usize, remote: SocketAddr) {
        let (node, peer) = (self.node.0, peer.0);
        if shard == 0 {
            tracing::info!(node, peer, shard, %remote, "accepted node {peer}'s connection from {remote}");
        } else {
            tracing::debug!(node, peer, shard, %remote, "accepted node {peer}'s connection from {remote}");
        }
    }

    fn reject_frame(&self, inbound: &mut Connection, error: &cohort_messages::FrameError, peer: Option<NodeId>) {
        self.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
        inbound.rejects.frame(error);
        self.metrics.record_rejected(inbound.connection, &inbound.rejects);
        if error.closes_connection() {
            match error {
                cohort_messages::FrameError::Revision { .. } => {
                    self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                    self.metrics.inc_refused(Port::Peer, "revision");
                }
                cohort_messages::FrameError::ClusterMismatch { .. } => {
                    self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                    self.metrics.inc_refused(Port::Peer, "cluster_mismatch");
                }
                _ => {}
            }
            let remote = inbound.remote;
            if crate::repeats::admit(
                "peer connection closed for a bad frame",
                &format!("{}, from {}", self.node, remote.ip()),
            ) {
                let node = self.node.0;
                let from = match peer {
                    Some(peer) => format!("{remote} (node {})", peer.0),
                    None => remote.to_string(),
                };
                let (peer, kind) = (peer.map(|peer| peer.0), error.kind());
                tracing::warn!(node, peer, %remote, kind, %error, "closing the peer connection from {from}: {error}");
            }
        }
    }

    /// Handle one frame; false closes the connection.
    fn handle(
        &self,
        peer: &mut Option<NodeId>,
        frame: Frame,
        rejects: &mut cohort_messages::RejectCounters,
        connection: usize,
        remote: SocketAddr,
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
                        let why = format!(
                            "it runs {} shards, this node {}; every node of a cluster runs the same shard count",
                            handshake.shard_count,
                            self.routes.shard_count()
                        );
                        self.refuse(remote, Some(handshake.node), "shard_count", &why);
                        false
                    }
                    Ok(()) if handshake.node == frame.header.sender => {
                        *peer = Some(handshake.node);
                        true
                    }
                    Ok(()) => {
                        let why = "its Handshake's sender is another node";
                        self.refuse(remote, Some(handshake.node), "sender_mismatch", why);
                        false
                    }
                    Err(error) => {
                        self.refuse(remote, Some(handshake.node), "handshake", &error.to_string());
                        false
                    }
                },
                _ => {
                    self.refuse(remote, None, "not_a_handshake", "its first frame is not a Handshake");
                    false
                }
            };
        };
        if frame.header.sender != from {
            // T1: every frame's sender is the authenticated peer.
            self.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            let why = format!("a frame claims sender {}", frame.header.sender);
            self.refuse(remote, Some(from), "sender_mismatch", &why);
            return false;
        }
        let routed = route_peer_frame(from, message, frame.header.trace, self.routes.shard_count());
        self.count_entry_rejects(&routed.rejected, rejects, connection);
        if let Some(refusal) = routed.refused {
            self.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            self.metrics.inc_refused(Port::Peer, refusal.label());
        }
        if let Some(message) = routed.agent {
            self.to_agent(from, message);
        }
        for (shard, input) in routed.inputs {
            pending.push(shard, input);
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
