//! Three real nodes in one process: loopback TCP between them, real WAL files,
//! real actix actors.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use cohort_actors::core::{StateMachine, WriteMode};
use cohort_messages::{ClusterId, GroupId, Incarnation, NodeId, Op, RequestKind};
use cohort_runtime::config::ClusterConfig;
use cohort_runtime::node::{GroupPlacement, Node, NodeBuilder, NodeHandle, SubmitError};

const CLUSTER: ClusterId = ClusterId(0xC0_4087_7E57);

/// A register: a write stores the value and returns the previous one.
#[derive(Default)]
struct Register(Bytes);

impl StateMachine for Register {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        std::mem::replace(&mut self.0, Bytes::copy_from_slice(operation))
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        self.0.clone()
    }
    fn snapshot(&self) -> Bytes {
        self.0.clone()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = Bytes::copy_from_slice(snapshot);
        Ok(())
    }
}

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
    }
}

fn start_node(index: usize, addresses: &[SocketAddr], dir: &std::path::Path, groups: u64) -> Node {
    let node = NodeId(index as u64 + 1);
    let mut builder = NodeBuilder::new(CLUSTER, node)
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
        });
    }
    builder.start().expect("node starts")
}

/// Submit to the group's primary, following redirects, for up to 15 s.
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
            assert_eq!((first, second), (Op(1), Op(2)), "{g}");
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
            assert_eq!(op, Op(2), "{g}: the write before the crash was kept");
        }
        let failover = started.elapsed();
        assert!(failover < Duration::from_secs(10), "failover took {failover:?}");
        // Restart node 1 from its data directory: it recovers and catches up.
        nodes[0] = Some(start_node(0, &addresses, &dir, 6));
        let restarted = nodes[0].as_ref().map(Node::handle).expect("restarted");
        let all = vec![restarted.clone(), handles[1].clone(), handles[2].clone()];
        for g in 0..6 {
            let op = write(&all, GroupId(g), b"third").await.expect("writes go on with the restarted node");
            assert_eq!(op, Op(3), "{g}");
        }
        for node in nodes.into_iter().flatten() {
            node.stop();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
