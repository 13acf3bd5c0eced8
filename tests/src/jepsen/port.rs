//! One connection to a node's client port, speaking its raw frames
//! (`runtime/src/client_port.rs`): a Handshake with node id 0, then Request
//! frames, answered in order by Reply or Redirect frames. Answers that do not
//! belong to the request in flight (a late answer on a reused connection)
//! are skipped with the core's matching rules ([`answers`], [`redirects`]).

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use cohort_core::client::{answers, redirects};
use cohort_messages::{
    ClusterId, FrameDecoder, Handshake, Message, NodeId, Redirect, Reply, Request, TraceContext, WIRE_REVISION,
};

use crate::jepsen::nodes::CLUSTER_ID;

/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
/// Bytes read per system call.
const READ_CHUNK_BYTES: usize = 4096;

/// A node's answer to one request.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A Reply (applied, refused or retry).
    Reply(Reply),
    /// Ask the named primary instead.
    Redirect(Redirect),
}

/// An open, greeted connection.
pub struct Connection {
    stream: TcpStream,
    decoder: FrameDecoder,
    buffer: BytesMut,
}

fn cluster() -> ClusterId {
    ClusterId(u128::from(CLUSTER_ID))
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

impl Connection {
    /// Connect to `address` and send the Handshake.
    pub fn open(address: SocketAddr) -> io::Result<Connection> {
        let mut stream = TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(Duration::from_secs(1)))?;
        let hello = Message::Handshake(Handshake {
            revision: WIRE_REVISION,
            cluster: cluster(),
            node: NodeId(0),
            shard_count: 1,
        })
        .encode(cluster(), NodeId(0), TraceContext::NONE);
        stream.write_all(&hello.to_bytes())?;
        Ok(Connection {
            stream,
            decoder: FrameDecoder::new(cluster()),
            buffer: BytesMut::with_capacity(READ_CHUNK_BYTES),
        })
    }

    /// Send `request` and wait up to `timeout` for its answer. An error
    /// leaves the connection unusable: drop it.
    pub fn call(&mut self, request: &Request, timeout: Duration) -> io::Result<Answer> {
        let deadline = Instant::now() + timeout;
        let frame = Message::Request(request.clone()).encode(cluster(), NodeId(0), TraceContext::NONE);
        self.stream.write_all(&frame.to_bytes())?;
        loop {
            loop {
                let frame = match self.decoder.decode(&mut self.buffer) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(error) if error.closes_connection() => return Err(io::Error::other(error)),
                    Err(_) => continue,
                };
                match frame.message() {
                    Ok(Message::Reply(reply)) if answers(request, &reply) => return Ok(Answer::Reply(reply)),
                    Ok(Message::Redirect(redirect)) if redirects(request, &redirect) => {
                        return Ok(Answer::Redirect(redirect));
                    }
                    _ => {}
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out("no answer in time"));
            }
            self.stream.set_read_timeout(Some(left))?;
            let mut chunk = [0u8; READ_CHUNK_BYTES];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the node closed the connection")),
                Ok(read) => self.buffer.extend_from_slice(&chunk[..read]),
                Err(error) if matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(timed_out("no answer in time"));
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
}
