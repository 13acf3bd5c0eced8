//! D1 on real nodes: three cohort nodes in this process (loopback TCP,
//! mTLS, write-ahead logs on disk) host one group of the kv example's redb
//! store. A node restarted after thousands of writes does not rebuild the
//! state it has on disk: its store is never restored from a snapshot, and
//! it applies again only the ops above its last checkpoint (fewer than one
//! snapshot interval), and its store file holds the writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cohort_examples::kv_store::{KvStore, put};
use cohort_runtime::prelude::*;

/// What the restarted node's store did.
#[derive(Default)]
struct Calls {
    applies: AtomicU64,
    restores: AtomicU64,
}

/// The store, with its applies and restores counted.
struct Counted {
    store: KvStore,
    calls: Arc<Calls>,
}

impl StateMachine for Counted {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.calls.applies.fetch_add(1, Ordering::Relaxed);
        self.store.apply(op, operation)
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.store.read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.store.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.calls.restores.fetch_add(1, Ordering::Relaxed);
        self.store.restore(snapshot)
    }

    fn durability(&self) -> Durability {
        self.store.durability()
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.store.checkpoint(record)
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.store.checkpointed()
    }

    fn clear(&mut self) -> Result<(), String> {
        self.store.clear()
    }
}

const WRITES: u64 = 3_000;
/// cohort's default `snapshot_interval_ops`.
const SNAPSHOT_INTERVAL_OPS: u64 = 1_024;

#[actix_rt::test]
async fn d1_a_restarted_node_applies_only_what_lies_above_its_checkpoint() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let files = dir.path().to_path_buf();
    let calls: Arc<Vec<Arc<Calls>>> = Arc::new((0..3).map(|_| Arc::new(Calls::default())).collect());
    let counted = Arc::clone(&calls);
    let mut cluster = LocalCluster::builder(3)
        .data_dir(dir.path())
        .cluster_config(LocalCluster::fast_timing())
        .group_kind_per_node("kv", move |node, group| {
            let store = KvStore::open_or_empty(&files.join(format!("node-{}", node.0)).join("kv"), group);
            Box::new(Counted { store, calls: Arc::clone(&counted[node.0 as usize - 1]) })
        })
        .groups("kv", [GroupId(0)])
        .start()
        .expect("the cluster starts");
    assert!(cluster.wait_connected(Duration::from_secs(20)).await, "the nodes connect");
    let client = cluster.client();
    for i in 0..WRITES {
        let key = format!("key-{i}");
        client.write(GroupId(0), put(key.as_bytes(), b"value")).await.expect("the write commits");
    }
    // Every member applied every write before the restart.
    let applied = |node: usize| calls[node].applies.load(Ordering::Relaxed);
    for _ in 0..200 {
        if (0..3).all(|node| applied(node) >= WRITES) {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert!((0..3).all(|node| applied(node) >= WRITES), "every member applied every write");
    // Node 3 restarts from its disk.
    cluster.stop_node(NodeId(3));
    let restarted = &calls[2];
    restarted.applies.store(0, Ordering::Relaxed);
    cluster.restart_node(NodeId(3)).expect("node 3 restarts");
    // It serves again: a write after the restart commits, and node 3
    // applies it.
    client.write(GroupId(0), put(b"after", b"restart")).await.expect("a write after the restart commits");
    for _ in 0..400 {
        if restarted.applies.load(Ordering::Relaxed) > 0 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    let replayed = restarted.applies.load(Ordering::Relaxed);
    assert_eq!(restarted.restores.load(Ordering::Relaxed), 0, "D1: the restart restored no snapshot");
    assert!(
        replayed <= SNAPSHOT_INTERVAL_OPS + 1,
        "D1: the restart applied {replayed} ops again, more than lie above a checkpoint"
    );
    assert!(replayed > 0, "node 3 applied the write after its restart");
    cluster.stop();
    // What node 3 keeps on disk holds the writes (through its last
    // checkpoint, at least the first snapshot interval's).
    let store = KvStore::open(&KvStore::path(&dir.path().join("node-3").join("kv"), GroupId(0))).expect("opens");
    assert_eq!(store.read(b"key-0").first(), Some(&1), "key-0 is in node 3's store");
}
