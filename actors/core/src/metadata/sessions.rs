//! Session expiry on the metadata primary (S1).
//!
//! Keepalives are not logged: the metadata primary tracks them in memory and,
//! when a session has been silent for `session_timeout_ticks` of its own
//! ticks, proposes an `ExpireSession` command, which every member applies.
//! Time is ticks, so the simulator runs it unchanged. A new metadata primary
//! starts every session's clock afresh (it cannot know when the last
//! keepalive reached its predecessor), which only ever delays an expiry.

use std::collections::BTreeMap;

use cohort_messages::{NodeId, SessionId};

/// Session deadlines, kept by the metadata primary.
#[derive(Clone, Debug, Default)]
pub struct SessionTracker {
    timeout_ticks: u64,
    deadlines: BTreeMap<(NodeId, SessionId), u64>,
}

impl SessionTracker {
    /// A tracker expiring sessions after `timeout_ticks` of silence.
    pub fn new(timeout_ticks: u64) -> SessionTracker {
        assert!(timeout_ticks > 0, "a session timeout of 0 ticks expires every session at once");
        SessionTracker { timeout_ticks, deadlines: BTreeMap::new() }
    }

    /// A session opened, or this member became metadata primary and learned
    /// of a live session: its clock starts now.
    pub fn start(&mut self, node: NodeId, session: SessionId, now: u64) {
        self.deadlines.insert((node, session), now.saturating_add(self.timeout_ticks));
    }

    /// A keepalive arrived. False if the session is not tracked (expired or
    /// unknown): the node must open a new session.
    pub fn keepalive(&mut self, node: NodeId, session: SessionId, now: u64) -> bool {
        match self.deadlines.get_mut(&(node, session)) {
            Some(deadline) => {
                *deadline = now.saturating_add(self.timeout_ticks);
                true
            }
            None => false,
        }
    }

    /// Sessions silent past their deadline at `now`; they are forgotten here
    /// and must be expired through the log.
    pub fn expired(&mut self, now: u64) -> Vec<(NodeId, SessionId)> {
        let expired: Vec<_> =
            self.deadlines.iter().filter(|(_, deadline)| **deadline <= now).map(|(key, _)| *key).collect();
        for key in &expired {
            self.deadlines.remove(key);
        }
        expired
    }

    /// True if the session's clock is running here.
    pub fn tracks(&self, node: NodeId, session: SessionId) -> bool {
        self.deadlines.contains_key(&(node, session))
    }

    /// Stop tracking a session (it expired through the log, or was replaced).
    pub fn forget(&mut self, node: NodeId, session: SessionId) {
        self.deadlines.remove(&(node, session));
    }
}
