//! Removals of log segments on a thread of their own, for the real file
//! system ([`crate::OsFileSystem`]).
//!
//! Why: removing a closed segment frees its blocks and drops its pages
//! from the cache, which on ext4 took 25–37 ms for a 64 MiB segment here.
//! Done by the storage worker, that is a pause of every flush of the shard:
//! at 1,024 writers, the one stall in a 10 s window that made their p99.9
//! 30–60 ms against a p99 of 13 ms. Here each removal is queued, and a
//! thread removes the file and syncs its directory, one removal after the
//! other, in the order asked.
//!
//! What stays true: a segment is only asked to go once snapshots cover it
//! (`Wal::prune`), so nothing reads it again, and names never repeat (a
//! segment is named by its first log position). Removals reach the disk in
//! order, each with its own directory sync, so the segments left after a
//! crash are still a contiguous suffix, as when the worker removed them
//! itself; a crash before a queued removal leaves the segment, which
//! recovery removes again. The first failure (of the removal or of the
//! directory's sync) stops every later removal and is reported by
//! [`Remover::failure`] from then on: the storage treats it as a failed
//! sync, which is fatal. Dropping the remover waits for the queued
//! removals, so a storage reopened on the same directory never races one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

/// One removal: the file, and the directory to sync after.
struct Removal {
    path: PathBuf,
    dir: PathBuf,
}

/// What the thread and the storage share.
#[derive(Debug, Default)]
struct State {
    /// Removals asked for and not done (or skipped) yet.
    pending: usize,
    /// The first failure, kept for every report.
    failure: Option<(io::ErrorKind, String)>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    settled: Condvar,
    /// Whether `state` holds a failure: the check each sync of the
    /// storage makes ([`Remover::failure`]) reads this, not the lock.
    failed: AtomicBool,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The removal thread of one storage (see the module docs).
#[derive(Debug)]
pub(crate) struct Remover {
    queue: Option<Sender<Removal>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Remover {
    /// Start the thread; it carries out each removal with
    /// `remove_and_sync` (remove the file, one already gone counting as
    /// removed, then sync the directory).
    pub(crate) fn start(remove_and_sync: fn(&Path, &Path) -> io::Result<()>) -> io::Result<Remover> {
        let (queue, removals) = channel::<Removal>();
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new().name("cohort-wal-rm".into()).spawn({
            let shared = Arc::clone(&shared);
            move || {
                for Removal { path, dir } in removals {
                    let failed = shared.state().failure.is_some();
                    let result = if failed { Ok(()) } else { remove_and_sync(&path, &dir) };
                    let mut state = shared.state();
                    if let Err(error) = result {
                        state.failure = Some((error.kind(), format!("removing {}: {error}", path.display())));
                        shared.failed.store(true, Ordering::Release);
                    }
                    state.pending -= 1;
                    shared.settled.notify_all();
                }
            }
        })?;
        Ok(Remover { queue: Some(queue), shared, thread: Some(thread) })
    }

    /// Queue the removal of `path`, then a sync of `dir`. `Err`: an
    /// earlier removal failed (nothing more is removed).
    pub(crate) fn remove(&mut self, path: PathBuf, dir: PathBuf) -> io::Result<()> {
        self.failure()?;
        self.shared.state().pending += 1;
        let sent = self.queue.as_ref().map(|queue| queue.send(Removal { path, dir }));
        if !matches!(sent, Some(Ok(()))) {
            self.shared.state().pending -= 1;
            return Err(io::Error::other("the segment removal thread is gone"));
        }
        Ok(())
    }

    /// `Err` if a removal failed (then every later report says so too).
    pub(crate) fn failure(&self) -> io::Result<()> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        match &self.shared.state().failure {
            Some((kind, reason)) => Err(io::Error::new(*kind, reason.clone())),
            None => Ok(()),
        }
    }

    /// Wait until every removal asked for is done; then as [`Remover::failure`].
    pub(crate) fn settle(&self) -> io::Result<()> {
        let mut state = self.shared.state();
        while state.pending > 0 {
            state = self.shared.settled.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        drop(state);
        self.failure()
    }
}

impl Drop for Remover {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has done what is queued.
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the real file system's removals do (`disk.rs`).
    fn remove_and_sync(path: &Path, dir: &Path) -> io::Result<()> {
        match std::fs::remove_file(path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        std::fs::File::open(dir)?.sync_all()
    }

    #[test]
    fn v6_removals_are_done_in_order_and_settle_waits_for_them() {
        let dir = tempfile::tempdir().expect("a directory");
        let paths: Vec<PathBuf> = (0..20).map(|i| dir.path().join(format!("wal-{i:020}.seg"))).collect();
        for path in &paths {
            std::fs::write(path, vec![7u8; 64 * 1024]).expect("a segment");
        }
        let mut remover = Remover::start(remove_and_sync).expect("a thread");
        for path in &paths {
            remover.remove(path.clone(), dir.path().to_owned()).expect("queued");
        }
        remover.settle().expect("every removal done");
        assert!(paths.iter().all(|path| !path.exists()), "every queued segment is gone");
        remover.remove(paths[0].clone(), dir.path().to_owned()).expect("a file already gone counts as removed");
        remover.settle().expect("no failure");
    }

    #[test]
    fn v6_the_first_failure_stops_later_removals_and_is_reported_from_then_on() {
        let dir = tempfile::tempdir().expect("a directory");
        let kept = dir.path().join("wal-00000000000000000002.seg");
        std::fs::write(&kept, b"segment").expect("a segment");
        let mut remover = Remover::start(remove_and_sync).expect("a thread");
        let missing_dir = dir.path().join("no-such-directory");
        remover.remove(missing_dir.join("wal-1.seg"), missing_dir).expect("queued");
        remover.remove(kept.clone(), dir.path().to_owned()).expect("queued before the failure is known");
        let error = remover.settle().expect_err("the directory's sync failed");
        assert!(error.to_string().contains("no-such-directory"), "{error}");
        assert!(kept.exists(), "a removal after a failure is not done: the survivors stay a suffix");
        assert!(remover.failure().is_err(), "the failure is sticky");
        assert!(remover.remove(kept.clone(), dir.path().to_owned()).is_err(), "nothing more is queued");
    }

    #[test]
    fn v6_dropping_the_remover_waits_for_what_is_queued() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("wal-00000000000000000001.seg");
        std::fs::write(&path, vec![1u8; 1024 * 1024]).expect("a segment");
        let mut remover = Remover::start(remove_and_sync).expect("a thread");
        remover.remove(path.clone(), dir.path().to_owned()).expect("queued");
        drop(remover);
        assert!(!path.exists(), "the drop waited for the removal");
    }
}
