//! Three real nodes in one process: loopback TCP between them, real WAL files,
//! real actix actors.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use cohort_actors::core::{StateMachine, WriteMode};
use cohort_messages::{ClusterId, GroupId, Incarnation, NodeId, Op, RequestKind};
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

fn start_node(index: usize, addresses: &[SocketAddr], dir: &std::path::Path, groups: u64) -> Node {
    let node = NodeId(index as u64 + 1);
    let mut builder = NodeBuilder::new(CLUSTER, node)
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

/// Submit to the group's primary, following redirects.
async fn write(handles: &[NodeHandle], group: GroupId, value: &'static [u8]) -> Result<Op, SubmitError> {
    let mut target = 0;
    for _ in 0..20 {
        match handles[target].submit(group, RequestKind::Write, Bytes::from_static(value), Duration::from_secs(5)).await
        {
            Ok(committed) => return Ok(committed.op),
            Err(SubmitError::NotPrimary { primary: Some(primary), .. }) => target = (primary.0 - 1) as usize,
            Err(SubmitError::NotPrimary { primary: None, .. }) | Err(SubmitError::Refused { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                target = (target + 1) % handles.len();
            }
            Err(other) => return Err(other),
        }
    }
    Err(SubmitError::Timeout { group, waited: Duration::from_secs(0) })
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
