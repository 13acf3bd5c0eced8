//! D1 on real nodes: three cohort nodes in this process (loopback TCP,
//! mTLS, write-ahead logs on disk) host one partition of the log example's
//! segment store. A node restarted after thousands of appends does not
//! rebuild the partition it has on disk: its store is never restored from
//! a snapshot, it applies again only the ops above its last checkpoint
//! (fewer than one snapshot interval), and its segment files hold the
//! messages.

mod restart;

use cohort_runtime::log_store::{Answer, LogStore, LogStoreConfig, decode_answer, fetch};
use cohort_runtime::prelude::*;
use restart::{SNAPSHOT_INTERVAL_OPS, restart_node_3};

const MESSAGES: u64 = 3_000;
/// Small segments, so that the partition spans several files.
const CONFIG: LogStoreConfig = LogStoreConfig { segment_size_max_bytes: 4 * 1024, retention_bytes: 1 << 30 };

fn message(i: u64) -> String {
    format!("message-{i}")
}

#[actix_rt::test]
async fn d1_a_restarted_node_re_applies_only_the_messages_above_its_checkpoint() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let files = dir.path().to_path_buf();
    let open = move |node: NodeId, group| {
        LogStore::open_or_empty(&files.join(format!("node-{}", node.0)).join("log"), group, CONFIG)
    };
    let after = Bytes::from_static(b"after the restart");
    let restarted = restart_node_3(dir.path(), "partition", open, MESSAGES, |i| message(i).into(), after).await;
    assert_eq!(restarted.after.as_ref(), MESSAGES.to_le_bytes(), "offsets go on after the restart");
    assert_eq!(restarted.restores, 0, "D1: the restart restored no snapshot");
    assert!(
        restarted.replayed <= SNAPSHOT_INTERVAL_OPS + 1,
        "D1: the restart applied {} ops again, more than lie above a checkpoint",
        restarted.replayed
    );
    assert!(restarted.replayed > 0, "node 3 applied the append after its restart");
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
