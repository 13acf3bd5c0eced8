//! D1 on real nodes: three cohort nodes in this process (loopback TCP,
//! mTLS, write-ahead logs on disk) host one group of the kv example's redb
//! store. A node restarted after thousands of writes does not rebuild the
//! state it has on disk: its store is never restored from a snapshot, and
//! it applies again only the ops above its last checkpoint (fewer than one
//! snapshot interval), and its store file holds the writes.

mod restart;

use cohort_examples::kv_store::{KvStore, put};
use cohort_runtime::prelude::*;
use restart::{SNAPSHOT_INTERVAL_OPS, restart_node_3};

#[actix_rt::test]
async fn d1_a_restarted_node_applies_only_what_lies_above_its_checkpoint() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let files = dir.path().to_path_buf();
    let open =
        move |node: NodeId, group| KvStore::open_or_empty(&files.join(format!("node-{}", node.0)).join("kv"), group);
    let key = |i: u64| format!("key-{i}");
    let restarted =
        restart_node_3(dir.path(), "kv", open, 3_000, |i| put(key(i).as_bytes(), b"value"), put(b"after", b"restart"))
            .await;
    assert_eq!(restarted.after.as_ref(), b"new", "the key written after the restart is new");
    assert_eq!(restarted.restores, 0, "D1: the restart restored no snapshot");
    assert!(
        restarted.replayed <= SNAPSHOT_INTERVAL_OPS + 1,
        "D1: the restart applied {} ops again, more than lie above a checkpoint",
        restarted.replayed
    );
    assert!(restarted.replayed > 0, "node 3 applied the write after its restart");
    // What node 3 keeps on disk holds the writes (through its last
    // checkpoint, at least the first snapshot interval's).
    let store = KvStore::open(&KvStore::path(&dir.path().join("node-3").join("kv"), GroupId(0))).expect("opens");
    assert_eq!(store.read(b"key-0").first(), Some(&1), "key-0 is in node 3's store");
}
