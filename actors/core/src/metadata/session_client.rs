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
//! F2, why the attempts are spaced: safety never rests on the session
//! (fencing by view and incarnation does), so a node should outlive a short
//! loss of the metadata group and keep serving the groups whose members it
//! reaches. Each failed attempt (no answer within two keepalive intervals)
//! is followed by a wait that doubles: `reconnect_backoff_ticks`, then twice
//! that, and so on ([`SessionClient::reconnect_span_ticks`] is the whole
//! span). The node stops only if the metadata group stayed unreachable for
//! all of it. The first session after start is retried without limit and
//! without backoff.
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
        /// When it was sent (`None`: send at `not_before_tick`).
        sent_tick: Option<u64>,
        /// An unsent attempt waits for this tick (the backoff, F2).
        not_before_tick: u64,
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
    reconnect_backoff_ticks: u64,
    state: SessionState,
}

/// The wait after a failed attempt doubles this many times at most.
const BACKOFF_DOUBLINGS_MAX: u32 = 10;

impl SessionClient {
    /// A client that opens its first session on its first tick. After a
    /// failed reconnect attempt `n` it waits `reconnect_backoff_ticks × 2^(n-1)`.
    pub fn new(policy: ExpiredPolicy, keepalive_interval_ticks: u64, reconnect_backoff_ticks: u64) -> SessionClient {
        assert!(keepalive_interval_ticks > 0, "keepalives need an interval of at least one tick");
        SessionClient {
            policy,
            keepalive_interval_ticks,
            reconnect_backoff_ticks,
            state: SessionState::Opening { attempt: 1, sent_tick: None, not_before_tick: 0, boot: true },
        }
    }

    /// The wait after failed reconnect attempt `attempt` (from 1).
    fn backoff_ticks(&self, attempt: u32) -> u64 {
        let doublings = attempt.saturating_sub(1).min(BACKOFF_DOUBLINGS_MAX);
        self.reconnect_backoff_ticks.saturating_mul(1 << doublings)
    }

    /// F2: how long the metadata group may stay unreachable after the node
    /// learned its session expired before `Reconnect` stops the node: every
    /// attempt's answer timeout plus the waits between attempts. `None`
    /// under `Shutdown`.
    pub fn reconnect_span_ticks(&self) -> Option<u64> {
        let ExpiredPolicy::Reconnect { attempts } = self.policy else { return None };
        let waits: u64 = (1..attempts).map(|attempt| self.backoff_ticks(attempt)).fold(0, u64::saturating_add);
        Some(u64::from(attempts).saturating_mul(self.open_timeout_ticks()).saturating_add(waits))
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
            SessionState::Opening { attempt, sent_tick: None, not_before_tick, boot } => {
                if now < not_before_tick {
                    return None;
                }
                self.state = SessionState::Opening { attempt, sent_tick: Some(now), not_before_tick, boot };
                Some(SessionAction::Open { attempt })
            }
            SessionState::Opening { attempt, sent_tick: Some(sent), boot, .. } => {
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
                if boot {
                    self.state = SessionState::Opening {
                        attempt: attempt + 1,
                        sent_tick: Some(now),
                        not_before_tick: now,
                        boot,
                    };
                    return Some(SessionAction::Open { attempt: attempt + 1 });
                }
                let not_before_tick = now.saturating_add(self.backoff_ticks(attempt));
                self.state = SessionState::Opening { attempt: attempt + 1, sent_tick: None, not_before_tick, boot };
                self.on_tick(now)
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
                self.state = SessionState::Opening { attempt: 1, sent_tick: None, not_before_tick: 0, boot: false };
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
