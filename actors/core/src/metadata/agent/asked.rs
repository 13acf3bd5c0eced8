//! When the agent last asked a shard for something about a group (a seal,
//! a replica, a transfer). A shard may refuse or drop such a request (a
//! member behind, a record not yet durable), and the agent only learns so
//! from a later scan that looks the same; so it asks once, then again only
//! after a retry period, which bounds what it sends per group however often
//! it scans.

use std::collections::BTreeMap;

use cohort_messages::GroupId;

/// The tick each group was last asked for, by group.
#[derive(Clone, Debug, Default)]
pub(super) struct Asked {
    ticks: BTreeMap<GroupId, u64>,
}

impl Asked {
    /// Whether `group` may be asked for again at `now`: once, then only
    /// after `retry_ticks`. Records `now` if so.
    pub(super) fn again(&mut self, group: GroupId, now: u64, retry_ticks: u64) -> bool {
        let due = self.ticks.get(&group).is_none_or(|last| now >= last.saturating_add(retry_ticks));
        if due {
            self.ticks.insert(group, now);
        }
        debug_assert!(!due || self.ticks.get(&group) == Some(&now), "a due ask is recorded at now");
        due
    }

    /// Forget `group` (what was asked for happened).
    pub(super) fn forget(&mut self, group: GroupId) {
        self.ticks.remove(&group);
    }

    /// Keep only the groups `keep` says are still wanted.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(GroupId) -> bool) {
        self.ticks.retain(|group, _| keep(*group));
    }

    /// True if no group is recorded.
    pub(super) fn is_empty(&self) -> bool {
        self.ticks.is_empty()
    }

    /// True if some group was asked for at `since` or later.
    pub(super) fn any_since(&self, since: u64) -> bool {
        self.ticks.values().any(|tick| *tick >= since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_asked_once_then_once_per_retry_period() {
        let mut asked = Asked::default();
        let answers: Vec<bool> = (10..=18).map(|now| asked.again(GroupId(3), now, 4)).collect();
        assert_eq!(answers, vec![true, false, false, false, true, false, false, false, true]);
        assert!(asked.any_since(18) && !asked.any_since(19));
        assert!(asked.again(GroupId(4), 18, 4), "each group on its own");
        asked.forget(GroupId(3));
        assert!(asked.again(GroupId(3), 19, 4), "asked afresh once forgotten");
        asked.retain(|group| group == GroupId(4));
        assert!(!asked.any_since(19) && !asked.is_empty());
    }
}
