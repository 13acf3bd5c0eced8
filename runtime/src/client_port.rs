//! The client port: Request frames in, Reply or Redirect frames out (V5).
//!
//! A client connects, sends a Handshake (its node id is 0; revision and
//! cluster are checked as for peers, R18), then any number of Request frames.
//! Each is routed to the shard that owns its group; the answer goes back on the
//! same connection in the order the requests arrived. A non-primary answers
//! with a Redirect naming the primary it knows, so a client library can retry
//! there. Exactly-once is per (client id, request number), as for local
//! submits: a client that retries must reuse both. A Request frame whose
//! header carries a trace context continues the client's trace.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use cohort_core::routing::shard_of;
use cohort_messages::{ClusterId, Frame, FrameDecoder, Message, NodeId, Outcome, Reply, ReplyError, TraceContext};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tracing::Instrument as _;

use cohort_actors::directory::Directory;
use cohort_actors::shard::{ClientAnswer, Submit};

/// How long the port waits for a shard's answer before replying `Busy`.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Accept client connections forever.
pub async fn serve(listener: TcpListener, cluster: ClusterId, node: NodeId, shards: Arc<Directory>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                actix::spawn(serve_client(stream, cluster, node, Arc::clone(&shards)));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn serve_client(mut stream: TcpStream, cluster: ClusterId, node: NodeId, shards: Arc<Directory>) {
    let mut decoder = FrameDecoder::new(cluster);
    let mut buffer = BytesMut::with_capacity(16 * 1024);
    let mut greeted = false;
    loop {
        loop {
            let frame = match decoder.decode(&mut buffer) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) if error.closes_connection() => return,
                Err(_) => continue,
            };
            let Some(answer) = handle(frame, &mut greeted, cluster, node, &shards).await else { return };
            if let Some(message) = answer {
                let encoded = message.encode(cluster, node, TraceContext::NONE);
                if stream.write_all(&encoded.to_bytes()).await.is_err() {
                    return;
                }
            }
        }
        match stream.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// `None`: close the connection. `Some(None)`: nothing to answer.
async fn handle(
    frame: Frame,
    greeted: &mut bool,
    cluster: ClusterId,
    node: NodeId,
    shards: &Directory,
) -> Option<Option<Message>> {
    let message = frame.message().ok()?;
    let trace = frame.header.trace;
    if !*greeted {
        return match message {
            Message::Handshake(handshake) if handshake.check_peer(cluster).is_ok() => {
                *greeted = true;
                Some(None)
            }
            _ => None,
        };
    }
    let Message::Request(request) = message else { return Some(None) };
    let (client, number, group) = (request.client, request.request, request.group);
    let refused = |code, detail: String| Reply {
        client,
        request: number,
        group,
        view: cohort_messages::View(0),
        op: cohort_messages::Op(0),
        outcome: Outcome::Error { code, detail },
    };
    let Some(shard) = shards.shard(shard_of(group, shards.shard_count())) else {
        return Some(Some(Message::Reply(refused(ReplyError::Busy, "the node is stopping".into()))));
    };
    let (answer, answered) = oneshot::channel();
    let span = cohort_actors::traces::client_request_span(node, &request, trace);
    if shard.try_send(Submit { request, answer, span: span.clone() }).is_err() {
        return Some(Some(Message::Reply(refused(ReplyError::Busy, "the shard's mailbox is full; retry".into()))));
    }
    let message = match tokio::time::timeout(ANSWER_TIMEOUT, answered).instrument(span).await {
        Ok(Ok(ClientAnswer::Reply(reply))) => Message::Reply(reply),
        Ok(Ok(ClientAnswer::Redirect(redirect))) => Message::Redirect(redirect),
        _ => Message::Reply(refused(ReplyError::Busy, "no answer in time; retry with the same request number".into())),
    };
    Some(Some(message))
}
