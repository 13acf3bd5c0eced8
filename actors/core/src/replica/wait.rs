//! Quorum waits (Q1, Q2): wait until `quorum` members durably hold an op.
//!
//! Members that already hold the op count at once; later PrepareOks count as
//! they arrive. A wait ends with `Ok`, or with a typed error that names the
//! quorum, the acks collected and the ticks waited (timeout, cancellation, or
//! loss of the primary role). A new primary uses exactly this to commit what
//! it inherited (Q3), the fix of a leader that timed out waiting for its
//! quorum and dropped an acknowledged write.

use cohort_messages::Op;

use super::{Replica, RoleState};
use crate::effect::{Effect, QuorumWaitError, WaitId};
use crate::effects::Effects;
use crate::quorum::holders;

/// One pending wait.
#[derive(Clone, Debug)]
pub(crate) struct QuorumWait {
    pub id: WaitId,
    pub op: Op,
    pub quorum: usize,
    pub started_tick: u64,
    pub deadline_tick: u64,
}

impl Replica {
    /// Start a wait; it may end at once.
    pub(crate) fn wait_quorum(
        &mut self,
        id: WaitId,
        op: Op,
        quorum: usize,
        timeout_ticks: u64,
        now: u64,
        out: &mut Effects,
    ) {
        let done = |result| Effect::QuorumWaitDone { wait: id, result };
        if !self.is_primary() {
            return out.push(done(Err(QuorumWaitError::NotPrimary { group: self.spec.group, view: self.view })));
        }
        if quorum == 0 || quorum > self.spec.members.len() {
            return out.push(done(Err(QuorumWaitError::Impossible { quorum, members: self.spec.members.len() })));
        }
        self.lead_mut().waits.push(QuorumWait {
            id,
            op,
            quorum,
            started_tick: now,
            deadline_tick: now.saturating_add(timeout_ticks),
        });
        self.check_waits(out);
        assert!(self.lead().waits.iter().all(|wait| wait.quorum <= self.spec.members.len()), "Q1: quorums of voters");
    }

    /// The primary ends the waits whose quorum is reached.
    pub(crate) fn check_waits(&mut self, out: &mut Effects) {
        if self.lead().waits.is_empty() {
            return;
        }
        let held = self.held_ops();
        self.lead_mut().waits.retain(|wait| {
            if holders(&held, wait.op) >= wait.quorum {
                out.push(Effect::QuorumWaitDone { wait: wait.id, result: Ok(()) });
                false
            } else {
                true
            }
        });
        debug_assert!(self.lead().waits.iter().all(|wait| holders(&held, wait.op) < wait.quorum), "Q1: all ended");
    }

    /// The primary ends the waits whose deadline passed (Q2).
    pub(crate) fn expire_waits(&mut self, now: u64, out: &mut Effects) {
        let held = self.held_ops();
        self.lead_mut().waits.retain(|wait| {
            if now < wait.deadline_tick {
                return true;
            }
            let error = QuorumWaitError::Timeout {
                quorum: wait.quorum,
                acks: holders(&held, wait.op),
                waited_ticks: now - wait.started_tick,
            };
            out.push(Effect::QuorumWaitDone { wait: wait.id, result: Err(error) });
            false
        });
        debug_assert!(self.lead().waits.iter().all(|wait| now < wait.deadline_tick), "Q2: every expired wait ended");
    }

    /// Cancel one wait (Q2). False if it is not pending here (only a
    /// primary has waits).
    pub(crate) fn cancel_wait(&mut self, id: WaitId, now: u64, out: &mut Effects) -> bool {
        let RoleState::Primary(primary) = &mut self.role else { return false };
        let Some(index) = primary.waits.iter().position(|wait| wait.id == id) else { return false };
        let wait = primary.waits.remove(index);
        let error = QuorumWaitError::Cancelled {
            quorum: wait.quorum,
            acks: holders(&self.held_ops(), wait.op),
            waited_ticks: now - wait.started_tick,
        };
        out.push(Effect::QuorumWaitDone { wait: id, result: Err(error) });
        debug_assert!(self.lead().waits.iter().all(|wait| wait.id != id), "Q2: a wait ends once");
        true
    }

    /// The primary role ended: every wait it held (`waits`) fails, as not
    /// primary in the view this replica is in now.
    pub(crate) fn fail_waits(&self, waits: Vec<QuorumWait>, out: &mut Effects) {
        debug_assert!(
            waits.iter().all(|wait| wait.started_tick <= wait.deadline_tick),
            "Q2: a wait ends after it began"
        );
        for wait in waits {
            out.push(Effect::QuorumWaitDone {
                wait: wait.id,
                result: Err(QuorumWaitError::NotPrimary { group: self.spec.group, view: self.view }),
            });
        }
    }
}
