//! R24 and V7 from outside: a primary's quorum window never outlives its
//! view. A primary serves reads (and stays primary) while its window holds:
//! a replication quorum confirmed its view, through Commit replies or the
//! shard-pair replies that stand in for them (Z3), within the last
//! `commit_heartbeat_timeout`. Each confirming member granted a lease at
//! least that long and joins no view change while it runs, and a later
//! view is elected by a view-change quorum, which meets every replication
//! quorum: so once the primary of a later view has been confirmed, no
//! primary of an earlier view of the same incarnation may be confirmed
//! again. After every step, each replica its shard says is a confirmed
//! primary (`Shard::is_confirmed_primary`, the question the node's agent
//! asks) is checked against the highest view of its group and incarnation
//! whose primary was ever seen confirmed.
//!
//! A sealing primary is left out: it serves no reads once the seal is in
//! its log, and its backups then follow a member to a later view whatever
//! their lease (the seal must reach every next member), so its window may
//! still hold while a later view is confirmed.
//!
//! "Became primary" would not do as the later view's mark: a leader that
//! completes an election and loses power before its view is durable
//! comes back in the earlier view, having led nobody (its StartView waits
//! for that flush, V2), and the earlier view may then be completed after
//! all.
//!
//! Linearizability sees a window that outlived its view only when a read
//! lands in it; this sees every one, whatever extended it: a window longer
//! than the lease, a lease released too early, or a contact counted from a
//! reply that did not vouch for the view.

use std::collections::{HashMap, HashSet};

use cohort_core::Shard;
use cohort_messages::{GroupId, Incarnation, View};

/// The highest view seen confirmed per group and incarnation, and the
/// windows reported already (a broken window usually lasts several ticks).
#[derive(Debug, Default)]
pub struct Window {
    confirmed: HashMap<(GroupId, Incarnation), View>,
    reported: HashSet<(usize, GroupId, Incarnation, View)>,
}

impl Window {
    /// Every confirmed primary of shard `shard` of node `node`.
    pub fn check(&mut self, node: usize, shard: &Shard) -> Vec<String> {
        let mut violations = Vec::new();
        for replica in shard.replicas().filter(|replica| replica.is_primary()) {
            let (group, incarnation, view) = (replica.group(), replica.incarnation(), replica.view());
            if !shard.is_confirmed_primary(group, shard.now()) || replica.is_sealing() {
                continue;
            }
            let highest = self.confirmed.entry((group, incarnation)).or_insert(view);
            if *highest <= view {
                *highest = view;
                continue;
            }
            if self.reported.insert((node, group, incarnation, view)) {
                violations.push(format!(
                    "R24 broken: node {node} is a confirmed primary of {group} in {view} at its tick {}, but the \
                     primary of {highest} was confirmed already",
                    shard.now()
                ));
            }
        }
        violations
    }
}
