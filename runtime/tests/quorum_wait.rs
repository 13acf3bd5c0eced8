//! Q1/Q2 on real nodes: a host waits on the primary until a quorum of a
//! group's members durably hold an op, with a timeout, a cancellation and
//! typed errors that name the quorum, the acks collected and the time
//! waited. Three real nodes in one process (loopback mTLS, WAL files).

use std::time::Duration;

use cohort_runtime::prelude::*;

const G: GroupId = GroupId(0);

/// The node that leads `group` now, once one does.
async fn primary_of(cluster: &LocalCluster, group: GroupId) -> NodeHandle {
    for _ in 0..300 {
        for handle in cluster.handles() {
            if handle.report().await.primaries.contains(&group) {
                return handle;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{group} has no primary");
}

#[test]
fn q1_q2_a_host_waits_for_a_quorum_with_timeout_cancellation_and_typed_errors() {
    actix_rt::System::new().block_on(async {
        let mut cluster = LocalCluster::builder(3)
            .group_kind("register", |_| Box::new(Register::default()))
            .groups("register", [G])
            .start()
            .expect("cluster starts");
        let client = cluster.client().timeout(Duration::from_secs(20));
        let first = client.write(G, "a").await.expect("a write commits");
        let primary = primary_of(&cluster, G).await;

        // Q1: every member holds the op soon after it commits; a member that
        // already holds it counts at once.
        primary.wait_quorum(G, first.op, 3, Duration::from_secs(10)).await.expect("all three members hold it");
        primary.wait_quorum(G, first.op, 1, Duration::from_millis(100)).await.expect("the primary holds it");
        // The embedded client finds the primary among its nodes.
        client.wait_quorum(G, first.op, 3, Duration::from_secs(10)).await.expect("through the client");

        // More members than the group has, and a wait on a backup.
        let impossible = primary.wait_quorum(G, first.op, 4, Duration::from_secs(1)).await;
        assert_eq!(impossible, Err(WaitQuorumError::Impossible { group: G, quorum: 4, members: 3 }));
        let backup = cluster.handles().into_iter().find(|handle| handle.node() != primary.node()).expect("a backup");
        let on_backup = backup.wait_quorum(G, first.op, 2, Duration::from_secs(1)).await;
        assert_eq!(on_backup, Err(WaitQuorumError::NotPrimary { group: G, node: backup.node() }));

        // A backup down: a new op commits on two members and never reaches three.
        let down = cluster.handles().into_iter().map(|handle| handle.node()).find(|node| *node != primary.node());
        cluster.stop_node(down.expect("a backup"));
        let second = client.write(G, "b").await.expect("two of three commit");
        let timeout = primary.wait_quorum(G, second.op, 3, Duration::from_millis(300)).await;
        match timeout {
            Err(WaitQuorumError::Timeout { group, op, quorum, acks, waited }) => {
                assert_eq!((group, op, quorum, acks), (G, second.op, 3, 2));
                assert!(waited >= Duration::from_millis(300), "waited {waited:?}");
                let message = timeout.expect_err("a timeout").to_string();
                assert!(message.contains("couldn't wait for quorum 3") && message.contains("collected 2 acks"));
            }
            other => panic!("expected a timeout with 2 acks, got {other:?}"),
        }

        // Q2: a cancelled wait ends at once with the acks it collected.
        let wait = primary.start_quorum_wait(G, second.op, 3, Duration::from_secs(60)).await.expect("started");
        wait.cancel();
        let cancelled = tokio::time::timeout(Duration::from_secs(5), wait.result()).await.expect("ends at once");
        assert!(
            matches!(cancelled, Err(WaitQuorumError::Cancelled { quorum: 3, acks: 2, .. })),
            "expected a cancellation with 2 acks, got {cancelled:?}"
        );
        cluster.stop();
    });
}
