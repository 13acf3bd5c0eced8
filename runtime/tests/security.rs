//! T1, T2: who may connect. A real two-node cluster on loopback (mTLS with
//! throwaway certificates, as `LocalCluster` makes them) and an outsider
//! that dials its peer port the way a node would, with the wrong
//! credentials or a lie. Every refusal must be counted by reason.

use std::sync::Arc;
use std::time::Duration;

// The wire, spoken by hand: what an outsider would send.
use cohort_messages::{Handshake, LinkMode, LinkShard, Message, Preamble, Reply, TraceContext, WIRE_REVISION};
use cohort_runtime::client::Request;
use cohort_runtime::metrics::Port;
use cohort_runtime::prelude::*;
use cohort_runtime::tls::{Credentials, TlsFiles};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

fn cluster() -> LocalCluster {
    LocalCluster::builder(2)
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [GroupId(0)])
        .start()
        .expect("cluster starts")
}

fn credentials(files: &TlsFiles) -> Credentials {
    Credentials::load(files).expect("credentials load")
}

/// Dial `address` as a node would: preamble, TLS with `credentials`
/// (checking the answer is node 1), then the frames in `hello`. Returns
/// whether the connection stayed open for a moment afterwards.
async fn dial(
    address: std::net::SocketAddr,
    credentials: Option<&Credentials>,
    hello: &[Message],
    sender: NodeId,
    cluster: ClusterId,
) -> bool {
    let Ok(mut tcp) = TcpStream::connect(address).await else { return false };
    let mode = if credentials.is_some() { LinkMode::Tls } else { LinkMode::Plaintext };
    if tcp.write_all(&Preamble::new(0, mode).encode()).await.is_err() {
        return false;
    }
    let mut stream: Box<dyn Io> = match credentials {
        None => Box::new(tcp),
        Some(credentials) => {
            let config = cohort_runtime::tls::client_config(credentials).expect("client config");
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let name = rustls_pki_types::ServerName::try_from("node-1.cohort").expect("a name");
            match tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await {
                Ok(Ok(stream)) => Box::new(stream),
                _ => return false,
            }
        }
    };
    for message in hello {
        let frame = message.encode(cluster, sender, TraceContext::NONE).to_bytes();
        if stream.write_all(&frame).await.is_err() || stream.flush().await.is_err() {
            return false;
        }
    }
    // A refused connection is closed by the node: the read ends (0 or error).
    let mut byte = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(1500), stream.read(&mut byte)).await.is_err()
}

fn handshake(cluster: ClusterId, node: NodeId) -> Message {
    Message::Handshake(Handshake { revision: WIRE_REVISION, cluster, node, shard_count: 1 })
}

async fn wait_refused(node: &Node, reason: &'static str) -> u64 {
    for _ in 0..100 {
        let count = node.handle().metrics().refused(Port::Peer, reason);
        if count > 0 {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    0
}

#[actix_rt::test]
async fn t1_a_node_with_a_certificate_from_another_ca_or_none_never_joins_and_is_counted() {
    let cluster = cluster();
    let node = cluster.node(NodeId(1)).expect("node 1");
    let address = node.listen_address();
    let cluster_id = cohort_runtime::local::LOCAL_CLUSTER_ID;
    // Another CA's certificate for "node 2": the TLS handshake fails.
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let foreign = cohort_runtime::tls::local_cluster(elsewhere.path(), [NodeId(2)]).expect("foreign certificates");
    let foreign = credentials(foreign.node(NodeId(2)).expect("files"));
    let hello = [handshake(cluster_id, NodeId(2)), Message::LinkShard(LinkShard { shard: 0 })];
    assert!(!dial(address, Some(&foreign), &hello, NodeId(2), cluster_id).await, "a foreign CA's node is refused");
    assert!(wait_refused(node, "tls_handshake").await >= 1, "and counted as a failed TLS handshake");
    // No certificate at all: plaintext to a TLS node is refused at once.
    assert!(!dial(address, None, &hello, NodeId(2), cluster_id).await, "a plaintext dialer is refused");
    assert!(wait_refused(node, "plaintext").await >= 1, "and counted");
    // The real node 2 is still connected.
    assert_eq!(node.handle().connected_peers(), 1);
}

/// TLS to node 1's peer port with `credentials`, past the preamble.
async fn tls_to_node_1(
    address: std::net::SocketAddr,
    credentials: &Credentials,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut tcp = TcpStream::connect(address).await.expect("connect");
    tcp.write_all(&Preamble::new(0, LinkMode::Tls).encode()).await.expect("preamble");
    let config = cohort_runtime::tls::client_config(credentials).expect("client config");
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls_pki_types::ServerName::try_from("node-1.cohort").expect("a name");
    connector.connect(name, tcp).await.expect("TLS with a certificate of the cluster's CA")
}

#[actix_rt::test]
async fn t1_a_peer_whose_certificate_names_node_2_but_claims_node_3_is_disconnected() {
    let cluster = cluster();
    let node = cluster.node(NodeId(1)).expect("node 1");
    let address = node.listen_address();
    let cluster_id = cohort_runtime::local::LOCAL_CLUSTER_ID;
    let node2 = credentials(cluster.certs().node(NodeId(2)).expect("node 2's files"));
    // In the Handshake: node 2's certificate, claiming node 3 (not even a
    // peer of node 1 here: refused either way, and counted).
    let claims_3 = [handshake(cluster_id, NodeId(3)), Message::LinkShard(LinkShard { shard: 0 })];
    assert!(!dial(address, Some(&node2), &claims_3, NodeId(3), cluster_id).await, "refused");
    let refused = wait_refused(node, "unknown_peer").await + wait_refused(node, "certificate_names_another_node").await;
    assert!(refused >= 1, "counted");

    // In a frame header: an honest greeting as node 2, then a frame whose
    // header names node 3.
    let mut stream = tls_to_node_1(address, &node2).await;
    for message in [handshake(cluster_id, NodeId(2)), Message::LinkShard(LinkShard { shard: 0 })] {
        stream.write_all(&message.encode(cluster_id, NodeId(2), TraceContext::NONE).to_bytes()).await.expect("write");
    }
    let forged = handshake(cluster_id, NodeId(3));
    stream.write_all(&forged.encode(cluster_id, NodeId(3), TraceContext::NONE).to_bytes()).await.expect("write");
    stream.flush().await.expect("flush");
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "a frame from another sender closes the connection");
    assert!(wait_refused(node, "sender_mismatch").await >= 1, "and is counted");
}

#[actix_rt::test]
async fn t1_a_certificate_that_names_the_wrong_node_is_refused_even_for_a_known_peer() {
    // Three nodes: node 3 is a peer of node 1; node 2's certificate claiming node 3 must not pass.
    let cluster = LocalCluster::builder(3)
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [GroupId(0)])
        .start()
        .expect("cluster starts");
    let node = cluster.node(NodeId(1)).expect("node 1");
    let cluster_id = cohort_runtime::local::LOCAL_CLUSTER_ID;
    let node2 = credentials(cluster.certs().node(NodeId(2)).expect("node 2's files"));
    let claims_3 = [
        Message::Handshake(Handshake { revision: WIRE_REVISION, cluster: cluster_id, node: NodeId(3), shard_count: 1 }),
        Message::LinkShard(LinkShard { shard: 0 }),
    ];
    assert!(!dial(node.listen_address(), Some(&node2), &claims_3, NodeId(3), cluster_id).await, "refused");
    assert!(wait_refused(node, "certificate_names_another_node").await >= 1, "counted by its reason");
}

/// A TLS client of a node's client port, greeted.
struct PortClient {
    stream: tokio_rustls::client::TlsStream<TcpStream>,
    buffer: bytes::BytesMut,
    decoder: cohort_messages::FrameDecoder,
}

impl PortClient {
    async fn connect(address: std::net::SocketAddr, credentials: &Credentials) -> Option<PortClient> {
        let tcp = TcpStream::connect(address).await.ok()?;
        let config = cohort_runtime::tls::client_config(credentials).ok()?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = rustls_pki_types::ServerName::try_from("nodes.cohort").ok()?;
        let mut stream = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await.ok()?.ok()?;
        let cluster = cohort_runtime::local::LOCAL_CLUSTER_ID;
        let hello = Message::Handshake(Handshake { revision: WIRE_REVISION, cluster, node: NodeId(0), shard_count: 1 });
        stream.write_all(&hello.encode(cluster, NodeId(0), TraceContext::NONE).to_bytes()).await.ok()?;
        let mut client =
            PortClient { stream, buffer: bytes::BytesMut::new(), decoder: cohort_messages::FrameDecoder::new(cluster) };
        // The node greets back with its own Handshake.
        match client.next().await? {
            Message::Handshake(handshake) if handshake.node != NodeId(0) => Some(client),
            _ => None,
        }
    }

    async fn next(&mut self) -> Option<Message> {
        loop {
            if let Ok(Some(frame)) = self.decoder.decode(&mut self.buffer) {
                return frame.message().ok();
            }
            let read = tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buffer)).await;
            if !matches!(read, Ok(Ok(n)) if n > 0) {
                return None;
            }
        }
    }

    async fn call(&mut self, request: &Request) -> Option<Message> {
        let cluster = cohort_runtime::local::LOCAL_CLUSTER_ID;
        let frame = Message::Request(request.clone()).encode(cluster, NodeId(0), TraceContext::NONE).to_bytes();
        self.stream.write_all(&frame).await.ok()?;
        self.next().await
    }
}

fn client_cluster() -> LocalCluster {
    LocalCluster::builder(1)
        .client_ports()
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [GroupId(1)])
        .start()
        .expect("cluster starts")
}

/// `client`'s registration with group 1 (H5: request 1, no operation).
fn register(client: u128) -> Request {
    Request {
        client: ClientId(client),
        request: RequestNumber(1),
        group: GroupId(1),
        kind: RequestKind::Write,
        operation: Bytes::new(),
    }
}

/// The first write to group 1 of the client whose registration was
/// answered with `registered`: numbered after the registration's op (H5).
fn write(registered: &Reply, value: &'static str) -> Request {
    Request {
        request: RequestNumber(registered.op.0 + 1),
        operation: Bytes::from_static(value.as_bytes()),
        ..register(registered.client.0)
    }
}

#[actix_rt::test]
async fn t2_a_client_without_credentials_or_with_another_cas_is_refused() {
    let cluster = client_cluster();
    let node = cluster.node(NodeId(1)).expect("node 1");
    let address = node.client_address().expect("a client port");
    // Plaintext: not TLS at all.
    let mut plain = TcpStream::connect(address).await.expect("connect");
    let cluster_id = cohort_runtime::local::LOCAL_CLUSTER_ID;
    let hello = handshake(cluster_id, NodeId(0)).encode(cluster_id, NodeId(0), TraceContext::NONE).to_bytes();
    let _ = plain.write_all(&hello).await;
    // At most a TLS alert comes back, then the close; never a frame.
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "a plaintext client is closed on");
    let mut decoder = cohort_messages::FrameDecoder::new(cluster_id);
    assert!(
        !matches!(decoder.decode(&mut bytes::BytesMut::from(&answer[..])), Ok(Some(_))),
        "and is answered no frame: {answer:?}"
    );
    // A client certificate from another CA.
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let foreign = cohort_runtime::tls::local_cluster(elsewhere.path(), [NodeId(1)]).expect("foreign certificates");
    assert!(PortClient::connect(address, &credentials(&foreign.client)).await.is_none(), "a foreign client is refused");
    let handle = node.handle();
    let mut counted = 0;
    for _ in 0..100 {
        counted = handle.metrics().refused(Port::Client, "tls_handshake");
        if counted >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(counted >= 2, "both are counted ({counted})");
    // The cluster's own client works.
    let mut own = PortClient::connect(address, &credentials(&cluster.certs().client)).await.expect("own client");
    assert!(matches!(own.call(&register(7)).await, Some(Message::Reply(_))), "and is served");
}

#[actix_rt::test]
async fn t3_requests_to_the_metadata_group_are_refused_on_the_client_port_and_the_node_handle() {
    let cluster = client_cluster();
    let node = cluster.node(NodeId(1)).expect("node 1");
    let address = node.client_address().expect("a client port");
    let mut client = PortClient::connect(address, &credentials(&cluster.certs().client)).await.expect("client");
    let to_metadata = Request {
        group: GroupId::METADATA,
        request: RequestNumber(2),
        operation: Bytes::from_static(b"DeleteGroup"),
        ..register(9)
    };
    match client.call(&to_metadata).await {
        Some(Message::Reply(reply)) => assert!(
            matches!(reply.outcome, cohort_messages::Outcome::Error { code: ReplyError::Forbidden, .. }),
            "{reply:?}"
        ),
        other => panic!("expected a Forbidden reply, got {other:?}"),
    }
    assert_eq!(node.handle().metrics().refused(Port::Client, "reserved_group"), 1, "counted");
    let handle = node.handle();
    let through_handle =
        handle.submit(GroupId::METADATA, RequestKind::Write, Bytes::new(), Duration::from_secs(1)).await;
    assert!(matches!(through_handle, Err(SubmitError::Reserved { .. })), "the in-process path refuses too");
    // The partition group was not touched: it still serves.
    assert!(matches!(client.call(&register(10)).await, Some(Message::Reply(_))));
}

#[actix_rt::test]
async fn t2_one_client_cannot_answer_for_another_clients_request_numbers() {
    let cluster = client_cluster();
    let node = cluster.node(NodeId(1)).expect("node 1");
    let address = node.client_address().expect("a client port");
    let certs_dir = cluster.certs().client.ca.parent().expect("the certificates directory").to_path_buf();
    let other = cohort_runtime::tls::Authority::load(&certs_dir).expect("the CA").write_client(&certs_dir, "other");
    let other = credentials(&other.expect("a second client"));
    let mut alice = PortClient::connect(address, &credentials(&cluster.certs().client)).await.expect("alice");
    let mut mallory = PortClient::connect(address, &other).await.expect("mallory");
    // Mallory sends Alice's (client id, request number) first.
    let id = 0xA11CE;
    let Some(Message::Reply(mallory_registered)) = mallory.call(&register(id)).await else {
        panic!("mallory registers")
    };
    let stolen = mallory.call(&write(&mallory_registered, "mallory's")).await;
    assert!(matches!(stolen, Some(Message::Reply(_))), "mallory's write is served as mallory's own");
    // Alice's write with that id is hers: applied, not a duplicate of mallory's.
    let Some(Message::Reply(alice_registered)) = alice.call(&register(id)).await else { panic!("alice registers") };
    let Some(Message::Reply(first)) = alice.call(&write(&alice_registered, "alice's")).await else {
        panic!("alice's reply")
    };
    let Some(Message::Reply(retry)) = alice.call(&write(&alice_registered, "alice's")).await else {
        panic!("alice's retry")
    };
    assert_eq!(first.client, ClientId(id), "answers name the id the client chose");
    assert_eq!(first.op, retry.op, "alice's retry is answered as the same op (exactly once)");
    let Some(Message::Reply(mallorys)) = mallory.call(&write(&mallory_registered, "mallory's")).await else {
        panic!("mallory again")
    };
    assert_ne!(mallorys.op, first.op, "the same id from two clients is two ops");
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    kib * 1024
}

#[actix_rt::test]
async fn t5_two_thousand_connections_that_send_a_header_and_stall_cost_little_memory_and_writes_go_on() {
    let cluster = LocalCluster::builder(3)
        .client_ports()
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [GroupId(1)])
        .start()
        .expect("cluster starts");
    let client = cluster.client();
    client.write(GroupId(1), "before").await.expect("a write before the flood");
    let node = cluster.node(NodeId(1)).expect("node 1");
    let before = rss_bytes();
    // A valid frame header that declares a 1 MiB Request body, then nothing.
    let cluster_id = cohort_runtime::local::LOCAL_CLUSTER_ID;
    let header = {
        let request = register(1);
        let frame = Message::Request(Request { operation: Bytes::from(vec![0u8; 1 << 20]), ..request })
            .encode(cluster_id, NodeId(0), TraceContext::NONE)
            .to_bytes();
        frame.slice(..cohort_messages::HEADER_SIZE_BYTES)
    };
    let targets = [node.listen_address(), node.client_address().expect("a client port")];
    let mut stalled = Vec::new();
    for index in 0..2000 {
        let Ok(mut stream) = TcpStream::connect(targets[index % 2]).await else { continue };
        if index % 2 == 0 {
            // The peer port: a good preamble first, as a node would send.
            let _ = stream.write_all(&Preamble::new(0, LinkMode::Tls).encode()).await;
        }
        let _ = stream.write_all(&header).await;
        stalled.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown = rss_bytes().saturating_sub(before);
    eprintln!("{} stalled connections: RSS grew by {} KiB", stalled.len(), grown >> 10);
    assert!(stalled.len() >= 1900, "the connections were made ({})", stalled.len());
    assert!(grown < 64 * 1024 * 1024, "2,000 stalled connections grew RSS by {} MiB", grown >> 20);
    // Writes go on while they are held.
    for value in ["during-1", "during-2", "during-3"] {
        client.write(GroupId(1), value).await.expect("a write during the flood");
    }
    let handle = node.handle();
    let metrics = handle.metrics();
    let refused = metrics.refused(Port::Peer, "connections_max") + metrics.refused(Port::Peer, "tls_handshake");
    let refused = refused + metrics.refused(Port::Client, "tls_handshake");
    assert!(refused > 0, "the flood's connections are refused and counted");
    drop(stalled);
}

#[actix_rt::test]
async fn t5_what_a_node_keeps_about_a_connection_is_freed_when_it_closes() {
    let cluster = cluster();
    let node = cluster.node(NodeId(1)).expect("node 1");
    let _cluster_id = cohort_runtime::local::LOCAL_CLUSTER_ID;
    let node2 = credentials(cluster.certs().node(NodeId(2)).expect("node 2's files"));
    for _ in 0..20 {
        // A frame of another cluster: rejected (counted by kind), connection closed.
        let mut stream = tls_to_node_1(node.listen_address(), &node2).await;
        let foreign = handshake(ClusterId(0xBAD), NodeId(2)).encode(ClusterId(0xBAD), NodeId(2), TraceContext::NONE);
        let _ = stream.write_all(&foreign.to_bytes()).await;
        let _ = stream.flush().await;
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    }
    let handle = node.handle();
    assert!(handle.metrics().refused(Port::Peer, "cluster_mismatch") >= 20, "each was refused and counted");
    let mut kept = usize::MAX;
    for _ in 0..100 {
        kept = handle.metrics().rejected_sources();
        if kept == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(kept, 0, "nothing is kept about connections that closed");
}
