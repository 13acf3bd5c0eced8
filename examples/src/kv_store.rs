//! The `kv` example's state machine: one partition's keys in a redb file
//! that it keeps itself (D1, [`Durability::Persistent`]). docs/embedding.md
//! ("State on disk") has the contract; this is one way to meet it.
//!
//! **Where things are.** One redb file per group, `<dir>/group-<id>.redb`
//! ([`KvStore::path`]), with two tables: `entries` (key → value, both
//! bytes) and `meta` (the file's format and the record of the newest
//! checkpoint).
//!
//! **What is durable when.**
//! - `apply` writes into an overlay in memory (`key → Some(value)`, or
//!   `None` for a delete); `read` looks in the overlay, then in the file.
//! - `checkpoint(record)` writes the overlay and `record` in one redb write
//!   transaction committed with [`redb::Durability::Immediate`] (atomic and
//!   synced), then empties the overlay. A crash before the commit returns
//!   leaves the previous checkpoint; after it, this one.
//! - A restart finds exactly the newest checkpoint: what the overlay held is
//!   gone, and cohort applies it again from its log.
//! - `restore` (a state transfer) keeps the new state in memory as a whole
//!   replacement: reads see it at once, and the next checkpoint, which
//!   cohort asks for right after, empties the table and writes it with the
//!   record in one transaction.
//!
//! **Streamed transfers (D3).** A member that lags behind the log gets
//! the newest checkpoint streamed from a redb read transaction
//! ([`StateMachine::export`]): the `entries` table in key order, each entry
//! as in a snapshot (key length `u16`, key, value length `u32`, value),
//! whole entries per chunk. The read transaction is the point-in-time view:
//! later checkpoints commit around it. The stream's size is kept in `meta`
//! (`encoded_bytes`, updated by each checkpoint from the old and new
//! lengths of what it writes), so an export costs nothing before its first
//! chunk. The receiver stages into `group-<id>.redb.staging`, a redb file
//! of its own: each chunk's entries and the staged length in one
//! transaction, committed synced, so a restart resumes after the last
//! chunk; the last chunk writes the record, and renaming the staging file
//! over the group's file is the atomic install. An export reads on from
//! where its last chunk ended, or repeats its last chunk; any other offset
//! (a resume after the sender restarted) starts the transfer over.
//!
//! **Memory.** cohort asks for a checkpoint at every snapshot point (every
//! 1,024 applied ops or 8 MiB of log by default), so the overlay holds at
//! most about that much; after a `restore` the whole state is in memory
//! until that checkpoint.
//!
//! **Failures.** Every byte from outside is checked: an operation that does
//! not decode is answered `malformed` and changes nothing; a snapshot that
//! does not decode is refused whole ([`decode_snapshot`]). A file that
//! cannot be opened (not a redb file, corrupt, another format, locked) does
//! not stop the node: [`KvStore::open_or_empty`] says why on stderr and
//! returns a store that is empty and has no checkpoint, so cohort rebuilds
//! the group from its log or from another member; its first `clear` or
//! `checkpoint` moves a damaged file aside (`*.unusable-<time>`) and starts
//! a new one. The file is checked whole when it is opened
//! ([`redb::Builder::set_check_integrity_on_open`]), so a damaged file is an
//! error, not a panic. A file that fails under a read once open (an I/O
//! error) is a dead environment: the store panics with the path and the
//! error rather than answer wrongly, which stops the group's shard.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use cohort_runtime::prelude::{Bytes, Durability, GroupId, Op, StateExport, StateMachine};
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition};

/// Key → value.
const ENTRIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("entries");
/// [`FORMAT_KEY`] and [`RECORD_KEY`].
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Where `meta` names the file's format ([`FORMAT`]).
const FORMAT_KEY: &str = "format";
/// The format this module writes; a file with another is not opened.
const FORMAT: &[u8] = b"cohort-kv-store 1";
/// Where `meta` holds the record of the newest checkpoint.
const RECORD_KEY: &str = "checkpoint";
/// `meta`: the checkpoint's entries encoded as a stream would carry them,
/// in bytes (u64, little-endian).
const ENCODED_KEY: &str = "encoded_bytes";
/// `meta` of a staging file: the stream's key, and the bytes staged.
const STREAM_KEY: &str = "stream_key";
const STAGED_KEY: &str = "stream_staged";
/// The first bytes of a snapshot ([`decode_snapshot`]).
const SNAPSHOT_MAGIC: &[u8; 8] = b"kvsnap01";
/// What an operation that does not decode is answered.
const MALFORMED: &[u8] = b"malformed";

/// The longest key an operation can carry.
pub const KEY_SIZE_MAX_BYTES: usize = u16::MAX as usize;

/// The operation that sets `key` to `value`: `P`, the key's length
/// (`u16`, little-endian), the key, the value.
///
/// # Panics
///
/// If `key` is longer than [`KEY_SIZE_MAX_BYTES`].
pub fn put(key: &[u8], value: &[u8]) -> Bytes {
    let length = u16::try_from(key.len()).expect("a key of at most KEY_SIZE_MAX_BYTES");
    [&b"P"[..], &length.to_le_bytes(), key, value].concat().into()
}

/// The operation that removes `key`: `D`, then the key.
pub fn delete(key: &[u8]) -> Bytes {
    [&b"D"[..], key].concat().into()
}

/// A decoded operation: the key and its new value (`None`: removed).
fn decode_operation(operation: &[u8]) -> Result<(Bytes, Option<Bytes>), String> {
    match operation.split_first() {
        Some((b'P', rest)) => {
            let (key, value) = take(rest, 2).map_err(|error| format!("put: {error}"))?;
            Ok((key, Some(Bytes::copy_from_slice(value))))
        }
        Some((b'D', key)) => Ok((Bytes::copy_from_slice(key), None)),
        Some((tag, _)) => Err(format!("unknown operation {tag:#04x}")),
        None => Err("empty operation".into()),
    }
}

/// Split off a field prefixed by its little-endian length of `width`
/// bytes (2 or 4): the field and what follows it.
fn take(input: &[u8], width: usize) -> Result<(Bytes, &[u8]), String> {
    debug_assert!(width == 2 || width == 4, "widths in use");
    let (prefix, rest) = input.split_at_checked(width).ok_or_else(|| format!("truncated {width}-byte length"))?;
    let length = prefix.iter().rev().fold(0usize, |n, byte| (n << 8) | usize::from(*byte));
    let (field, rest) =
        rest.split_at_checked(length).ok_or_else(|| format!("field of {length} bytes, {} left", rest.len()))?;
    Ok((Bytes::copy_from_slice(field), rest))
}

/// Encode entries given in ascending key order, in [`decode_snapshot`]'s
/// format.
fn encode_snapshot<'a>(entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Bytes {
    let mut out = SNAPSHOT_MAGIC.to_vec();
    out.extend_from_slice(&0u64.to_le_bytes());
    let mut count = 0u64;
    for (key, value) in entries {
        // Keys come from `put` (at most KEY_SIZE_MAX_BYTES) and values from
        // operations (at most 1 MiB): the casts below cannot truncate.
        assert!(key.len() <= KEY_SIZE_MAX_BYTES && u32::try_from(value.len()).is_ok(), "entry fits its lengths");
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
        count += 1;
    }
    out[SNAPSHOT_MAGIC.len()..SNAPSHOT_MAGIC.len() + 8].copy_from_slice(&count.to_le_bytes());
    out.into()
}

/// Decode a snapshot, or say why it is not one: wrong magic, a truncated
/// field, keys not strictly ascending (so no key twice), a count that
/// differs from the entries, bytes after them.
///
/// The format: `kvsnap01`, the entry count (`u64`), then per entry in
/// ascending key order the key's length (`u16`), the key, the value's
/// length (`u32`), the value; integers little-endian.
pub fn decode_snapshot(snapshot: &[u8]) -> Result<BTreeMap<Bytes, Bytes>, String> {
    let rest = snapshot.strip_prefix(SNAPSHOT_MAGIC).ok_or("snapshot: not a kv snapshot (wrong magic)")?;
    let (count, mut rest) = rest.split_at_checked(8).ok_or("snapshot: truncated entry count")?;
    let count = u64::from_le_bytes(count.try_into().map_err(|_| "snapshot: entry count")?);
    let mut entries = BTreeMap::new();
    while !rest.is_empty() {
        let at = entries.len();
        let (key, after_key) = take(rest, 2).map_err(|error| format!("snapshot: entry {at}'s key: {error}"))?;
        let (value, after_value) =
            take(after_key, 4).map_err(|error| format!("snapshot: entry {at}'s value: {error}"))?;
        if entries.last_key_value().is_some_and(|(last, _)| *last >= key) {
            return Err(format!("snapshot: entry {at}'s key is not above the one before"));
        }
        entries.insert(key, value);
        rest = after_value;
    }
    if entries.len() as u64 != count {
        return Err(format!("snapshot: says {count} entries, holds {}", entries.len()));
    }
    Ok(entries)
}

/// The file of one group.
enum File {
    /// Open, with its tables and format checked.
    Open(Database),
    /// It could not be opened: why, and whether to move it aside before
    /// starting a new one (a damaged file, not a locked or unreadable one).
    Unusable { reason: String, set_aside: bool },
}

/// One partition's keys, on disk in a redb file (see the module docs).
pub struct KvStore {
    path: PathBuf,
    file: File,
    /// Applied since the newest checkpoint: a key's new value, `None` if
    /// removed.
    overlay: BTreeMap<Bytes, Option<Bytes>>,
    /// The overlay is the whole state: what the file holds is to be
    /// replaced at the next checkpoint (after a `restore`, or when the file
    /// is unusable). The overlay then holds no `None`.
    replaced: bool,
    /// The newest durable checkpoint's record, as `meta` holds it.
    record: Option<Bytes>,
    /// D3: the checkpoint's entries as a stream encodes them, in bytes.
    encoded_bytes: u64,
    /// D3: a stream being staged: its file, key and staged length.
    staging: Option<Staging>,
}

/// D3: a stream staged in a redb file of its own.
struct Staging {
    database: Database,
    key: Bytes,
    staged_bytes: u64,
}

impl KvStore {
    /// Where group `group`'s file is under `dir`.
    pub fn path(dir: &Path, group: GroupId) -> PathBuf {
        dir.join(format!("group-{}.redb", group.0))
    }

    /// Open (or create) the store in `path`, at its newest checkpoint.
    /// `Err` names the file and what is wrong with it.
    pub fn open(path: &Path) -> Result<KvStore, String> {
        let (database, record) = open_database(path).map_err(|(reason, _)| reason)?;
        Ok(KvStore::new(path, File::Open(database), record))
    }

    /// Group `group`'s store under `dir`, for a node's factory. A file that
    /// cannot be opened gives a store that is empty, has no checkpoint, and
    /// starts a new file at its first `clear` or `checkpoint`; the reason
    /// goes to stderr.
    pub fn open_or_empty(dir: &Path, group: GroupId) -> KvStore {
        let path = KvStore::path(dir, group);
        match open_database(&path) {
            Ok((database, record)) => KvStore::new(&path, File::Open(database), record),
            Err((reason, set_aside)) => {
                eprintln!("kv: {reason}; {group} starts empty here and is rebuilt from the log or another member");
                KvStore::new(&path, File::Unusable { reason, set_aside }, None)
            }
        }
    }

    fn new(path: &Path, file: File, record: Option<Bytes>) -> KvStore {
        let replaced = matches!(file, File::Unusable { .. });
        let encoded_bytes = match &file {
            File::Open(database) => encoded_size(database).unwrap_or(0),
            File::Unusable { .. } => 0,
        };
        let staging = open_staging(&staging_path(path));
        KvStore { path: path.to_owned(), file, overlay: BTreeMap::new(), replaced, record, encoded_bytes, staging }
    }

    /// The state's rules, checked in debug builds after every change.
    fn invariants(&self) {
        debug_assert!(!matches!(self.file, File::Unusable { .. }) || self.replaced, "an unusable file holds nothing");
        debug_assert!(!self.replaced || self.overlay.values().all(Option::is_some), "a replacement has no deletes");
    }

    /// `key`'s value as applied so far.
    fn get(&self, key: &[u8]) -> Option<Bytes> {
        match self.overlay.get(key) {
            Some(value) => value.clone(),
            None if self.replaced => None,
            None => self.committed(key),
        }
    }

    /// `key`'s value in the newest checkpoint.
    fn committed(&self, key: &[u8]) -> Option<Bytes> {
        let (File::Open(database), false) = (&self.file, self.replaced) else { return None };
        let read = || -> Result<Option<Bytes>, String> {
            let transaction = database.begin_read().map_err(|error| error.to_string())?;
            let table = transaction.open_table(ENTRIES).map_err(|error| error.to_string())?;
            let value = table.get(key).map_err(|error| error.to_string())?;
            Ok(value.map(|value| Bytes::copy_from_slice(value.value())))
        };
        read().unwrap_or_else(|error| self.dead("read a key", &error))
    }

    /// The file failed under a read: stop rather than answer wrongly.
    fn dead(&self, what: &str, error: &str) -> ! {
        panic!("kv: {}: could not {what}: {error}", self.path.display())
    }

    /// Make the file usable: move a damaged one aside and start a new one.
    /// The state stays a whole replacement for the next checkpoint.
    fn reopen(&mut self) -> Result<(), String> {
        let File::Unusable { reason, set_aside } = &self.file else { return Ok(()) };
        if *set_aside && self.path.exists() {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            let aside = self.path.with_extension(format!("redb.unusable-{nanos}"));
            std::fs::rename(&self.path, &aside)
                .map_err(|error| format!("{}: could not move it aside ({reason}): {error}", self.path.display()))?;
            eprintln!("kv: {}: moved aside to {} ({reason})", self.path.display(), aside.display());
        }
        let (database, _record) = open_database(&self.path).map_err(|(reason, _)| reason)?;
        self.file = File::Open(database);
        Ok(())
    }

    /// Write the state as applied so far and `record` in one transaction,
    /// committed and synced; with no record, write an empty state (`clear`).
    /// On `Err` nothing changed, on disk or in memory.
    fn commit(&mut self, record: Option<&[u8]>) -> Result<(), String> {
        self.reopen()?;
        let File::Open(database) = &self.file else { unreachable!("reopen leaves the file open") };
        let path = &self.path;
        let mut transaction = database.begin_write().map_err(failure(path, "begin"))?;
        transaction.set_durability(redb::Durability::Immediate).map_err(failure(path, "durability"))?;
        let mut encoded_bytes = self.encoded_bytes;
        if self.replaced || record.is_none() {
            transaction.delete_table(ENTRIES).map_err(failure(path, "empty the entries"))?;
            encoded_bytes = 0;
        }
        {
            let mut entries = transaction.open_table(ENTRIES).map_err(failure(path, "entries"))?;
            for (key, value) in self.overlay.iter().filter(|_| record.is_some()) {
                let old = match value {
                    Some(value) => entries.insert(key.as_ref(), value.as_ref()),
                    None => entries.remove(key.as_ref()),
                }
                .map_err(failure(path, "write an entry"))?;
                if let Some(old) = old {
                    encoded_bytes -= entry_bytes(key, old.value());
                }
                encoded_bytes += value.as_ref().map_or(0, |value| entry_bytes(key, value));
            }
            let mut meta = transaction.open_table(META).map_err(failure(path, "meta"))?;
            meta.insert(ENCODED_KEY, &encoded_bytes.to_le_bytes()[..]).map_err(failure(path, "write the size"))?;
            match record {
                Some(record) => meta.insert(RECORD_KEY, record).map(drop),
                None => meta.remove(RECORD_KEY).map(drop),
            }
            .map_err(failure(path, "write the record"))?;
        }
        transaction.commit().map_err(failure(path, "commit"))?;
        self.overlay.clear();
        self.replaced = false;
        self.record = record.map(Bytes::copy_from_slice);
        self.encoded_bytes = encoded_bytes;
        self.invariants();
        Ok(())
    }

    /// D3: drop a staged stream and its file.
    fn drop_staging(&mut self) -> Result<(), String> {
        self.staging = None;
        let path = staging_path(&self.path);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(format!("{}: remove: {error}", path.display())),
        }
    }

    /// Every entry as applied so far, in key order.
    fn entries(&self) -> Vec<(Bytes, Bytes)> {
        let live = |(key, value): (&Bytes, &Option<Bytes>)| Some((key.clone(), value.clone()?));
        let (File::Open(database), false) = (&self.file, self.replaced) else {
            return self.overlay.iter().filter_map(live).collect();
        };
        let read = || -> Result<Vec<(Bytes, Bytes)>, redb::Error> {
            let transaction = database.begin_read()?;
            let table = transaction.open_table(ENTRIES)?;
            let mut overlay = self.overlay.iter().peekable();
            let mut out = Vec::new();
            for entry in table.iter()? {
                let (key, value) = entry?;
                let key = key.value();
                while let Some(earlier) = overlay.next_if(|(pending, _)| pending.as_ref() < key) {
                    out.extend(live(earlier));
                }
                match overlay.next_if(|(pending, _)| pending.as_ref() == key) {
                    Some(changed) => out.extend(live(changed)),
                    None => out.push((Bytes::copy_from_slice(key), Bytes::copy_from_slice(value.value()))),
                }
            }
            out.extend(overlay.filter_map(live));
            Ok(out)
        };
        read().unwrap_or_else(|error| self.dead("read the entries", &error.to_string()))
    }
}

/// Open or create the file at `path`: create its tables, check its format,
/// read its checkpoint record. `Err`: why, and whether the file is damaged
/// (to be moved aside) rather than locked or unreachable.
fn open_database(path: &Path) -> Result<(Database, Option<Bytes>), (String, bool)> {
    let failed = |set_aside: bool| move |error: String| (format!("{}: {error}", path.display()), set_aside);
    let dir = path.parent().ok_or_else(|| failed(false)("no directory".into()))?;
    std::fs::create_dir_all(dir).map_err(|error| failed(false)(format!("create its directory: {error}")))?;
    let existed = path.exists();
    let database = Database::builder()
        .set_check_integrity_on_open(true)
        .create(path)
        .map_err(|error| failed(damaged(&error))(format!("open: {error}")))?;
    let checked = || -> Result<Option<Bytes>, String> {
        let transaction = database.begin_write().map_err(|error| error.to_string())?;
        let record = {
            transaction.open_table(ENTRIES).map_err(|error| format!("entries table: {error}"))?;
            let mut meta = transaction.open_table(META).map_err(|error| format!("meta table: {error}"))?;
            let format = meta.get(FORMAT_KEY).map_err(|error| error.to_string())?.map(|value| value.value().to_vec());
            match format {
                None => drop(meta.insert(FORMAT_KEY, FORMAT).map_err(|error| error.to_string())?),
                Some(format) if format == FORMAT => {}
                Some(format) => {
                    let (found, wanted) = (String::from_utf8_lossy(&format), String::from_utf8_lossy(FORMAT));
                    return Err(format!("format {found:?}, not {wanted:?}"));
                }
            }
            let record = meta.get(RECORD_KEY).map_err(|error| error.to_string())?;
            record.map(|record| Bytes::copy_from_slice(record.value()))
        };
        transaction.commit().map_err(|error| error.to_string())?;
        Ok(record)
    };
    let record = checked().map_err(failed(true))?;
    if !existed {
        // The new file's name must survive a crash as its checkpoints do.
        sync_dir(dir).map_err(|error| failed(false)(format!("sync its directory: {error}")))?;
    }
    Ok((database, record))
}

/// Say which step on which file failed, for `map_err`.
fn failure<'a, E: std::fmt::Display>(path: &'a Path, what: &'a str) -> impl FnOnce(E) -> String + 'a {
    move |error| format!("{}: checkpoint: {what}: {error}", path.display())
}

/// Whether an open failed on the file's content (move it aside and start
/// anew) rather than on its lock or the disk (leave it for the operator).
fn damaged(error: &DatabaseError) -> bool {
    match error {
        DatabaseError::Storage(StorageError::Io(io)) => io.kind() == std::io::ErrorKind::InvalidData,
        DatabaseError::Storage(StorageError::Corrupted(_)) | DatabaseError::UpgradeRequired(_) => true,
        _ => false,
    }
}

/// Make a directory's entries (a new file's name) durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// An entry's bytes in a snapshot or a stream.
fn entry_bytes(key: &[u8], value: &[u8]) -> u64 {
    (2 + key.len() + 4 + value.len()) as u64
}

/// Append an entry in the snapshot's (and the stream's) encoding.
fn encode_entry(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    assert!(key.len() <= KEY_SIZE_MAX_BYTES && u32::try_from(value.len()).is_ok(), "entry fits its lengths");
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// D3: the checkpoint's stream size as `meta` holds it; a file of before
/// `encoded_bytes` existed is measured once.
fn encoded_size(database: &Database) -> Result<u64, redb::Error> {
    let transaction = database.begin_read()?;
    let meta = transaction.open_table(META)?;
    if let Some(size) = meta.get(ENCODED_KEY)? {
        return Ok(size.value().try_into().map(u64::from_le_bytes).unwrap_or(0));
    }
    let entries = transaction.open_table(ENTRIES)?;
    let mut size = 0;
    for entry in entries.iter()? {
        let (key, value) = entry?;
        size += entry_bytes(key.value(), value.value());
    }
    Ok(size)
}

/// D3: where `path`'s stream is staged.
fn staging_path(path: &Path) -> PathBuf {
    path.with_extension("redb.staging")
}

/// D3: a staging file left by an earlier process, if it holds a stream's
/// key (one without is an install that finished, or a begin that did not:
/// removed).
fn open_staging(path: &Path) -> Option<Staging> {
    if !path.exists() {
        return None;
    }
    let opened = || -> Result<Option<Staging>, redb::Error> {
        let database = Database::builder().set_check_integrity_on_open(true).create(path)?;
        let (key, staged_bytes) = {
            let transaction = database.begin_read()?;
            let meta = transaction.open_table(META)?;
            let key = meta.get(STREAM_KEY)?.map(|key| Bytes::copy_from_slice(key.value()));
            let staged =
                meta.get(STAGED_KEY)?.and_then(|staged| staged.value().try_into().ok()).map(u64::from_le_bytes);
            (key, staged)
        };
        Ok(key.zip(staged_bytes).map(|(key, staged_bytes)| Staging { database, key, staged_bytes }))
    };
    match opened() {
        Ok(Some(staging)) => Some(staging),
        _ => {
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

/// D3: the entries of a stream chunk (whole entries, keys ascending).
fn decode_chunk(chunk: &[u8]) -> Result<Vec<(Bytes, Bytes)>, String> {
    let mut rest = chunk;
    let mut entries: Vec<(Bytes, Bytes)> = Vec::new();
    while !rest.is_empty() {
        let (key, after_key) = take(rest, 2).map_err(|error| format!("stream chunk: a key: {error}"))?;
        let (value, after_value) = take(after_key, 4).map_err(|error| format!("stream chunk: a value: {error}"))?;
        if entries.last().is_some_and(|(last, _)| *last >= key) {
            return Err("stream chunk: keys not ascending".into());
        }
        entries.push((key, value));
        rest = after_value;
    }
    Ok(entries)
}

/// D3: the checkpoint's entries, read from a redb read transaction.
struct EntriesView {
    record: Bytes,
    table: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    size_bytes: u64,
    /// Where the next chunk starts, and the last key before it.
    next: (u64, Option<Bytes>),
    /// The last chunk served, to serve it again.
    last: Option<(u64, Bytes)>,
}

impl EntriesView {
    fn chunk_after(&self, after: Option<&[u8]>, size_max_bytes: usize) -> Result<(Vec<u8>, Option<Bytes>), String> {
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) = match after {
            Some(key) => (Bound::Excluded(key), Bound::Unbounded),
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        let mut chunk = Vec::new();
        let mut last_key = None;
        for entry in self.table.range(bounds).map_err(|error| error.to_string())? {
            let (key, value) = entry.map_err(|error| error.to_string())?;
            let size = entry_bytes(key.value(), value.value()) as usize;
            if chunk.len() + size > size_max_bytes {
                if chunk.is_empty() {
                    return Err(format!("an entry of {size} bytes exceeds the chunk size {size_max_bytes}"));
                }
                break;
            }
            encode_entry(&mut chunk, key.value(), value.value());
            last_key = Some(Bytes::copy_from_slice(key.value()));
        }
        Ok((chunk, last_key))
    }
}

impl StateExport for EntriesView {
    fn record(&self) -> Bytes {
        self.record.clone()
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read(&mut self, offset_bytes: u64, size_max_bytes: usize) -> Result<Option<Bytes>, String> {
        if let Some((at, chunk)) = &self.last
            && *at == offset_bytes
        {
            return Ok(Some(chunk.clone()));
        }
        if offset_bytes != self.next.0 || offset_bytes >= self.size_bytes {
            return Ok(None);
        }
        let (chunk, last_key) = self.chunk_after(self.next.1.as_deref(), size_max_bytes)?;
        if chunk.is_empty() {
            return Err(format!("the entries end at {offset_bytes} bytes, short of {}", self.size_bytes));
        }
        let chunk = Bytes::from(chunk);
        self.next = (offset_bytes + chunk.len() as u64, last_key);
        self.last = Some((offset_bytes, chunk.clone()));
        Ok(Some(chunk))
    }
}

impl StateMachine for KvStore {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        let Ok((key, value)) = decode_operation(operation) else { return Bytes::from_static(MALFORMED) };
        let existed = self.get(&key).is_some();
        match value {
            Some(value) => {
                self.overlay.insert(key, Some(value));
            }
            None if self.replaced => {
                self.overlay.remove(&key);
            }
            None if existed => {
                self.overlay.insert(key, None);
            }
            None => {}
        }
        self.invariants();
        Bytes::from_static(if existed { b"existed" } else { b"new" })
    }

    /// The query is a key; the answer is `1` and the value, or `0` if absent.
    fn read(&self, key: &[u8]) -> Bytes {
        match self.get(key) {
            Some(value) => [&[1u8][..], &value].concat().into(),
            None => Bytes::from_static(&[0]),
        }
    }

    fn snapshot(&self) -> Bytes {
        let entries = self.entries();
        encode_snapshot(entries.iter().map(|(key, value)| (key.as_ref(), value.as_ref())))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let entries = decode_snapshot(snapshot)?;
        self.overlay = entries.into_iter().map(|(key, value)| (key, Some(value))).collect();
        self.replaced = true;
        self.invariants();
        Ok(())
    }

    fn durability(&self) -> Durability {
        Durability::Persistent
    }

    /// D2: each run is a write transaction of redb: applied on the shard's
    /// apply worker, off the thread that serves the shard's other groups.
    fn apply_off_shard(&self) -> bool {
        true
    }

    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.commit(Some(record))
    }

    fn checkpointed(&self) -> Option<Bytes> {
        self.record.clone()
    }

    fn clear(&mut self) -> Result<(), String> {
        self.drop_staging()?;
        self.commit(None)
    }

    fn export(&mut self) -> Result<Option<Box<dyn StateExport>>, String> {
        let (File::Open(database), false, Some(record)) = (&self.file, self.replaced, &self.record) else {
            return Ok(None);
        };
        let path = &self.path;
        let transaction = database.begin_read().map_err(|error| format!("{}: export: {error}", path.display()))?;
        let table = transaction.open_table(ENTRIES).map_err(|error| format!("{}: export: {error}", path.display()))?;
        let view =
            EntriesView { record: record.clone(), table, size_bytes: self.encoded_bytes, next: (0, None), last: None };
        Ok(Some(Box::new(view)))
    }

    fn import_begin(&mut self, key: &[u8]) -> Result<(), String> {
        if self.staging.as_ref().is_some_and(|staging| staging.key[..] == *key) {
            return Ok(());
        }
        self.drop_staging()?;
        let path = staging_path(&self.path);
        let failed = |error: redb::Error| format!("{}: staging: {error}", path.display());
        let database = Database::create(&path).map_err(|error| failed(error.into()))?;
        let transaction = database.begin_write().map_err(|error| failed(error.into()))?;
        {
            transaction.open_table(ENTRIES).map_err(|error| failed(error.into()))?;
            let mut meta = transaction.open_table(META).map_err(|error| failed(error.into()))?;
            meta.insert(FORMAT_KEY, FORMAT).map_err(|error| failed(error.into()))?;
            meta.insert(STREAM_KEY, key).map_err(|error| failed(error.into()))?;
            meta.insert(STAGED_KEY, &0u64.to_le_bytes()[..]).map_err(|error| failed(error.into()))?;
        }
        transaction.commit().map_err(|error| failed(error.into()))?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir).map_err(|error| format!("{}: staging: sync the directory: {error}", path.display()))?;
        }
        self.staging = Some(Staging { database, key: Bytes::copy_from_slice(key), staged_bytes: 0 });
        Ok(())
    }

    fn import_write(&mut self, offset_bytes: u64, chunk: &[u8]) -> Result<(), String> {
        let path = staging_path(&self.path);
        let staging = self.staging.as_mut().ok_or("no stream is staged")?;
        if offset_bytes != staging.staged_bytes {
            return Err(format!("a chunk at {offset_bytes} after {} staged bytes", staging.staged_bytes));
        }
        let entries = decode_chunk(chunk)?;
        let failed = |error: redb::Error| format!("{}: staging a chunk: {error}", path.display());
        let staged = offset_bytes + chunk.len() as u64;
        let transaction = staging.database.begin_write().map_err(|error| failed(error.into()))?;
        {
            let mut table = transaction.open_table(ENTRIES).map_err(|error| failed(error.into()))?;
            for (key, value) in &entries {
                table.insert(key.as_ref(), value.as_ref()).map_err(|error| failed(error.into()))?;
            }
            let mut meta = transaction.open_table(META).map_err(|error| failed(error.into()))?;
            meta.insert(STAGED_KEY, &staged.to_le_bytes()[..]).map_err(|error| failed(error.into()))?;
        }
        transaction.commit().map_err(|error| failed(error.into()))?;
        staging.staged_bytes = staged;
        Ok(())
    }

    fn import_staged(&self) -> Option<(Bytes, u64)> {
        self.staging.as_ref().map(|staging| (staging.key.clone(), staging.staged_bytes))
    }

    fn import_finish(&mut self, record: &[u8]) -> Result<(), String> {
        let staging = self.staging.take().ok_or("no stream is staged")?;
        let encoded_bytes = staging.staged_bytes;
        let staged_path = staging_path(&self.path);
        let failed = |error: redb::Error| format!("{}: install: {error}", staged_path.display());
        let transaction = staging.database.begin_write().map_err(|error| failed(error.into()))?;
        {
            let mut meta = transaction.open_table(META).map_err(|error| failed(error.into()))?;
            meta.insert(RECORD_KEY, record).map_err(|error| failed(error.into()))?;
            meta.insert(ENCODED_KEY, &encoded_bytes.to_le_bytes()[..]).map_err(|error| failed(error.into()))?;
            meta.remove(STREAM_KEY).map_err(|error| failed(error.into()))?;
            meta.remove(STAGED_KEY).map_err(|error| failed(error.into()))?;
        }
        transaction.commit().map_err(|error| failed(error.into()))?;
        drop(staging);
        // The atomic step: the staged file becomes the group's. The old
        // file is closed first (an export may still read it: its pages stay
        // until its read transaction ends).
        self.file = File::Unusable { reason: "being replaced by a streamed state".into(), set_aside: false };
        std::fs::rename(&staged_path, &self.path)
            .map_err(|error| format!("{}: install over {}: {error}", staged_path.display(), self.path.display()))?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir).map_err(|error| format!("{}: install: sync the directory: {error}", self.path.display()))?;
        }
        let (database, installed) = open_database(&self.path).map_err(|(reason, _)| reason)?;
        debug_assert_eq!(installed.as_deref(), Some(record), "the installed file holds the record");
        self.file = File::Open(database);
        self.overlay.clear();
        self.replaced = false;
        self.record = Some(Bytes::copy_from_slice(record));
        self.encoded_bytes = encoded_bytes;
        self.invariants();
        Ok(())
    }
}
