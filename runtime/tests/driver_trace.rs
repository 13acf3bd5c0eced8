//! One driver for the node and the simulator, held to it on a real run.
//!
//! Three real nodes (actix actors, loopback mTLS, WAL files with fsync)
//! take writes, lose a node, elect new primaries and take a restarted node
//! back. Every shard records each call its actor made on its
//! `ShardDriver` (ticks with the clock's reading, routed peer frames,
//! submits, flush reports, link states, hosting changes) and each turn the
//! driver handed back to be carried out. Each recording is then replayed
//! through a driver built the way the simulator builds every shard, and
//! must give the very same turns, message for message. A shard actor that
//! moved its shard any other way than through the driver (a call on the
//! core the simulator never makes, an effect taken or routed by its own
//! rule) would make the replay diverge.

use std::time::Duration;

use cohort_actors::DriverRecording;
use cohort_core::driver::{Recorded, replay};
use cohort_core::metadata::MetadataStateMachine;
use cohort_core::{GroupSpec, StateMachine};
use cohort_runtime::prelude::*;

const SHARDS: usize = 2;
const GROUPS: u64 = 6;

/// Replay `recording` through a driver built as the simulator builds one;
/// the number of turns compared.
fn replayed_equals_recorded(name: &str, recording: &DriverRecording) -> usize {
    let limits = recording.driver.clone().expect("a driver's limits");
    let mut driver =
        cohort_sim::node::shard_driver(recording.node, recording.peers.iter().copied(), &recording.core, limits);
    let mut state_machine = |spec: &GroupSpec| -> Box<dyn StateMachine> {
        if spec.group == GroupId::METADATA {
            Box::new(MetadataStateMachine::default())
        } else {
            Box::new(Register::default())
        }
    };
    let replayed = replay(&mut driver, &recording.recorded, &mut state_machine);
    let recorded: Vec<_> = recording
        .recorded
        .iter()
        .filter_map(|entry| match entry {
            Recorded::Turn(turn) => Some(turn),
            Recorded::Input(_) => None,
        })
        .collect();
    assert_eq!(replayed.len(), recorded.len(), "{name}: one turn per recorded end of turn");
    let count = recorded.len();
    for (index, (replayed, recorded)) in replayed.iter().zip(&recorded).enumerate() {
        assert_eq!(replayed, *recorded, "{name}: turn {index} of {count} differs");
    }
    recorded.len()
}

#[test]
fn one_driver_a_real_nodes_shards_replay_to_the_same_turns_in_the_simulators_driver() {
    actix_rt::System::new().block_on(async {
        let mut cluster = LocalCluster::builder(3)
            .shards(SHARDS)
            .record_drivers()
            .group_kind("register", |_| Box::new(Register::default()))
            .groups("register", (0..GROUPS).map(GroupId))
            .start()
            .expect("cluster starts");
        let client = cluster.client().timeout(Duration::from_secs(30));
        for round in 0..5 {
            for group in 0..GROUPS {
                client.write(GroupId(group), format!("{round}")).await.expect("a write commits");
            }
        }
        // Every member of a new cluster starts recovering (H1) and ends
        // within a repair timeout, or, if it lent its vote to a later view
        // while the others went on without it, once its primary moved the
        // group up to that view (three heartbeat timeouts). One that has
        // not, when node 3 dies, holds its group (with node 3 down too, it
        // waits for node 3; see actors/core/tests/recovery.rs): kill node
        // 3 once none recovers.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for handle in cluster.handles() {
            while !handle.report().await.recovering.is_empty() {
                assert!(std::time::Instant::now() < deadline, "node {} still recovers a group", handle.node());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Node 3 dies: the groups it led elect new primaries, and writes go on.
        cluster.stop_node(NodeId(3));
        for group in 0..GROUPS {
            client.write(GroupId(group), "after").await.expect("a write commits after the failover");
        }
        // Node 1 restarts from its WAL: its new shards record from their recovery.
        cluster.stop_node(NodeId(1));
        cluster.restart_node(NodeId(1)).expect("node 1 restarts");
        cluster.restart_node(NodeId(3)).expect("node 3 restarts");
        // The restarted nodes have new handles: a client of them all.
        let client = cluster.client().timeout(Duration::from_secs(60));
        for group in 0..GROUPS {
            client.write(GroupId(group), "back").await.expect("a write commits with every node back");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut turns = 0;
        for handle in cluster.handles() {
            for shard in 0..SHARDS {
                let recording = handle.take_driver_recording(shard).await.expect("the shard runs");
                assert!(!recording.recorded.is_empty(), "node {} shard {shard} recorded", handle.node());
                turns += replayed_equals_recorded(&format!("node {} shard {shard}", handle.node()), &recording);
            }
        }
        assert!(turns > 100, "the run made turns to compare ({turns})");
        cluster.stop();
    });
}
