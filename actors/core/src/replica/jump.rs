//! T5: bounded view jumps ([`crate::CoreConfig::view_jump_max_views`]).
//!
//! Why bound them, and why only here: a replica that follows a live
//! primary has no reason to leave it for a view far ahead on one peer's
//! word, and if it did, one forged or corrupt message would move a healthy
//! group deep into its view space (and the new view is staged in the
//! superblock at once). A replica that follows no live primary is exactly
//! the one that may need a far view to catch up (it was down or cut off
//! through many view changes), so it takes any. The full argument is on
//! the config field.

use cohort_messages::View;

use super::{Replica, RoleState};

impl Replica {
    /// True while this replica follows a live primary: it is that primary,
    /// inside its quorum window (R24), or a backup or learner whose lease
    /// from its primary still runs (one heartbeat timeout after the newest
    /// Commit it accepted, V7).
    pub(crate) fn follows_live_primary(&self, now: u64) -> bool {
        match self.role {
            RoleState::ViewChange(_) => false,
            RoleState::Primary(_) => now < self.step_down_tick(),
            RoleState::Backup(_) | RoleState::Learner => now < self.lease_expiry,
        }
    }

    /// True if a message of `view` must be refused: it is more than
    /// `view_jump_max_views` above this replica's view, and this replica
    /// follows a live primary.
    pub(crate) fn view_jump_refused(&self, view: View, now: u64) -> bool {
        let limit = u64::from(self.view.0) + u64::from(self.config.view_jump_max_views);
        u64::from(view.0) > limit && self.follows_live_primary(now)
    }
}
