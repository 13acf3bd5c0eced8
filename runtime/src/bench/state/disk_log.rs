//! `--state disk-log`: the `log` shape's state kept on disk by the state
//! machine itself (D1, [`Durability::Persistent`]), so a run measures what
//! a growing state costs once cohort no longer snapshots it whole.
//!
//! Each replica appends every write (a 4-byte little-endian length and its
//! bytes, the `log` shape's encoding) to its file `entries` through a
//! 1 MiB buffer, with no sync. A checkpoint flushes and syncs that file,
//! then writes `checkpoint` (the record, the file's length and entry
//! count, and a digest) to a temporary file that it syncs and renames over
//! the old one, and syncs the directory: the file's length at the rename is
//! the durable state. Opening cuts `entries` back to the checkpoint's
//! length, so the state after a restart is exactly the checkpoint's, as
//! the contract asks. Memory per replica: the buffer, whatever the state.
//!
//! A state transfer reads the whole file into one snapshot (streamed
//! snapshots are issue 34 item 3). An I/O error under an apply panics with
//! the path: the bench's disk failed, and no figure is worth reporting.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use cohort_core::{Durability, StateMachine};
use cohort_messages::{GroupId, OPERATION_SIZE_MAX_BYTES, Op};

use super::StateBytes;

/// Bytes of an entry's length prefix.
const LENGTH_PREFIX_BYTES: u64 = 4;
/// Bytes buffered before a write reaches the file.
const BUFFER_SIZE_BYTES: usize = 1 << 20;
const CHECKPOINT_MAGIC: &[u8; 8] = b"cohbdlg1";

/// One replica's entries on disk.
pub(super) struct DiskLog {
    dir: PathBuf,
    entries: RefCell<BufWriter<File>>,
    /// Bytes of `entries`, the buffered ones included.
    length_bytes: u64,
    count: u64,
    record: Option<Bytes>,
    size: StateBytes,
}

impl DiskLog {
    /// Open `group`'s log under `dir` at its last checkpoint (empty if it
    /// has none or it does not check).
    pub(super) fn open(dir: &Path, group: GroupId, size: StateBytes) -> Result<DiskLog, String> {
        let dir = dir.join(format!("group-{}", group.0));
        std::fs::create_dir_all(&dir).map_err(|error| format!("creating {}: {error}", dir.display()))?;
        let checkpoint = std::fs::read(dir.join("checkpoint")).ok().and_then(|bytes| decode_checkpoint(&bytes));
        let (record, length_bytes, count) = match checkpoint {
            Some((record, length, count)) => (Some(record), length, count),
            None => (None, 0, 0),
        };
        let path = dir.join("entries");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|error| format!("opening {}: {error}", path.display()))?;
        file.set_len(length_bytes).map_err(|error| format!("cutting {} to its checkpoint: {error}", path.display()))?;
        let mut file = file;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))
            .map_err(|error| format!("seeking {}: {error}", path.display()))?;
        size.set(length_bytes);
        let entries = RefCell::new(BufWriter::with_capacity(BUFFER_SIZE_BYTES, file));
        Ok(DiskLog { dir, entries, length_bytes, count, record, size })
    }

    fn entries_path(&self) -> PathBuf {
        self.dir.join("entries")
    }

    /// Flush the buffer and sync the file.
    fn sync(&self) -> Result<(), String> {
        let mut entries = self.entries.borrow_mut();
        entries.flush().map_err(|error| format!("writing {}: {error}", self.entries_path().display()))?;
        entries.get_ref().sync_data().map_err(|error| format!("syncing {}: {error}", self.entries_path().display()))
    }

    /// Replace the checkpoint file, durably.
    fn write_checkpoint(&self, contents: &[u8]) -> Result<(), String> {
        let (temporary, path) = (self.dir.join("checkpoint.tmp"), self.dir.join("checkpoint"));
        let step = |what: &str, error: std::io::Error| format!("{what} {}: {error}", path.display());
        let mut file = File::create(&temporary).map_err(|error| step("creating", error))?;
        file.write_all(contents).map_err(|error| step("writing", error))?;
        file.sync_data().map_err(|error| step("syncing", error))?;
        std::fs::rename(&temporary, &path).map_err(|error| step("renaming into", error))?;
        File::open(&self.dir).and_then(|dir| dir.sync_all()).map_err(|error| step("syncing the directory of", error))
    }

    /// Write `entries` anew with the snapshot's contents.
    fn rewrite(&mut self, contents: &[u8], count: u64) -> Result<(), String> {
        let mut entries = self.entries.borrow_mut();
        let path = self.dir.join("entries");
        entries.flush().map_err(|error| format!("writing {}: {error}", path.display()))?;
        let file = entries.get_mut();
        file.set_len(0).map_err(|error| format!("emptying {}: {error}", path.display()))?;
        std::io::Seek::seek(file, std::io::SeekFrom::Start(0))
            .map_err(|error| format!("seeking {}: {error}", path.display()))?;
        entries.write_all(contents).map_err(|error| format!("writing {}: {error}", path.display()))?;
        drop(entries);
        self.length_bytes = contents.len() as u64;
        self.count = count;
        self.size.set(self.length_bytes);
        Ok(())
    }
}

/// Checkpoint file: magic, record length u32, record, entries length u64,
/// entry count u64, then an FNV-1a digest u64 of everything before it.
fn encode_checkpoint(record: &[u8], length_bytes: u64, count: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(36 + record.len());
    out.extend_from_slice(CHECKPOINT_MAGIC);
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(record);
    out.extend_from_slice(&length_bytes.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    let sum = digest(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn decode_checkpoint(bytes: &[u8]) -> Option<(Bytes, u64, u64)> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if digest(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let rest = body.strip_prefix(CHECKPOINT_MAGIC)?;
    let (length, rest) = rest.split_first_chunk::<4>()?;
    let length = u32::from_le_bytes(*length) as usize;
    let record = rest.get(..length)?;
    let rest = &rest[length..];
    let (entries_bytes, rest) = rest.split_first_chunk::<8>()?;
    let (count, rest) = rest.split_first_chunk::<8>()?;
    rest.is_empty()
        .then(|| (Bytes::copy_from_slice(record), u64::from_le_bytes(*entries_bytes), u64::from_le_bytes(*count)))
}

fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3))
}

/// The entry count of a snapshot, or why it is not one.
fn count_entries(snapshot: &[u8]) -> Result<u64, String> {
    let (mut at, mut count) = (0usize, 0u64);
    while at < snapshot.len() {
        let Some(prefix) = snapshot.get(at..at + LENGTH_PREFIX_BYTES as usize) else {
            return Err(format!("disk-log snapshot: a length prefix cut short at byte {at}"));
        };
        let length = u32::from_le_bytes(prefix.try_into().unwrap_or([0; 4])) as usize;
        at += LENGTH_PREFIX_BYTES as usize + length;
        if at > snapshot.len() || length > OPERATION_SIZE_MAX_BYTES {
            return Err(format!("disk-log snapshot: an entry of {length} bytes past the end or the limit"));
        }
        count += 1;
    }
    Ok(count)
}

impl StateMachine for DiskLog {
    /// Append; the result is the entry's offset (u64, little-endian).
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        debug_assert!(operation.len() <= OPERATION_SIZE_MAX_BYTES);
        let mut entries = self.entries.borrow_mut();
        let written =
            entries.write_all(&(operation.len() as u32).to_le_bytes()).and_then(|()| entries.write_all(operation));
        if let Err(error) = written {
            panic!("appending to {}: {error}", self.dir.join("entries").display());
        }
        drop(entries);
        self.length_bytes += LENGTH_PREFIX_BYTES + operation.len() as u64;
        self.count += 1;
        self.size.set(self.length_bytes);
        Bytes::copy_from_slice(&(self.count - 1).to_le_bytes())
    }

    /// Whatever the query: the state's size in bytes (u64, little-endian).
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.length_bytes.to_le_bytes())
    }

    fn snapshot(&self) -> Bytes {
        if let Err(error) = self.entries.borrow_mut().flush() {
            panic!("writing {}: {error}", self.entries_path().display());
        }
        match std::fs::read(self.entries_path()) {
            Ok(contents) => contents.into(),
            Err(error) => panic!("reading {}: {error}", self.entries_path().display()),
        }
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let count = count_entries(snapshot)?;
        self.rewrite(snapshot, count)
    }

    fn durability(&self) -> Durability {
        Durability::Persistent
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.sync()?;
        self.write_checkpoint(&encode_checkpoint(record, self.length_bytes, self.count))?;
        self.record = Some(Bytes::copy_from_slice(record));
        Ok(())
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.record.clone()
    }

    fn clear(&mut self) -> Result<(), String> {
        let checkpoint = self.dir.join("checkpoint");
        match std::fs::remove_file(&checkpoint) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(format!("removing {}: {error}", checkpoint.display())),
        }
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|error| format!("syncing {}: {error}", self.dir.display()))?;
        self.rewrite(&[], 0)?;
        self.record = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::state::StateSizes;

    #[test]
    fn d1_disk_log_state_after_reopen_is_the_last_checkpoint() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let sizes = StateSizes::default();
        let mut log = DiskLog::open(dir.path(), GroupId(3), sizes.handle()).expect("opens");
        assert_eq!(log.checkpointed(), None);
        log.apply(Op(1), b"first");
        log.checkpoint(b"at 1").expect("checkpoint");
        log.apply(Op(2), b"second, never checkpointed");
        let snapshot_before = log.snapshot();
        drop(log);
        let mut reopened = DiskLog::open(dir.path(), GroupId(3), sizes.handle()).expect("opens again");
        assert_eq!(reopened.checkpointed().as_deref(), Some(&b"at 1"[..]));
        assert_eq!(&reopened.snapshot()[..], &[&5u32.to_le_bytes()[..], b"first"].concat()[..]);
        assert!(snapshot_before.len() > reopened.snapshot().len(), "the apply after the checkpoint is gone");
        assert_eq!(reopened.apply(Op(2), b"again"), Bytes::copy_from_slice(&1u64.to_le_bytes()), "offsets go on");
        reopened.restore(&snapshot_before).expect("a snapshot of the log restores");
        assert_eq!(reopened.snapshot(), snapshot_before);
        assert!(reopened.restore(&[9, 0, 0, 0, 1]).is_err(), "a cut entry is refused");
        reopened.clear().expect("clears");
        drop(reopened);
        let cleared = DiskLog::open(dir.path(), GroupId(3), sizes.handle()).expect("opens");
        assert_eq!((cleared.checkpointed(), cleared.snapshot().len()), (None, 0));
    }

    #[test]
    fn d1_disk_log_a_damaged_checkpoint_counts_as_none() {
        let encoded = encode_checkpoint(b"record", 9, 1);
        assert_eq!(decode_checkpoint(&encoded), Some((Bytes::from_static(b"record"), 9, 1)));
        for at in 0..encoded.len() {
            let mut damaged = encoded.clone();
            damaged[at] ^= 0x40;
            assert_eq!(decode_checkpoint(&damaged), None, "a flipped bit at {at}");
        }
        assert_eq!(decode_checkpoint(&encoded[..encoded.len() - 1]), None);
    }
}
