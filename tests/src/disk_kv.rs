//! D1 in the simulator: the workload's kv map as a state machine that keeps
//! its state on the node's simulated disk ([`cohort_core::Durability::Persistent`]).
//!
//! It holds the map in memory and writes it whole, with cohort's record, at
//! each checkpoint: into a temporary file, synced, renamed over the
//! group's checkpoint file, and the directory synced, so a power loss at
//! any call leaves the previous checkpoint or the new one. Applies after the
//! last checkpoint live only in memory: any crash (a kill as much as a power
//! loss) takes the state back to that checkpoint, behind the log's durable
//! op, and cohort must apply the rest again from its log. The disk's
//! faults reach it too: a full disk or a failed write or sync fails the
//! checkpoint (cohort keeps its log and asks again), and a checkpoint file
//! that does not check (its digest) counts as none, so the replica is
//! rebuilt from the other members if cohort's own snapshot needs it.
//!
//! D3: it streams its newest checkpoint's pairs to a lagging member
//! ([`StateMachine::export`]), and stages a stream it receives in two files
//! of its own: the stream's key (written whole: temporary file, sync,
//! rename) and its chunks, each appended as a framed record (size, bytes,
//! digest) and synced before the next is asked for. A power loss keeps the
//! records up to the first that does not check, so the transfer resumes
//! after the last whole chunk. The last chunk builds the new checkpoint
//! file from the staged pairs and cohort's record, renamed over the old
//! one: the same atomic step as a checkpoint.
//!
//! A simulated group's state is a few hundred pairs, so writing it whole is
//! cheap here; what the simulator checks is the contract's timing (what is
//! durable when), not the engine.

use crate::shared::Shared;
use std::path::PathBuf;

use bytes::{BufMut, Bytes, BytesMut};
use cohort_core::{Durability, StateExport, StateMachine};
use cohort_messages::op_batch::{OpBatch, OpResults};
use cohort_messages::{GroupId, Op};
use cohort_wal::{FileSystem, OpenMode};

use crate::disk::SimDisk;
use crate::kv::{Kv, digest};

/// Where the state machines of a node keep their checkpoints.
pub fn state_dir() -> PathBuf {
    PathBuf::from("/cohort/state")
}

const MAGIC: &[u8; 4] = b"SKV1";

/// D1: checkpoints of a node's state machines, over its every start.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointCounts {
    /// Checkpoints taken.
    pub taken: u64,
    /// Checkpoints that failed (a disk fault).
    pub failed: u64,
    /// Replicas rebuilt from the other members because their state
    /// machine's checkpoint was behind storage's snapshot, or gone.
    pub rebuilt: u64,
    /// D3: streamed states installed.
    pub streamed: u64,
    /// D3: staged streams resumed after a restart of their receiver (the
    /// next chunk went on the staging found at the start).
    pub resumed: u64,
}

/// Shared by a node's state machines.
pub type CheckpointSink = Shared<CheckpointCounts>;

/// The kv map of one group, checkpointed to a [`SimDisk`].
pub struct DiskKv {
    kv: Kv,
    disk: SimDisk,
    path: PathBuf,
    record: Option<Bytes>,
    counts: CheckpointSink,
    /// D3: the staged stream's key and the bytes staged (whole records).
    staging: Option<(Bytes, u64)>,
    /// D3: where the next staged record goes in the chunk file.
    staged_end: u64,
    /// D3: the staging was found at open and nothing was staged since.
    staging_from_before: bool,
}

impl DiskKv {
    /// Open `group`'s state on `disk`: its newest checkpoint, or empty
    /// (`kv`, an empty map, holds it).
    pub fn open(disk: SimDisk, group: GroupId, mut kv: Kv, counts: CheckpointSink) -> DiskKv {
        let path = checkpoint_path(group);
        let mut fs = disk.clone();
        let read = fs.read(&path).ok().and_then(|bytes| decode(&bytes));
        let record = match read {
            Some((record, pairs)) if kv.restore(&pairs).is_ok() => Some(record),
            _ => None,
        };
        let (staging, staged_end) = read_staging(&mut fs, group);
        let staging_from_before = staging.is_some();
        DiskKv { kv, disk, path, record, counts, staging, staged_end, staging_from_before }
    }

    /// The value of a key (0: absent).
    pub fn get(&self, key: u64) -> u64 {
        self.kv.get(key)
    }

    fn write(&mut self, contents: &[u8]) -> std::io::Result<()> {
        let path = self.path.clone();
        self.write_file(&path, contents)
    }

    /// Write `path` whole: temporary file, sync, rename, directory sync.
    fn write_file(&mut self, path: &std::path::Path, contents: &[u8]) -> std::io::Result<()> {
        let dir = state_dir();
        let temporary = path.with_extension("tmp");
        let fs = &mut self.disk;
        fs.create_dir_all(&dir)?;
        let file = fs.open(&temporary, OpenMode::CreateTruncate)?;
        fs.write_all_at(&file, contents, 0)?;
        fs.sync_data(&file)?;
        fs.rename(&temporary, path)?;
        let handle = fs.open_dir(&dir)?;
        fs.sync_dir(&handle)
    }

    fn remove(&mut self) -> std::io::Result<()> {
        let path = self.path.clone();
        self.remove_file(&path)?;
        self.drop_staging()
    }

    fn remove_file(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        let fs = &mut self.disk;
        if fs.exists(path) {
            fs.remove_file(path)?;
            let handle = fs.open_dir(&state_dir())?;
            fs.sync_dir(&handle)?;
        }
        Ok(())
    }

    /// D3: remove the staged stream (key first: chunks without a key are
    /// never resumed).
    fn drop_staging(&mut self) -> std::io::Result<()> {
        self.staging = None;
        self.staged_end = 0;
        let (key, chunks) = staging_paths(&self.path);
        self.remove_file(&key)?;
        self.remove_file(&chunks)
    }

    fn stage(&mut self, key: &[u8]) -> std::io::Result<()> {
        self.drop_staging()?;
        let (key_path, chunks) = staging_paths(&self.path);
        let fs = &mut self.disk;
        fs.create_dir_all(&state_dir())?;
        let file = fs.open(&chunks, OpenMode::CreateTruncate)?;
        fs.sync_data(&file)?;
        let mut contents = BytesMut::with_capacity(key.len() + 8);
        contents.put_slice(key);
        contents.put_u64_le(digest(key));
        self.write_file(&key_path, &contents)?;
        self.staging = Some((Bytes::copy_from_slice(key), 0));
        self.staging_from_before = false;
        Ok(())
    }

    fn append_chunk(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        let (_, chunks) = staging_paths(&self.path);
        let mut record = BytesMut::with_capacity(chunk.len() + 12);
        record.put_u32_le(chunk.len() as u32);
        record.put_slice(chunk);
        record.put_u64_le(digest(&record));
        let fs = &mut self.disk;
        let file = fs.open(&chunks, OpenMode::CreateOrOpen)?;
        fs.write_all_at(&file, &record, self.staged_end)?;
        fs.sync_data(&file)?;
        self.staged_end += record.len() as u64;
        Ok(())
    }
}

/// D3: the files a group's staged stream lives in: its key, its chunks.
fn staging_paths(path: &std::path::Path) -> (PathBuf, PathBuf) {
    (path.with_extension("stream-key"), path.with_extension("stream"))
}

/// D3: the staged stream of `group` (key, whole bytes) and where its
/// records end; none if its key does not check.
fn read_staging(fs: &mut SimDisk, group: GroupId) -> (Option<(Bytes, u64)>, u64) {
    let (key_path, chunks) = staging_paths(&checkpoint_path(group));
    let key = fs.read(&key_path).ok().and_then(|bytes| {
        let (key, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
        (digest(key) == u64::from_le_bytes(sum.try_into().ok()?)).then(|| Bytes::copy_from_slice(key))
    });
    let Some(key) = key else { return (None, 0) };
    let records = fs.read(&chunks).unwrap_or_default();
    let (pieces, end) = staged_records(&records);
    let staged = pieces.iter().map(|piece| piece.len() as u64).sum();
    (Some((key, staged)), end)
}

/// The whole records of a chunk file, and where they end (a torn or
/// damaged record and all after it are not counted).
fn staged_records(bytes: &[u8]) -> (Vec<&[u8]>, u64) {
    let mut pieces = Vec::new();
    let mut at = 0usize;
    while let Some(size) = bytes.get(at..at + 4).and_then(|size| Some(u32::from_le_bytes(size.try_into().ok()?))) {
        let Some(record) = bytes.get(at..at + 4 + size as usize + 8) else { break };
        let (body, sum) = record.split_at(4 + size as usize);
        if sum.try_into().ok().map(u64::from_le_bytes) != Some(digest(body)) {
            break;
        }
        pieces.push(&body[4..]);
        at += record.len();
    }
    (pieces, at as u64)
}

/// A kv pair's size in its encoding.
const PAIR_BYTES: usize = 16;

/// D3: the pairs of a checkpoint, read whole (a simulated state is small).
struct PairsView {
    record: Bytes,
    pairs: Bytes,
}

impl StateExport for PairsView {
    fn record(&self) -> Bytes {
        self.record.clone()
    }

    fn size_bytes(&self) -> u64 {
        self.pairs.len() as u64
    }

    fn read(&mut self, offset_bytes: u64, size_max_bytes: usize) -> Result<Option<Bytes>, String> {
        let start = usize::try_from(offset_bytes).map_err(|error| error.to_string())?;
        if start >= self.pairs.len() {
            return Ok(None);
        }
        // One pair per chunk at most: a simulated state is a few pairs, and
        // this cuts its transfers between any two of them.
        let size = size_max_bytes.min(PAIR_BYTES);
        Ok(Some(self.pairs.slice(start..(start + size).min(self.pairs.len()))))
    }
}

/// File: magic, record size u32, record, pairs size u32, pairs, digest u64
/// of everything before it.
fn encode(record: &[u8], pairs: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(20 + record.len() + pairs.len());
    out.put_slice(MAGIC);
    out.put_u32_le(record.len() as u32);
    out.put_slice(record);
    out.put_u32_le(pairs.len() as u32);
    out.put_slice(pairs);
    let sum = digest(&out);
    out.put_u64_le(sum);
    out.freeze()
}

fn decode(bytes: &[u8]) -> Option<(Bytes, Bytes)> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if digest(body) != u64::from_le_bytes(sum.try_into().ok()?) || body.get(..4)? != MAGIC {
        return None;
    }
    let rest = &body[4..];
    let (record, rest) = take(rest)?;
    let (pairs, rest) = take(rest)?;
    rest.is_empty().then(|| (Bytes::copy_from_slice(record), Bytes::copy_from_slice(pairs)))
}

fn take(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let rest = &bytes[4..];
    (rest.len() >= len).then(|| rest.split_at(len))
}

impl StateMachine for DiskKv {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.kv.apply(op, operation)
    }

    fn takes_op_batches(&self) -> bool {
        self.kv.takes_op_batches()
    }

    fn apply_op_batch(&mut self, op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        self.kv.apply_op_batch(op, batch, results);
    }

    fn read(&self, query: &[u8]) -> Bytes {
        self.kv.read(query)
    }

    fn snapshot(&self) -> Bytes {
        self.kv.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.kv.restore(snapshot)
    }

    fn durability(&self) -> Durability {
        Durability::Persistent
    }

    /// D2: applied on the shard's apply worker, so that every `--state disk`
    /// run of the simulator lends its runs and hands them back late.
    fn apply_off_shard(&self) -> bool {
        true
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        let contents = encode(record, &self.kv.snapshot());
        if let Err(error) = self.write(&contents) {
            self.counts.borrow_mut().failed += 1;
            return Err(format!("checkpoint of {}: {error}", self.path.display()));
        }
        self.counts.borrow_mut().taken += 1;
        self.record = Some(Bytes::copy_from_slice(record));
        Ok(())
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.record.clone()
    }

    fn clear(&mut self) -> Result<(), String> {
        self.remove().map_err(|error| format!("clearing {}: {error}", self.path.display()))?;
        self.kv = self.kv.emptied();
        self.record = None;
        Ok(())
    }

    fn export(&mut self) -> Result<Option<Box<dyn StateExport>>, String> {
        // The checkpoint file, not the map: applies since it are not in it.
        let mut fs = self.disk.clone();
        let bytes = fs.read(&self.path).map_err(|error| format!("export of {}: {error}", self.path.display()))?;
        let (record, pairs) = decode(&bytes).ok_or_else(|| format!("export of {}: damaged", self.path.display()))?;
        Ok(Some(Box::new(PairsView { record, pairs })))
    }

    fn import_begin(&mut self, key: &[u8]) -> Result<(), String> {
        if self.staging.as_ref().is_some_and(|(staged, _)| staged[..] == *key) {
            return Ok(());
        }
        self.stage(key).map_err(|error| format!("staging a stream for {}: {error}", self.path.display()))
    }

    fn import_write(&mut self, offset_bytes: u64, chunk: &[u8]) -> Result<(), String> {
        let staged = self.staging.as_ref().map(|(_, staged)| *staged).ok_or("no stream is staged")?;
        if offset_bytes != staged {
            return Err(format!("a chunk at {offset_bytes} after {staged} staged bytes"));
        }
        self.append_chunk(chunk).map_err(|error| format!("staging a chunk for {}: {error}", self.path.display()))?;
        if let Some((_, staged)) = &mut self.staging {
            *staged += chunk.len() as u64;
        }
        if std::mem::take(&mut self.staging_from_before) {
            self.counts.borrow_mut().resumed += 1;
        }
        Ok(())
    }

    fn import_staged(&self) -> Option<(Bytes, u64)> {
        self.staging.clone()
    }

    fn import_finish(&mut self, record: &[u8]) -> Result<(), String> {
        let (_, chunks) = staging_paths(&self.path);
        let mut fs = self.disk.clone();
        let bytes = fs.read(&chunks).map_err(|error| format!("reading the staged stream: {error}"))?;
        let (pieces, _) = staged_records(&bytes);
        let pairs: Vec<u8> = pieces.concat();
        let staged = self.staging.as_ref().map_or(0, |(_, staged)| *staged);
        if pairs.len() as u64 != staged {
            return Err(format!("{} staged bytes read back, {staged} written", pairs.len()));
        }
        let mut kv = self.kv.emptied();
        kv.restore(&pairs)?;
        let contents = encode(record, &pairs);
        if let Err(error) = self.write(&contents) {
            self.counts.borrow_mut().failed += 1;
            return Err(format!("installing a stream as {}: {error}", self.path.display()));
        }
        self.kv = kv;
        self.record = Some(Bytes::copy_from_slice(record));
        self.counts.borrow_mut().streamed += 1;
        // A leftover staging is dropped by the next `import_begin`.
        let _ = self.drop_staging();
        Ok(())
    }
}

/// The path of `group`'s checkpoint file.
pub fn checkpoint_path(group: GroupId) -> PathBuf {
    state_dir().join(format!("group-{}", group.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{ApplySink, KvOp};

    fn put(kv: &mut DiskKv, op: u64, key: u64, value: u64) {
        kv.apply(Op(op), &KvOp::Put { key, value }.encode());
    }

    #[test]
    fn d1_state_after_reopen_is_the_last_checkpoint() {
        let disk = SimDisk::new(1);
        let mut kv = DiskKv::open(disk.clone(), GroupId(7), Kv::new(ApplySink::default()), CheckpointSink::default());
        assert_eq!(kv.checkpointed(), None);
        put(&mut kv, 1, 1, 10);
        kv.checkpoint(b"at 1").unwrap();
        put(&mut kv, 2, 2, 20);
        let reopened = DiskKv::open(disk.clone(), GroupId(7), Kv::new(ApplySink::default()), CheckpointSink::default());
        assert_eq!(reopened.checkpointed().as_deref(), Some(&b"at 1"[..]));
        assert_eq!((reopened.get(1), reopened.get(2)), (10, 0), "the apply after the checkpoint is gone");
        let mut reopened = reopened;
        reopened.clear().unwrap();
        let cleared = DiskKv::open(disk, GroupId(7), Kv::new(ApplySink::default()), CheckpointSink::default());
        assert_eq!((cleared.checkpointed(), cleared.get(1)), (None, 0));
    }

    #[test]
    fn d1_a_damaged_checkpoint_counts_as_none() {
        let disk = SimDisk::new(2);
        let mut kv = DiskKv::open(disk.clone(), GroupId(3), Kv::new(ApplySink::default()), CheckpointSink::default());
        put(&mut kv, 1, 1, 10);
        kv.checkpoint(b"record").unwrap();
        let mut fs = disk.clone();
        let mut bytes = fs.read(&checkpoint_path(GroupId(3))).unwrap();
        bytes[6] ^= 1;
        let file = fs.open(&checkpoint_path(GroupId(3)), OpenMode::CreateTruncate).unwrap();
        fs.write_all_at(&file, &bytes, 0).unwrap();
        let reopened = DiskKv::open(disk, GroupId(3), Kv::new(ApplySink::default()), CheckpointSink::default());
        assert_eq!((reopened.checkpointed(), reopened.get(1)), (None, 0));
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use crate::kv::ApplySink;

    #[test]
    fn d3_staged_chunks_survive_a_reopen() {
        let disk = SimDisk::new(5);
        let mut kv = DiskKv::open(disk.clone(), GroupId(4), Kv::new(ApplySink::default()), CheckpointSink::default());
        kv.import_begin(b"key").unwrap();
        kv.import_write(0, &[1u8; 32]).unwrap();
        kv.import_write(32, &[2u8; 16]).unwrap();
        let reopened = DiskKv::open(disk, GroupId(4), Kv::new(ApplySink::default()), CheckpointSink::default());
        assert_eq!(reopened.import_staged(), Some((Bytes::from_static(b"key"), 48)));
    }
}
