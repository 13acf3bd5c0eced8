//! The client port: Request frames in, Reply or Redirect frames out (V5),
//! over mTLS (T2), with every resource a client can take bounded (T5).
//!
//! A client connects with a certificate signed by the cluster CA (`cohort
//! certs client`), sends a Handshake (its node id is 0; revision and cluster
//! are checked as for peers, R18) and gets this node's Handshake back (so it
//! learns which node an address is). A first frame of another cluster or
//! wire revision is answered with this node's Handshake too, and the
//! connection closes: the client reads in it what it got wrong and fails at
//! once instead of retrying until its timeout (O5). After the Handshake a
//! client sends Request frames, as many at
//! once as it likes up to [`ClientPortLimits::in_flight_max`]: they are
//! served concurrently and each answer names its client id and request
//! number, so answers may come back in any order. A non-primary answers with
//! a Redirect naming the primary it knows. A Request frame whose header
//! carries a trace context continues the client's trace. A RouteQuery is
//! answered with Routes from this node's copy of the metadata (the owner
//! each group last reported, S2), so a client can go to a group's primary
//! first and refresh its cache on a Redirect (C1).
//!
//! What a client cannot do (T3, T2):
//! - reach a reserved group: a Request for the metadata group is refused
//!   `Forbidden` (operators use the admin port, nodes their peer links);
//! - answer for another client: exactly-once is per (client id, request
//!   number), and the id the cluster uses is the client's chosen id bound to
//!   its certificate ([`cohort_actors::bound_client_id`]); its own
//!   retries, through any node, keep working, another client's do not meet
//!   them.
//!
//! Bounds (T5): connections per port, a deadline for TLS and the Handshake,
//! an idle timeout, requests in flight per connection, the body of a frame
//! (a Request's limit, checked from the header), and a write timeout for a
//! client that stops reading. Every refusal is counted by reason in
//! `cohort_refusals_total{port="client"}`; every request by kind in
//! `cohort_client_requests_total`, and every error answer by its code in
//! `cohort_client_errors_total` (O2). The bytes of answers queued for
//! clients are bounded per connection and per node, and a connection whose
//! answers fill a budget stops reading requests until they are written
//! (H4; see `budget.rs`).

mod budget;
mod writer;

pub use budget::{ANSWER_BUDGET_MAX_BYTES, ANSWER_BUDGET_MIN_BYTES, ANSWER_RESERVE_BYTES};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use cohort_actors::Directory;
use cohort_actors::{ClientAnswer, Submit};
use cohort_actors::{NodeMetrics, Port};
use cohort_actors::{NodeTls, Stream};
use cohort_core::routing::shard_of;
use cohort_messages::{
    ClusterId, Command, Frame, FrameDecoder, FrameError, GroupId, Handshake, Message, NodeId, Outcome, Reply,
    ReplyError, Request, TraceContext, WIRE_REVISION,
};
use tokio::io::{AsyncReadExt, ReadHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tracing::Instrument as _;

use self::budget::{ConnectionBudget, NodeBudget};
use self::writer::{Queued, write_answers};

/// The limits of the client port (T5); see `[client]` in the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientPortLimits {
    /// Connections open at once; more are closed at accept.
    pub connections_max: usize,
    /// Time a new connection has for TLS and its Handshake.
    pub handshake_timeout: Duration,
    /// A greeted connection that sends nothing this long is closed.
    pub idle_timeout: Duration,
    /// Requests one connection may have in flight; more are answered `Busy`.
    pub in_flight_max: usize,
    /// How long the port waits for a shard's answer before replying `Busy`.
    pub answer_timeout: Duration,
    /// A write to a client that takes longer than this closes the connection.
    pub write_timeout: Duration,
    /// H4: bytes of answers one connection may hold unwritten; past them it
    /// stops reading requests. An answer larger than this goes out alone.
    pub answer_bytes_max: usize,
    /// H4: bytes of answers every connection together may hold unwritten
    /// (each may add [`ANSWER_RESERVE_BYTES`] of small answers outside it).
    pub answer_bytes_node_max: usize,
}

impl Default for ClientPortLimits {
    fn default() -> Self {
        ClientPortLimits {
            connections_max: 1024,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(300),
            in_flight_max: 256,
            answer_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            answer_bytes_max: 8 * 1024 * 1024,
            answer_bytes_node_max: 256 * 1024 * 1024,
        }
    }
}

/// The identity of every client when the port runs without TLS
/// (`insecure`): all clients are one, and nothing tells them apart. The
/// embedded [`crate::client::Client`] binds its ids with it too when it
/// reaches an insecure cluster's other nodes over their client ports.
pub(crate) const INSECURE_IDENTITY: [u8; 32] = [0; 32];

/// What serving the port needs.
pub(crate) struct ClientPort {
    /// Our cluster.
    pub cluster: ClusterId,
    /// This node.
    pub node: NodeId,
    /// The shards.
    pub shards: Arc<Directory>,
    /// Where refusals and socket writes are counted.
    pub metrics: Arc<NodeMetrics>,
    /// TLS (required client certificates); `None` only for `insecure`.
    pub tls: Option<NodeTls>,
    /// The bounds.
    pub limits: ClientPortLimits,
    /// This node's copy of the metadata (route queries, and requests to
    /// groups it does not know: O5).
    pub metadata: cohort_actors::SharedMetadata,
    /// The groups this node was configured with: they exist once the
    /// metadata created them, so a request for one is never refused as
    /// unknown while the cluster starts.
    pub configured: Arc<std::collections::BTreeSet<GroupId>>,
}

impl ClientPort {
    /// O5: why `group` does not exist, if this node's copy of the metadata
    /// says so; `None` when it knows the group, when the node was
    /// configured with it (the metadata creates it while the cluster
    /// starts), or when the node holds no copy yet.
    fn no_such_group(&self, group: GroupId) -> Option<String> {
        if self.configured.contains(&group) {
            return None;
        }
        self.metadata.with(|metadata| {
            if metadata.epoch.0 == 0 {
                return None;
            }
            let epoch = metadata.epoch.0;
            match metadata.groups.get(&group) {
                Some(record) if record.live => None,
                Some(_) => Some(format!(
                    "{group} was deleted (the cluster's metadata at epoch {epoch}); create it again to use it"
                )),
                None => Some(format!(
                    "{group} does not exist: the cluster's metadata (epoch {epoch}) knows no such group; check the \
                     group id, or create it first (`cohort admin create-group`)"
                )),
            }
        })
    }

    /// Count a refusal by reason (T5) and log it (O1) with the address it
    /// came from, once per window and reason: the first of each reason in
    /// full, the rest as a count. A connection idle past its timeout is
    /// routine and logged at `debug` only.
    fn refuse(&self, remote: SocketAddr, reason: &'static str) {
        self.metrics.inc_refused(Port::Client, reason);
        let node = self.node.0;
        if reason == "idle_timeout" {
            return tracing::debug!(node, %remote, reason, "closed the idle client connection from {remote}");
        }
        if cohort_actors::admit_repeated_warning("client refused", &format!("{}: {reason}", self.node)) {
            tracing::warn!(node, %remote, reason, "refused the client at {remote}: {reason} (counted in cohort_refusals_total)");
        }
    }
}

/// Accept client connections forever.
pub(crate) async fn serve(listener: TcpListener, port: Arc<ClientPort>) {
    let connections = Arc::new(Semaphore::new(port.limits.connections_max.max(1)));
    let budget = NodeBudget::new(port.limits.answer_bytes_node_max, Arc::clone(&port.metrics));
    loop {
        match listener.accept().await {
            Ok((stream, remote)) => match Arc::clone(&connections).try_acquire_owned() {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    let budget = ConnectionBudget::new(&budget, port.limits.answer_bytes_max);
                    actix::spawn(serve_connection(stream, remote, Arc::clone(&port), budget, permit));
                }
                // Closing it at once is the refusal.
                Err(_) => port.refuse(remote, "connections_max"),
            },
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// One connection, from TLS to close; `_permit` holds its place in the cap.
async fn serve_connection(
    tcp: TcpStream,
    remote: SocketAddr,
    port: Arc<ClientPort>,
    budget: Arc<ConnectionBudget>,
    _permit: OwnedSemaphorePermit,
) {
    let limits = port.limits;
    let deadline = tokio::time::Instant::now() + limits.handshake_timeout;
    let (stream, identity): (Stream, [u8; 32]) = match &port.tls {
        None => (Box::new(tcp), INSECURE_IDENTITY),
        Some(tls) => match tokio::time::timeout_at(deadline, tls.acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => {
                let certificate = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()).cloned();
                // The verifier requires a certificate; without one there is no identity.
                let Some(certificate) = certificate else { return port.refuse(remote, "no_certificate") };
                (Box::new(stream), cohort_actors::identity_of(&certificate))
            }
            Ok(Err(_)) => return port.refuse(remote, "tls_handshake"),
            Err(_) => return port.refuse(remote, "handshake_timeout"),
        },
    };
    let (mut reader, writer) = tokio::io::split(stream);
    let (answers, queued) = mpsc::channel::<Queued>(limits.in_flight_max + 1);
    actix::spawn(write_answers(writer, queued, Arc::clone(&port), remote));
    // A client sends only Handshakes and Requests: no body above a Request's limit.
    let decoder = FrameDecoder::with_body_max(port.cluster, Command::Request.body_size_max_bytes());
    let mut connection = Connection {
        port,
        remote,
        identity,
        decoder,
        buffer: BytesMut::with_capacity(4 * 1024),
        greeted: false,
        in_flight: Arc::new(Semaphore::new(limits.in_flight_max.max(1))),
        budget,
        answers,
    };
    connection.run(&mut reader, deadline).await;
}

/// The reading side of one connection.
struct Connection {
    port: Arc<ClientPort>,
    /// Where the client is.
    remote: SocketAddr,
    identity: [u8; 32],
    decoder: FrameDecoder,
    buffer: BytesMut,
    greeted: bool,
    in_flight: Arc<Semaphore>,
    budget: Arc<ConnectionBudget>,
    answers: mpsc::Sender<Queued>,
}

impl Connection {
    async fn run(&mut self, reader: &mut ReadHalf<Stream>, handshake_deadline: tokio::time::Instant) {
        loop {
            loop {
                // H4: no more requests while answers fill a budget; they wait in the socket.
                if self.greeted {
                    tokio::select! {
                        () = self.budget.room() => {}
                        () = self.answers.closed() => return,
                    }
                }
                let frame = match self.decoder.decode(&mut self.buffer) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(error) => {
                        self.port.refuse(self.remote, if error.closes_connection() { "bad_frame" } else { "bad_body" });
                        if error.closes_connection() {
                            if !self.greeted && names_another_cluster(&error) {
                                // O5: say who we are; the client's decoder
                                // refuses this frame, naming both sides.
                                let _ = self.send(Message::Handshake(self.handshake())).await;
                            }
                            return;
                        }
                        continue;
                    }
                };
                if !self.handle(frame).await {
                    return;
                }
            }
            let deadline = if self.greeted {
                tokio::time::Instant::now() + self.port.limits.idle_timeout
            } else {
                handshake_deadline
            };
            match tokio::time::timeout_at(deadline, reader.read_buf(&mut self.buffer)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(_)) => {}
                Err(_) => {
                    return self
                        .port
                        .refuse(self.remote, if self.greeted { "idle_timeout" } else { "handshake_timeout" });
                }
            }
        }
    }

    /// Handle one frame; false closes the connection.
    async fn handle(&mut self, frame: Frame) -> bool {
        let message = match frame.message() {
            Ok(message) => message,
            Err(_) => {
                self.port.refuse(self.remote, "bad_body");
                return true;
            }
        };
        if !self.greeted {
            return match message {
                Message::Handshake(handshake) if handshake.check_peer(self.port.cluster).is_ok() => {
                    self.greeted = true;
                    self.send(Message::Handshake(self.handshake())).await
                }
                _ => {
                    self.port.refuse(self.remote, "not_a_handshake");
                    false
                }
            };
        }
        let request = match message {
            Message::Request(request) => request,
            Message::RouteQuery(query) => {
                self.port.metrics.inc_client_route_query();
                return self.send(Message::Routes(self.routes(&query))).await;
            }
            _ => {
                self.port.refuse(self.remote, "unexpected_command");
                return true;
            }
        };
        self.port.metrics.inc_client_request(request.kind);
        if request.group == GroupId::METADATA {
            self.port.refuse(self.remote, "reserved_group");
            let detail = format!("{} is the cluster's metadata group: clients cannot send it requests", request.group);
            return self.send(Message::Reply(refused(&request, ReplyError::Forbidden, detail))).await;
        }
        if let Some(detail) = self.port.no_such_group(request.group) {
            self.port.refuse(self.remote, "no_such_group");
            return self.send(Message::Reply(refused(&request, ReplyError::NoSuchGroup, detail))).await;
        }
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            self.port.refuse(self.remote, "in_flight_max");
            let detail = "too many requests in flight on this connection; wait for answers".to_string();
            return self.send(Message::Reply(refused(&request, ReplyError::Busy, detail))).await;
        };
        let trace = frame.header.trace;
        let budget = Arc::clone(&self.budget);
        let answers = self.answers.clone();
        actix::spawn(answer(request, trace, self.identity, Arc::clone(&self.port), budget, answers, permit));
        true
    }

    /// C1: where each asked group's primary is, from the metadata's owner
    /// records; the metadata group itself, like a group the metadata does
    /// not know, has no route for clients.
    fn routes(&self, query: &cohort_messages::RouteQuery) -> cohort_messages::Routes {
        let routes = self.port.metadata.with(|metadata| {
            query
                .groups
                .iter()
                .map(|group| {
                    let owner = metadata
                        .groups
                        .get(group)
                        .filter(|record| record.live && *group != GroupId::METADATA)
                        .and_then(|record| record.owner);
                    cohort_messages::Route {
                        group: *group,
                        view: owner.map_or(cohort_messages::View(0), |owner| owner.view),
                        primary: owner.map(|owner| owner.node),
                    }
                })
                .collect()
        });
        cohort_messages::Routes { routes }
    }

    async fn send(&self, message: Message) -> bool {
        queue(&self.port, &self.budget, &self.answers, message).await
    }

    /// This node's Handshake.
    fn handshake(&self) -> Handshake {
        Handshake {
            revision: WIRE_REVISION,
            cluster: self.port.cluster,
            node: self.port.node,
            shard_count: u16::try_from(self.port.shards.shard_count()).unwrap_or(u16::MAX),
        }
    }
}

/// True for a frame refused for its cluster id or wire revision (R18): a
/// client set up for another cluster, or of another release, that learns
/// which from this node's Handshake.
fn names_another_cluster(error: &FrameError) -> bool {
    matches!(error, FrameError::ClusterMismatch { .. } | FrameError::Revision { .. })
}

fn refused(request: &Request, code: ReplyError, detail: String) -> Reply {
    Reply {
        client: request.client,
        request: request.request,
        group: request.group,
        view: cohort_messages::View(0),
        op: cohort_messages::Op(0),
        outcome: Outcome::Error { code, detail },
    }
}

/// Submit one request to its shard under the client's bound id, and queue
/// the answer, under the id the client chose.
async fn answer(
    mut request: Request,
    trace: TraceContext,
    identity: [u8; 32],
    port: Arc<ClientPort>,
    budget: Arc<ConnectionBudget>,
    answers: mpsc::Sender<Queued>,
    _permit: OwnedSemaphorePermit,
) {
    let chosen = request.client;
    let shown = request.clone();
    request.client = cohort_actors::bound_client_id(&identity, chosen);
    let shards = &port.shards;
    let message = match shards.shard(shard_of(request.group, shards.shard_count())) {
        None => Message::Reply(refused(&shown, ReplyError::Busy, "the node is stopping".into())),
        Some(shard) => {
            let (answer, answered) = oneshot::channel();
            let span = cohort_actors::client_request_span(port.node, &request, trace);
            if shard.try_send(Submit { request, answer, span: span.clone() }).is_err() {
                Message::Reply(refused(&shown, ReplyError::Busy, "the shard's mailbox is full; retry".into()))
            } else {
                match tokio::time::timeout(port.limits.answer_timeout, answered).instrument(span).await {
                    Ok(Ok(ClientAnswer::Reply(mut reply))) => {
                        reply.client = chosen;
                        Message::Reply(reply)
                    }
                    Ok(Ok(ClientAnswer::Redirect(mut redirect))) => {
                        redirect.client = chosen;
                        Message::Redirect(redirect)
                    }
                    _ => Message::Reply(refused(
                        &shown,
                        ReplyError::Busy,
                        "no answer in time; retry with the same request number".into(),
                    )),
                }
            }
        }
    };
    queue(&port, &budget, &answers, message).await;
}

/// H4: charge `message`'s frame to the connection's budgets (waiting for
/// room; an error answer or a redirect is counted first, O2), then encode it into a buffer of exactly that size and queue it
/// for the writer, which releases the charge once the bytes are written.
/// False if the connection is closing.
async fn queue(
    port: &ClientPort,
    budget: &Arc<ConnectionBudget>,
    answers: &mpsc::Sender<Queued>,
    message: Message,
) -> bool {
    match &message {
        Message::Reply(Reply { outcome: Outcome::Error { code, .. }, .. }) => port.metrics.inc_client_error(*code),
        Message::Redirect(_) => port.metrics.inc_client_redirect(),
        _ => {}
    }
    let size_bytes = message.frame_size_bytes();
    let charge = tokio::select! {
        charge = budget.charge(size_bytes) => charge,
        () = answers.closed() => None,
    };
    let Some(charge) = charge else { return false };
    let mut frame = BytesMut::with_capacity(size_bytes);
    message.encode_into(port.cluster, port.node, TraceContext::NONE, &mut frame);
    drop(message);
    debug_assert_eq!(frame.len(), charge.size_bytes(), "H4: an answer is charged its frame's size");
    answers.send(Queued { frame: frame.freeze(), charge }).await.is_ok()
}
