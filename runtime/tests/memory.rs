//! Z1 in heap bytes: a group written once and then left alone gives its
//! group actor back, and keeps only its data and what its storage tracks.
//!
//! This test binary counts live heap bytes with a counting allocator, so
//! what the allocator keeps for reuse (which RSS counts) does not hide what
//! the nodes freed. Three real nodes run in this process over loopback TCP.

use std::alloc::System;
use std::time::{Duration, Instant};

use cap::Cap;
use cohort_runtime::prelude::*;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

const NODES: usize = 3;
const GROUPS: u64 = 2_000;
const WRITERS: u64 = 64;

/// The local cluster's timing with a longer idle heartbeat timeout: the
/// shards sweep for idle group actors once per timeout, so every actor the
/// writes started is still alive when the writes end (the actor of a group
/// retires one to two sweeps after its last call).
fn timing() -> cohort_runtime::config::ClusterConfig {
    cohort_runtime::config::ClusterConfig {
        commit_idle_heartbeat_timeout: SWEEP_INTERVAL,
        ..LocalCluster::fast_timing()
    }
}

const SWEEP_INTERVAL: Duration = Duration::from_secs(8);

/// Wait up to `timeout` for `done`, checking every 100 ms.
async fn eventually(timeout: Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done().await
}

/// Group actors alive on the cluster's nodes (two shards each), as last counted.
fn group_actors(cluster: &LocalCluster) -> u64 {
    cluster.handles().iter().map(|handle| (0..2).map(|shard| handle.metrics().group_actors(shard)).sum::<u64>()).sum()
}

/// Live heap bytes once the nodes had a second to settle.
async fn settled_heap_bytes() -> usize {
    tokio::time::sleep(Duration::from_secs(1)).await;
    ALLOCATOR.allocated()
}

/// Write once to each of `groups`, by writers that go away afterwards.
async fn write_once(cluster: &LocalCluster, groups: std::ops::Range<u64>) {
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (client, groups) = (cluster.client(), groups.clone());
            actix_rt::spawn(async move {
                for group in groups.skip(writer as usize).step_by(WRITERS as usize) {
                    client.write(GroupId(group), "x").await.expect("the write commits");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("a writer finished");
    }
}

/// Live heap bytes with the written groups' actors alive, and once they
/// all retired (two sweeps at most).
async fn retired_heap_bytes(cluster: &LocalCluster) -> (usize, usize) {
    let written = settled_heap_bytes().await;
    let alive = group_actors(cluster);
    assert!(alive > 0, "the written groups' primaries answered through group actors");
    assert!(
        eventually(2 * SWEEP_INTERVAL + Duration::from_secs(3), async || group_actors(cluster) == 0).await,
        "every group actor retired: {} of {alive} alive",
        group_actors(cluster)
    );
    (written, settled_heap_bytes().await)
}

#[test]
fn z1_a_group_written_once_and_left_idle_gives_its_group_actor_back() {
    actix_rt::System::new().block_on(async {
        let cluster = LocalCluster::builder(NODES)
            .shards(2)
            .cluster_config(timing())
            .group_kind("register", |_| Box::new(Register::default()))
            .groups("register", (0..GROUPS).map(GroupId))
            .start()
            .expect("three nodes start");
        let led = eventually(Duration::from_secs(60), async || {
            let mut primaries = 0;
            for handle in cluster.handles() {
                primaries += handle.report().await.primaries.len();
            }
            primaries == GROUPS as usize
        })
        .await;
        assert!(led, "every group has a primary");
        let started = settled_heap_bytes().await;

        // Two halves: the first also grows what the nodes size once (link
        // buffers, the storage's maps); the second shows what a written
        // group keeps per replica.
        let (first, second) = (0..GROUPS / 2, GROUPS / 2..GROUPS);
        write_once(&cluster, first).await;
        let first_idle = retired_heap_bytes(&cluster).await.1;
        write_once(&cluster, second).await;
        let (written, idle) = retired_heap_bytes(&cluster).await;

        let half_replicas = (GROUPS / 2) as f64 * NODES as f64;
        let kept = (idle as f64 - first_idle as f64) / half_replicas;
        let given_back = (written as f64 - idle as f64) / (GROUPS / 2) as f64;
        let replicas = (GROUPS as f64 + 1.0) * NODES as f64;
        eprintln!(
            "z1 heap: {:.0} B per replica after start; a group written once and left idle keeps {kept:.0} B per \
             replica more; its retired actors gave back {given_back:.0} B per group",
            started as f64 / replicas
        );
        // Its snapshot (the state machine and the client table's entry),
        // the storage's cursor and deferred snapshot: about 500 B, and no
        // actor (an actor is 1 to 2 KB).
        assert!(kept < 768.0, "a written, idle group replica keeps only its data and bookkeeping: {kept:.0} B");
        assert!(given_back > 1024.0, "retired actors gave their task, mailbox and maps back: {given_back:.0} B");
        cluster.stop();
    });
}
