//! Early writeback: segment bytes pushed to the disk in the background as
//! they are appended, so that a checkpoint's sync finds little left to
//! write.
//!
//! Appends are plain writes into the page cache, and the kernel writes
//! dirty pages back on its own only late (after 30 s, or past a share of
//! memory). Left alone, every byte appended since the last checkpoint is
//! written by that checkpoint's sync, on the thread that applies: a
//! partition written at 5 MB/s with cohort's default checkpoint every 8
//! MiB of log syncs 8 MiB at once, tens of milliseconds during which no
//! other group of the shard applies (the message log's p99 showed it). So
//! after every [`WRITEBACK_INTERVAL_BYTES`] appended to a segment, the
//! store asks one background thread of the process to sync that file; the
//! checkpoint's own sync still makes everything durable and reports any
//! error (this thread opens the file anew for each sync, so an error it
//! meets is also reported through the store's own descriptor: Linux keeps
//! a write error for every description opened before it).
//!
//! It is only a hint: at most [`QUEUED_MAX`] syncs wait (more are
//! dropped), a file gone by then (dropped by retention) is skipped, and
//! nothing waits for it.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, sync_channel};

/// A segment file is synced in the background after this many bytes were
/// appended to it since the last time.
pub(super) const WRITEBACK_INTERVAL_BYTES: u64 = 1024 * 1024;

/// Syncs waiting for the background thread at most.
const QUEUED_MAX: usize = 1024;

/// The background thread's queue; `None` if it could not be started (then
/// checkpoints sync everything, as without it).
static QUEUE: OnceLock<Option<SyncSender<PathBuf>>> = OnceLock::new();

/// Ask for `path` to be synced in the background.
pub(super) fn hint(path: PathBuf) {
    let queue = QUEUE.get_or_init(|| {
        let (queue, paths) = sync_channel::<PathBuf>(QUEUED_MAX);
        let thread = std::thread::Builder::new().name("log-writeback".into()).spawn(move || {
            for path in paths {
                // An error here is met again by the checkpoint's sync.
                if let Ok(file) = std::fs::File::open(&path) {
                    let _ = file.sync_data();
                }
            }
        });
        thread.ok().map(|_| queue)
    });
    if let Some(queue) = queue {
        let _ = queue.try_send(path);
    }
}
