//! A message log's state machine, the one the `log` example and `cohort
//! bench --state message-log` (K7) run: one partition's messages in segment
//! files that it keeps itself (D1, [`Durability::Persistent`]), so a
//! partition can hold more than memory. docs/embedding.md ("State on disk")
//! has the contract; this is one way to meet it for an append-only log.
//!
//! **Where things are.** One directory per partition,
//! `<dir>/partition-<id>/` ([`LogStore::path`]):
//! - `checkpoint`: the commit point (below).
//! - `generation-<n>/<first offset, 20 digits>.log`: the segments, each a
//!   run of records (a message's length, a CRC-32C, the message) starting
//!   at the offset its name says. A segment is cut before a record would
//!   take it past [`LogStoreConfig::segment_size_max_bytes`].
//!
//! A generation is one lineage of segments: a `restore` (a state transfer)
//! writes the new state into the next generation's directory, so the
//! previous checkpoint's segments stay intact until the checkpoint that
//! names the new generation is durable; then the old directory is removed.
//! `clear` starts a new generation too.
//!
//! **What is durable when.**
//! - `apply` writes the record at the end of the last segment (a plain
//!   write: in the page cache, not synced). `read` and `snapshot` see it at
//!   once.
//! - `checkpoint(record)` syncs every segment written since the previous
//!   checkpoint and the directories of those it created, then replaces the
//!   `checkpoint` file atomically (a temporary file, synced, renamed over
//!   it, the directory synced). That file holds the record, the generation,
//!   the earliest and next offsets, and the last segment's length: the
//!   rename is the commit point. A crash before it leaves the previous
//!   checkpoint; after it, this one.
//! - A restart ([`LogStore::open`]) reads the `checkpoint` file, cuts the
//!   last segment back to the length it names, removes segments past it
//!   (and other generations' directories): the state is exactly the
//!   checkpoint's, and cohort applies what came after again from its log.
//!   No `checkpoint` file: an empty partition (leftovers are removed).
//! - `restore` writes the new generation (not synced); cohort asks for a
//!   checkpoint right after, which makes it durable.
//! - `clear` removes the `checkpoint` file durably (the partition is then
//!   empty after any restart), then the partition's directory.
//!
//! **Retention.** A partition keeps at most
//! [`LogStoreConfig::retention_bytes`] of segments (and always its last
//! segment): after each append, whole oldest segments are dropped while it
//! holds more. Offsets keep counting; a fetch below the earliest kept
//! offset is answered [`Answer::Trimmed`] with that offset. Where segments
//! are cut and which are dropped depends only on the messages and the two
//! limits, never on when checkpoints ran, so every replica answers a fetch
//! alike; every node must therefore run a partition with the same limits,
//! as it runs the same code. A dropped segment's file is removed once the
//! next checkpoint, which no longer names it, is durable.
//!
//! **Batches (K5).** The store takes op batches: a producer sends many
//! messages in one write (`Client::write_batch`), which cohort logs,
//! replicates and applies as one entry; each message is appended in turn and
//! answered with its own offset, and the batch's records reach the segment
//! in one write (one per segment, where the batch crosses a cut). Every
//! write to a partition is a batch (a plain write is refused by cohort
//! before it enters the log).
//!
//! **Early writeback.** After every 1 MiB appended to a segment, the file
//! is handed to one background thread of the process that syncs it
//! (`log_store/writeback.rs`), so that a checkpoint's sync, on the thread that applies
//! the shard's groups, finds little left to write. It is a hint: the
//! checkpoint's sync is still what makes the segments durable.
//!
//! **Reads** ([`fetch`], [`Answer`]) come from the files: a fetch finds
//! its segment among those in memory, then its record through the
//! segment's sparse index, and reads at most [`FETCH_MESSAGES_MAX`]
//! messages and [`FETCH_SIZE_MAX_BYTES`].
//!
//! **Memory** per partition: one entry (8 bytes) of sparse index per 4 KiB
//! of segment, plus about 80 bytes per segment (and, for the last segment,
//! up to as much again in spare capacity while it grows): 2 MiB for a full
//! partition at the default 1 GiB retention (16 segments of 64 MiB), 16 KiB
//! for 8 MiB. Why sparse: a full index (one entry per message) costs in
//! proportion to the messages, 8 bytes each, which for small messages is a
//! large share of what is on disk; one entry per 4 KiB bounds it by bytes
//! and makes a fetch read at most 4 KiB (and a record) before its first
//! message. The index is not kept on disk: it is rebuilt when the store
//! opens, by reading and checking every kept record once (a restart reads
//! the partition once; a kept index file would be one more file to check
//! and keep in step). A state transfer (`snapshot`, `restore`) holds the whole kept
//! state in memory, up to the retention limit (streamed snapshots are issue
//! 34 item 3, not built yet).
//!
//! **Failures.** Every byte from outside is checked: a fetch query that
//! does not decode is answered [`Answer::Failed`]; a snapshot that does not
//! decode is refused whole ([`decode_snapshot`]); a message over
//! [`MESSAGE_SIZE_MAX_BYTES`] is refused, not appended. On disk, every
//! record has a checksum and every file is checked when the store opens: a
//! damaged or contradictory `checkpoint` file, a missing segment, a
//! damaged record below the checkpointed length, all make
//! [`LogStore::open`] fail with what and where. The node's factory
//! ([`LogStore::open_or_empty`]) does not stop the node then: it says why
//! on stderr, moves the partition's directory aside
//! (`partition-<id>.damaged-<time>`, for the operator), and returns an
//! empty store with no checkpoint, so cohort rebuilds the partition from
//! its log or from another member. Damage found later, under a fetch or a
//! snapshot, is answered [`Answer::Failed`] or a snapshot the receiver
//! refuses with the reason. An I/O error under `apply` (which cannot
//! return one) is a dead environment: the store panics with the path and
//! the error rather than diverge from the other replicas, which stops the
//! group's shard; a restart opens the store at its checkpoint again.

mod checkpoint;
mod encoding;
mod files;
mod segment;
mod segments;
mod writeback;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use cohort_core::{Durability, StateMachine};
use cohort_messages::op_batch::{OpBatch, OpResults};
use cohort_messages::{GroupId, Op};

use checkpoint::Checkpoint;
pub use encoding::{
    Answer, FETCH_MESSAGES_MAX, FETCH_SIZE_MAX_BYTES, MESSAGE_SIZE_MAX_BYTES, PartitionSnapshot, appended_offset,
    decode_answer, decode_snapshot, fetch,
};
use encoding::{Fetched, SnapshotWriter};
pub use segment::SEGMENT_SIZE_LIMIT_BYTES;
use segments::Segments;

/// The default [`LogStoreConfig::segment_size_max_bytes`]: 64 MiB.
pub const SEGMENT_SIZE_MAX_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// The default [`LogStoreConfig::retention_bytes`]: 1 GiB.
pub const RETENTION_BYTES_DEFAULT: u64 = 1024 * 1024 * 1024;

/// Where a generation's directory name starts; the generation follows.
const GENERATION_PREFIX: &str = "generation-";

/// A partition's limits. Every node must run a partition with the same
/// ones: they decide where segments are cut and which are dropped, which
/// fetches see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogStoreConfig {
    /// A segment is cut before a record would take it past this (a record
    /// larger than it has a segment of its own); 1 to
    /// [`SEGMENT_SIZE_LIMIT_BYTES`].
    pub segment_size_max_bytes: u64,
    /// Whole oldest segments are dropped while the partition holds more
    /// than this; the last segment is always kept.
    pub retention_bytes: u64,
}

impl Default for LogStoreConfig {
    fn default() -> LogStoreConfig {
        LogStoreConfig {
            segment_size_max_bytes: SEGMENT_SIZE_MAX_BYTES_DEFAULT,
            retention_bytes: RETENTION_BYTES_DEFAULT,
        }
    }
}

impl LogStoreConfig {
    /// Why these limits cannot be used, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=SEGMENT_SIZE_LIMIT_BYTES).contains(&self.segment_size_max_bytes) {
            return Err(format!(
                "segment_size_max_bytes is {}, not 1 to {SEGMENT_SIZE_LIMIT_BYTES}",
                self.segment_size_max_bytes
            ));
        }
        Ok(())
    }
}

/// One partition's messages, on disk in segment files (see the module
/// docs).
pub struct LogStore {
    /// The partition's directory.
    path: PathBuf,
    config: LogStoreConfig,
    /// The generation the segments are in: the checkpoint's, or a newer
    /// one since a `restore` or a `clear`.
    generation: u64,
    segments: Segments,
    /// The newest durable checkpoint's record.
    record: Option<Bytes>,
    /// Whether the partition's directory was made (or found) by this
    /// store, with the directories above it to sync in `unsynced_dirs`.
    dir_made: bool,
    /// Directories above the partition's that gained entries since the
    /// last checkpoint.
    unsynced_dirs: BTreeSet<PathBuf>,
    /// Other generations' directories may be left to remove.
    stale_generations: bool,
}

impl LogStore {
    /// Where partition `group`'s directory is under `dir`.
    pub fn path(dir: &Path, group: GroupId) -> PathBuf {
        dir.join(format!("partition-{}", group.0))
    }

    /// Open the partition in the directory `path` (made at the first
    /// append if missing) at its newest checkpoint. `Err` names the file
    /// and what is wrong with it: limits that cannot be used, a damaged
    /// checkpoint or segment, an I/O error.
    pub fn open(path: &Path, config: LogStoreConfig) -> Result<LogStore, String> {
        config.check()?;
        let found = checkpoint::read(path)?;
        let mut store = LogStore::empty(path.to_owned(), config);
        store.generation = found.as_ref().map_or(0, |found| found.generation);
        store.record = found.as_ref().map(|found| found.record.clone());
        store.stale_generations = true;
        store.remove_stale_generations();
        let (earliest, next, active_size_bytes) =
            found.map_or((0, 0, 0), |found| (found.earliest, found.next, found.active_size_bytes));
        store.segments = Segments::open(store.generation_dir(store.generation), earliest, next, active_size_bytes)?;
        Ok(store)
    }

    /// Partition `group`'s store under `dir`, for a node's factory. A
    /// partition that cannot be opened is moved aside
    /// (`partition-<id>.damaged-<time>`) and the store starts empty, with
    /// no checkpoint; the reason goes to stderr.
    ///
    /// # Panics
    ///
    /// If `config` fails [`LogStoreConfig::check`] (check it first), or a
    /// partition that cannot be opened cannot be moved aside either (the
    /// disk is gone).
    pub fn open_or_empty(dir: &Path, group: GroupId, config: LogStoreConfig) -> LogStore {
        if let Err(reason) = config.check() {
            panic!("log: {reason}");
        }
        let path = LogStore::path(dir, group);
        let reason = match LogStore::open(&path, config) {
            Ok(store) => return store,
            Err(reason) => reason,
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let aside = path.with_extension(format!("damaged-{nanos}"));
        match std::fs::rename(&path, &aside) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                panic!("log: {reason}; and {} could not be moved aside: {error}", path.display())
            }
            _ => {}
        }
        eprintln!(
            "log: {reason}; {group} starts empty here and is rebuilt from the log or another member ({} moved to {})",
            path.display(),
            aside.display()
        );
        LogStore::empty(path, config)
    }

    /// A store with no message and no checkpoint in `path`.
    fn empty(path: PathBuf, config: LogStoreConfig) -> LogStore {
        let segments = Segments::empty(path.join(format!("{GENERATION_PREFIX}0")), 0);
        LogStore {
            path,
            config,
            generation: 0,
            segments,
            record: None,
            dir_made: false,
            unsynced_dirs: BTreeSet::new(),
            stale_generations: false,
        }
    }

    /// The oldest offset kept (those below were dropped by retention).
    pub fn earliest(&self) -> u64 {
        self.segments.earliest()
    }

    /// The offset the next append takes: the messages ever appended.
    pub fn next(&self) -> u64 {
        self.segments.next()
    }

    /// The bytes of the segments kept.
    pub fn kept_bytes(&self) -> u64 {
        self.segments.kept_bytes()
    }

    /// The segments kept.
    pub fn segment_count(&self) -> usize {
        self.segments.count()
    }

    /// The entries of the sparse index in memory (8 bytes each).
    pub fn index_entries(&self) -> usize {
        self.segments.index_entries()
    }

    /// The directory of the current generation's segments.
    pub fn segments_dir(&self) -> PathBuf {
        self.generation_dir(self.generation)
    }

    /// Make the partition's directory if it is missing. Its entry in its
    /// parent (and those of any directory made above it) is synced at the
    /// next checkpoint: the first of each store syncs the parent even when
    /// the directory was found, as a crash may have left it unsynced.
    fn make_dir(&mut self) -> Result<(), String> {
        if !self.dir_made {
            files::create_dirs(&self.path, &mut self.unsynced_dirs)
                .map_err(|error| format!("{}: could not create: {error}", self.path.display()))?;
            self.unsynced_dirs.extend(self.path.parent().map(Path::to_owned));
            self.dir_made = true;
        }
        Ok(())
    }

    fn generation_dir(&self, generation: u64) -> PathBuf {
        self.path.join(format!("{GENERATION_PREFIX}{generation}"))
    }

    /// Remove other generations' directories and a temporary checkpoint
    /// file; what cannot be removed is reported and tried again after the
    /// next checkpoint.
    fn remove_stale_generations(&mut self) {
        let entries = match std::fs::read_dir(&self.path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                self.stale_generations = false;
                return;
            }
            Err(error) => return eprintln!("log: {}: could not list: {error}", self.path.display()),
            Ok(entries) => entries,
        };
        let mut removed = true;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_str().unwrap_or_default();
            let generation = name.strip_prefix(GENERATION_PREFIX).and_then(|n| n.parse::<u64>().ok());
            let outcome = match generation {
                Some(generation) if generation != self.generation => files::remove_dir(&entry.path()),
                _ if name == checkpoint::TEMPORARY_FILE_NAME => files::remove_file(&entry.path()),
                _ => Ok(()),
            };
            if let Err(error) = outcome {
                eprintln!("log: {error}");
                removed = false;
            }
        }
        self.stale_generations = !removed;
    }

    /// After a durable checkpoint: remove what it no longer names.
    fn sweep(&mut self) {
        if self.stale_generations {
            self.remove_stale_generations();
        }
        if self.segments.has_trimmed()
            && let Err(error) = self.segments.remove_trimmed()
        {
            eprintln!("log: {error}");
        }
    }
}

impl StateMachine for LogStore {
    /// Append; the result is the message's offset (`u64`, little-endian;
    /// [`appended_offset`]), or a refusal for a message over
    /// [`MESSAGE_SIZE_MAX_BYTES`].
    ///
    /// # Panics
    ///
    /// On an I/O error writing the segment (see the module docs).
    fn apply(&mut self, _op: Op, message: &[u8]) -> Bytes {
        if message.len() > MESSAGE_SIZE_MAX_BYTES {
            return encoding::refused_too_large();
        }
        let segment_size_max_bytes = self.config.segment_size_max_bytes;
        let appended = self.make_dir().and_then(|()| self.segments.append(message, segment_size_max_bytes));
        let offset = appended.unwrap_or_else(|error| panic!("log: {error}"));
        self.segments.trim(self.config.retention_bytes);
        encoding::appended(offset)
    }

    /// K5: producers append in batches (`Client::write_batch`): a batch
    /// is one entry of cohort's log and one call of `apply_op_batch`.
    fn takes_op_batches(&self) -> bool {
        true
    }

    /// Each message appended as `apply` would, its offset (or refusal) its
    /// result, with one write per segment the batch reaches and retention
    /// applied once at the end: the same files and the same drops as
    /// message by message (a drop depends only on what is kept, which
    /// only grows during the batch).
    ///
    /// # Panics
    ///
    /// On an I/O error writing the segment (see the module docs).
    fn apply_op_batch(&mut self, _op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        if let Err(error) = self.make_dir() {
            panic!("log: {error}");
        }
        let mut appender = self.segments.appender(self.config.segment_size_max_bytes);
        for message in batch.iter() {
            if message.len() > MESSAGE_SIZE_MAX_BYTES {
                results.push(&encoding::refused_too_large());
                continue;
            }
            let offset = appender.append(message).unwrap_or_else(|error| panic!("log: {error}"));
            results.push(&offset.to_le_bytes());
        }
        appender.finish().unwrap_or_else(|error| panic!("log: {error}"));
        self.segments.trim(self.config.retention_bytes);
    }

    /// The query is [`fetch`]'s; the answer is an [`Answer`], encoded.
    fn read(&self, query: &[u8]) -> Bytes {
        let (offset, count) = match encoding::decode_fetch(query) {
            Ok(fetch) => fetch,
            Err(reason) => return encoding::failed(&reason),
        };
        if offset < self.segments.earliest() {
            return encoding::trimmed(self.segments.earliest());
        }
        let mut fetched = Fetched::new(count);
        match self.segments.read(offset, &mut fetched) {
            Ok(()) => fetched.finish(),
            Err(reason) => encoding::failed(&reason),
        }
    }

    fn snapshot(&self) -> Bytes {
        let mut writer = SnapshotWriter::new(self.segments.earliest(), self.segments.kept_bytes() as usize);
        match self.segments.for_each(|message| writer.push(message)) {
            Ok(()) => writer.finish(),
            Err(reason) => {
                eprintln!("log: could not read the partition for a state transfer: {reason}");
                encoding::snapshot_failed(&reason)
            }
        }
    }

    /// Write the snapshot's messages into a new generation; on `Err` the
    /// state is unchanged.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let decoded = decode_snapshot(snapshot)?;
        self.make_dir()?;
        let generation = self.generation + 1;
        let mut restored = Segments::empty(self.generation_dir(generation), decoded.earliest);
        for message in decoded.messages() {
            if let Err(error) = restored.append(message, self.config.segment_size_max_bytes) {
                restored.discard();
                return Err(format!("restore: {error}"));
            }
        }
        debug_assert_eq!(restored.next(), decoded.next, "decode_snapshot counted the messages");
        self.segments = restored;
        self.generation = generation;
        self.stale_generations = true;
        Ok(())
    }

    fn durability(&self) -> Durability {
        Durability::Persistent
    }

    /// D2: a run appends to segment files: applied on the shard's apply
    /// worker, off the thread that serves the shard's other groups.
    fn apply_off_shard(&self) -> bool {
        true
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        if record.len() > checkpoint::RECORD_SIZE_MAX_BYTES {
            return Err(format!("a record of {} bytes; a checkpoint holds at most 4 GiB", record.len()));
        }
        self.make_dir()?;
        self.segments.sync()?;
        for dir in &self.unsynced_dirs {
            files::sync(dir)?;
        }
        self.unsynced_dirs.clear();
        let checkpoint = Checkpoint {
            generation: self.generation,
            earliest: self.segments.earliest(),
            next: self.segments.next(),
            active_size_bytes: self.segments.active_size_bytes(),
            record: Bytes::copy_from_slice(record),
        };
        checkpoint::write(&self.path, &checkpoint)?;
        self.record = Some(checkpoint.record);
        self.sweep();
        Ok(())
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.record.clone()
    }

    fn clear(&mut self) -> Result<(), String> {
        checkpoint::remove(&self.path)?;
        self.record = None;
        self.generation += 1;
        self.segments = Segments::empty(self.generation_dir(self.generation), 0);
        self.dir_made = false;
        // The state is durably gone with the checkpoint; what follows only
        // frees the disk (what it leaves is removed at the next open or
        // checkpoint).
        let parent = self.path.parent().filter(|parent| parent.exists());
        match files::remove_dir(&self.path).and_then(|()| parent.map_or(Ok(()), files::sync)) {
            Ok(()) => self.stale_generations = false,
            Err(error) => {
                eprintln!("log: {error}");
                self.stale_generations = true;
            }
        }
        Ok(())
    }
}
