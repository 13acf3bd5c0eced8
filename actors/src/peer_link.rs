//! The peer link: one actor per peer node, owning the TCP connection to it.
//!
//! A writer task connects (retrying with exponential backoff), sends our
//! Handshake (revision, cluster, node, shards; R18), then writes the frames
//! the outboxes hand over. The actor never blocks: frames for a peer that is
//! not connected, or whose queue is full, are dropped and counted; the
//! protocol re-sends what matters (heartbeats, repairs), and a dropped reply
//! batch is replaced by the next (R30). Connectivity is shared with the
//! shards so each group can record it after a batch (R25).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use cohort_messages::{ClusterId, EncodedFrame, Handshake, Message, NodeId, TraceContext, WIRE_REVISION};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::inbound::ConnectionReader;
use crate::{drops::Drops, metrics::DropReason};

/// Frames to write to the peer, in order.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SendFrames {
    /// The frames.
    pub frames: Vec<EncodedFrame>,
}

/// Turns of frames queued per peer before new ones are dropped.
const QUEUE_TURNS_MAX: usize = 1024;
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The peer link actor.
pub struct PeerLink {
    peer: NodeId,
    address: SocketAddr,
    hello: EncodedFrame,
    queue: Option<mpsc::Sender<Vec<EncodedFrame>>>,
    connected: Arc<AtomicBool>,
    drops: Arc<Drops>,
}

impl PeerLink {
    /// A link from `node` to `peer` at `address`.
    pub fn new(
        cluster: ClusterId,
        node: NodeId,
        shard_count: u16,
        peer: NodeId,
        address: SocketAddr,
        connected: Arc<AtomicBool>,
        drops: Arc<Drops>,
    ) -> PeerLink {
        let hello = Message::Handshake(Handshake { revision: WIRE_REVISION, cluster, node, shard_count }).encode(
            cluster,
            node,
            TraceContext::NONE,
        );
        PeerLink { peer, address, hello, queue: None, connected, drops }
    }

    /// The peer this link writes to.
    pub fn peer(&self) -> NodeId {
        self.peer
    }
}

impl Actor for PeerLink {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        let (sender, receiver) = mpsc::channel(QUEUE_TURNS_MAX);
        self.queue = Some(sender);
        let writer = write_loop(self.address, self.hello.clone(), receiver, Arc::clone(&self.connected));
        ctx.spawn(writer.into_actor(self));
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.connected.store(false, Ordering::Relaxed);
    }
}

impl Handler<SendFrames> for PeerLink {
    type Result = ();

    fn handle(&mut self, send: SendFrames, _ctx: &mut Self::Context) {
        let count = send.frames.len() as u64;
        if !self.connected.load(Ordering::Relaxed) {
            self.drops.add(DropReason::PeerDisconnected, count);
            return;
        }
        let queued = self.queue.as_ref().is_some_and(|queue| queue.try_send(send.frames).is_ok());
        if !queued {
            self.drops.add(DropReason::MailboxFull, count);
        }
    }
}

async fn write_loop(
    address: SocketAddr,
    hello: EncodedFrame,
    mut frames: mpsc::Receiver<Vec<EncodedFrame>>,
    connected: Arc<AtomicBool>,
) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let mut stream = match TcpStream::connect(address).await {
            Ok(stream) => stream,
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if write_frame(&mut stream, &hello).await.is_err() {
            continue;
        }
        backoff = BACKOFF_MIN;
        // Frames queued while disconnected are stale: drop them.
        while frames.try_recv().is_ok() {}
        connected.store(true, Ordering::Relaxed);
        loop {
            let Some(turn) = frames.recv().await else {
                connected.store(false, Ordering::Relaxed);
                return;
            };
            let mut failed = false;
            for frame in &turn {
                if write_frame(&mut stream, frame).await.is_err() {
                    failed = true;
                    break;
                }
            }
            if failed {
                break;
            }
        }
        connected.store(false, Ordering::Relaxed);
    }
}

async fn write_frame(stream: &mut TcpStream, frame: &EncodedFrame) -> std::io::Result<()> {
    stream.write_all(&frame.header).await?;
    stream.write_all(&frame.body).await
}

/// The reading of an inbound connection from this link's peer, past its
/// Handshake: run in the link's context.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Adopt(pub ConnectionReader);

impl Handler<Adopt> for PeerLink {
    type Result = ();

    fn handle(&mut self, Adopt(reader): Adopt, ctx: &mut Self::Context) {
        ctx.spawn(reader.into_actor(self));
    }
}
