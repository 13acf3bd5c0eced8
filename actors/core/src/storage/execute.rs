//! The one executor of the core's storage effects, used by the node's
//! storage worker and by the simulator: both drive a [`Storage`] with the
//! same rules, so they cannot drift apart.
//!
//! The rules: effects run in the order the core emitted them; an append,
//! truncation or snapshot that fails stops the node (the error is
//! returned); a superblock stage that fails without killing the
//! environment is reported for that group alone (R12) and the node goes
//! on; a fatal stage error stops the node like any other. A `Flush` is not
//! run here: the driver makes what is staged durable when it chooses
//! (the worker at once, after the turns queued behind it; the simulator
//! after a seeded delay) and then reports it to the core.

use cohort_messages::GroupId;

use super::{Storage, StorageError};
use crate::effect::{Effect, FlushId};

/// What executing one effect leaves for the driver to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Executed {
    /// Staged, or saved (a snapshot): nothing more.
    Done,
    /// Make everything staged durable with [`Storage::flush`], then call
    /// `Shard::on_flushed` with this id.
    Flush(FlushId),
    /// Staging this group's superblock failed (R12): call
    /// `Shard::on_superblock_failed` for it.
    SuperblockFailed(GroupId),
    /// Not a storage effect: the driver executes it itself.
    NotStorage(Effect),
}

/// Execute one of the core's effects against `storage`. `Err` means the
/// node must stop: the environment is dead, or the log would no longer be
/// what the core believes.
pub fn execute(storage: &mut impl Storage, effect: Effect) -> Result<Executed, StorageError> {
    match effect {
        Effect::Append { group, entry } => storage.append(group, &entry).map(|()| Executed::Done),
        Effect::Truncate { group, after } => storage.truncate_after(group, after).map(|()| Executed::Done),
        Effect::StageSuperblock { group, superblock } => match storage.stage_superblock(group, &superblock) {
            Ok(()) => Ok(Executed::Done),
            Err(error) if error.is_fatal() => Err(error),
            Err(_) => Ok(Executed::SuperblockFailed(group)),
        },
        Effect::SaveSnapshot { group, snapshot, deferrable: false } => {
            storage.save_snapshot(group, &snapshot).map(|()| Executed::Done)
        }
        Effect::SaveSnapshot { group, snapshot, deferrable: true } => {
            storage.defer_snapshot(group, &snapshot).map(|()| Executed::Done)
        }
        Effect::Flush { id } => Ok(Executed::Flush(id)),
        other => {
            debug_assert!(!other.kind().is_storage(), "every storage effect is executed above");
            Ok(Executed::NotStorage(other))
        }
    }
}
