//! A node's side of its session with the metadata group (S1, S3).
//!
//! The node opens a session, sends a keepalive every `keepalive_interval_ticks`,
//! and learns of expiry either from the metadata group (a `SessionExpired`
//! message, or a keepalive answered as expired) or from its own silence.
//! What happens then is the policy (S3):
//! - `Shutdown`: the node stops;
//! - `Reconnect`: it opens a new session, up to `reconnect_attempts` times
//!   in a row; a session that opens resets the count. Past the attempts it
//!   stops.
//!
//! After a new session the node re-owns the groups it still hosts (S4, the
//! runtime's supervisor does that with the new session id). Sans-IO: ticks
//! in, commands out.

use cohort_messages::SessionId;

/// What to do when the session expires (`session_expired_policy`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExpiredPolicy {
    /// Stop the node.
    Shutdown,
    /// Open a new session, at most this many times in a row, then stop.
    Reconnect {
        /// Attempts before giving up.
        attempts: u32,
    },
}

/// Where the session is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SessionState {
    /// Waiting for `OpenSession` to commit.
    Opening {
        /// The attempt, counted from 1.
        attempt: u32,
        /// When it was sent (`None`: send on the next tick).
        sent_tick: Option<u64>,
        /// True for the first session after start: retried without limit.
        boot: bool,
    },
    /// Open.
    Open {
        /// The session.
        session: SessionId,
        /// When the last keepalive left.
        keepalive_tick: u64,
    },
    /// The node must stop (policy, or attempts used up).
    Stopped,
}

/// What the node must do now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SessionAction {
    /// Submit `OpenSession` (attempt n) to the metadata group.
    Open {
        /// The attempt.
        attempt: u32,
    },
    /// Send a keepalive for this session to the metadata primary.
    Keepalive(SessionId),
    /// A new session is open: re-own the hosted groups under it (S4).
    Reown(SessionId),
    /// Stop the node, with the reason.
    Stop(&'static str),
}

/// The session client.
#[derive(Clone, Debug)]
pub struct SessionClient {
    policy: ExpiredPolicy,
    keepalive_interval_ticks: u64,
    state: SessionState,
}

impl SessionClient {
    /// A client that opens its first session on its first tick.
    pub fn new(policy: ExpiredPolicy, keepalive_interval_ticks: u64) -> SessionClient {
        assert!(keepalive_interval_ticks > 0, "keepalives need an interval of at least one tick");
        SessionClient {
            policy,
            keepalive_interval_ticks,
            state: SessionState::Opening { attempt: 1, sent_tick: None, boot: true },
        }
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.state
    }

    /// An open attempt is given up after two keepalive intervals without an answer.
    fn open_timeout_ticks(&self) -> u64 {
        2 * self.keepalive_interval_ticks
    }

    /// Every tick.
    pub fn on_tick(&mut self, now: u64) -> Option<SessionAction> {
        match self.state {
            SessionState::Opening { attempt, sent_tick: None, boot } => {
                self.state = SessionState::Opening { attempt, sent_tick: Some(now), boot };
                Some(SessionAction::Open { attempt })
            }
            SessionState::Opening { attempt, sent_tick: Some(sent), boot } => {
                if now < sent.saturating_add(self.open_timeout_ticks()) {
                    return None;
                }
                // This attempt failed.
                let limit = match self.policy {
                    ExpiredPolicy::Reconnect { attempts } => attempts,
                    ExpiredPolicy::Shutdown => 1,
                };
                if !boot && attempt >= limit {
                    self.state = SessionState::Stopped;
                    return Some(SessionAction::Stop("no new session after every reconnect attempt"));
                }
                self.state = SessionState::Opening { attempt: attempt + 1, sent_tick: Some(now), boot };
                Some(SessionAction::Open { attempt: attempt + 1 })
            }
            SessionState::Open { session, keepalive_tick } => {
                if now >= keepalive_tick.saturating_add(self.keepalive_interval_ticks) {
                    self.state = SessionState::Open { session, keepalive_tick: now };
                    Some(SessionAction::Keepalive(session))
                } else {
                    None
                }
            }
            SessionState::Stopped => None,
        }
    }

    /// `OpenSession` committed with `session`.
    pub fn on_opened(&mut self, session: SessionId, now: u64) -> Option<SessionAction> {
        if !matches!(self.state, SessionState::Opening { .. }) {
            return None;
        }
        self.state = SessionState::Open { session, keepalive_tick: now };
        Some(SessionAction::Reown(session))
    }

    /// The metadata group says `session` expired (S1), or refused its keepalive.
    pub fn on_expired(&mut self, session: SessionId) -> Option<SessionAction> {
        match self.state {
            SessionState::Open { session: current, .. } if current == session => {}
            _ => return None, // A stale notice about an older session.
        }
        match self.policy {
            ExpiredPolicy::Reconnect { attempts } if attempts > 0 => {
                self.state = SessionState::Opening { attempt: 1, sent_tick: None, boot: false };
                None
            }
            ExpiredPolicy::Reconnect { .. } => {
                self.state = SessionState::Stopped;
                Some(SessionAction::Stop("session expired and session_reconnect_attempts is 0"))
            }
            ExpiredPolicy::Shutdown => {
                self.state = SessionState::Stopped;
                Some(SessionAction::Stop("session expired and session_expired_policy is shutdown"))
            }
        }
    }
}
