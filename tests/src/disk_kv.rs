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
//! A simulated group's state is a few hundred pairs, so writing it whole is
//! cheap here; what the simulator checks is the contract's timing (what is
//! durable when), not the engine.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};
use cohort_core::{Durability, StateMachine};
use cohort_messages::{GroupId, Op};
use cohort_wal::{FileSystem, OpenMode};

use crate::disk::SimDisk;
use crate::kv::{ApplySink, Kv, digest};

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
}

/// Shared by a node's state machines.
pub type CheckpointSink = Rc<RefCell<CheckpointCounts>>;

/// The kv map of one group, checkpointed to a [`SimDisk`].
pub struct DiskKv {
    kv: Kv,
    disk: SimDisk,
    path: PathBuf,
    record: Option<Bytes>,
    counts: CheckpointSink,
}

impl DiskKv {
    /// Open `group`'s state on `disk`: its newest checkpoint, or empty.
    pub fn open(disk: SimDisk, group: GroupId, sink: ApplySink, counts: CheckpointSink) -> DiskKv {
        let path = checkpoint_path(group);
        let mut kv = Kv::new(sink);
        let mut fs = disk.clone();
        let read = fs.read(&path).ok().and_then(|bytes| decode(&bytes));
        let record = match read {
            Some((record, pairs)) if kv.restore(&pairs).is_ok() => Some(record),
            _ => None,
        };
        DiskKv { kv, disk, path, record, counts }
    }

    /// The value of a key (0: absent).
    pub fn get(&self, key: u64) -> u64 {
        self.kv.get(key)
    }

    fn write(&mut self, contents: &[u8]) -> std::io::Result<()> {
        let dir = state_dir();
        let temporary = self.path.with_extension("tmp");
        let fs = &mut self.disk;
        fs.create_dir_all(&dir)?;
        let file = fs.open(&temporary, OpenMode::CreateTruncate)?;
        fs.write_all_at(&file, contents, 0)?;
        fs.sync_data(&file)?;
        fs.rename(&temporary, &self.path)?;
        let handle = fs.open_dir(&dir)?;
        fs.sync_dir(&handle)
    }

    fn remove(&mut self) -> std::io::Result<()> {
        let fs = &mut self.disk;
        if fs.exists(&self.path) {
            fs.remove_file(&self.path)?;
            let handle = fs.open_dir(&state_dir())?;
            fs.sync_dir(&handle)?;
        }
        Ok(())
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
        self.kv = Kv::new(self.kv.sink());
        self.record = None;
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
    use crate::kv::KvOp;

    fn put(kv: &mut DiskKv, op: u64, key: u64, value: u64) {
        kv.apply(Op(op), &KvOp::Put { key, value }.encode());
    }

    #[test]
    fn d1_state_after_reopen_is_the_last_checkpoint() {
        let disk = SimDisk::new(1);
        let mut kv = DiskKv::open(disk.clone(), GroupId(7), ApplySink::default(), CheckpointSink::default());
        assert_eq!(kv.checkpointed(), None);
        put(&mut kv, 1, 1, 10);
        kv.checkpoint(b"at 1").unwrap();
        put(&mut kv, 2, 2, 20);
        let reopened = DiskKv::open(disk.clone(), GroupId(7), ApplySink::default(), CheckpointSink::default());
        assert_eq!(reopened.checkpointed().as_deref(), Some(&b"at 1"[..]));
        assert_eq!((reopened.get(1), reopened.get(2)), (10, 0), "the apply after the checkpoint is gone");
        let mut reopened = reopened;
        reopened.clear().unwrap();
        let cleared = DiskKv::open(disk, GroupId(7), ApplySink::default(), CheckpointSink::default());
        assert_eq!((cleared.checkpointed(), cleared.get(1)), (None, 0));
    }

    #[test]
    fn d1_a_damaged_checkpoint_counts_as_none() {
        let disk = SimDisk::new(2);
        let mut kv = DiskKv::open(disk.clone(), GroupId(3), ApplySink::default(), CheckpointSink::default());
        put(&mut kv, 1, 1, 10);
        kv.checkpoint(b"record").unwrap();
        let mut fs = disk.clone();
        let mut bytes = fs.read(&checkpoint_path(GroupId(3))).unwrap();
        bytes[6] ^= 1;
        let file = fs.open(&checkpoint_path(GroupId(3)), OpenMode::CreateTruncate).unwrap();
        fs.write_all_at(&file, &bytes, 0).unwrap();
        let reopened = DiskKv::open(disk, GroupId(3), ApplySink::default(), CheckpointSink::default());
        assert_eq!((reopened.checkpointed(), reopened.get(1)), (None, 0));
    }
}
