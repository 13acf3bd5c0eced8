//! How a group replicates, as its placement names it and the metadata
//! records it: the replication quorum and when writes are acknowledged
//! (Q4). Every member of a group, and every replica added to it later,
//! builds its replica from the same values.

use serde::{Deserialize, Serialize};

use crate::error::{Invalid, invalid};
use crate::{Command, GROUP_MEMBERS_MAX};

/// When a write is acknowledged (Q4), chosen per group.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WriteMode {
    /// After the op commits (a replication quorum holds it durably) and is
    /// applied; the reply carries the state machine's result. Never lost.
    #[default]
    Sync,
    /// As soon as the primary's own copy is durable, before replication; the
    /// reply carries the op number and an empty result. Fire-and-forget: a
    /// write acknowledged this way is lost if the primary fails before a
    /// quorum holds it (like an asynchronous space).
    Async,
}

/// A group's replication settings.
///
/// ```
/// use cohort_messages::replication::{Replication, WriteMode};
/// let all = Replication { quorum: Some(3), write_mode: WriteMode::Sync };
/// assert_eq!(all.quorum_for(3, 3), 3);
/// assert_eq!(all.quorum_for(3, 4), 4, "write-all stays write-all when a member joins");
/// assert_eq!(Replication::default().quorum_for(3, 5), 3, "a majority");
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Replication {
    /// The replication quorum Qr (`None`: a majority of the voters).
    pub quorum: Option<u8>,
    /// Q4: synchronous or asynchronous writes.
    pub write_mode: WriteMode,
}

impl Replication {
    /// A quorum in `1..=members` when one is given.
    pub fn validate(&self, members: usize) -> Result<(), Invalid> {
        match self.quorum {
            Some(quorum) if quorum == 0 || usize::from(quorum) > members.min(GROUP_MEMBERS_MAX) => {
                Err(invalid(Command::Request, "replication quorum outside 1..=members"))
            }
            _ => Ok(()),
        }
    }

    /// The quorum for a group of `members` voters, when these settings were
    /// given for `members_before` voters: a majority stays a majority,
    /// write-all stays write-all, and any other quorum stays what it was
    /// (at most the new member count).
    pub fn quorum_for(&self, members_before: usize, members: usize) -> usize {
        let members = members.max(1);
        match self.quorum.map(usize::from) {
            None => members / 2 + 1,
            Some(quorum) if quorum >= members_before => members,
            Some(quorum) => quorum.clamp(1, members),
        }
    }
}
