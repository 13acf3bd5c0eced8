//! The metadata state machine (M1, S1, S2, S4) and session expiry tracking.

use cohort_core::StateMachine;
use cohort_core::metadata::{Metadata, MetadataStateMachine, SessionTracker};
use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{Epoch, GroupId, Incarnation, NodeId, Op, SessionId, View};
use proptest::prelude::*;

fn register(metadata: &mut Metadata, epoch: u64, node: u64) {
    let result =
        metadata.apply(Epoch(epoch), MetadataCommand::RegisterNode { node: NodeId(node), address: format!("n{node}") });
    assert_eq!(result, MetadataResult::Done { epoch: Epoch(epoch) });
}

fn open(metadata: &mut Metadata, epoch: u64, node: u64) -> SessionId {
    match metadata.apply(Epoch(epoch), MetadataCommand::OpenSession { node: NodeId(node) }) {
        MetadataResult::SessionOpened { session, .. } => session,
        other => panic!("session not opened: {other:?}"),
    }
}

fn owner(metadata: &Metadata, group: u64) -> Option<NodeId> {
    metadata.groups.get(&GroupId(group)).and_then(|record| record.owner).map(|owner| owner.node)
}

#[test]
fn m1_every_change_is_a_numbered_epoch_and_nodes_ack_what_they_applied() {
    let mut metadata = Metadata::default();
    register(&mut metadata, 1, 1);
    register(&mut metadata, 2, 2);
    assert_eq!(metadata.epoch, Epoch(2));
    metadata.apply(Epoch(3), MetadataCommand::AckEpoch { node: NodeId(1), epoch: Epoch(3) });
    metadata.apply(Epoch(4), MetadataCommand::AckEpoch { node: NodeId(2), epoch: Epoch(2) });
    assert_eq!(metadata.acked_by(Epoch(3)), 1);
    assert_eq!(metadata.acked_by(Epoch(2)), 2);
    // An ack beyond the log is capped at the epoch it was applied at.
    metadata.apply(Epoch(5), MetadataCommand::AckEpoch { node: NodeId(2), epoch: Epoch(99) });
    assert_eq!(metadata.nodes[&NodeId(2)].acked, Epoch(5));
}

#[test]
fn recreated_group_gets_a_higher_incarnation() {
    let mut metadata = Metadata::default();
    register(&mut metadata, 1, 1);
    let create = || MetadataCommand::CreateGroup {
        group: GroupId(7),
        kind: "kv".into(),
        members: vec![NodeId(1)],
        replication: Default::default(),
    };
    assert_eq!(
        metadata.apply(Epoch(2), create()),
        MetadataResult::GroupCreated { incarnation: Incarnation(1), epoch: Epoch(2) }
    );
    assert!(matches!(metadata.apply(Epoch(3), create()), MetadataResult::Refused { .. }), "exists");
    metadata.apply(Epoch(4), MetadataCommand::DeleteGroup { group: GroupId(7) });
    assert_eq!(
        metadata.apply(Epoch(5), create()),
        MetadataResult::GroupCreated { incarnation: Incarnation(2), epoch: Epoch(5) }
    );
}

#[test]
fn s2_session_expiry_removes_the_nodes_ownership_records() {
    let mut metadata = Metadata::default();
    register(&mut metadata, 1, 1);
    register(&mut metadata, 2, 2);
    let session = open(&mut metadata, 3, 1);
    metadata.apply(
        Epoch(4),
        MetadataCommand::CreateGroup {
            group: GroupId(1),
            kind: "kv".into(),
            members: vec![NodeId(1), NodeId(2)],
            replication: Default::default(),
        },
    );
    let report = MetadataCommand::ReportOwnership {
        group: GroupId(1),
        incarnation: Incarnation(1),
        node: NodeId(1),
        session,
        view: View(0),
    };
    assert_eq!(metadata.apply(Epoch(5), report), MetadataResult::Done { epoch: Epoch(5) });
    assert_eq!(owner(&metadata, 1), Some(NodeId(1)));
    // A stale expiry (another session id) is refused and changes nothing.
    let stale = metadata.apply(Epoch(6), MetadataCommand::ExpireSession { node: NodeId(1), session: SessionId(99) });
    assert!(matches!(stale, MetadataResult::Refused { .. }));
    assert_eq!(owner(&metadata, 1), Some(NodeId(1)));
    metadata.apply(Epoch(7), MetadataCommand::ExpireSession { node: NodeId(1), session });
    assert_eq!(owner(&metadata, 1), None, "clients are no longer sent to the expired node");
    assert_eq!(metadata.nodes[&NodeId(1)].session, None);
}

#[test]
fn s4_ownership_reports_are_fenced_by_session_incarnation_and_view() {
    let mut metadata = Metadata::default();
    register(&mut metadata, 1, 1);
    register(&mut metadata, 2, 2);
    let first = open(&mut metadata, 3, 1);
    let second = open(&mut metadata, 4, 2);
    metadata.apply(
        Epoch(5),
        MetadataCommand::CreateGroup {
            group: GroupId(1),
            kind: "kv".into(),
            members: vec![NodeId(1), NodeId(2)],
            replication: Default::default(),
        },
    );
    let report = |node: u64, session: SessionId, incarnation: u64, view: u32| MetadataCommand::ReportOwnership {
        group: GroupId(1),
        incarnation: Incarnation(incarnation),
        node: NodeId(node),
        session,
        view: View(view),
    };
    assert!(matches!(metadata.apply(Epoch(6), report(2, second, 1, 3)), MetadataResult::Done { .. }));
    // The old primary of view 1 reports late: refused, the record keeps view 3.
    let late = metadata.apply(Epoch(7), report(1, first, 1, 1));
    assert!(matches!(late, MetadataResult::Refused { ref reason } if reason.contains("older")), "{late:?}");
    assert_eq!(owner(&metadata, 1), Some(NodeId(2)));
    // Wrong incarnation, or without a live session: refused.
    assert!(matches!(metadata.apply(Epoch(8), report(1, first, 2, 4)), MetadataResult::Refused { .. }));
    metadata.apply(Epoch(9), MetadataCommand::ExpireSession { node: NodeId(1), session: first });
    assert!(matches!(metadata.apply(Epoch(10), report(1, first, 1, 4)), MetadataResult::Refused { .. }));
    // After a new session, the node re-owns the group at a newer view (S4).
    let renewed = open(&mut metadata, 11, 1);
    assert!(matches!(metadata.apply(Epoch(12), report(1, renewed, 1, 4)), MetadataResult::Done { .. }));
    assert_eq!(owner(&metadata, 1), Some(NodeId(1)));
}

#[test]
fn s4_a_new_session_ends_the_old_one_and_its_ownership() {
    let mut metadata = Metadata::default();
    register(&mut metadata, 1, 1);
    let first = open(&mut metadata, 2, 1);
    metadata.apply(
        Epoch(3),
        MetadataCommand::CreateGroup {
            group: GroupId(1),
            kind: "kv".into(),
            members: vec![NodeId(1)],
            replication: Default::default(),
        },
    );
    let report = |session: SessionId| MetadataCommand::ReportOwnership {
        group: GroupId(1),
        incarnation: Incarnation(1),
        node: NodeId(1),
        session,
        view: View(0),
    };
    metadata.apply(Epoch(4), report(first));
    let second = open(&mut metadata, 5, 1);
    assert_ne!(first, second);
    assert_eq!(owner(&metadata, 1), None, "records of the old session are gone");
    assert!(matches!(metadata.apply(Epoch(6), report(first)), MetadataResult::Refused { .. }));
    assert!(matches!(metadata.apply(Epoch(7), report(second)), MetadataResult::Done { .. }));
}

/// Found by `cohort-sim --scenario metadata` (seed 3448): the owner's new
/// session emptied the record, and a stale primary's report of an older view
/// was then accepted. The highest recorded view outlives the record.
#[test]
fn s4_a_stale_view_is_refused_after_the_owner_record_was_dropped() {
    let mut metadata = Metadata::default();
    register(&mut metadata, 1, 1);
    register(&mut metadata, 2, 2);
    let create = MetadataCommand::CreateGroup {
        group: GroupId(0),
        kind: "kv".into(),
        members: vec![NodeId(1), NodeId(2)],
        replication: Default::default(),
    };
    metadata.apply(Epoch(3), create);
    let first = open(&mut metadata, 4, 1);
    let stale = open(&mut metadata, 5, 2);
    let report = |node: u64, session: SessionId, view: u32| MetadataCommand::ReportOwnership {
        group: GroupId(0),
        incarnation: Incarnation(1),
        node: NodeId(node),
        session,
        view: View(view),
    };
    assert_eq!(metadata.apply(Epoch(6), report(1, first, 6)), MetadataResult::Done { epoch: Epoch(6) });
    // Node 1 opens a new session: its record goes (S4) ...
    let second = open(&mut metadata, 7, 1);
    assert_eq!(owner(&metadata, 0), None);
    // ... and node 2, primary of view 4 before it stalled, must not take it.
    assert!(matches!(metadata.apply(Epoch(8), report(2, stale, 4)), MetadataResult::Refused { .. }));
    assert_eq!(owner(&metadata, 0), None);
    // Node 1 re-owns in the same view under its new session.
    assert_eq!(metadata.apply(Epoch(9), report(1, second, 6)), MetadataResult::Done { epoch: Epoch(9) });
    assert_eq!(owner(&metadata, 0), Some(NodeId(1)));
}

#[test]
fn s1_sessions_expire_after_silence_in_ticks() {
    let mut tracker = SessionTracker::new(30);
    tracker.start(NodeId(1), SessionId(1), 0);
    tracker.start(NodeId(2), SessionId(2), 0);
    for now in (10..=60).step_by(10) {
        assert!(tracker.keepalive(NodeId(2), SessionId(2), now));
        let expired = tracker.expired(now);
        if now < 30 {
            assert!(expired.is_empty(), "{now}");
        } else if now == 30 {
            assert_eq!(expired, vec![(NodeId(1), SessionId(1))]);
        } else {
            assert!(expired.is_empty(), "node 2 keeps its session alive: {now}");
        }
    }
    assert!(!tracker.keepalive(NodeId(1), SessionId(1), 70), "an expired session must be reopened");
}

fn command() -> impl Strategy<Value = Vec<u8>> {
    let node = 1u64..5;
    prop_oneof![
        (node.clone()).prop_map(|n| MetadataCommand::RegisterNode { node: NodeId(n), address: format!("n{n}") }
            .encode()
            .to_vec()),
        (node.clone()).prop_map(|n| MetadataCommand::OpenSession { node: NodeId(n) }.encode().to_vec()),
        (node.clone(), 1u64..6).prop_map(|(n, s)| MetadataCommand::ExpireSession {
            node: NodeId(n),
            session: SessionId(s)
        }
        .encode()
        .to_vec()),
        (0u64..3, proptest::collection::btree_set(1u64..5, 1..4)).prop_map(|(g, members)| {
            MetadataCommand::CreateGroup {
                group: GroupId(g),
                kind: "kv".into(),
                members: members.into_iter().map(NodeId).collect(),
                replication: Default::default(),
            }
            .encode()
            .to_vec()
        }),
        (0u64..3).prop_map(|g| MetadataCommand::DeleteGroup { group: GroupId(g) }.encode().to_vec()),
        (0u64..3, 1u64..3, node.clone(), 1u64..6, 0u32..5).prop_map(|(g, i, n, s, v)| {
            MetadataCommand::ReportOwnership {
                group: GroupId(g),
                incarnation: Incarnation(i),
                node: NodeId(n),
                session: SessionId(s),
                view: View(v),
            }
            .encode()
            .to_vec()
        }),
        proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Every member applying the same commands reaches the same state and
    /// results (garbage included), and a snapshot restores it exactly.
    #[test]
    fn m1_metadata_is_deterministic_and_snapshots_round_trip(commands in proptest::collection::vec(command(), 1..60)) {
        let mut a = MetadataStateMachine::default();
        let mut b = MetadataStateMachine::default();
        for (index, operation) in commands.iter().enumerate() {
            let op = Op(index as u64 + 1);
            prop_assert_eq!(a.apply(op, operation), b.apply(op, operation));
        }
        prop_assert_eq!(a.state(), b.state());
        let mut restored = MetadataStateMachine::default();
        restored.restore(&a.snapshot()).expect("restores");
        prop_assert_eq!(restored.state(), a.state());
        // Ownership always names a member with a live session.
        for record in a.state().groups.values() {
            if let Some(owner) = record.owner {
                prop_assert!(record.live && record.members.contains(&owner.node));
                prop_assert_eq!(a.state().nodes[&owner.node].session, Some(owner.session));
            }
        }
    }
}

mod sessions_end_to_end {
    use super::*;
    use cohort_core::metadata::{
        ExpiredPolicy, KeepaliveOutcome, MetadataDriver, SessionAction, SessionClient, SessionState,
    };

    /// Two registered nodes, node 1 with an open session.
    fn cluster() -> (Metadata, SessionId) {
        let mut metadata = Metadata::default();
        register(&mut metadata, 1, 1);
        register(&mut metadata, 2, 2);
        let session = open(&mut metadata, 3, 1);
        (metadata, session)
    }

    #[test]
    fn s1_s2_the_metadata_primary_expires_a_silent_session_through_the_log() {
        let (mut metadata, session) = cluster();
        let mut driver = MetadataDriver::new(30);
        assert_eq!(driver.on_keepalive(NodeId(1), session, 0, &metadata), KeepaliveOutcome::NotPrimary);
        assert!(driver.on_tick(0, true, &metadata).is_empty());
        for now in (5..30).step_by(5) {
            assert_eq!(driver.on_keepalive(NodeId(1), session, now, &metadata), KeepaliveOutcome::Renewed);
            assert!(driver.on_tick(now, true, &metadata).is_empty(), "kept alive at {now}");
        }
        // Silence: 30 ticks after the last keepalive (25) the expiry is proposed, once.
        assert!(driver.on_tick(54, true, &metadata).is_empty());
        let proposed = driver.on_tick(55, true, &metadata);
        assert_eq!(proposed, vec![MetadataCommand::ExpireSession { node: NodeId(1), session }]);
        assert!(driver.on_tick(56, true, &metadata).is_empty(), "not proposed twice");
        // Lost (never applied): proposed again one timeout later.
        assert_eq!(driver.on_tick(85, true, &metadata), proposed);
        // Once it commits, the node's keepalives are told the session expired.
        metadata.apply(Epoch(4), proposed[0].clone());
        assert_eq!(driver.on_keepalive(NodeId(1), session, 57, &metadata), KeepaliveOutcome::Expired);
    }

    #[test]
    fn s1_a_new_metadata_primary_gives_every_session_a_full_timeout() {
        let (metadata, session) = cluster();
        let mut driver = MetadataDriver::new(30);
        // This member becomes primary at tick 100, long after the last keepalive
        // reached its predecessor: it still waits a full timeout.
        assert!(driver.on_tick(100, true, &metadata).is_empty());
        assert!(driver.on_tick(129, true, &metadata).is_empty());
        assert_eq!(driver.on_tick(130, true, &metadata).len(), 1);
        let _ = session;
        // Losing the primary role stops proposals.
        let mut driver = MetadataDriver::new(30);
        driver.on_tick(0, true, &metadata);
        assert!(driver.on_tick(40, false, &metadata).is_empty());
    }

    #[test]
    fn s3_reconnect_then_shutdown_after_attempts() {
        let mut client = SessionClient::new(ExpiredPolicy::Reconnect { attempts: 2 }, 10, 0);
        assert_eq!(client.on_tick(0), Some(SessionAction::Open { attempt: 1 }));
        assert_eq!(client.on_opened(SessionId(1), 3), Some(SessionAction::Reown(SessionId(1))));
        assert_eq!(client.on_tick(13), Some(SessionAction::Keepalive(SessionId(1))));
        // The session expires: reconnect, attempt 1; a stale notice is ignored.
        assert_eq!(client.on_expired(SessionId(7)), None);
        assert_eq!(client.on_expired(SessionId(1)), None);
        assert_eq!(client.on_tick(20), Some(SessionAction::Open { attempt: 1 }));
        // No answer for two intervals: attempt 2; no answer again: stop.
        assert_eq!(client.on_tick(40), Some(SessionAction::Open { attempt: 2 }));
        assert_eq!(client.on_tick(60), Some(SessionAction::Stop("no new session after every reconnect attempt")));
        assert_eq!(client.state(), SessionState::Stopped);
    }

    #[test]
    fn f2_reconnect_attempts_are_spaced_by_a_doubling_backoff() {
        let mut client = SessionClient::new(ExpiredPolicy::Reconnect { attempts: 3 }, 10, 30);
        assert_eq!(client.reconnect_span_ticks(), Some(3 * 20 + 30 + 60), "attempts' timeouts plus the waits");
        client.on_tick(0);
        client.on_opened(SessionId(1), 1);
        client.on_expired(SessionId(1));
        assert_eq!(client.on_tick(20), Some(SessionAction::Open { attempt: 1 }));
        // Attempt 1 goes unanswered for two intervals: wait 30 ticks.
        assert_eq!(client.on_tick(40), None);
        assert_eq!(client.on_tick(69), None, "still backing off");
        assert_eq!(client.on_tick(70), Some(SessionAction::Open { attempt: 2 }));
        // Attempt 2 unanswered: the wait doubles to 60.
        assert_eq!(client.on_tick(90), None);
        assert_eq!(client.on_tick(149), None, "still backing off");
        assert_eq!(client.on_tick(150), Some(SessionAction::Open { attempt: 3 }));
        assert_eq!(client.on_tick(170), Some(SessionAction::Stop("no new session after every reconnect attempt")));
        assert_eq!(170 - 20, client_span(30), "the node stopped exactly one span after its first attempt");
    }

    fn client_span(backoff: u64) -> u64 {
        SessionClient::new(ExpiredPolicy::Reconnect { attempts: 3 }, 10, backoff).reconnect_span_ticks().unwrap_or(0)
    }

    #[test]
    fn f2_a_late_answer_during_the_backoff_opens_the_session() {
        let mut client = SessionClient::new(ExpiredPolicy::Reconnect { attempts: 3 }, 10, 30);
        client.on_tick(0);
        client.on_opened(SessionId(1), 1);
        client.on_expired(SessionId(1));
        client.on_tick(20);
        assert_eq!(client.on_tick(40), None, "attempt 1 timed out; backing off");
        assert_eq!(client.on_opened(SessionId(2), 50), Some(SessionAction::Reown(SessionId(2))));
        assert_eq!(client.on_tick(60), Some(SessionAction::Keepalive(SessionId(2))));
    }

    #[test]
    fn f2_shutdown_has_no_reconnect_span() {
        assert_eq!(SessionClient::new(ExpiredPolicy::Shutdown, 10, 30).reconnect_span_ticks(), None);
    }

    #[test]
    fn s3_reconnect_succeeds_and_reowns() {
        let mut client = SessionClient::new(ExpiredPolicy::Reconnect { attempts: 3 }, 10, 0);
        client.on_tick(0);
        client.on_opened(SessionId(1), 1);
        client.on_expired(SessionId(1));
        assert_eq!(client.on_tick(5), Some(SessionAction::Open { attempt: 1 }));
        assert_eq!(
            client.on_opened(SessionId(4), 8),
            Some(SessionAction::Reown(SessionId(4))),
            "S4: re-own under the new session"
        );
    }

    #[test]
    fn s3_shutdown_policy_stops_on_expiry() {
        let mut client = SessionClient::new(ExpiredPolicy::Shutdown, 10, 0);
        client.on_tick(0);
        client.on_opened(SessionId(1), 1);
        assert_eq!(
            client.on_expired(SessionId(1)),
            Some(SessionAction::Stop("session expired and session_expired_policy is shutdown"))
        );
    }

    #[test]
    fn s3_the_first_session_is_retried_until_the_metadata_group_answers() {
        let mut client = SessionClient::new(ExpiredPolicy::Shutdown, 10, 0);
        assert_eq!(client.on_tick(0), Some(SessionAction::Open { attempt: 1 }));
        for (now, attempt) in [(20, 2), (40, 3), (60, 4)] {
            assert_eq!(client.on_tick(now), Some(SessionAction::Open { attempt }), "boot keeps trying");
        }
    }
}

mod admission {
    use super::*;

    const N1: NodeId = NodeId(1);
    const N2: NodeId = NodeId(2);
    const VOTERS: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

    fn state_with_group() -> Metadata {
        let mut metadata = Metadata::default();
        for node in 1..=4 {
            register(&mut metadata, node, node);
        }
        let create = MetadataCommand::CreateGroup {
            group: GroupId(7),
            kind: "kv".into(),
            members: vec![NodeId(1), NodeId(2), NodeId(3)],
            replication: Default::default(),
        };
        assert!(matches!(metadata.apply(Epoch(5), create), MetadataResult::GroupCreated { .. }));
        metadata
    }

    #[test]
    fn t3_a_command_that_speaks_for_a_node_must_come_from_that_node() {
        let metadata = state_with_group();
        let speaking_for_n2 = [
            MetadataCommand::RegisterNode { node: N2, address: "n2".into() },
            MetadataCommand::OpenSession { node: N2 },
            MetadataCommand::AckEpoch { node: N2, epoch: Epoch(3) },
            MetadataCommand::ReportOwnership {
                group: GroupId(7),
                incarnation: Incarnation(1),
                node: N2,
                session: SessionId(1),
                view: View(1),
            },
            MetadataCommand::ReportSealed { group: GroupId(7), incarnation: Incarnation(1), node: N2 },
        ];
        for command in speaking_for_n2 {
            assert_eq!(metadata.admit(N2, &VOTERS, &command), Ok(()), "{command:?} from n2 itself");
            let refused = metadata.admit(N1, &VOTERS, &command).expect_err("n1 may not speak for n2");
            assert!(refused.contains("speaks only for itself"), "{refused}");
        }
    }

    #[test]
    fn t3_an_expiry_comes_only_from_a_metadata_member() {
        let metadata = state_with_group();
        let expire = MetadataCommand::ExpireSession { node: N2, session: SessionId(1) };
        assert_eq!(metadata.admit(N1, &VOTERS, &expire), Ok(()), "the metadata primary's driver");
        assert!(metadata.admit(NodeId(4), &VOTERS, &expire).is_err(), "a node outside the metadata group");
    }

    #[test]
    fn t3_a_catch_up_is_reported_by_a_member_of_the_group() {
        let metadata = state_with_group();
        let caught_up = MetadataCommand::ReportCaughtUp {
            group: GroupId(7),
            incarnation: Incarnation(1),
            node: NodeId(4),
            op: Op(0),
        };
        assert_eq!(metadata.admit(N1, &VOTERS, &caught_up), Ok(()), "a member (the primary) reports its learner");
        assert!(metadata.admit(NodeId(4), &VOTERS, &caught_up).is_err(), "the learner cannot vouch for itself");
    }

    #[test]
    fn t3_the_state_machine_refuses_at_admission_what_it_would_not_admit() {
        let mut machine = MetadataStateMachine::default();
        let open = MetadataCommand::OpenSession { node: N2 }.encode();
        assert!(machine.admit(N1, &VOTERS, &open).is_err());
        assert_eq!(machine.admit(N2, &VOTERS, &open), Ok(()));
        // Undecodable bytes are left to apply, which refuses them on every member alike.
        assert_eq!(machine.admit(N1, &VOTERS, b"not a command"), Ok(()));
        let _ = machine.apply(Op(1), b"not a command");
    }
}
