//! What the D1 restart tests share: three cohort nodes in this process
//! (loopback TCP, mTLS, write-ahead logs on disk) host group 0 of a state
//! machine on disk, take a few thousand writes, and node 3 restarts from
//! its disk; the test then reads what the restart cost and what the files
//! hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cohort_runtime::prelude::*;

/// cohort's default `snapshot_interval_ops`: a restart applies again at
/// most this many ops (those above the last checkpoint), and one more
/// written after it.
pub const SNAPSHOT_INTERVAL_OPS: u64 = 1_024;

/// What a node's state machine did.
#[derive(Default)]
struct Calls {
    applies: AtomicU64,
    restores: AtomicU64,
}

/// A state machine, with its applies and restores counted.
struct Counted<S> {
    inner: S,
    calls: Arc<Calls>,
}

impl<S: StateMachine> StateMachine for Counted<S> {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.calls.applies.fetch_add(1, Ordering::Relaxed);
        self.inner.apply(op, operation)
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.inner.read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.inner.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.calls.restores.fetch_add(1, Ordering::Relaxed);
        self.inner.restore(snapshot)
    }

    fn durability(&self) -> Durability {
        self.inner.durability()
    }

    fn apply_off_shard(&self) -> bool {
        self.inner.apply_off_shard()
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.inner.checkpoint(record)
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.inner.checkpointed()
    }

    fn clear(&mut self) -> Result<(), String> {
        self.inner.clear()
    }
}

/// What node 3's restart cost.
pub struct Restarted {
    /// Snapshots its state machine was restored from.
    pub restores: u64,
    /// Ops it applied after the restart (the write after it included).
    pub replayed: u64,
    /// The result of the write after the restart.
    pub after: Bytes,
}

/// Host group 0 of `kind` on three nodes keeping their data under `dir`
/// (node N's state machines made by `open(N, group)`), write `operation(i)`
/// for i below `writes`, wait until every member applied them, restart
/// node 3, write `after`, and wait until node 3 applies it.
pub async fn restart_node_3<S: StateMachine + 'static>(
    dir: &std::path::Path,
    kind: &'static str,
    open: impl Fn(NodeId, GroupId) -> S + Send + Sync + 'static,
    writes: u64,
    operation: impl Fn(u64) -> Bytes,
    after: Bytes,
) -> Restarted {
    let calls: Arc<Vec<Arc<Calls>>> = Arc::new((0..3).map(|_| Arc::new(Calls::default())).collect());
    let counted = Arc::clone(&calls);
    let mut cluster = LocalCluster::builder(3)
        .data_dir(dir)
        .cluster_config(LocalCluster::fast_timing())
        .group_kind_per_node(kind, move |node, group| {
            Box::new(Counted { inner: open(node, group), calls: Arc::clone(&counted[node.0 as usize - 1]) })
        })
        .groups(kind, [GroupId(0)])
        .start()
        .expect("the cluster starts");
    assert!(cluster.wait_connected(Duration::from_secs(20)).await, "the nodes connect");
    let client = cluster.client();
    for i in 0..writes {
        client.write(GroupId(0), operation(i)).await.expect("the write commits");
    }
    let applied = |node: usize| calls[node].applies.load(Ordering::Relaxed);
    // A liveness bound, not a speed one: 30 s (it took past 10 s once in CI
    // with builds and simulator sweeps beside it; 5-9 s alone or beside two).
    for _ in 0..600 {
        if (0..3).all(|node| applied(node) >= writes) {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert!((0..3).all(|node| applied(node) >= writes), "every member applied every write");
    cluster.stop_node(NodeId(3));
    let restarted = &calls[2];
    restarted.applies.store(0, Ordering::Relaxed);
    cluster.restart_node(NodeId(3)).expect("node 3 restarts");
    let written = client.write(GroupId(0), after).await.expect("a write after the restart commits");
    for _ in 0..400 {
        if restarted.applies.load(Ordering::Relaxed) > 0 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    let restarted = Restarted {
        restores: restarted.restores.load(Ordering::Relaxed),
        replayed: restarted.applies.load(Ordering::Relaxed),
        after: written.result,
    };
    cluster.stop();
    restarted
}
