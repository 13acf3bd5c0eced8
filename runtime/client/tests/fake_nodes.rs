//! C1 against scripted nodes: plaintext client ports served by this test,
//! each answering Handshakes, route queries and requests as a scenario
//! says (out of order, with redirects, by closing the connection, or not at
//! all), so the client's matching, routing and retry rules are checked
//! exactly. The real cluster is in runtime/tests/network_client.rs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use cohort_client::{ClientError, ClientLimits, ClusterClient};
use cohort_messages::{
    ClusterId, FrameDecoder, GroupId, Handshake, Message, NodeId, Op, Outcome, Redirect, Reply, ReplyError, Request,
    Route, Routes, TraceContext, View, WIRE_REVISION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CLUSTER: ClusterId = ClusterId(0xC1);

/// What a scripted node does with one request.
enum Action {
    Answer(Message),
    /// Keep it; when `hold` requests are held, answer them all, last first.
    Hold(Message),
    /// Close the connection without answering.
    Close,
    /// Never answer.
    Silent,
}

type Script = dyn Fn(&Request, usize) -> Action + Send + Sync;

struct FakeNode {
    address: String,
    /// Every request received, in order.
    seen: Arc<Mutex<Vec<Request>>>,
}

fn ok(request: &Request, op: u64) -> Message {
    Message::Reply(Reply {
        client: request.client,
        request: request.request,
        group: request.group,
        view: View(1),
        op: Op(op),
        outcome: Outcome::Ok(request.operation.clone()),
    })
}

fn refuse(request: &Request, code: ReplyError) -> Message {
    Message::Reply(Reply {
        client: request.client,
        request: request.request,
        group: request.group,
        view: View(1),
        op: Op(0),
        outcome: Outcome::Error { code, detail: "scripted".into() },
    })
}

fn redirect(request: &Request, primary: NodeId) -> Message {
    Message::Redirect(Redirect {
        group: request.group,
        client: request.client,
        request: request.request,
        view: View(2),
        primary: Some(primary),
    })
}

/// Start node `node`: `routes` names each group's primary, `script` answers
/// requests (given the request and how many this node saw before it),
/// `hold` is the batch size of [`Action::Hold`].
async fn fake_node(
    node: u64,
    routes: impl Fn(GroupId) -> Option<NodeId> + Send + Sync + 'static,
    hold: usize,
    script: impl Fn(&Request, usize) -> Action + Send + Sync + 'static,
) -> FakeNode {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script: Arc<Script> = Arc::new(script);
    let routes: Arc<dyn Fn(GroupId) -> Option<NodeId> + Send + Sync> = Arc::new(routes);
    let shared = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let node = NodeId(node);
            tokio::spawn(serve(stream, node, Arc::clone(&routes), hold, Arc::clone(&script), Arc::clone(&shared)));
        }
    });
    FakeNode { address, seen }
}

async fn serve(
    mut stream: TcpStream,
    node: NodeId,
    routes: Arc<dyn Fn(GroupId) -> Option<NodeId> + Send + Sync>,
    hold: usize,
    script: Arc<Script>,
    seen: Arc<Mutex<Vec<Request>>>,
) {
    let mut decoder = FrameDecoder::new(CLUSTER);
    let mut buffer = BytesMut::new();
    let mut held = Vec::new();
    loop {
        while let Ok(Some(frame)) = decoder.decode(&mut buffer) {
            let answer = match frame.message().expect("a valid message") {
                Message::Handshake(_) => Some(Message::Handshake(Handshake {
                    revision: WIRE_REVISION,
                    cluster: CLUSTER,
                    node,
                    shard_count: 1,
                })),
                Message::RouteQuery(query) => Some(Message::Routes(Routes {
                    routes: query
                        .groups
                        .iter()
                        .map(|group| Route { group: *group, view: View(1), primary: routes(*group) })
                        .collect(),
                })),
                Message::Request(request) => {
                    let count = {
                        let mut seen = seen.lock().expect("seen");
                        seen.push(request.clone());
                        seen.len() - 1
                    };
                    match script(&request, count) {
                        Action::Answer(message) => Some(message),
                        Action::Hold(message) => {
                            held.push(message);
                            if held.len() >= hold {
                                for message in held.drain(..).rev() {
                                    send(&mut stream, &message, node).await;
                                }
                            }
                            None
                        }
                        Action::Close => return,
                        Action::Silent => None,
                    }
                }
                other => panic!("a client sent {other:?}"),
            };
            if let Some(answer) = answer {
                send(&mut stream, &answer, node).await;
            }
        }
        match stream.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn send(stream: &mut TcpStream, message: &Message, node: NodeId) {
    let _ = stream.write_all(&message.encode(CLUSTER, node, TraceContext::NONE).to_bytes()).await;
}

fn client(nodes: &[&FakeNode], timeout: Duration) -> ClusterClient {
    let limits = ClientLimits {
        attempt_timeout: Duration::from_millis(300),
        unreachable_backoff: Duration::from_millis(100),
        ..ClientLimits::default()
    };
    ClusterClient::builder(CLUSTER, nodes.iter().map(|node| node.address.clone()))
        .insecure()
        .limits(limits)
        .timeout(timeout)
        .build()
        .expect("a client")
}

#[tokio::test]
async fn c1_pipelined_answers_in_reverse_order_reach_their_callers() {
    let node =
        fake_node(1, |_| Some(NodeId(1)), 8, |request, _| Action::Hold(ok(request, request.group.0 + 100))).await;
    let client = client(&[&node], Duration::from_secs(5));
    let mut writes = tokio::task::JoinSet::new();
    for group in 0..8u64 {
        let client = client.clone();
        writes.spawn(async move { (group, client.write(GroupId(group), format!("value {group}")).await) });
    }
    while let Some(joined) = writes.join_next().await {
        let (group, written) = joined.expect("the task");
        let written = written.expect("the write");
        assert_eq!(written.op, Op(group + 100), "group {group} got its own answer");
        assert_eq!(written.result, Bytes::from(format!("value {group}")));
    }
    // Each group's client id registers first (H5), then writes.
    assert_eq!(node.seen.lock().expect("seen").len(), 16, "each registration and each write was sent once");
    assert_eq!(client.connections_open(), 1, "all on one connection");
}

#[tokio::test]
async fn c1_a_redirect_is_followed_and_the_route_cached() {
    // Both nodes' metadata say node 1 leads group 5 (stale): node 1
    // redirects to node 2, which serves.
    let first = fake_node(1, |_| Some(NodeId(1)), 1, |request, _| Action::Answer(redirect(request, NodeId(2)))).await;
    let second =
        fake_node(2, |_| Some(NodeId(1)), 1, |request, count| Action::Answer(ok(request, count as u64 + 1))).await;
    let client = client(&[&first, &second], Duration::from_secs(5));
    // The registration (H5) is redirected; it and both writes then go to
    // node 2, which answers them at ops 1, 2 and 3.
    let written = client.write(GroupId(5), "a").await.expect("the write");
    assert_eq!(written.op, Op(2));
    assert_eq!(client.route(GroupId(5)).map(|route| route.node), Some(NodeId(2)), "the redirect was cached");
    client.write(GroupId(5), "b").await.expect("the second write");
    assert_eq!(first.seen.lock().expect("seen").len(), 1, "only the registration went to node 1");
    let seen = second.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|request| request.client == seen[0].client), "one client id per group");
    let numbers: Vec<u64> = seen.iter().map(|request| request.request.0).collect();
    assert_eq!(numbers, [1, 2, 3], "the registration, then writes numbered after its op (1)");
}

#[tokio::test]
async fn c1_after_a_lost_connection_the_retry_carries_the_same_id_and_number() {
    let node = fake_node(
        1,
        |_| Some(NodeId(1)),
        1,
        |request, count| match count {
            // The registration (H5), answered at op 3; the write's first
            // attempt loses its connection.
            0 => Action::Answer(ok(request, 3)),
            1 => Action::Close,
            _ => Action::Answer(ok(request, 7)),
        },
    )
    .await;
    let client = client(&[&node], Duration::from_secs(5));
    assert_eq!(client.write(GroupId(1), "x").await.expect("the write").op, Op(7));
    let seen = node.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 3, "the registration, one lost attempt, one answered");
    assert_eq!(seen[1].request.0, 4, "numbered after the registration's op");
    assert_eq!((seen[1].client, seen[1].request), (seen[2].client, seen[2].request), "the same request");
}

#[tokio::test]
async fn c1_a_node_that_never_answers_times_out_with_the_request_to_retry() {
    // Registrations (request 1, H5) are answered at op 1; writes never.
    let node = fake_node(
        1,
        |_| Some(NodeId(1)),
        1,
        |request, _| {
            if request.request.0 == 1 { Action::Answer(ok(request, 1)) } else { Action::Silent }
        },
    )
    .await;
    let client = client(&[&node], Duration::from_millis(900));
    let started = std::time::Instant::now();
    let error = client.write(GroupId(1), "x").await.expect_err("no answer");
    assert!(started.elapsed() < Duration::from_secs(3), "the timeout holds");
    assert!(error.may_have_applied(), "{error}");
    let request = error.request().expect("the request to resubmit");
    assert_eq!(request.request.0, 2, "the write after the registration at op 1");
    // The next write of the group moves to a fresh id (the lost one may
    // apply), which registers first.
    let _ = client.write(GroupId(1), "y").await;
    let seen = node.seen.lock().expect("seen").clone();
    let after = seen.iter().find(|sent| sent.client != request.client).expect("a later request");
    assert_eq!(after.request.0, 1, "a fresh id after a write in doubt, registered first");
}

#[tokio::test]
async fn c1_a_group_no_node_knows_has_no_route_and_refusals_are_typed() {
    let node = fake_node(
        1,
        |group| (group != GroupId(9)).then_some(NodeId(1)),
        1,
        |request, _| {
            Action::Answer(match request.group.0 {
                9 => refuse(request, ReplyError::UnknownGroup),
                10 => refuse(request, ReplyError::Rejected),
                _ => refuse(request, ReplyError::Forbidden),
            })
        },
    )
    .await;
    let client = client(&[&node], Duration::from_millis(600));
    assert!(matches!(client.write(GroupId(9), "x").await, Err(ClientError::NoRoute { .. })));
    assert!(matches!(
        client.write(GroupId(10), "x").await,
        Err(ClientError::Refused { code: ReplyError::Rejected, .. })
    ));
    assert!(matches!(client.read(GroupId(11), "").await, Err(ClientError::Forbidden { .. })));
}

#[tokio::test]
async fn c1_an_unreachable_list_is_an_io_error_naming_the_address() {
    // A port nobody listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    drop(listener);
    let client = ClusterClient::builder(CLUSTER, [address.clone()])
        .insecure()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("a client");
    match client.write(GroupId(1), "x").await {
        Err(ClientError::Io { address: failed, .. }) => assert_eq!(failed, address),
        other => panic!("expected an Io error, got {other:?}"),
    }
}
