//! The metadata primary's driver: session expiry through the log (S1, S2).
//!
//! It runs next to the metadata group's replica on every node and acts only
//! while that replica is the primary. Keepalives reach it directly (they are
//! not logged); when a live session has been silent for the session timeout
//! it proposes an `ExpireSession` command, which the metadata group commits
//! and every member applies (removing the node's ownership records, S2).
//!
//! On becoming primary it starts every live session's clock afresh: it
//! cannot know when its predecessor last heard a keepalive, and waiting a
//! full timeout only ever delays an expiry. A session is never a lock: safety
//! comes from the view backups check (S5), so a late expiry is harmless.

use std::collections::BTreeMap;

use cohort_messages::metadata::MetadataCommand;
use cohort_messages::{NodeId, SessionId};

use super::{Metadata, SessionTracker};

/// The driver. See the module docs.
#[derive(Clone, Debug)]
pub struct MetadataDriver {
    tracker: SessionTracker,
    timeout_ticks: u64,
    primary: bool,
    /// Expiries proposed and not yet applied, with when: proposed again
    /// only if a timeout passes without it being applied (a lost request).
    proposed: BTreeMap<(NodeId, SessionId), u64>,
}

/// What a keepalive got.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KeepaliveOutcome {
    /// The session is alive; its clock restarted.
    Renewed,
    /// This member is not the metadata primary: send it to the primary.
    NotPrimary,
    /// The session is not live (expired or unknown): open a new one (S3).
    Expired,
}

impl MetadataDriver {
    /// A driver expiring sessions after `session_timeout_ticks` of silence.
    pub fn new(session_timeout_ticks: u64) -> MetadataDriver {
        MetadataDriver {
            tracker: SessionTracker::new(session_timeout_ticks),
            timeout_ticks: session_timeout_ticks,
            primary: false,
            proposed: BTreeMap::new(),
        }
    }

    /// A keepalive from `node` for `session`, judged against the applied state.
    pub fn on_keepalive(&mut self, node: NodeId, session: SessionId, now: u64, state: &Metadata) -> KeepaliveOutcome {
        if !self.primary {
            return KeepaliveOutcome::NotPrimary;
        }
        let live = state.nodes.get(&node).and_then(|record| record.session) == Some(session);
        if !live {
            return KeepaliveOutcome::Expired;
        }
        if !self.tracker.keepalive(node, session, now) {
            // Opened since our last tick: start its clock now.
            self.tracker.start(node, session, now);
        }
        KeepaliveOutcome::Renewed
    }

    /// Every tick: whether the local metadata replica is primary, and the
    /// applied metadata state. Returns the commands to submit to the
    /// metadata group.
    pub fn on_tick(&mut self, now: u64, primary: bool, state: &Metadata) -> Vec<MetadataCommand> {
        if primary && !self.primary {
            // A new primary: every live session gets a full timeout.
            self.tracker = SessionTracker::new(self.timeout_ticks);
            self.proposed.clear();
            for (node, record) in &state.nodes {
                if let Some(session) = record.session {
                    self.tracker.start(*node, session, now);
                }
            }
        }
        self.primary = primary;
        if !primary {
            return Vec::new();
        }
        // Sessions opened since the last tick start their clocks; applied
        // expiries and replaced sessions are forgotten.
        for (node, record) in &state.nodes {
            if let Some(session) = record.session
                && !self.proposed.contains_key(&(*node, session))
                && !self.tracker.tracks(*node, session)
            {
                self.tracker.start(*node, session, now);
            }
        }
        self.proposed
            .retain(|(node, session), _| state.nodes.get(node).and_then(|record| record.session) == Some(*session));
        let mut commands = Vec::new();
        for (node, session) in self.tracker.expired(now) {
            let live = state.nodes.get(&node).and_then(|record| record.session) == Some(session);
            if live {
                self.proposed.insert((node, session), now);
                commands.push(MetadataCommand::ExpireSession { node, session });
            }
        }
        for ((node, session), proposed_tick) in self.proposed.iter_mut() {
            if now >= proposed_tick.saturating_add(self.timeout_ticks) {
                *proposed_tick = now;
                commands.push(MetadataCommand::ExpireSession { node: *node, session: *session });
            }
        }
        commands
    }
}
