//! One connection to one node's client port, carrying many requests at once.
//!
//! Why pipelining: a request waits for a commit (a round trip and an
//! fsync on a quorum), so a connection that carried one request at a time
//! would cap a client at a few hundred writes per second per node. The node
//! serves every request of a connection concurrently and answers each with
//! its client id, group and request number, in any order; so here a writer
//! task sends frames as callers hand them over (everything queued by then in
//! one socket write), and a reader task hands each answer to the caller
//! waiting for that (client id, group, request number). Route queries carry
//! no number: the node answers them in the order asked, so their waiters
//! form a queue.
//!
//! The life of a connection: TCP, then TLS (unless insecure), then our
//! Handshake (node id 0) and the node's, which names the node behind the
//! address. A connection that fails is closed for good: every caller
//! waiting on it gets [`CallError::Closed`] and the pool dials a new one.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use cohort_messages::{
    ClientId, ClusterId, Command, FrameDecoder, FrameError, GroupId, Handshake, Message, NodeId, Redirect, Reply,
    Request, RequestNumber, RouteQuery, Routes, TraceContext, WIRE_REVISION,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::{Instant, timeout_at};

use crate::cluster_id::format_cluster_id;
use crate::config::ClientLimits;
use crate::error::ClientError;
use crate::tls::{ClientTls, tls_failure};

/// Bytes one writer turn puts in one socket write at most.
const WRITE_BATCH_MAX_BYTES: usize = 256 * 1024;
/// The read buffer's spare room before each read.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// A byte stream to a node: plain TCP or TLS over it.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;

/// A node's answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Reply(Reply),
    Redirect(Redirect),
}

/// Why one call on a connection got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The connection failed; `sent` if the request was handed to the
    /// writer first (it may have reached the node).
    Closed { detail: String, sent: bool },
    /// No answer in time; `silent` if nothing at all arrived on the
    /// connection meanwhile (it may be dead: drop it).
    Timeout { silent: bool, sent: bool },
}

/// Why a dial failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DialError {
    /// Connect, read or write failed, or the node closed the connection:
    /// worth trying again later.
    Io { kind: std::io::ErrorKind, detail: String },
    /// TLS refused a certificate: trying again will not help.
    Tls { detail: String },
    /// The node is of another cluster or speaks another wire revision (its
    /// Handshake said so, R18): trying again will not help.
    Mismatch { detail: String },
}

impl DialError {
    /// The caller's error for this failure to dial `address` if trying
    /// again will not help; otherwise the I/O failure's kind and detail.
    pub(crate) fn final_error(self, address: &str) -> Result<ClientError, (std::io::ErrorKind, String)> {
        let address = address.to_string();
        match self {
            DialError::Tls { detail } => Ok(ClientError::Tls { address, detail }),
            DialError::Mismatch { detail } => Ok(ClientError::Mismatch { address, detail }),
            DialError::Io { kind, detail } => Err((kind, detail)),
        }
    }

    /// The caller's error for this failure to dial `address`, whatever it was.
    pub(crate) fn into_client_error(self, address: &str) -> ClientError {
        self.final_error(address).unwrap_or_else(|(kind, detail)| ClientError::Io {
            address: address.to_string(),
            kind,
            detail,
        })
    }
}

/// Which request an answer is for (the exactly-once key, per connection).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    client: ClientId,
    group: GroupId,
    request: RequestNumber,
}

impl Key {
    fn of(request: &Request) -> Key {
        Key { client: request.client, group: request.group, request: request.request }
    }
}

/// Callers waiting for answers.
#[derive(Default)]
struct Pending {
    /// Per request, every caller waiting for it (a caller's own concurrent
    /// retries of one request share its answer), each with a token.
    calls: HashMap<Key, Vec<(u64, oneshot::Sender<Answer>)>>,
    /// Route queries, in the order sent.
    routes: VecDeque<oneshot::Sender<Routes>>,
    next_token: u64,
    /// Why the connection closed, once it has.
    closed: Option<String>,
}

/// What the tasks and the callers of one connection share.
struct Shared {
    pending: Mutex<Pending>,
    /// Frames received so far (a caller whose wait saw none suspects a dead link).
    heard: AtomicU64,
    /// The reader and writer tasks, aborted on close.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deliver(&self, message: Message) {
        match message {
            Message::Reply(reply) => self
                .answer(Key { client: reply.client, group: reply.group, request: reply.request }, Answer::Reply(reply)),
            Message::Redirect(redirect) => self.answer(
                Key { client: redirect.client, group: redirect.group, request: redirect.request },
                Answer::Redirect(redirect),
            ),
            Message::Routes(routes) => {
                if let Some(waiter) = self.pending().routes.pop_front() {
                    let _ = waiter.send(routes);
                }
            }
            // Nothing else is sent to clients; skip it.
            _ => {}
        }
    }

    /// Hand `answer` to everyone waiting for `key`; a late answer nobody
    /// waits for any more is dropped.
    fn answer(&self, key: Key, answer: Answer) {
        let waiters = self.pending().calls.remove(&key).unwrap_or_default();
        for (_, waiter) in waiters {
            let _ = waiter.send(answer.clone());
        }
    }

    /// Close for good: every waiter learns it (its sender is dropped).
    fn close(&self, why: String) {
        let (calls, routes) = {
            let mut pending = self.pending();
            if pending.closed.is_none() {
                pending.closed = Some(why);
            }
            (std::mem::take(&mut pending.calls), std::mem::take(&mut pending.routes))
        };
        drop((calls, routes));
        for task in self.tasks.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            task.abort();
        }
    }

    fn why_closed(&self) -> String {
        self.pending().closed.clone().unwrap_or_else(|| "the connection closed".into())
    }
}

/// Removes a caller's waiter when it stops waiting (answered, timed out or
/// cancelled), so callers that give up leave nothing behind.
struct Waiting<'a> {
    shared: &'a Shared,
    key: Key,
    token: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut pending = self.shared.pending();
        if let Some(waiters) = pending.calls.get_mut(&self.key) {
            waiters.retain(|(token, _)| *token != self.token);
            if waiters.is_empty() {
                pending.calls.remove(&self.key);
            }
        }
    }
}

/// An open, greeted connection to one node.
pub(crate) struct Connection {
    node: NodeId,
    cluster: ClusterId,
    outgoing: mpsc::Sender<Bytes>,
    in_flight: Arc<Semaphore>,
    shared: Arc<Shared>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.close("the client dropped the connection".into());
    }
}

impl Connection {
    /// The node behind this connection, from its Handshake.
    pub(crate) fn node(&self) -> NodeId {
        self.node
    }

    /// Whether the connection still works.
    pub(crate) fn is_open(&self) -> bool {
        self.shared.pending().closed.is_none()
    }

    /// Close it (a caller saw it stay silent).
    pub(crate) fn close(&self, why: &str) {
        self.shared.close(why.to_string());
    }

    /// Send `request` and wait up to `timeout` for its answer.
    pub(crate) async fn call(&self, request: &Request, timeout: Duration) -> Result<Answer, CallError> {
        let deadline = Instant::now() + timeout;
        let not_sent = |_| CallError::Timeout { silent: false, sent: false };
        let _place = timeout_at(deadline, Arc::clone(&self.in_flight).acquire_owned())
            .await
            .map_err(not_sent)?
            .map_err(|_| CallError::Closed { detail: self.shared.why_closed(), sent: false })?;
        let key = Key::of(request);
        let (answered, waiting) = {
            let mut pending = self.shared.pending();
            if let Some(why) = &pending.closed {
                return Err(CallError::Closed { detail: why.clone(), sent: false });
            }
            let token = pending.next_token;
            pending.next_token += 1;
            let (answer, answered) = oneshot::channel();
            pending.calls.entry(key).or_default().push((token, answer));
            (answered, Waiting { shared: &self.shared, key, token })
        };
        let heard = self.shared.heard.load(Ordering::Relaxed);
        let frame = Message::Request(request.clone()).encode(self.cluster, NodeId(0), TraceContext::NONE).to_bytes();
        match timeout_at(deadline, self.outgoing.send(frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(CallError::Closed { detail: self.shared.why_closed(), sent: false }),
            Err(_) => return Err(CallError::Timeout { silent: false, sent: false }),
        }
        let answer = match timeout_at(deadline, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(CallError::Closed { detail: self.shared.why_closed(), sent: true }),
            Err(_) => {
                Err(CallError::Timeout { silent: self.shared.heard.load(Ordering::Relaxed) == heard, sent: true })
            }
        };
        drop(waiting);
        answer
    }

    /// Ask where `groups`' primaries are (at most `ROUTE_QUERY_GROUPS_MAX`).
    pub(crate) async fn routes(&self, groups: Vec<GroupId>, timeout: Duration) -> Result<Routes, CallError> {
        debug_assert!(!groups.is_empty() && groups.len() <= cohort_messages::ROUTE_QUERY_GROUPS_MAX);
        let deadline = Instant::now() + timeout;
        let _place = timeout_at(deadline, Arc::clone(&self.in_flight).acquire_owned())
            .await
            .map_err(|_| CallError::Timeout { silent: false, sent: false })?
            .map_err(|_| CallError::Closed { detail: self.shared.why_closed(), sent: false })?;
        let asked = groups.clone();
        let frame = Message::RouteQuery(RouteQuery { groups }).encode(self.cluster, NodeId(0), TraceContext::NONE);
        let answered = {
            let mut pending = self.shared.pending();
            if let Some(why) = &pending.closed {
                return Err(CallError::Closed { detail: why.clone(), sent: false });
            }
            let (answer, answered) = oneshot::channel();
            // The waiter stays queued even if we stop waiting: answers come
            // in the order asked, so removing it would hand ours to the next.
            pending.routes.push_back(answer);
            // Queue the frame under the same lock, so frames go out in the
            // order of the queue.
            if self.outgoing.try_send(frame.to_bytes()).is_err() {
                pending.routes.pop_back();
                return Err(CallError::Timeout { silent: false, sent: false });
            }
            answered
        };
        match timeout_at(deadline, answered).await {
            Ok(Ok(routes)) if routes.routes.iter().map(|route| route.group).eq(asked.iter().copied()) => Ok(routes),
            Ok(Ok(_)) => {
                let detail = "a Routes answer for other groups than asked".to_string();
                self.close(&detail);
                Err(CallError::Closed { detail, sent: true })
            }
            Ok(Err(_)) => Err(CallError::Closed { detail: self.shared.why_closed(), sent: true }),
            Err(_) => Err(CallError::Timeout { silent: false, sent: true }),
        }
    }
}

/// The decoder of a client connection: frames of our cluster, no body
/// above a Reply's limit (the largest a node sends a client).
fn decoder(cluster: ClusterId) -> FrameDecoder {
    FrameDecoder::with_body_max(cluster, Command::Reply.body_size_max_bytes())
}

fn io_error(error: &std::io::Error, what: &str) -> DialError {
    match tls_failure(error) {
        Some(detail) => DialError::Tls { detail },
        None => DialError::Io { kind: error.kind(), detail: format!("{what}: {error}") },
    }
}

fn timed_out(what: &str, limit: Duration) -> DialError {
    DialError::Io { kind: std::io::ErrorKind::TimedOut, detail: format!("{what} took longer than {limit:?}") }
}

/// Dial `address`, run TLS (unless `tls` is `None`) and exchange
/// Handshakes; spawn the connection's reader and writer tasks.
pub(crate) async fn dial(
    address: &str,
    cluster: ClusterId,
    tls: Option<&ClientTls>,
    limits: &ClientLimits,
) -> Result<Connection, DialError> {
    let tcp = match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(address)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(error)) => return Err(io_error(&error, "connect")),
        Err(_) => return Err(timed_out("connect", limits.connect_timeout)),
    };
    let _ = tcp.set_nodelay(true);
    let deadline = Instant::now() + limits.handshake_timeout;
    let mut stream: Stream = match tls {
        None => Box::new(tcp),
        Some(tls) => match timeout_at(deadline, tls.connector.connect(tls.server_name.clone(), tcp)).await {
            Ok(Ok(stream)) => Box::new(stream),
            Ok(Err(error)) => return Err(io_error(&error, "TLS handshake")),
            Err(_) => return Err(timed_out("TLS and the Handshake", limits.handshake_timeout)),
        },
    };
    let hello = Handshake { revision: WIRE_REVISION, cluster, node: NodeId(0), shard_count: 1 };
    let hello = Message::Handshake(hello).encode(cluster, NodeId(0), TraceContext::NONE).to_bytes();
    let sent = async {
        stream.write_all(&hello).await?;
        stream.flush().await
    };
    match timeout_at(deadline, sent).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return Err(io_error(&error, "sending the Handshake")),
        Err(_) => return Err(timed_out("TLS and the Handshake", limits.handshake_timeout)),
    }
    let mut decoder = decoder(cluster);
    let mut buffer = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let node = match timeout_at(deadline, greeting(&mut stream, &mut decoder, &mut buffer, cluster)).await {
        Ok(result) => result?,
        Err(_) => return Err(timed_out("TLS and the Handshake", limits.handshake_timeout)),
    };
    Ok(spawn(stream, node, cluster, decoder, buffer, limits))
}

/// Read the node's Handshake: the node id behind the address.
async fn greeting(
    stream: &mut Stream,
    decoder: &mut FrameDecoder,
    buffer: &mut BytesMut,
    cluster: ClusterId,
) -> Result<NodeId, DialError> {
    let refused = |detail: String| DialError::Io { kind: std::io::ErrorKind::InvalidData, detail };
    loop {
        match decoder.decode(buffer) {
            Ok(Some(frame)) => {
                return match frame.message() {
                    Ok(Message::Handshake(handshake)) if handshake.node != NodeId(0) => {
                        handshake
                            .check_peer(cluster)
                            .map_err(|error| refused(format!("the node's Handshake: {error}")))?;
                        Ok(handshake.node)
                    }
                    other => Err(refused(format!(
                        "the node answered {other:?} instead of its Handshake: is this a client port?"
                    ))),
                };
            }
            Ok(None) => {}
            // O5: a node answers a Handshake of another cluster or revision
            // with its own, whose header this decoder refuses.
            Err(FrameError::ClusterMismatch { got, expected }) => {
                let (node, ours) = (format_cluster_id(ClusterId(got)), format_cluster_id(ClusterId(expected)));
                return Err(DialError::Mismatch {
                    detail: format!("the node is in cluster {node}, this client in cluster {ours}"),
                });
            }
            Err(FrameError::Revision { got, expected }) => {
                return Err(DialError::Mismatch {
                    detail: format!("the node speaks wire revision {got}, this client revision {expected}"),
                });
            }
            Err(error) => return Err(refused(format!("the node's first frame: {error}: is this a client port?"))),
        }
        buffer.reserve(READ_CHUNK_BYTES);
        match stream.read_buf(buffer).await {
            Ok(0) => {
                return Err(DialError::Io {
                    kind: std::io::ErrorKind::UnexpectedEof,
                    detail: "the node closed the connection before its Handshake (another cluster id, or a wire \
                             revision it does not speak, or a plaintext client on a TLS port)"
                        .into(),
                });
            }
            Ok(_) => {}
            Err(error) => return Err(io_error(&error, "reading the node's Handshake")),
        }
    }
}

fn spawn(
    stream: Stream,
    node: NodeId,
    cluster: ClusterId,
    decoder: FrameDecoder,
    buffer: BytesMut,
    limits: &ClientLimits,
) -> Connection {
    let (reader, writer) = tokio::io::split(stream);
    let in_flight_max = limits.requests_in_flight_max.max(1);
    let (outgoing, queued) = mpsc::channel(in_flight_max);
    let shared = Arc::new(Shared { pending: Mutex::default(), heard: AtomicU64::new(0), tasks: Mutex::default() });
    let read = tokio::spawn(read_frames(reader, decoder, buffer, Arc::clone(&shared)));
    let write = tokio::spawn(write_frames(writer, queued, limits.write_timeout, Arc::clone(&shared)));
    shared.tasks.lock().unwrap_or_else(PoisonError::into_inner).extend([read.abort_handle(), write.abort_handle()]);
    Connection { node, cluster, outgoing, in_flight: Arc::new(Semaphore::new(in_flight_max)), shared }
}

/// The reader task: decode frames and hand each answer to its caller.
async fn read_frames(
    mut reader: ReadHalf<Stream>,
    mut decoder: FrameDecoder,
    mut buffer: BytesMut,
    shared: Arc<Shared>,
) {
    let why = 'connection: loop {
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(frame)) => {
                    shared.heard.fetch_add(1, Ordering::Relaxed);
                    // A body that does not decode answers nobody; its caller times out.
                    if let Ok(message) = frame.message() {
                        shared.deliver(message);
                    }
                }
                Ok(None) => break,
                Err(error) if error.closes_connection() => {
                    break 'connection format!("a bad frame from the node: {error}");
                }
                Err(_) => {}
            }
        }
        buffer.reserve(READ_CHUNK_BYTES);
        match reader.read_buf(&mut buffer).await {
            Ok(0) => break "the node closed the connection".to_string(),
            Ok(_) => {}
            Err(error) => break format!("reading from the node: {error}"),
        }
    };
    shared.close(why);
}

/// The writer task: every frame queued by now in one socket write.
async fn write_frames(
    mut writer: WriteHalf<Stream>,
    mut queued: mpsc::Receiver<Bytes>,
    limit: Duration,
    shared: Arc<Shared>,
) {
    let mut batch = BytesMut::new();
    while let Some(first) = queued.recv().await {
        batch.clear();
        batch.extend_from_slice(&first);
        while batch.len() < WRITE_BATCH_MAX_BYTES {
            match queued.try_recv() {
                Ok(next) => batch.extend_from_slice(&next),
                Err(_) => break,
            }
        }
        let write = async {
            writer.write_all(&batch).await?;
            writer.flush().await
        };
        match tokio::time::timeout(limit, write).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return shared.close(format!("writing to the node: {error}")),
            Err(_) => return shared.close(format!("a write to the node took longer than {limit:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_messages::{Op, Outcome, View};

    fn shared() -> Shared {
        Shared { pending: Mutex::default(), heard: AtomicU64::new(0), tasks: Mutex::default() }
    }

    fn reply(client: u128, request: u64) -> Reply {
        Reply {
            client: ClientId(client),
            request: RequestNumber(request),
            group: GroupId(1),
            view: View(1),
            op: Op(request),
            outcome: Outcome::Ok(Bytes::new()),
        }
    }

    fn wait(shared: &Shared, client: u128, request: u64) -> oneshot::Receiver<Answer> {
        let (answer, answered) = oneshot::channel();
        let key = Key { client: ClientId(client), group: GroupId(1), request: RequestNumber(request) };
        shared.pending().calls.entry(key).or_default().push((0, answer));
        answered
    }

    #[test]
    fn c1_answers_in_any_order_reach_the_caller_of_their_request() {
        let shared = shared();
        let mut first = wait(&shared, 7, 1);
        let mut second = wait(&shared, 7, 2);
        let mut other = wait(&shared, 8, 1);
        shared.deliver(Message::Reply(reply(7, 2)));
        shared.deliver(Message::Reply(reply(8, 1)));
        shared.deliver(Message::Reply(reply(9, 1))); // nobody waits: dropped
        assert_eq!(second.try_recv(), Ok(Answer::Reply(reply(7, 2))));
        assert_eq!(other.try_recv(), Ok(Answer::Reply(reply(8, 1))));
        assert!(first.try_recv().is_err(), "still waiting");
        shared.deliver(Message::Reply(reply(7, 1)));
        assert_eq!(first.try_recv(), Ok(Answer::Reply(reply(7, 1))));
        assert!(shared.pending().calls.is_empty(), "answered waiters leave nothing behind");
    }

    /// What `greeting` makes of `answer`, the node's first bytes.
    fn greeted_by(answer: Bytes) -> Result<NodeId, DialError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let (near, mut far) = tokio::io::duplex(64 * 1024);
            far.write_all(&answer).await.expect("written");
            drop(far);
            let mut stream: Stream = Box::new(near);
            greeting(&mut stream, &mut decoder(ClusterId(0xc0ffee)), &mut BytesMut::new(), ClusterId(0xc0ffee)).await
        })
    }

    fn node_handshake(cluster: ClusterId) -> Message {
        Message::Handshake(Handshake { revision: WIRE_REVISION, cluster, node: NodeId(3), shard_count: 1 })
    }

    #[test]
    fn o5_a_node_of_another_cluster_or_revision_is_a_final_answer_naming_both() {
        let ours = node_handshake(ClusterId(0xc0ffee)).encode(ClusterId(0xc0ffee), NodeId(3), TraceContext::NONE);
        assert!(matches!(greeted_by(ours.to_bytes()), Ok(NodeId(3))));
        let other = node_handshake(ClusterId(0xbeef)).encode(ClusterId(0xbeef), NodeId(3), TraceContext::NONE);
        let Err(DialError::Mismatch { detail }) = greeted_by(other.to_bytes()) else { panic!("a mismatch") };
        assert_eq!(
            detail,
            "the node is in cluster 0000000000000000000000000000beef, this client in cluster \
             00000000000000000000000000c0ffee"
        );
        // The revision is at bytes 60..62 of the header; the header's
        // checksum covers it, so a frame of revision 3 is built whole.
        let mut future =
            cohort_messages::Header::new(ClusterId(0xc0ffee), NodeId(3), Command::Handshake, TraceContext::NONE);
        future.revision = WIRE_REVISION + 1;
        let body = node_handshake(ClusterId(0xc0ffee)).encode_body();
        let frame = cohort_messages::EncodedFrame::new(future, body);
        let Err(DialError::Mismatch { detail }) = greeted_by(frame.to_bytes()) else { panic!("a mismatch") };
        assert_eq!(
            detail,
            format!("the node speaks wire revision {}, this client revision {WIRE_REVISION}", WIRE_REVISION + 1)
        );
        // A node that closes without a word is still worth trying again.
        assert!(matches!(greeted_by(Bytes::new()), Err(DialError::Io { .. })));
    }

    #[test]
    fn c1_closing_a_connection_fails_every_waiter_with_the_reason() {
        let shared = shared();
        let mut waiting = wait(&shared, 7, 1);
        shared.close("the node closed the connection".into());
        assert!(matches!(waiting.try_recv(), Err(oneshot::error::TryRecvError::Closed)));
        assert_eq!(shared.why_closed(), "the node closed the connection");
    }
}
