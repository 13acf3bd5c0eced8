//! One connection to a node's client port, speaking its raw frames
//! (`runtime/src/client_port/`) over mTLS with the run's client
//! certificate: a Handshake with node id 0, then Request frames, answered
//! by Reply or Redirect frames. Answers that do not belong to the request in
//! flight (the node's own Handshake, a late answer on a reused connection)
//! are skipped with the core's matching rules ([`answers`], [`redirects`]).

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
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

/// Where a node's client port is, and how to speak TLS to it.
#[derive(Clone)]
pub struct Endpoint {
    /// The client port.
    pub address: SocketAddr,
    /// The run's client certificate and the cluster CA.
    pub tls: Arc<rustls::ClientConfig>,
}

/// The TLS configuration of a client with `dir`'s `ca.pem` and
/// `client-<name>.pem`/`.key` (as `cohort certs client` writes them).
pub fn client_tls(dir: &std::path::Path, name: &str) -> io::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let invalid = |what: &str, error: &dyn std::fmt::Display| io::Error::other(format!("{what}: {error}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.pem")).map_err(|e| invalid("ca.pem", &e))? {
        roots.add(cert.map_err(|e| invalid("ca.pem", &e))?).map_err(|e| invalid("ca.pem", &e))?;
    }
    let chain = CertificateDer::pem_file_iter(dir.join(format!("client-{name}.pem")))
        .map_err(|e| invalid("client certificate", &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("client certificate", &e))?;
    let key =
        PrivateKeyDer::from_pem_file(dir.join(format!("client-{name}.key"))).map_err(|e| invalid("client key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", &e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| invalid("TLS", &e))?;
    Ok(Arc::new(config))
}

/// An open, greeted connection.
pub struct Connection {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
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
    /// Connect to `endpoint`, run TLS, and send the Handshake.
    pub fn open(endpoint: &Endpoint) -> io::Result<Connection> {
        let tcp = TcpStream::connect_timeout(&endpoint.address, CONNECT_TIMEOUT)?;
        tcp.set_nodelay(true)?;
        tcp.set_write_timeout(Some(Duration::from_secs(1)))?;
        tcp.set_read_timeout(Some(Duration::from_secs(1)))?;
        let name = rustls::pki_types::ServerName::try_from("nodes.cohort").map_err(io::Error::other)?;
        let connection = rustls::ClientConnection::new(Arc::clone(&endpoint.tls), name).map_err(io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(connection, tcp);
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
            self.stream.sock.set_read_timeout(Some(left))?;
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
