//! H3: a group created again under the same id never serves the data of
//! its earlier lives. A *life* of a group id runs from a `CreateGroup` to
//! the next `DeleteGroup`; it starts at the incarnation its creation gave
//! (the record's `created`) and goes on through its member changes.
//!
//! The metadata scenario's operator writes to the groups it creates values
//! tagged with the life they are written in ([`tag`]), and reads them back;
//! it deletes a group only once nothing it sent is still in flight, so no
//! write of an earlier life can reach a later one. Every answer a replica
//! gives it (the value a read found, or the one a write replaced) is
//! judged against the life of that replica: a value tagged with an earlier
//! life means the replica carried data over from before its group's last
//! creation (an old replica still hosted, a log or view recovered into a
//! new replica, a snapshot of the old state).
//!
//! A replica of a life that ended may still answer until its node has
//! applied the delete (or the creation after it), and its agent has
//! unloaded it: at most [`ENDED_ANSWER_TICKS_MAX`] ticks after its node's
//! metadata showed the end. Later than that is a violation too.
//!
//! The same lives keep the agreement checker (P2/P3) apart per life: each
//! life numbers its ops from 1 again.

use std::collections::{BTreeMap, BTreeSet};

use cohort_core::metadata::GroupRecord;
use cohort_messages::{GroupId, Incarnation};

/// How long after its node's metadata showed its life ended a replica may
/// still answer: the agent's next scan unloads it (a scan follows a change
/// of the metadata within a few ticks, Z3), and the shard's turn that
/// answered may have begun before.
pub const ENDED_ANSWER_TICKS_MAX: u64 = 20;

/// The value the operator writes as its `seq`-th write in the life created
/// at `life`: the life in the high 32 bits, never 0 (0 reads as absent).
pub fn tag(life: Incarnation, seq: u32) -> u64 {
    assert!(life.0 >= 1 && life.0 < 1 << 32, "a life is a creation's incarnation: {life:?}");
    (life.0 << 32) | u64::from(seq)
}

/// The life a value was written in.
fn life_of_value(value: u64) -> Incarnation {
    Incarnation(value >> 32)
}

/// The lives of each group the operator created, by the incarnation each
/// creation gave.
#[derive(Debug, Default)]
pub struct Lives {
    created: BTreeMap<GroupId, BTreeSet<Incarnation>>,
    /// Answers judged, and how many were of a later life than the replica
    /// (a replica of a deleted life still answering before its node
    /// applied the delete: the bounded window docs/metadata.md names).
    pub answers: u64,
    /// Answers from a replica whose life had ended elsewhere.
    pub answers_from_ended_life: u64,
    /// What each node's metadata last showed of each created group, since
    /// which tick.
    seen: BTreeMap<(usize, GroupId), (Shown, u64)>,
}

/// What a node's metadata shows of a group: the start of its life, whether
/// it is live, and its incarnation.
type Shown = (Incarnation, bool, Incarnation);

impl Lives {
    /// A creation of `group` committed at `incarnation`.
    pub fn created(&mut self, group: GroupId, incarnation: Incarnation) {
        self.created.entry(group).or_default().insert(incarnation);
    }

    /// `node`'s metadata shows `record` for `group` at tick `now`.
    pub fn node_saw(&mut self, node: usize, group: GroupId, record: &GroupRecord, now: u64) {
        self.created(group, record.created);
        let state = (record.created, record.live, record.incarnation);
        let entry = self.seen.entry((node, group)).or_insert((state, now));
        if entry.0 != state {
            *entry = (state, now);
        }
    }

    /// `node` crashed: its next process starts from its own storage, with
    /// a copy of the metadata that may be older than what it showed.
    pub fn crashed(&mut self, node: usize) {
        self.seen.retain(|(seen_by, _), _| *seen_by != node);
    }

    /// The life a replica of `group` at `incarnation` belongs to: the last
    /// creation at or before it; `None` for groups the operator never
    /// created (clients' groups: one life).
    pub fn life(&self, group: GroupId, incarnation: Incarnation) -> Option<Incarnation> {
        self.created.get(&group)?.range(..=incarnation).next_back().copied()
    }

    /// The key under which the agreement checker keeps `group`'s ops
    /// applied by a replica at `incarnation`: the group itself in its first
    /// life, a key of its own for each later one (ids the simulator never
    /// gives a group: past bit 44, where the operator's ids, from 2^40, and
    /// the clients' small ones never reach).
    pub fn agreement_key(&self, group: GroupId, incarnation: Incarnation) -> GroupId {
        let first = self.created.get(&group).and_then(|lives| lives.first().copied());
        match self.life(group, incarnation) {
            Some(life) if Some(life) != first => {
                assert!(group.0 < 1 << 44 && life.0 < 1 << 19, "{group} {life:?} fit the key");
                GroupId(group.0 | life.0 << 44)
            }
            _ => group,
        }
    }

    /// `node`'s replica of `group` at `incarnation` answered the operator
    /// at tick `now` with `value` (read, or replaced by a write) for the
    /// key it tags.
    pub fn answered(
        &mut self,
        node: usize,
        group: GroupId,
        incarnation: Incarnation,
        value: u64,
        now: u64,
    ) -> Result<(), String> {
        self.answers += 1;
        let Some(life) = self.life(group, incarnation) else { return Ok(()) };
        if self.created.get(&group).and_then(|lives| lives.last()).is_some_and(|last| *last > life) {
            self.answers_from_ended_life += 1;
        }
        if let Some(((created, live, recorded), since)) = self.seen.get(&(node, group)).copied() {
            let ended = created > incarnation || (!live && recorded >= incarnation);
            if ended && now > since + ENDED_ANSWER_TICKS_MAX {
                return Err(format!(
                    "H3 broken: node {node}'s replica of {group} at incarnation {} answered {} ticks after its \
                     node's metadata ended that life ({})",
                    incarnation.0,
                    now - since,
                    if live { "created again" } else { "deleted" }
                ));
            }
        }
        if value == 0 {
            return Ok(());
        }
        let written = life_of_value(value);
        if written < life {
            return Err(format!(
                "H3 broken: node {node}'s replica of {group} at incarnation {} (the life created at {}) answered \
                 {value:#x}, written in the life created at {}",
                incarnation.0, life.0, written.0
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h3_a_value_of_an_earlier_life_is_caught_and_its_own_life_s_passes() {
        let group = GroupId((1 << 40) + 3);
        let mut lives = Lives::default();
        lives.created(group, Incarnation(1));
        lives.created(group, Incarnation(2));
        // A member change moved life 2 on to incarnation 3.
        assert_eq!(lives.life(group, Incarnation(3)), Some(Incarnation(2)));
        assert_eq!(lives.answered(0, group, Incarnation(3), tag(Incarnation(2), 1), 10), Ok(()));
        assert_eq!(lives.answered(0, group, Incarnation(2), 0, 10), Ok(()), "empty is fine");
        let old = lives.answered(1, group, Incarnation(2), tag(Incarnation(1), 4), 10);
        assert!(old.is_err_and(|violation| violation.contains("H3 broken")));
        // A replica of life 1 still answering before its node applied the
        // delete is counted, not a violation.
        assert_eq!(lives.answered(2, group, Incarnation(1), tag(Incarnation(1), 4), 10), Ok(()));
        assert_eq!((lives.answers, lives.answers_from_ended_life), (4, 1));
    }

    #[test]
    fn h3_a_replica_answering_long_after_its_node_saw_its_life_end_is_caught() {
        let group = GroupId((1 << 40) + 5);
        let mut lives = Lives::default();
        let mut record = GroupRecord {
            kind: "kv".into(),
            incarnation: Incarnation(1),
            members: Vec::new(),
            learners: Vec::new(),
            replication: Default::default(),
            caught_up: Default::default(),
            pending: None,
            live: true,
            owner: None,
            owner_view_max: cohort_messages::View(0),
            created: Incarnation(1),
            transfer: None,
        };
        lives.node_saw(0, group, &record, 5);
        record.live = false;
        lives.node_saw(0, group, &record, 100);
        let value = tag(Incarnation(1), 1);
        assert_eq!(lives.answered(0, group, Incarnation(1), value, 100 + ENDED_ANSWER_TICKS_MAX), Ok(()));
        let late = lives.answered(0, group, Incarnation(1), value, 101 + ENDED_ANSWER_TICKS_MAX);
        assert!(late.is_err_and(|violation| violation.contains("deleted")));
        // Node 1's metadata has not shown the delete: its replica may answer.
        assert_eq!(lives.answered(1, group, Incarnation(1), value, 500), Ok(()));
        // Node 0 restarts with an older copy of the metadata: what its
        // earlier process saw no longer judges it.
        lives.crashed(0);
        assert_eq!(lives.answered(0, group, Incarnation(1), value, 500), Ok(()));
    }

    #[test]
    fn h3_each_later_life_keeps_its_own_agreement_key() {
        let group = GroupId((1 << 40) + 3);
        let mut lives = Lives::default();
        assert_eq!(lives.agreement_key(GroupId(2), Incarnation(1)), GroupId(2), "a client group");
        lives.created(group, Incarnation(1));
        lives.created(group, Incarnation(4));
        assert_eq!(lives.agreement_key(group, Incarnation(2)), group);
        let later = lives.agreement_key(group, Incarnation(5));
        assert_ne!(later, group);
        assert_eq!(later, lives.agreement_key(group, Incarnation(4)));
    }
}
