//! D1 on real nodes: three cohort nodes in this process (loopback TCP,
//! mTLS, write-ahead logs on disk) host one partition of the log example's
//! segment store. A node restarted after thousands of appends does not
//! rebuild the partition it has on disk: its store is never restored from
//! a snapshot, it applies again only the ops above its last checkpoint
//! (fewer than one snapshot interval), and its segment files hold the
//! messages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cohort_examples::log_store::{Answer, LogStore, LogStoreConfig, decode_answer, fetch};
use cohort_runtime::prelude::*;

/// What the restarted node's store did.
#[derive(Default)]
struct Calls {
    applies: AtomicU64,
    restores: AtomicU64,
}

/// The store, with its applies and restores counted.
struct Counted {
    store: LogStore,
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

const MESSAGES: u64 = 3_000;
/// cohort's default `snapshot_interval_ops`.
const SNAPSHOT_INTERVAL_OPS: u64 = 1_024;
/// Small segments, so that the partition spans several files.
const CONFIG: LogStoreConfig = LogStoreConfig { segment_size_max_bytes: 4 * 1024, retention_bytes: 1 << 30 };

fn message(i: u64) -> String {
    format!("message-{i}")
}

#[actix_rt::test]
async fn d1_a_restarted_node_re_applies_only_the_messages_above_its_checkpoint() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let files = dir.path().to_path_buf();
    let calls: Arc<Vec<Arc<Calls>>> = Arc::new((0..3).map(|_| Arc::new(Calls::default())).collect());
    let counted = Arc::clone(&calls);
    let mut cluster = LocalCluster::builder(3)
        .data_dir(dir.path())
        .cluster_config(LocalCluster::fast_timing())
        .group_kind_per_node("partition", move |node, group| {
            let store = LogStore::open_or_empty(&files.join(format!("node-{}", node.0)).join("log"), group, CONFIG);
            Box::new(Counted { store, calls: Arc::clone(&counted[node.0 as usize - 1]) })
        })
        .groups("partition", [GroupId(0)])
        .start()
        .expect("the cluster starts");
    assert!(cluster.wait_connected(Duration::from_secs(20)).await, "the nodes connect");
    let client = cluster.client();
    for i in 0..MESSAGES {
        client.write(GroupId(0), message(i)).await.expect("the append commits");
    }
    // Every member applied every message before the restart.
    let applied = |node: usize| calls[node].applies.load(Ordering::Relaxed);
    for _ in 0..200 {
        if (0..3).all(|node| applied(node) >= MESSAGES) {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert!((0..3).all(|node| applied(node) >= MESSAGES), "every member applied every message");
    // Node 3 restarts from its disk.
    cluster.stop_node(NodeId(3));
    let restarted = &calls[2];
    restarted.applies.store(0, Ordering::Relaxed);
    cluster.restart_node(NodeId(3)).expect("node 3 restarts");
    // It serves again: an append after the restart commits at the next
    // offset, and node 3 applies it.
    let written = client.write(GroupId(0), "after the restart").await.expect("an append after the restart commits");
    assert_eq!(written.result.as_ref(), MESSAGES.to_le_bytes(), "offsets go on");
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
    assert!(replayed > 0, "node 3 applied the append after its restart");
    cluster.stop();
    // What node 3 keeps on disk holds the messages, in several segment
    // files (through its last checkpoint, at least the first snapshot
    // interval's).
    let path = LogStore::path(&dir.path().join("node-3").join("log"), GroupId(0));
    let store = LogStore::open(&path, CONFIG).expect("opens");
    assert!(store.next() >= SNAPSHOT_INTERVAL_OPS, "{} messages checkpointed", store.next());
    assert!(store.segment_count() > 1, "several segments");
    let segments = std::fs::read_dir(store.segments_dir()).expect("segments").count();
    assert_eq!(segments, store.segment_count(), "one file per segment");
    for offset in [0, 500, SNAPSHOT_INTERVAL_OPS - 1] {
        let answer = decode_answer(&store.read(&fetch(offset, 1))).expect("an answer");
        assert_eq!(answer, Answer::Messages(vec![Bytes::from(message(offset))]), "offset {offset}");
    }
}
