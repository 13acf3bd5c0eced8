//! Z3: the two rules of quiescence that stand in for R24 and R8, checked
//! from what the nodes sent and what their shards hold (only with
//! `--quiesce-ticks`).
//!
//! - **Contact only from a matching reply** (R24 for a quiesced group). A
//!   primary end's pair with a peer dates the contact of every group it
//!   holds quiesced for that peer from the send tick of the newest
//!   heartbeat the peer answered *with a match*: the peer then held the
//!   same groups at the same view and commit point, which is what a
//!   CommitReply of each says. A reply that did not match says the peer
//!   holds something else, and counts for nothing. So after every tick the
//!   pair's contact tick (`Pairs::lead_contacts`) is at most the tick of the
//!   newest matched reply delivered to that shard, for that process
//!   (epoch), from that peer. A break dates a quorum window from a member
//!   that no longer vouches for the view.
//! - **Follow only the primary of one's own view** (R8 for a quiesced
//!   backup). A quiesced backup follows `(primary, view)`: the matching
//!   heartbeats of that primary's node renew its timeout and its lease. So
//!   after every tick a replica that follows quiesced is a backup, in that
//!   very view, and that node is who became primary of the group in that
//!   view (the P1 records). A break lets an old primary's heartbeats keep a
//!   backup of a newer view from suspecting its own primary, and grant the
//!   old one leases.
//!
//! The first rule is checked against the frames the simulated network
//! delivered, the second against the primaries P1 recorded: neither asks
//! the core's own `follow_holds` or the pair's match, which are what a
//! mutant of these rules breaks.

use std::collections::{HashMap, HashSet};

use cohort_core::Replica;
use cohort_core::quiesce::Pairs;
use cohort_messages::{GroupId, NodeId, PairHeartbeatReply, View};

use super::single_primary::SinglePrimary;
use crate::node::node_index;

/// The newest matched reply delivered per (node, shard, the node's process
/// epoch, replying peer), and what was reported already (a broken state
/// usually lasts several ticks: it is reported once).
#[derive(Debug, Default)]
pub struct QuietRules {
    matched: HashMap<(usize, u16, u64, NodeId), u64>,
    reported_contacts: HashSet<(usize, u16, u64, NodeId, u64)>,
    reported_follows: HashSet<(usize, GroupId, View, View)>,
}

impl QuietRules {
    /// `reply` from `from` was delivered to node `node`.
    pub fn reply_delivered(&mut self, node: usize, from: NodeId, reply: &PairHeartbeatReply) {
        if reply.matched {
            let newest = self.matched.entry((node, reply.shard, reply.epoch, from)).or_default();
            *newest = (*newest).max(reply.tick);
        }
    }

    /// Contact only from a matching reply, for shard `shard` of node `node`.
    pub fn check_contacts(&mut self, node: usize, shard: u16, pairs: &Pairs) -> Vec<String> {
        let mut violations = Vec::new();
        for (peer, contact) in pairs.lead_contacts().filter(|(_, contact)| *contact != 0) {
            let key = (node, shard, pairs.epoch(), peer);
            let matched = self.matched.get(&key).copied().unwrap_or(0);
            if contact > matched && self.reported_contacts.insert((node, shard, pairs.epoch(), peer, contact)) {
                let peer = node_index(peer);
                violations.push(format!(
                    "Z3 broken: node {node} shard {shard} dates its quiesced groups' contact with node {peer} \
                     from tick {contact}, but the newest reply node {peer} matched answers tick {matched}"
                ));
            }
        }
        violations
    }

    /// Follow only the primary of one's own view, for `replica` on node `node`.
    pub fn check_follow(&mut self, node: usize, replica: &Replica, primaries: &SinglePrimary) -> Option<String> {
        let (primary, view) = replica.quiet_follow()?;
        let group = replica.group();
        let elected = primaries.primary_of(group, replica.incarnation(), view);
        let holds = !replica.is_primary()
            && replica.view() == view
            && replica.status() == cohort_core::Status::Normal
            && elected == Some(node_index(primary));
        if holds || !self.reported_follows.insert((node, group, view, replica.view())) {
            return None;
        }
        let elected = elected.map_or_else(|| "nobody".to_string(), |elected| format!("node {elected}"));
        Some(format!(
            "Z3 broken: node {node}'s replica of {group} follows node {} quiesced in {view}, but it is in {} ({:?}) \
             and the primary of {view} was {elected}",
            node_index(primary),
            replica.view(),
            replica.status()
        ))
    }
}
