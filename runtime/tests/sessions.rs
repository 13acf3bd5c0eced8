//! Node sessions with the metadata group in real nodes (S1, S3): every node
//! of a local cluster (real TCP, real files, real actors) runs the metadata
//! group and its metadata agent.

use std::time::{Duration, Instant};

use cohort_runtime::config::{ExpiredPolicyName, SessionConfig};
use cohort_runtime::prelude::*;

fn fast_sessions(policy: ExpiredPolicyName) -> SessionConfig {
    SessionConfig {
        session_timeout_ms: 1000,
        session_keepalive_interval_ms: 200,
        session_expired_policy: policy,
        session_reconnect_attempts: 3,
        session_reconnect_backoff_ms: 1000,
    }
}

async fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

#[actix_rt::test]
async fn s1_nodes_hold_sessions() {
    let cluster = LocalCluster::builder(3)
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", (0..3).map(GroupId))
        .session_config(fast_sessions(ExpiredPolicyName::Reconnect))
        .start()
        .expect("cluster starts");
    let handles = cluster.handles();
    // Every node opens a session, and every node's copy of the metadata shows
    // all three sessions, the three groups and an owner for each: the node
    // whose replica is primary, in its view (S4 re-own after the session).
    let all_owned = wait_until(Duration::from_secs(15), || {
        handles.iter().all(|handle| {
            let metadata = handle.metadata();
            handle.session().is_some()
                && metadata.nodes.len() == 3
                && metadata.nodes.values().all(|record| record.session.is_some())
                && (0..3).all(|g| metadata.groups.get(&GroupId(g)).is_some_and(|group| group.owner.is_some()))
        })
    })
    .await;
    let statuses: Vec<String> = handles.iter().map(|handle| handle.status().to_string()).collect();
    assert!(all_owned, "sessions and owners within 15 s: {statuses:#?}");
    for handle in &handles {
        let metadata = handle.metadata();
        let session = handle.session().expect("a session");
        assert_eq!(metadata.nodes[&handle.node()].session, Some(session), "{}", handle.node());
    }
    // Each owner record names the node that leads the group now.
    let mut primaries = std::collections::BTreeMap::new();
    for handle in &handles {
        for group in handle.report().await.primaries {
            primaries.insert(group, handle.node());
        }
    }
    let metadata = handles[0].metadata();
    for g in 0..3 {
        let owner = metadata.groups[&GroupId(g)].owner.expect("owned");
        assert_eq!(Some(&owner.node), primaries.get(&GroupId(g)), "group {g}: the owner is its primary");
    }
    let status = handles[0].status();
    assert!(status.operations.is_empty(), "{status}");
    assert!(status.sessions.opened >= 1, "{status}");
}

#[actix_rt::test]
async fn s1_s2_a_silent_node_session_expires() {
    let mut cluster = LocalCluster::builder(3)
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [GroupId(0)])
        .session_config(fast_sessions(ExpiredPolicyName::Shutdown))
        .start()
        .expect("cluster starts");
    let handles = cluster.handles();
    let opened = wait_until(Duration::from_secs(15), || {
        handles.iter().all(|handle| handle.metadata().nodes.values().filter(|r| r.session.is_some()).count() == 3)
    })
    .await;
    assert!(opened, "every node holds a session");
    // Node 3 goes silent (stopped as in a crash): the metadata primary
    // expires its session after session_timeout, through the log (S1, S2).
    // The S3 policy on a live node is checked with real processes
    // (processes.rs: s3_shutdown_policy_stops_node).
    let victim = handles[2].clone();
    let session = victim.session().expect("node 3 has a session");
    cluster.stop_node(NodeId(3));
    let expired = wait_until(Duration::from_secs(10), || {
        handles[0].metadata().nodes.get(&NodeId(3)).is_some_and(|record| record.session != Some(session))
    })
    .await;
    assert!(expired, "node 3's session expired in the metadata: {}", handles[0].status());
    let _ = victim;
}

/// Z5: in a cluster of seven, nodes 6 and 7 are past the metadata group's
/// five voters. Each hosts a learner replica of it, which follows the log
/// into the node's copy of the metadata: the same state as a voter's. A
/// learner that was down recovers its replica and catches up on the events
/// it missed.
#[actix_rt::test]
async fn z5_nodes_past_the_metadata_voters_follow_its_log_as_learners() {
    let (learner, other_learner) = (NodeId(7), NodeId(6));
    let mut cluster = LocalCluster::builder(7)
        .group_kind("register", |_| Box::new(Register::default()))
        .group(GroupPlacement::new(GroupId(0), vec![learner, other_learner, NodeId(1)]).kind("register"))
        .group(GroupPlacement::new(GroupId(1), vec![other_learner, NodeId(2), NodeId(3)]).kind("register"))
        .session_config(fast_sessions(ExpiredPolicyName::Reconnect))
        .start()
        .expect("cluster starts");
    let handles = cluster.handles();
    let voter = handles[0].clone();
    for handle in &handles {
        let status = handle.status();
        assert_eq!(status.metadata_members, (1..=5).map(NodeId).collect::<Vec<_>>(), "{status}");
        assert_eq!(status.metadata_learners, [NodeId(6), NodeId(7)], "{status}");
        assert!(handle.subscribe(GroupId::METADATA).await.is_some(), "{} hosts a metadata replica", handle.node());
    }
    // Every session open and both groups owned, on the learners as on a voter.
    let settled = |handles: &[NodeHandle]| {
        handles.iter().all(|handle| {
            let metadata = handle.metadata();
            metadata.nodes.len() == 7
                && metadata.nodes.values().all(|record| record.session.is_some())
                && (0..2).all(|g| metadata.groups.get(&GroupId(g)).is_some_and(|group| group.owner.is_some()))
        })
    };
    let all_settled = wait_until(Duration::from_secs(20), || settled(&handles)).await;
    assert!(all_settled, "sessions and owners on every node: {:#?}", handles[6].status());
    // A learner's copy is the voters' state, not a summary of it: once both
    // reach the same epoch they are equal.
    let same_state = |handle: &NodeHandle| {
        let (ours, theirs) = (handle.metadata(), voter.metadata());
        ours.epoch == theirs.epoch && ours == theirs
    };
    let followed = wait_until(Duration::from_secs(10), || same_state(&handles[5]) && same_state(&handles[6])).await;
    assert!(followed, "the learners' metadata equals a voter's: {:?} vs {:?}", handles[6].metadata(), voter.metadata());

    // Node 7 goes down; its session expires while it is away (an event it
    // misses), and it comes back from its data directory.
    let session = handles[6].session().expect("node 7 holds a session");
    cluster.stop_node(learner);
    let expired = wait_until(Duration::from_secs(10), || {
        voter.metadata().nodes.get(&learner).is_some_and(|record| record.session != Some(session))
    })
    .await;
    assert!(expired, "node 7's session expired while it was down: {}", voter.status());
    let missed = voter.metadata().epoch;
    cluster.restart_node(learner).expect("node 7 restarts");
    let restarted = cluster.handle(learner).expect("node 7 runs");
    let caught_up = wait_until(Duration::from_secs(20), || {
        let metadata = restarted.metadata();
        metadata.epoch >= missed
            && metadata.nodes.get(&learner).is_some_and(|record| record.session.is_some_and(|s| s != session))
    })
    .await;
    assert!(caught_up, "node 7 caught up past epoch {missed} with a new session: {}", restarted.status());
    let followed = wait_until(Duration::from_secs(10), || same_state(&restarted)).await;
    assert!(followed, "the restarted learner's metadata equals a voter's");
}
