//! H3: a replica never takes data of an earlier life of its group id as
//! its own. A replica placed empty at an incarnation (a group created
//! again under the same id, a learner replacing an older incarnation's
//! replica) stages its superblock first, so whatever storage still holds
//! of an older incarnation at the next start is left from the replica it
//! replaced: recovery refuses it, and the host removes it and hosts the
//! replica empty.

mod common;

use cohort_core::storage::{RecoveredGroup, Superblock};
use cohort_core::{CoreConfig, Shard, ShardError};
use cohort_messages::{GroupId, Incarnation, NodeId, Op, View};
use common::{Counter, plain_spec};

const MEMBERS: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

/// What storage holds of group 9 written at `incarnation`, in view 4 with
/// ops through 7 committed.
fn written_at(incarnation: u64) -> RecoveredGroup {
    RecoveredGroup {
        superblock: Some(Superblock {
            view: View(4),
            log_view: View(4),
            commit: Op(7),
            incarnation: Incarnation(incarnation),
            members: MEMBERS.to_vec(),
            replication_quorum: 2,
            recovering: false,
        }),
        snapshot: None,
        entries: Vec::new(),
    }
}

#[test]
fn h3_recovery_refuses_data_of_an_earlier_life_of_the_group_id() {
    let mut shard = Shard::new(NodeId(2), CoreConfig::default());
    let placed = |incarnation: u64| {
        let mut spec = plain_spec(GroupId(9), &MEMBERS, 1);
        spec.incarnation = Incarnation(incarnation);
        spec
    };
    let refused = shard.recover_group(placed(2), Box::new(Counter(0)), written_at(1));
    assert!(
        matches!(
            refused,
            Err(ShardError::EarlierLife { group: GroupId(9), found: Incarnation(1), placed: Incarnation(2) })
        ),
        "{refused:?}"
    );
    assert!(shard.replica(GroupId(9)).is_none(), "nothing hosted from it");
    // The replica's own data, or a later incarnation's (a switch), is its own.
    shard.recover_group(placed(2), Box::new(Counter(0)), written_at(2)).expect("its own data");
    let replica = shard.replica(GroupId(9)).expect("hosted");
    assert_eq!((replica.incarnation(), replica.view() >= View(4)), (Incarnation(2), true));
    assert!(shard.remove_group(GroupId(9)));
    shard.recover_group(placed(2), Box::new(Counter(0)), written_at(3)).expect("a later incarnation");
    assert_eq!(shard.replica(GroupId(9)).map(|replica| replica.incarnation()), Some(Incarnation(3)));
}
