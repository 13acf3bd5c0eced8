//! Three real nodes in one process: loopback TCP between them, real WAL files,
//! real actix actors.

use std::net::SocketAddr;
use std::time::Duration;

use cohort_runtime::config::ClusterConfig;
use cohort_runtime::prelude::*;

const CLUSTER: ClusterId = ClusterId(0xC0_4087_7E57);

fn free_addresses(n: usize) -> Vec<SocketAddr> {
    let listeners: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind")).collect();
    listeners.iter().map(|l| l.local_addr().expect("address")).collect()
}

/// Short but valid timing (R9: the heartbeat timeout is at least 2 s).
fn fast_timing() -> ClusterConfig {
    ClusterConfig {
        tick: Duration::from_millis(50),
        commit_broadcast_interval: Duration::from_millis(250),
        commit_heartbeat_timeout: Duration::from_secs(2),
        commit_idle_heartbeat_interval: Duration::from_millis(500),
        commit_idle_heartbeat_timeout: Duration::from_secs(2),
        view_change_timeout: Duration::from_millis(500),
        repair_timeout: Duration::from_millis(100),
        commit_quiesce_timeout: None,
    }
}

fn start_node(index: usize, addresses: &[SocketAddr], dir: &std::path::Path, groups: u64) -> Node {
    build_node(index, addresses, dir, groups).start().expect("node starts")
}

fn start_node_with_admin(index: usize, addresses: &[SocketAddr], dir: &std::path::Path, groups: u64) -> Node {
    let admin = "127.0.0.1:0".parse().expect("address");
    build_node(index, addresses, dir, groups).admin(admin).start().expect("node starts")
}

/// The nodes' certificates, made once per test directory (T1: the nodes talk mTLS).
fn tls_of(dir: &std::path::Path, node: NodeId) -> cohort_runtime::tls::TlsFiles {
    let certs = dir.join("certs");
    if !certs.join(cohort_runtime::tls::CA_CERT_FILE).exists() {
        cohort_runtime::tls::local_cluster(&certs, (1..=3).map(NodeId)).expect("throwaway certificates");
    }
    cohort_runtime::tls::node_files(&certs, node)
}

fn build_node(index: usize, addresses: &[SocketAddr], dir: &std::path::Path, groups: u64) -> NodeBuilder {
    let node = NodeId(index as u64 + 1);
    let mut builder = NodeBuilder::new(CLUSTER, node)
        .tls(tls_of(dir, node))
        .cluster_config(fast_timing())
        .listen(addresses[index])
        .data_dir(dir.join(format!("node-{}", node.0)))
        .shards(2)
        .state_machine(|_| Box::new(Register::default()));
    for (peer, address) in addresses.iter().enumerate() {
        if peer != index {
            builder = builder.peer(NodeId(peer as u64 + 1), *address);
        }
    }
    for g in 0..groups {
        let members = (0..3).map(|i| NodeId(((g as usize + i) % 3) as u64 + 1)).collect();
        builder = builder.group(GroupPlacement {
            group: GroupId(g),
            incarnation: Incarnation(1),
            members,
            replication_quorum: None,
            write_mode: WriteMode::Sync,
            kind: Default::default(),
        });
    }
    builder
}

/// Submit to the group's primary, following redirects, for up to 15 s.
/// Each `submit` is a fresh client: its registration (H5) takes an op, and
/// the write the next, so a group's n-th write here commits at op 2n.
async fn write(handles: &[NodeHandle], group: GroupId, value: &'static [u8]) -> Result<Op, SubmitError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut target = 0;
    let mut last = SubmitError::Timeout { group, waited: Duration::from_secs(15) };
    while std::time::Instant::now() < deadline {
        match handles[target].submit(group, RequestKind::Write, Bytes::from_static(value), Duration::from_secs(3)).await
        {
            Ok(committed) => return Ok(committed.op),
            Err(SubmitError::NotPrimary { primary: Some(primary), .. })
                if handles.iter().any(|h| h.node() == primary) && handles[target].node() != primary =>
            {
                target = handles.iter().position(|h| h.node() == primary).unwrap_or(0);
            }
            Err(error) => {
                last = error;
                tokio::time::sleep(Duration::from_millis(100)).await;
                target = (target + 1) % handles.len();
            }
        }
    }
    Err(last)
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cohort-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn v1_three_nodes_replicate_over_tcp() {
    let dir = temp_dir("cluster-v1");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let nodes: Vec<Node> = (0..3).map(|i| start_node(i, &addresses, &dir, 8)).collect();
        let handles: Vec<NodeHandle> = nodes.iter().map(Node::handle).collect();
        for _ in 0..100 {
            if handles.iter().all(|h| h.connected_peers() == 2) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(handles.iter().all(|h| h.connected_peers() == 2), "every node connected to both peers");
        for g in 0..8 {
            let first = write(&handles, GroupId(g), b"one").await.expect("first write commits");
            let second = write(&handles, GroupId(g), b"two").await.expect("second write commits");
            assert_eq!((first, second), (Op(2), Op(4)), "{g}");
        }
        for node in nodes {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn v2_v3_v4_failover_then_restart_and_catch_up() {
    let dir = temp_dir("cluster-failover");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let mut nodes: Vec<Option<Node>> = (0..3).map(|i| Some(start_node(i, &addresses, &dir, 6))).collect();
        let handles: Vec<NodeHandle> = nodes.iter().flatten().map(Node::handle).collect();
        for g in 0..6 {
            write(&handles, GroupId(g), b"before").await.expect("write before the crash");
        }
        // Node 1 is the view-0 primary of groups 0 and 3: stop it like a crash.
        if let Some(node) = nodes[0].take() {
            node.stop();
        }
        let started = std::time::Instant::now();
        let survivors = &handles[1..];
        for g in 0..6 {
            let op = write(survivors, GroupId(g), b"after").await.expect("the group fails over and commits");
            assert_eq!(op, Op(4), "{g}: the write before the crash was kept");
        }
        let failover = started.elapsed();
        assert!(failover < Duration::from_secs(10), "failover took {failover:?}");
        // Restart node 1 from its data directory: it recovers and catches up.
        nodes[0] = Some(start_node(0, &addresses, &dir, 6));
        let restarted = nodes[0].as_ref().map(Node::handle).expect("restarted");
        let all = vec![restarted.clone(), handles[1].clone(), handles[2].clone()];
        for g in 0..6 {
            let op = write(&all, GroupId(g), b"third").await.expect("writes go on with the restarted node");
            assert_eq!(op, Op(6), "{g}");
        }
        for node in nodes.into_iter().flatten() {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

async fn http_get(address: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect to admin");
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("response");
    response
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|line| line.starts_with(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

#[test]
fn r19_r32_metrics_endpoint_serves_heartbeat_counters() {
    let dir = temp_dir("cluster-metrics");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let nodes: Vec<Node> = (0..3).map(|i| start_node_with_admin(i, &addresses, &dir, 6)).collect();
        let handles: Vec<NodeHandle> = nodes.iter().map(Node::handle).collect();
        for g in 0..6 {
            write(&handles, GroupId(g), b"x").await.expect("write");
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let admin = nodes[0].admin_address().expect("admin bound");
        let text = http_get(admin, "/metrics").await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        for name in [
            "cohort_commit_batches_sent_total",
            "cohort_commit_entries_sent_total",
            "cohort_reply_batches_received_total",
            "cohort_reply_entries_received_total",
        ] {
            assert!(metric(&text, name) > 0, "{name} is counted:\n{text}");
        }
        assert!(
            metric(&text, "cohort_commit_batches_sent_total") < metric(&text, "cohort_commit_entries_sent_total"),
            "batches carry several entries"
        );
        assert!(text.contains("cohort_peers_connected 2"), "{text}");
        assert!(http_get(admin, "/health").await.starts_with("HTTP/1.1 200"));
        for node in nodes {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Connect to `address`, send `frames`; true if the node closed the connection.
/// Dial `address` as node 2 would (preamble, TLS with node 2's certificate
/// from `dir`), send `frames`, and say whether the node closed the connection.
async fn send_raw(address: SocketAddr, dir: &std::path::Path, frames: &[cohort_messages::EncodedFrame]) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(address).await.expect("connect");
    let preamble = cohort_messages::Preamble::new(0, cohort_messages::LinkMode::Tls).encode();
    tcp.write_all(&preamble).await.expect("preamble");
    let credentials = cohort_runtime::tls::Credentials::load(&tls_of(dir, NodeId(2))).expect("node 2's certificate");
    let config = cohort_runtime::tls::client_config(&credentials).expect("TLS");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls_pki_types::ServerName::try_from("node-1.cohort").expect("a name");
    let mut stream = connector.connect(name, tcp).await.expect("TLS handshake");
    for frame in frames {
        stream.write_all(&frame.to_bytes()).await.expect("write");
    }
    stream.flush().await.expect("flush");
    let mut buffer = [0u8; 16];
    matches!(tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buffer)).await, Ok(Ok(0)) | Ok(Err(_)))
}

fn handshake(cluster: ClusterId, revision: u16) -> cohort_messages::EncodedFrame {
    handshake_from(NodeId(2), cluster, revision)
}

fn handshake_from(node: NodeId, cluster: ClusterId, revision: u16) -> cohort_messages::EncodedFrame {
    handshake_with_shards(node, cluster, revision, 2)
}

/// A Handshake claiming `shard_count` shards (the nodes here run 2).
fn handshake_with_shards(
    node: NodeId,
    cluster: ClusterId,
    revision: u16,
    shard_count: u16,
) -> cohort_messages::EncodedFrame {
    use cohort_messages::{Command, Handshake, Header, Message, TraceContext};
    let body = Message::Handshake(Handshake { revision, cluster, node, shard_count }).encode_body();
    let mut header = Header::new(cluster, node, Command::Handshake, TraceContext::NONE);
    header.revision = revision;
    cohort_messages::EncodedFrame::new(header, body)
}

#[test]
fn r18_wrong_cluster_or_revision_1_is_refused_and_r15_bad_frames_are_dropped() {
    let dir = temp_dir("cluster-r18");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let node = start_node(0, &addresses, &dir, 1);
        let address = node.listen_address();
        let handle = node.handle();
        assert!(send_raw(address, &dir, &[handshake(ClusterId(0xBAD), 2)]).await, "foreign cluster: connection closed");
        assert!(send_raw(address, &dir, &[handshake(CLUSTER, 1)]).await, "revision 1: connection closed");
        assert!(
            send_raw(address, &dir, &[handshake_from(NodeId(9), CLUSTER, 2)]).await,
            "unknown node: connection closed"
        );
        let other_shards = handshake_with_shards(NodeId(2), CLUSTER, 2, 3);
        assert!(send_raw(address, &dir, &[other_shards]).await, "another shard count: connection closed");
        assert_eq!(handle.inbound_stats().handshakes_refused.load(std::sync::atomic::Ordering::Relaxed), 4);
        // A good handshake, then a frame whose body was damaged on the way:
        // the frame is dropped and counted, the connection stays open.
        let mut damaged = cohort_messages::Message::Handshake(cohort_messages::Handshake {
            revision: 2,
            cluster: CLUSTER,
            node: NodeId(2),
            shard_count: 2,
        })
        .encode(CLUSTER, NodeId(2), cohort_messages::TraceContext::NONE);
        let mut body = damaged.body.to_vec();
        body[0] ^= 0x40;
        damaged.body = Bytes::from(body);
        let closed = send_raw(address, &dir, &[handshake(CLUSTER, 2), damaged]).await;
        assert!(!closed, "a bad body checksum drops the frame, not the connection");
        assert!(handle.inbound_stats().frames_rejected.load(std::sync::atomic::Ordering::Relaxed) >= 1);
        node.stop();
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_supervisor_restarts_a_crashed_outbox_and_shard_and_traffic_resumes() {
    use cohort_runtime::node::InjectFault;
    let dir = temp_dir("cluster-supervisor");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let nodes: Vec<Node> = (0..3).map(|i| start_node(i, &addresses, &dir, 6)).collect();
        let handles: Vec<NodeHandle> = nodes.iter().map(Node::handle).collect();
        for g in 0..6 {
            write(&handles, GroupId(g), b"one").await.expect("write before the faults");
        }
        // Every outbox of node 1 panics, then one of its shards.
        for shard in 0..2 {
            for peer in [NodeId(2), NodeId(3)] {
                handles[0].inject_fault(InjectFault::Outbox { shard, peer });
            }
        }
        handles[0].inject_fault(InjectFault::Shard { shard: 0 });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while handles[0].restarts() < 5 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(handles[0].restarts() >= 5, "four outboxes and a shard restarted, got {}", handles[0].restarts());
        for g in 0..6 {
            let op = write(&handles, GroupId(g), b"two").await.expect("traffic resumes after the restarts");
            assert_eq!(op, Op(4), "{g}: the restarted shard recovered its log");
        }
        for node in nodes {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// R20, R24: an idle group heartbeats only on the send ticks that line up
/// with its interval. A shard thread busy past such a tick runs it late
/// instead of jumping over it, so the primary's backups still answer within
/// its quorum window and no group changes view.
#[test]
fn r20_r24_an_idle_primary_whose_thread_stalls_past_its_send_ticks_keeps_its_window() {
    use cohort_runtime::node::InjectFault;
    let dir = temp_dir("cluster-stalls");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let nodes: Vec<Node> = (0..3).map(|i| start_node(i, &addresses, &dir, 3)).collect();
        let handles: Vec<NodeHandle> = nodes.iter().map(Node::handle).collect();
        for g in 0..3 {
            write(&handles, GroupId(g), b"one").await.expect("write before the stalls");
        }
        // Idle after one heartbeat timeout (2 s) without a new commit point.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut before = 0;
        for handle in &handles {
            before += handle.report().await.metrics.view_changes_started;
        }
        // Node 1 leads group 0: its shards are blocked 450 ms of every 530
        // for four quorum windows (the idle interval is 500 ms, the window 2 s).
        for _ in 0..16 {
            for shard in 0..2 {
                handles[0].inject_fault(InjectFault::StallShard { shard, stall_ms: 450 });
            }
            tokio::time::sleep(Duration::from_millis(530)).await;
        }
        let mut after = 0;
        for handle in &handles {
            after += handle.report().await.metrics.view_changes_started;
        }
        assert!(handles[0].metrics().ticks_late() > 0, "the stalls made node 1's shards run ticks late");
        assert_eq!(after, before, "no view change: every idle heartbeat left, late, and was answered");
        for g in 0..3 {
            let op = write(&handles, GroupId(g), b"two").await.expect("write after the stalls");
            assert_eq!(op, Op(4), "{g}: the same primary's log goes on");
        }
        for node in nodes {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Group actors alive on a node (its two shards), as last counted.
fn group_actors(handle: &NodeHandle) -> u64 {
    (0..2).map(|shard| handle.metrics().group_actors(shard)).sum()
}

/// Wait up to `timeout` for `done`, checking every 100 ms.
async fn eventually(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

/// Z1: a group written once does not keep its group actor. One nobody
/// calls or follows retires within two sweeps (a sweep every
/// `commit_idle_heartbeat_timeout`, 2 s here); a subscribed group keeps its
/// actor, and callers of retired groups are answered through new ones.
#[test]
fn z1_idle_group_actors_retire_and_later_callers_are_answered() {
    use cohort_runtime::group::GroupEvent;
    let dir = temp_dir("cluster-z1-retire");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let nodes: Vec<Node> = (0..3).map(|i| start_node(i, &addresses, &dir, 6)).collect();
        let handles: Vec<NodeHandle> = nodes.iter().map(Node::handle).collect();
        for g in 0..6 {
            assert_eq!(write(&handles, GroupId(g), b"one").await.expect("first write"), Op(2), "{g}");
        }
        let all = |handles: &[NodeHandle]| handles.iter().map(group_actors).collect::<Vec<_>>();
        assert!(
            eventually(Duration::from_secs(3), || all(&handles).iter().sum::<u64>() >= 6).await,
            "every group answered its caller through an actor: {:?}",
            all(&handles)
        );
        // Node 2 is a backup of group 0 and follows it.
        let mut events = handles[1].subscribe(GroupId(0)).await.expect("group 0 is hosted on node 2");
        assert!(
            eventually(Duration::from_secs(10), || all(&handles) == [0, 1, 0]).await,
            "only the followed group keeps its actor: {:?}",
            all(&handles)
        );
        // Callers come back to retired groups, some while a sweep may be
        // asking their actors; every one is answered.
        for round in 0..3u64 {
            for g in 0..6 {
                let op = write(&handles, GroupId(g), b"again").await.expect("a write to a retired group's actor");
                assert_eq!(op, Op(4 + 2 * round), "{g}");
            }
            tokio::time::sleep(Duration::from_millis(700 * round)).await;
        }
        let committed = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                match events.recv().await {
                    Some(GroupEvent::Committed { op, .. }) if op == Op(8) => return op,
                    Some(_) => {}
                    None => panic!("the subscription ended"),
                }
            }
        })
        .await
        .expect("the follower of group 0 heard every commit");
        assert_eq!(committed, Op(8));
        drop(events);
        assert!(
            eventually(Duration::from_secs(10), || all(&handles) == [0, 0, 0]).await,
            "a group whose subscriber went away retires its actor too: {:?}",
            all(&handles)
        );
        for node in nodes {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn group_actors_report_typed_roles_and_commits_to_subscribers() {
    use cohort_runtime::group::{GroupEvent, GroupRole};
    let dir = temp_dir("cluster-group-actors");
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses = free_addresses(3);
        let mut nodes: Vec<Option<Node>> = (0..3).map(|i| Some(start_node(i, &addresses, &dir, 3))).collect();
        let handles: Vec<NodeHandle> = nodes.iter().flatten().map(Node::handle).collect();
        // Group 0's members are nodes 1, 2, 3: node 1 leads view 0, once
        // every member has heard the others (H1: each started on a new
        // disk, so each recovers first); a write waits for that.
        write(&handles, GroupId(0), b"started").await.expect("the group started");
        let mut events = Vec::new();
        for handle in &handles {
            events.push(handle.subscribe(GroupId(0)).await.expect("group 0 is hosted everywhere"));
        }
        let first = |event: Option<GroupEvent>| match event {
            Some(GroupEvent::Role { role, .. }) => role,
            other => panic!("the current role comes first, got {other:?}"),
        };
        assert_eq!(first(events[0].recv().await), GroupRole::Primary(View(0)));
        assert_eq!(first(events[1].recv().await), GroupRole::Backup(View(0)));
        write(&handles, GroupId(0), b"x").await.expect("write");
        let committed = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                if let Some(GroupEvent::Committed { op, .. }) = events[1].recv().await {
                    return op;
                }
            }
        })
        .await
        .expect("a backup hears the commit");
        // The first write's op (its registration took op 1), which the
        // backup learns is committed only after it subscribed.
        assert_eq!(committed, Op(2));
        // The primary's node dies: node 2 becomes primary of a later view.
        if let Some(node) = nodes[0].take() {
            node.stop();
        }
        let became_primary = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(GroupEvent::Role { role: GroupRole::Primary(view), .. }) = events[1].recv().await {
                    return view;
                }
            }
        })
        .await
        .expect("node 2 hears that it became primary");
        assert!(became_primary > View(0));
        for node in nodes.into_iter().flatten() {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
