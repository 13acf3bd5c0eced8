//! `--state disk-log`: the `log` shape's state kept on disk by the state
//! machine itself (D1, [`Durability::Persistent`]), so a run measures what
//! a growing state costs once cohort no longer snapshots it whole.
//!
//! Each replica appends every write (a 4-byte little-endian length and its
//! bytes, the `log` shape's encoding) to its file `entries-<generation>`
//! through a 1 MiB buffer, with no sync. A checkpoint flushes and syncs
//! that file, then writes `checkpoint` (the record, the generation, the
//! file's length and entry count, and a digest) to a temporary file that
//! it syncs and renames over the old one, and syncs the directory: the
//! file's length at the rename is the durable state. Opening cuts the
//! checkpoint's entries file back to its length, so the state after a
//! restart is exactly the checkpoint's, as the contract asks. Memory per
//! replica: the buffer, whatever the state.
//!
//! D3: an export reads the checkpoint's entries file up to the
//! checkpoint's length with positioned reads. Entries are only appended,
//! so that prefix never changes while the export lives (a restore writes
//! a new generation, and the old file stays readable until its last handle
//! closes), and every later checkpoint of the same generation starts with
//! the same bytes: the generation is the export's *lineage* (a random
//! number drawn when the generation starts, kept in the checkpoint), so a
//! receiver goes on with a later checkpoint where it stopped. Any offset
//! can be read, so a transfer also resumes after a restart of either side.
//! The receiver stages the stream in `entries-<its next generation>` (each
//! chunk written in place, past the page cache where it is aligned, as
//! whole chunks are: `direct_io`, and synced), and after each chunk rewrites
//! `staging` (synced when the stream begins, not after each chunk: see
//! `DiskLog::write_staging`): the key, the staged length, the entries
//! counted so far and where the last one stands (the count is the
//! receiver's own: it reads the length prefixes as the bytes go by). The install is the new
//! checkpoint naming the new generation.
//!
//! An I/O error under an apply panics with the path: the bench's disk
//! failed, and no figure is worth reporting.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use cohort_core::{Durability, StateExport, StateMachine};
use cohort_messages::{GroupId, OPERATION_SIZE_MAX_BYTES, Op};

use super::StateBytes;
use crate::bench::direct_io::{self, AlignedBuffer};

/// Bytes of an entry's length prefix.
const LENGTH_PREFIX_BYTES: u64 = 4;
/// Bytes buffered before a write reaches the file.
const BUFFER_SIZE_BYTES: usize = 1 << 20;
const CHECKPOINT_MAGIC: &[u8; 8] = b"cohbdlg3";
const STAGING_MAGIC: &[u8; 8] = b"cohbdls2";

/// One replica's entries on disk.
pub(super) struct DiskLog {
    dir: PathBuf,
    entries: RefCell<BufWriter<File>>,
    /// Bytes of `entries`, the buffered ones included.
    length_bytes: u64,
    count: u64,
    record: Option<Bytes>,
    size: StateBytes,
    /// The entries file in use is `entries-<generation>`.
    generation: u64,
    /// The current generation's lineage (D3).
    lineage: u64,
    /// The checkpoint's generation, length, count and lineage (what an
    /// export reads).
    checkpointed: (u64, u64, u64, u64),
    /// D3: the stream being staged.
    staging: Option<Staging>,
    /// D2: applied on the shard's apply worker (`--apply-inline` clears
    /// it, for the comparison).
    off_shard: bool,
    /// K5: every write is an op batch (`--batch-ops` above 1).
    op_batches: bool,
    /// D3: the aligned copy of a chunk written past the page cache (one
    /// chunk's bytes while a stream is staged, nothing otherwise).
    aligned: AlignedBuffer,
}

/// D3: a stream being staged, as the `staging` file holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Staging {
    key: Bytes,
    /// The generation whose entries file it is staged in.
    generation: u64,
    staged_bytes: u64,
    /// Entries whose length prefix went by.
    count: u64,
    /// Bytes of the last entry still to come.
    pending: u64,
    /// The first bytes of a length prefix cut by the chunk's end.
    prefix: Vec<u8>,
}

impl Staging {
    /// Count the entries of `chunk`, the next bytes of the stream; `Err`
    /// for an entry over the operation limit.
    fn take(&mut self, chunk: &[u8]) -> Result<(), String> {
        let mut at = 0;
        while at < chunk.len() {
            if self.pending > 0 {
                let skip = self.pending.min((chunk.len() - at) as u64);
                self.pending -= skip;
                at += skip as usize;
                continue;
            }
            self.prefix.push(chunk[at]);
            at += 1;
            if let Ok(prefix) = <[u8; 4]>::try_from(&self.prefix[..]) {
                let length = u32::from_le_bytes(prefix) as usize;
                if length > OPERATION_SIZE_MAX_BYTES {
                    return Err(format!("a streamed entry of {length} bytes"));
                }
                self.prefix.clear();
                self.pending = length as u64;
                self.count += 1;
            }
        }
        self.staged_bytes += chunk.len() as u64;
        Ok(())
    }
}

impl DiskLog {
    /// D2: the same, applied on the shard's thread (`--apply-inline`).
    pub(super) fn inline(self) -> DiskLog {
        DiskLog { off_shard: false, ..self }
    }

    /// K5: the same, taking op batches.
    pub(super) fn op_batches(self, on: bool) -> DiskLog {
        DiskLog { op_batches: on, ..self }
    }

    /// Open `group`'s log under `dir` at its last checkpoint (empty if it
    /// has none or it does not check).
    pub(super) fn open(dir: &Path, group: GroupId, size: StateBytes) -> Result<DiskLog, String> {
        let dir = dir.join(format!("group-{}", group.0));
        std::fs::create_dir_all(&dir).map_err(|error| format!("creating {}: {error}", dir.display()))?;
        let checkpoint = std::fs::read(dir.join("checkpoint")).ok().and_then(|bytes| decode_checkpoint(&bytes));
        let (record, generation, length_bytes, count, lineage) = match checkpoint {
            Some(Checkpoint { record, generation, length_bytes, count, lineage }) => {
                (Some(record), generation, length_bytes, count, lineage)
            }
            None => (None, 0, 0, 0, new_lineage()),
        };
        let staging = std::fs::read(dir.join("staging")).ok().and_then(|bytes| decode_staging(&bytes));
        let file = open_entries(&entries_path(&dir, generation), length_bytes)?;
        size.set(length_bytes);
        let entries = RefCell::new(BufWriter::with_capacity(BUFFER_SIZE_BYTES, file));
        let checkpointed = (generation, length_bytes, count, lineage);
        let off_shard = true;
        Ok(DiskLog {
            dir,
            entries,
            length_bytes,
            count,
            record,
            size,
            generation,
            lineage,
            checkpointed,
            staging,
            off_shard,
            op_batches: false,
            aligned: AlignedBuffer::default(),
        })
    }

    fn entries_path(&self) -> PathBuf {
        entries_path(&self.dir, self.generation)
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

    /// Write the snapshot's contents as a new generation of entries (the
    /// old file stays readable for an export that holds it).
    fn rewrite(&mut self, contents: &[u8], count: u64) -> Result<(), String> {
        let generation = self.next_generation();
        let path = entries_path(&self.dir, generation);
        let mut file = open_entries(&path, 0)?;
        file.write_all(contents).map_err(|error| format!("writing {}: {error}", path.display()))?;
        self.switch_to(generation, file, contents.len() as u64, count);
        Ok(())
    }

    /// A generation above both the one in use and any staged.
    fn next_generation(&self) -> u64 {
        let staged = self.staging.as_ref().map_or(0, |staging| staging.generation);
        self.generation.max(self.checkpointed.0).max(staged) + 1
    }

    /// Use `entries-<generation>` from now on; the previous file is
    /// removed (an export may still read it through its own handle).
    fn switch_to(&mut self, generation: u64, file: File, length_bytes: u64, count: u64) {
        let old = self.entries_path();
        *self.entries.borrow_mut() = BufWriter::with_capacity(BUFFER_SIZE_BYTES, file);
        if generation != self.generation && self.checkpointed.0 != self.generation {
            let _ = std::fs::remove_file(&old);
        }
        self.generation = generation;
        self.lineage = new_lineage();
        self.length_bytes = length_bytes;
        self.count = count;
        self.size.set(length_bytes);
    }

    /// D3: rewrite `staging`, the record of what is staged, synced only if
    /// `sync`. A chunk's record needs no sync of its own: it is written
    /// only once the bytes it names are synced, so whichever version a
    /// power loss leaves names durable bytes (a torn one fails its digest
    /// and the stream starts over), and a killed process leaves the newest
    /// in the page cache. A sync would cost a second device flush per chunk.
    fn write_staging(&self, staging: &Staging, sync: bool) -> Result<(), String> {
        let path = self.dir.join("staging");
        let contents = encode_staging(staging);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|error| format!("opening {}: {error}", path.display()))?;
        file.write_all_at(&contents, 0).map_err(|error| format!("writing {}: {error}", path.display()))?;
        file.set_len(contents.len() as u64).map_err(|error| format!("sizing {}: {error}", path.display()))?;
        if sync {
            file.sync_data().map_err(|error| format!("syncing {}: {error}", path.display()))?;
        }
        Ok(())
    }

    /// D3: forget a staged stream, and its file.
    fn drop_staging(&mut self) {
        self.aligned = AlignedBuffer::default();
        if let Some(staging) = self.staging.take()
            && staging.generation != self.generation
            && staging.generation != self.checkpointed.0
        {
            let _ = std::fs::remove_file(entries_path(&self.dir, staging.generation));
        }
        let _ = std::fs::remove_file(self.dir.join("staging"));
    }
}

/// A lineage no other generation had: the clock's nanoseconds mixed with
/// the process id.
fn new_lineage() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ (u64::from(std::process::id()) << 40)
}

/// The entries file of `generation` under `dir`.
fn entries_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("entries-{generation}"))
}

/// Open (or create) an entries file, cut to `length_bytes`, positioned at
/// its end.
fn open_entries(path: &Path, length_bytes: u64) -> Result<File, String> {
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(|error| format!("opening {}: {error}", path.display()))?;
    file.set_len(length_bytes).map_err(|error| format!("cutting {} to its checkpoint: {error}", path.display()))?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))
        .map_err(|error| format!("seeking {}: {error}", path.display()))?;
    Ok(file)
}

/// What a checkpoint file holds.
#[derive(Debug, PartialEq, Eq)]
struct Checkpoint {
    record: Bytes,
    generation: u64,
    length_bytes: u64,
    count: u64,
    lineage: u64,
}

/// D3: a staging file: magic, key length u32, key, generation u64,
/// staged length u64, count u64, pending u64, prefix length u8, prefix
/// (up to 3 bytes), digest u64 of everything before it.
fn encode_staging(staging: &Staging) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + staging.key.len());
    out.extend_from_slice(STAGING_MAGIC);
    out.extend_from_slice(&(staging.key.len() as u32).to_le_bytes());
    out.extend_from_slice(&staging.key);
    for value in [staging.generation, staging.staged_bytes, staging.count, staging.pending] {
        out.extend_from_slice(&value.to_le_bytes());
    }
    out.push(staging.prefix.len() as u8);
    out.extend_from_slice(&staging.prefix);
    let sum = digest(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn decode_staging(bytes: &[u8]) -> Option<Staging> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if digest(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let rest = body.strip_prefix(STAGING_MAGIC)?;
    let (length, rest) = rest.split_first_chunk::<4>()?;
    let key = rest.get(..u32::from_le_bytes(*length) as usize)?;
    let rest = &rest[key.len()..];
    let (generation, rest) = rest.split_first_chunk::<8>()?;
    let (staged, rest) = rest.split_first_chunk::<8>()?;
    let (count, rest) = rest.split_first_chunk::<8>()?;
    let (pending, rest) = rest.split_first_chunk::<8>()?;
    let (prefix_length, prefix) = rest.split_first()?;
    (usize::from(*prefix_length) == prefix.len() && prefix.len() < 4).then(|| Staging {
        key: Bytes::copy_from_slice(key),
        generation: u64::from_le_bytes(*generation),
        staged_bytes: u64::from_le_bytes(*staged),
        count: u64::from_le_bytes(*count),
        pending: u64::from_le_bytes(*pending),
        prefix: prefix.to_vec(),
    })
}

/// D3: a checkpoint's entries, read by offset.
struct EntriesView {
    record: Bytes,
    file: File,
    length_bytes: u64,
    lineage: u64,
}

impl StateExport for EntriesView {
    fn record(&self) -> Bytes {
        self.record.clone()
    }

    fn size_bytes(&self) -> u64 {
        self.length_bytes
    }

    fn lineage(&self) -> Bytes {
        Bytes::copy_from_slice(&self.lineage.to_le_bytes())
    }

    fn read(&mut self, offset_bytes: u64, size_max_bytes: usize) -> Result<Option<Bytes>, String> {
        if offset_bytes >= self.length_bytes {
            return Ok(None);
        }
        let size = (self.length_bytes - offset_bytes).min(size_max_bytes as u64) as usize;
        // Read into spare capacity: zeroing a 4 MiB buffer first cost the
        // sender a tenth of its time in a catch-up.
        let mut chunk = Vec::with_capacity(size);
        self.file
            .seek(SeekFrom::Start(offset_bytes))
            .and_then(|_| (&mut self.file).take(size as u64).read_to_end(&mut chunk))
            .map_err(|error| format!("reading entries at {offset_bytes}: {error}"))?;
        if chunk.len() != size {
            return Err(format!("reading entries at {offset_bytes}: {} of {size} bytes", chunk.len()));
        }
        Ok(Some(chunk.into()))
    }
}

/// Checkpoint file: magic, record length u32, record, generation u64,
/// entries length u64, entry count u64, lineage u64, then an FNV-1a
/// digest u64 of everything before it.
fn encode_checkpoint(checkpoint: &Checkpoint) -> Vec<u8> {
    let Checkpoint { record, generation, length_bytes, count, lineage } = checkpoint;
    let mut out = Vec::with_capacity(52 + record.len());
    out.extend_from_slice(CHECKPOINT_MAGIC);
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(record);
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(&lineage.to_le_bytes());
    out.extend_from_slice(&length_bytes.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    let sum = digest(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn decode_checkpoint(bytes: &[u8]) -> Option<Checkpoint> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if digest(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let rest = body.strip_prefix(CHECKPOINT_MAGIC)?;
    let (length, rest) = rest.split_first_chunk::<4>()?;
    let length = u32::from_le_bytes(*length) as usize;
    let record = rest.get(..length)?;
    let rest = &rest[length..];
    let (generation, rest) = rest.split_first_chunk::<8>()?;
    let (lineage, rest) = rest.split_first_chunk::<8>()?;
    let (entries_bytes, rest) = rest.split_first_chunk::<8>()?;
    let (count, rest) = rest.split_first_chunk::<8>()?;
    rest.is_empty().then(|| Checkpoint {
        record: Bytes::copy_from_slice(record),
        generation: u64::from_le_bytes(*generation),
        length_bytes: u64::from_le_bytes(*entries_bytes),
        count: u64::from_le_bytes(*count),
        lineage: u64::from_le_bytes(*lineage),
    })
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
            panic!("appending to {}: {error}", self.entries_path().display());
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

    /// D2: a run appends to segment files: applied on the shard's apply
    /// worker, off the thread that serves the shard's other groups (unless
    /// the bench asked for it inline).
    fn apply_off_shard(&self) -> bool {
        self.off_shard
    }

    fn takes_op_batches(&self) -> bool {
        self.op_batches
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.sync()?;
        self.write_checkpoint(&encode_checkpoint(&Checkpoint {
            record: Bytes::copy_from_slice(record),
            generation: self.generation,
            length_bytes: self.length_bytes,
            count: self.count,
            lineage: self.lineage,
        }))?;
        if self.checkpointed.0 != self.generation {
            let _ = std::fs::remove_file(entries_path(&self.dir, self.checkpointed.0));
        }
        self.checkpointed = (self.generation, self.length_bytes, self.count, self.lineage);
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
        self.drop_staging();
        self.rewrite(&[], 0)?;
        self.record = None;
        Ok(())
    }

    fn export(&mut self) -> Result<Option<Box<dyn StateExport>>, String> {
        let Some(record) = self.record.clone() else { return Ok(None) };
        let (generation, length_bytes, _, lineage) = self.checkpointed;
        let path = entries_path(&self.dir, generation);
        let file = File::open(&path).map_err(|error| format!("opening {} to export it: {error}", path.display()))?;
        Ok(Some(Box::new(EntriesView { record, file, length_bytes, lineage })))
    }

    fn import_begin(&mut self, key: &[u8]) -> Result<(), String> {
        if self.staging.as_ref().is_some_and(|staging| staging.key[..] == *key) {
            return Ok(());
        }
        self.drop_staging();
        let generation = self.next_generation();
        let path = entries_path(&self.dir, generation);
        let file = open_entries(&path, 0)?;
        file.sync_all().map_err(|error| format!("syncing {}: {error}", path.display()))?;
        let staging = Staging {
            key: Bytes::copy_from_slice(key),
            generation,
            staged_bytes: 0,
            count: 0,
            pending: 0,
            prefix: Vec::new(),
        };
        self.write_staging(&staging, true)?;
        self.staging = Some(staging);
        Ok(())
    }

    fn import_write(&mut self, offset_bytes: u64, chunk: &[u8]) -> Result<(), String> {
        let mut staging = self.staging.clone().ok_or("no stream is staged")?;
        if offset_bytes != staging.staged_bytes {
            return Err(format!("a chunk at {offset_bytes} after {} staged bytes", staging.staged_bytes));
        }
        staging.take(chunk)?;
        let path = entries_path(&self.dir, staging.generation);
        // Past the page cache where the chunk is aligned (see `direct_io`).
        let direct = match AlignedBuffer::fits(offset_bytes, chunk) {
            true => direct_io::open(&path, false).map_err(|error| format!("opening {}: {error}", path.display()))?,
            false => None,
        };
        let file = match direct {
            Some(file) => {
                self.aligned
                    .write_at(&file, offset_bytes, chunk)
                    .map_err(|error| format!("writing {} directly: {error}", path.display()))?;
                file
            }
            None => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|error| format!("opening {}: {error}", path.display()))?;
                file.write_all_at(chunk, offset_bytes)
                    .map_err(|error| format!("writing {}: {error}", path.display()))?;
                file
            }
        };
        file.sync_data().map_err(|error| format!("syncing {}: {error}", path.display()))?;
        self.write_staging(&staging, false)?;
        self.staging = Some(staging);
        Ok(())
    }

    fn import_staged(&self) -> Option<(Bytes, u64)> {
        self.staging.as_ref().map(|staging| (staging.key.clone(), staging.staged_bytes))
    }

    fn import_finish(&mut self, record: &[u8]) -> Result<(), String> {
        let staging = self.staging.clone().ok_or("no stream is staged")?;
        if staging.pending > 0 || !staging.prefix.is_empty() {
            return Err(format!("the stream ends inside an entry ({} bytes short)", staging.pending));
        }
        let (generation, length_bytes, count) = (staging.generation, staging.staged_bytes, staging.count);
        let path = entries_path(&self.dir, generation);
        let file = open_entries(&path, length_bytes)?;
        file.sync_all().map_err(|error| format!("syncing {}: {error}", path.display()))?;
        // The atomic step: the checkpoint names the new generation.
        let lineage = new_lineage();
        let checkpoint =
            Checkpoint { record: Bytes::copy_from_slice(record), generation, length_bytes, count, lineage };
        self.write_checkpoint(&encode_checkpoint(&checkpoint))?;
        let previous = self.checkpointed.0;
        self.staging = None;
        self.aligned = AlignedBuffer::default();
        let _ = std::fs::remove_file(self.dir.join("staging"));
        self.switch_to(generation, file, length_bytes, count);
        self.lineage = lineage;
        let _ = std::fs::remove_file(entries_path(&self.dir, previous));
        self.checkpointed = (generation, length_bytes, count, lineage);
        self.record = Some(Bytes::copy_from_slice(record));
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
        let expected =
            Checkpoint { record: Bytes::from_static(b"record"), generation: 2, length_bytes: 9, count: 1, lineage: 7 };
        let encoded = encode_checkpoint(&expected);
        assert_eq!(decode_checkpoint(&encoded), Some(expected));
        for at in 0..encoded.len() {
            let mut damaged = encoded.clone();
            damaged[at] ^= 0x40;
            assert_eq!(decode_checkpoint(&damaged), None, "a flipped bit at {at}");
        }
        assert_eq!(decode_checkpoint(&encoded[..encoded.len() - 1]), None);
    }

    #[test]
    fn d3_disk_log_stages_aligned_chunks_past_the_page_cache_and_installs_the_same_state() {
        let (from, to) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let sizes = StateSizes::default();
        let mut source = DiskLog::open(from.path(), GroupId(1), sizes.handle()).expect("opens");
        for op in 1..=40u64 {
            source.apply(Op(op), &op.to_le_bytes().repeat(100));
        }
        source.checkpoint(b"at 40").expect("checkpoint");
        let mut view = source.export().expect("exports").expect("a view");
        let size = view.size_bytes();
        let chunk_bytes = direct_io::ALIGN_BYTES;
        assert!(size > 3 * chunk_bytes as u64 && !size.is_multiple_of(chunk_bytes as u64), "whole chunks and a tail");
        let mut target = DiskLog::open(to.path(), GroupId(1), sizes.handle()).expect("opens");
        target.import_begin(b"key").expect("stages");
        let mut offset = 0;
        while offset < size {
            // Whole chunks go past the page cache (where the file system
            // takes O_DIRECT), the tail through it.
            let chunk = view.read(offset, chunk_bytes).expect("reads").expect("a chunk");
            target.import_write(offset, &chunk).expect("staged");
            offset += chunk.len() as u64;
        }
        target.import_finish(b"at 40").expect("installs");
        assert_eq!(target.snapshot(), source.snapshot(), "the checkpoint's entries, byte for byte");
    }

    #[test]
    fn d3_disk_log_streams_its_checkpoint_and_a_staged_stream_resumes_after_a_reopen() {
        let (from, to) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let sizes = StateSizes::default();
        let mut source = DiskLog::open(from.path(), GroupId(1), sizes.handle()).expect("opens");
        for op in 1..=100u64 {
            source.apply(Op(op), &op.to_le_bytes().repeat(5));
        }
        source.checkpoint(b"at 100").expect("checkpoint");
        source.apply(Op(101), b"after the checkpoint: not streamed");
        let mut view = source.export().expect("exports").expect("a view");
        assert_eq!(view.record(), Bytes::from_static(b"at 100"));
        let size = view.size_bytes();
        let mut target = DiskLog::open(to.path(), GroupId(1), sizes.handle()).expect("opens");
        target.import_begin(b"key").expect("stages");
        let mut offset = 0;
        while offset < size / 2 {
            let chunk = view.read(offset, 300).expect("reads").expect("a chunk");
            target.import_write(offset, &chunk).expect("staged");
            offset += chunk.len() as u64;
        }
        drop(target);
        let mut target = DiskLog::open(to.path(), GroupId(1), sizes.handle()).expect("opens again");
        assert_eq!(target.import_staged(), Some((Bytes::from_static(b"key"), offset)), "resumes where it stopped");
        target.import_begin(b"key").expect("the same key keeps the staging");
        assert_eq!(target.import_staged(), Some((Bytes::from_static(b"key"), offset)));
        // A later checkpoint of the same lineage starts with the same bytes.
        source.checkpoint(b"at 101").expect("checkpoint");
        let mut later = source.export().expect("exports").expect("a view");
        assert_eq!(later.lineage(), view.lineage(), "one lineage while the generation lasts");
        assert!(later.size_bytes() > size);
        assert_eq!(later.read(0, 64).expect("reads"), view.read(0, 64).expect("reads"));
        while offset < size {
            let chunk = view.read(offset, 300).expect("reads").expect("a chunk");
            target.import_write(offset, &chunk).expect("staged");
            offset += chunk.len() as u64;
        }
        target.import_finish(b"at 100").expect("installs");
        let mut expected = source.snapshot();
        expected.truncate(expected.len() - (4 + b"after the checkpoint: not streamed".len()));
        assert_eq!(target.snapshot(), expected, "the checkpoint's entries, none after");
        assert_eq!(
            target.apply(Op(101), b"next"),
            Bytes::copy_from_slice(&100u64.to_le_bytes()),
            "the count came along"
        );
        drop(target);
        let reopened = DiskLog::open(to.path(), GroupId(1), sizes.handle()).expect("opens");
        assert_eq!(reopened.checkpointed().as_deref(), Some(&b"at 100"[..]));
        assert_eq!(reopened.import_staged(), None);
    }
}
