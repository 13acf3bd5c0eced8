//! The simulated disk: an in-memory file system behind cohort-wal's
//! [`FileSystem`] trait, so that every node runs the real [`FileStorage`]
//! (its group commit, rotation, checkpoints and recovery) on a disk whose
//! faults the seed chooses.
//!
//! [`FileStorage`]: cohort_wal::FileStorage
//!
//! It keeps the promises a POSIX disk keeps and no more:
//! - A write is visible to reads at once and durable only after
//!   `sync_data` on its file. A power loss keeps what was synced, then a
//!   seeded prefix of the later changes of each file, the first change
//!   after that prefix *torn*: a random subset of its 512-byte sectors (the
//!   page cache writes pages back in any order) or a random byte prefix.
//!   The rest is lost.
//! - Creating, renaming and removing files is durable only after
//!   `sync_dir` on the directory; a power loss keeps a seeded prefix of the
//!   directory's later changes (a journalling file system commits them in
//!   order). A file whose creation is lost is gone with its data.
//! - A process crash (kill -9) loses nothing that was written: the page
//!   cache outlives the process. It only loses what the process had not
//!   written yet (what `FileStorage` had staged).
//!
//! Faults armed by the simulator: a full disk (a write past the space left
//! writes what fits, then fails with ENOSPC), a failed sync (EIO), a failed
//! write (EIO), a power cut in the middle of a flush (a sync that never
//! returns: it and every later call fail until the crash is applied), and a
//! corrupt read: one read returns one flipped bit. A corrupt read only ever
//! hits bytes the WAL promises to check and stop on (see docs/storage.md,
//! "Limits of the detection"): anywhere in a snapshot file, and in a log
//! segment only below the data the last sync that wrote data made durable,
//! so that a valid record of a later flush always follows the damage. The simulator then
//! requires recovery to fail; it retries the start later, as an operator
//! would after a failed read.
//!
//! Directories are created durable at once (the storage makes its own
//! directory once, at its first start).

use crate::shared::Shared;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use cohort_wal::{FileSystem, OpenMode};

use crate::rng::Rng;

/// Sector size for torn writes.
pub const SECTOR_SIZE_BYTES: u64 = 512;

const ERRNO_NO_SPACE: i32 = 28;
const ERRNO_IO: i32 = 5;

/// A handle on one node's disk; clones share it.
#[derive(Clone, Debug, Default)]
pub struct SimDisk(Shared<DiskState>);

/// An open file of a [`SimDisk`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SimFile(u64);

/// An open directory of a [`SimDisk`].
#[derive(Clone, Debug)]
pub struct SimDir(PathBuf);

/// Counters of what the disk did and what its faults cost.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Writes (each `write_all_at`).
    pub writes: u64,
    /// Syncs of files and directories that succeeded.
    pub syncs: u64,
    /// Power losses applied.
    pub power_losses: u64,
    /// Directories wiped (H5: a new disk, an emptied directory).
    pub wipes: u64,
    /// Newest log segments cut short, synced records with them (H2, H5).
    pub segments_cut: u64,
    /// Unsynced file changes a power loss dropped or tore.
    pub changes_lost: u64,
    /// Writes a power loss kept in part (torn).
    pub writes_torn: u64,
    /// Writes cut short by a full disk.
    pub writes_refused_full: u64,
    /// Injected I/O errors served (failed syncs, failed writes).
    pub io_errors: u64,
    /// Corrupt reads served.
    pub corrupt_reads: u64,
}

/// Faults to arm; each stays armed until it fires (or is disarmed).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskFaults {
    /// Bytes the disk can hold in all (None: unlimited).
    pub capacity_bytes: Option<u64>,
    /// This many next syncs fail with EIO.
    pub sync_failures: u32,
    /// This many next writes fail with EIO, writing nothing.
    pub write_failures: u32,
    /// The next read of a file the WAL checks returns one flipped bit.
    pub corrupt_next_read: bool,
}

#[derive(Debug)]
enum Change {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    /// As of the last sync: what a power loss keeps for sure.
    durable: Vec<u8>,
    /// What reads see.
    current: Vec<u8>,
    /// The bytes of `current` that take room on the disk: those up to the
    /// end of the furthest write. A file made longer by `set_len` has a
    /// hole there (sparse, as on a real file system), which takes no room
    /// until it is written: the full-disk fault hits a preallocated
    /// segment's zeros and records as it would on a real disk.
    allocated_bytes: u64,
    /// Changes since the last sync, in order.
    pending: Vec<Change>,
    /// The lowest offset written before the last sync that made writes
    /// durable (a log segment's last flush: its records, then the zeros
    /// written ahead of them), leaving out writes a later cut shortened: a
    /// corrupt read of a segment stays below it, where every byte is older
    /// and that flush's records follow.
    checked_below_bytes: u64,
}

#[derive(Debug)]
enum DirChange {
    Link(String, u64),
    Unlink(String),
    Rename(String, String),
}

#[derive(Debug, Default)]
struct Directory {
    durable: BTreeMap<String, u64>,
    current: BTreeMap<String, u64>,
    pending: Vec<DirChange>,
}

#[derive(Debug, Default)]
struct DiskState {
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    dirs: BTreeMap<PathBuf, Directory>,
    faults: DiskFaults,
    /// A power cut during a flush: syncs left before the one that never returns.
    cut_after_syncs: Option<u32>,
    /// The power is gone: every call fails until `crash`.
    dead: bool,
    /// Seeds the corrupt read's bit.
    corrupt_seed: u64,
    stats: DiskStats,
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(ERRNO_IO)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file or directory", path.display()))
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path.file_name().and_then(|name| name.to_str()).ok_or_else(|| not_found(path))?;
    Ok((parent, name.to_owned()))
}

fn apply(content: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, data } => write_into(content, *offset, data),
        Change::SetLen(len) => content.resize(*len as usize, 0),
    }
}

fn write_into(content: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if content.len() < end {
        content.resize(end, 0);
    }
    content[offset as usize..end].copy_from_slice(data);
}

impl Inode {
    /// A power loss: keep the durable content, a seeded prefix of the
    /// pending changes, and a torn part of the next one.
    fn lose_power(&mut self, rng: &mut Rng, stats: &mut DiskStats) {
        let kept = rng.below(self.pending.len() as u64 + 1) as usize;
        let mut content = std::mem::take(&mut self.durable);
        for change in &self.pending[..kept] {
            apply(&mut content, change);
        }
        if let Some(torn) = self.pending.get(kept) {
            stats.changes_lost += (self.pending.len() - kept) as u64;
            match torn {
                Change::Write { offset, data } if !data.is_empty() => {
                    stats.writes_torn += 1;
                    if rng.chance(500) {
                        // Some sectors reached the disk, in any order.
                        let mut at = *offset;
                        let end = offset + data.len() as u64;
                        while at < end {
                            let sector_end = ((at / SECTOR_SIZE_BYTES + 1) * SECTOR_SIZE_BYTES).min(end);
                            if rng.chance(500) {
                                let from = (at - offset) as usize;
                                write_into(&mut content, at, &data[from..(sector_end - offset) as usize]);
                            }
                            at = sector_end;
                        }
                    } else {
                        let prefix = rng.below(data.len() as u64) as usize;
                        write_into(&mut content, *offset, &data[..prefix]);
                    }
                }
                Change::Write { .. } => {}
                Change::SetLen(_) => {
                    if rng.chance(500) {
                        apply(&mut content, torn);
                    }
                }
            }
        }
        self.pending.clear();
        self.current.clone_from(&content);
        self.durable = content;
        self.allocated_bytes = self.allocated_bytes.min(self.current.len() as u64);
    }

    fn sync(&mut self) {
        // Writes that a later cut shortened do not count: a failed write
        // the storage cut back holds no record (a full disk). Nor do writes
        // a later write of zeros covered (a failed write the storage
        // zeroed in place, H2), nor writes of zeros alone: they hold no
        // record either (a torn tail recovery overwrote), so no later
        // flush's records follow what is below them.
        let mut written: Vec<(u64, u64)> = Vec::new();
        for change in &self.pending {
            match change {
                Change::Write { offset, data } if data.iter().any(|byte| *byte != 0) => {
                    written.push((*offset, *offset + data.len() as u64));
                }
                Change::Write { offset, data } => {
                    let (from, to) = (*offset, *offset + data.len() as u64);
                    written.retain(|(start, end)| !(*start >= from && *end <= to));
                }
                Change::SetLen(len) => written.retain(|(_, end)| end <= len),
            }
        }
        let written_from = written.iter().map(|(offset, _)| *offset).min();
        self.pending.clear();
        self.durable.clone_from(&self.current);
        if let Some(offset) = written_from {
            self.checked_below_bytes = offset;
        }
        self.checked_below_bytes = self.checked_below_bytes.min(self.durable.len() as u64);
    }
}

impl Directory {
    fn lose_power(&mut self, rng: &mut Rng) {
        let kept = rng.below(self.pending.len() as u64 + 1) as usize;
        for change in &self.pending[..kept] {
            match change {
                DirChange::Link(name, inode) => {
                    self.durable.insert(name.clone(), *inode);
                }
                DirChange::Unlink(name) => {
                    self.durable.remove(name);
                }
                DirChange::Rename(from, to) => {
                    if let Some(inode) = self.durable.remove(from) {
                        self.durable.insert(to.clone(), inode);
                    }
                }
            }
        }
        self.pending.clear();
        self.current.clone_from(&self.durable);
    }

    fn sync(&mut self) {
        self.pending.clear();
        self.durable.clone_from(&self.current);
    }
}

impl DiskState {
    fn check_alive(&self) -> io::Result<()> {
        if self.dead { Err(eio()) } else { Ok(()) }
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let (parent, name) = split(path)?;
        self.dirs.get(&parent).and_then(|dir| dir.current.get(&name)).copied().ok_or_else(|| not_found(path))
    }

    fn inode(&mut self, file: SimFile) -> io::Result<&mut Inode> {
        self.inodes.get_mut(&file.0).ok_or_else(eio)
    }

    fn used_bytes(&self) -> u64 {
        let mut linked: Vec<u64> = self.dirs.values().flat_map(|dir| dir.current.values().copied()).collect();
        linked.sort_unstable();
        linked.dedup();
        linked.iter().filter_map(|inode| self.inodes.get(inode)).map(|inode| inode.allocated_bytes).sum()
    }

    /// One sync call: a power cut or an injected failure may stop it.
    fn before_sync(&mut self) -> io::Result<()> {
        self.check_alive()?;
        if let Some(left) = self.cut_after_syncs {
            if left == 0 {
                self.dead = true;
                return Err(eio());
            }
            self.cut_after_syncs = Some(left - 1);
        }
        if self.faults.sync_failures > 0 {
            self.faults.sync_failures -= 1;
            self.stats.io_errors += 1;
            return Err(eio());
        }
        Ok(())
    }

    fn create(&mut self, parent: PathBuf, name: String) -> u64 {
        let inode = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(inode, Inode::default());
        if let Some(dir) = self.dirs.get_mut(&parent) {
            dir.current.insert(name.clone(), inode);
            dir.pending.push(DirChange::Link(name, inode));
        }
        inode
    }

    /// Flip one bit of `bytes` read from `path` if a corrupt read is armed
    /// and the bytes are ones the WAL checks (see the module docs).
    fn maybe_corrupt(&mut self, path: &Path, inode: u64, bytes: &mut [u8]) {
        if !self.faults.corrupt_next_read {
            return;
        }
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        let checked_bytes = if name.ends_with(".snap") {
            bytes.len() as u64
        } else if name.ends_with(".seg") {
            self.inodes.get(&inode).map_or(0, |inode| inode.checked_below_bytes).min(bytes.len() as u64)
        } else {
            0
        };
        if checked_bytes == 0 {
            return;
        }
        let mut rng = Rng::new(self.corrupt_seed);
        self.corrupt_seed = rng.next_u64();
        let bit = rng.below(checked_bytes * 8);
        bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
        self.faults.corrupt_next_read = false;
        self.stats.corrupt_reads += 1;
    }
}

impl SimDisk {
    /// An empty disk; `seed` chooses the bits corrupt reads flip.
    pub fn new(seed: u64) -> SimDisk {
        let disk = SimDisk::default();
        disk.0.borrow_mut().corrupt_seed = seed;
        disk
    }

    /// The faults armed now.
    pub fn faults(&self) -> DiskFaults {
        self.0.borrow().faults
    }

    /// Arm (or disarm) faults.
    pub fn set_faults(&self, faults: DiskFaults) {
        self.0.borrow_mut().faults = faults;
    }

    /// What the disk did so far.
    pub fn stats(&self) -> DiskStats {
        self.0.borrow().stats
    }

    /// Bytes in files now.
    pub fn used_bytes(&self) -> u64 {
        self.0.borrow().used_bytes()
    }

    /// The power fails during the flush that is about to run: after
    /// `syncs` more syncs succeed, the next one never returns, and every
    /// call fails until [`SimDisk::crash`].
    pub fn cut_power_after_syncs(&self, syncs: u32) {
        self.0.borrow_mut().cut_after_syncs = Some(syncs);
    }

    /// The node went down. With `power_loss` the disk loses what was not
    /// synced, as the module docs describe; without (a process crash) it
    /// keeps everything written. Armed faults stay armed; a power cut is over.
    pub fn crash(&self, power_loss: bool, rng: &mut Rng) {
        let mut state = self.0.borrow_mut();
        let state = &mut *state;
        state.dead = false;
        state.cut_after_syncs = None;
        if !power_loss {
            return;
        }
        state.stats.power_losses += 1;
        for inode in state.inodes.values_mut() {
            inode.lose_power(rng, &mut state.stats);
        }
        for dir in state.dirs.values_mut() {
            dir.lose_power(rng);
        }
        // Files no directory names any more are gone.
        let linked: std::collections::BTreeSet<u64> =
            state.dirs.values().flat_map(|dir| dir.current.values().copied()).collect();
        state.inodes.retain(|inode, _| linked.contains(inode));
    }
}

impl SimDisk {
    /// H1, H5: the files of directory `dir` and of every directory under
    /// it are gone, durably (a new disk, or a directory an operator
    /// emptied); the directories stay, empty. Only while the node is down.
    pub fn wipe(&self, dir: &Path) {
        let mut state = self.0.borrow_mut();
        let state = &mut *state;
        let mut gone = Vec::new();
        for (path, directory) in state.dirs.iter_mut().filter(|(path, _)| path.starts_with(dir)) {
            let _ = path;
            gone.extend(directory.current.values().copied());
            gone.extend(directory.durable.values().copied());
            directory.current.clear();
            directory.durable.clear();
            directory.pending.clear();
        }
        for inode in gone {
            state.inodes.remove(&inode);
        }
        state.stats.wipes += 1;
    }
}

impl SimDisk {
    /// H2, H5: the newest log segment of directory `dir` loses its end,
    /// durably, records that had been synced with it: the file is cut at
    /// a random offset past its header and before its last byte that is
    /// not zero (a cut inside the zeros ahead of the records loses
    /// nothing). Only while the node is down. False if `dir` has no
    /// segment with records.
    pub fn cut_newest_segment(&self, dir: &Path, rng: &mut Rng) -> bool {
        let mut state = self.0.borrow_mut();
        let state = &mut *state;
        let Some(directory) = state.dirs.get(dir) else { return false };
        let newest = directory.current.iter().rfind(|(name, _)| name.starts_with("wal-") && name.ends_with(".seg"));
        let Some((_, &inode)) = newest else { return false };
        let Some(file) = state.inodes.get_mut(&inode) else { return false };
        let header = cohort_wal::format::SEGMENT_HEADER_SIZE_BYTES as u64;
        let end = file.current.iter().rposition(|byte| *byte != 0).map_or(0, |last| last as u64 + 1);
        if end <= header {
            return false;
        }
        let offset = rng.range(header, end) as usize;
        file.current.truncate(offset);
        file.allocated_bytes = file.allocated_bytes.min(offset as u64);
        file.durable = file.current.clone();
        file.pending.clear();
        // No later flush's records follow any of its bytes now: a corrupt
        // read could not be told from the cut (see the module docs).
        file.checked_below_bytes = 0;
        state.stats.segments_cut += 1;
        true
    }
}

impl FileSystem for SimDisk {
    type File = SimFile;
    type Dir = SimDir;

    fn open(&mut self, path: &Path, mode: OpenMode) -> io::Result<SimFile> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        let (parent, name) = split(path)?;
        if !state.dirs.contains_key(&parent) {
            return Err(not_found(&parent));
        }
        let existing = state.lookup(path).ok();
        match (mode, existing) {
            (OpenMode::CreateNew, Some(_)) => {
                Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: file exists", path.display())))
            }
            (OpenMode::Existing, None) => Err(not_found(path)),
            (OpenMode::CreateTruncate, Some(inode)) => {
                let file = state.inode(SimFile(inode))?;
                file.current.clear();
                file.allocated_bytes = 0;
                file.pending.push(Change::SetLen(0));
                Ok(SimFile(inode))
            }
            (_, Some(inode)) => Ok(SimFile(inode)),
            (_, None) => Ok(SimFile(state.create(parent, name))),
        }
    }

    fn write_all_at(&mut self, file: &SimFile, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        if state.faults.write_failures > 0 {
            state.faults.write_failures -= 1;
            state.stats.io_errors += 1;
            return Err(eio());
        }
        let mut data = buf;
        let mut full = false;
        if let Some(capacity) = state.faults.capacity_bytes {
            let allocated = state.inode(*file)?.allocated_bytes;
            let room = capacity.saturating_sub(state.used_bytes());
            let end_max = allocated + room;
            let end = offset + buf.len() as u64;
            if end > end_max {
                full = true;
                data = &buf[..end_max.saturating_sub(offset).min(buf.len() as u64) as usize];
            }
        }
        state.stats.writes += 1;
        let inode = state.inode(*file)?;
        write_into(&mut inode.current, offset, data);
        inode.allocated_bytes = inode.allocated_bytes.max(offset + data.len() as u64);
        inode.pending.push(Change::Write { offset, data: data.to_vec() });
        if full {
            state.stats.writes_refused_full += 1;
            return Err(io::Error::from_raw_os_error(ERRNO_NO_SPACE));
        }
        Ok(())
    }

    fn set_len(&mut self, file: &SimFile, len_bytes: u64) -> io::Result<()> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        let inode = state.inode(*file)?;
        inode.current.resize(len_bytes as usize, 0);
        inode.allocated_bytes = inode.allocated_bytes.min(len_bytes);
        inode.pending.push(Change::SetLen(len_bytes));
        Ok(())
    }

    fn sync_data(&mut self, file: &SimFile) -> io::Result<()> {
        let mut state = self.0.borrow_mut();
        state.before_sync()?;
        state.inode(*file)?.sync();
        state.stats.syncs += 1;
        Ok(())
    }

    fn open_dir(&mut self, dir: &Path) -> io::Result<SimDir> {
        let state = self.0.borrow();
        state.check_alive()?;
        if state.dirs.contains_key(dir) { Ok(SimDir(dir.to_path_buf())) } else { Err(not_found(dir)) }
    }

    fn sync_dir(&mut self, dir: &SimDir) -> io::Result<()> {
        let mut state = self.0.borrow_mut();
        state.before_sync()?;
        state.dirs.get_mut(&dir.0).ok_or_else(|| not_found(&dir.0))?.sync();
        state.stats.syncs += 1;
        Ok(())
    }

    fn read(&mut self, path: &Path) -> io::Result<Vec<u8>> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        let inode = state.lookup(path)?;
        let mut bytes = state.inode(SimFile(inode))?.current.clone();
        state.maybe_corrupt(path, inode, &mut bytes);
        Ok(bytes)
    }

    fn len(&mut self, path: &Path) -> io::Result<u64> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        let inode = state.lookup(path)?;
        Ok(state.inode(SimFile(inode))?.current.len() as u64)
    }

    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        state.lookup(path)?;
        let (parent, name) = split(path)?;
        if let Some(dir) = state.dirs.get_mut(&parent) {
            dir.current.remove(&name);
            dir.pending.push(DirChange::Unlink(name));
        }
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        let inode = state.lookup(from)?;
        let (parent, from_name) = split(from)?;
        let (to_parent, to_name) = split(to)?;
        if parent != to_parent {
            return Err(io::Error::new(io::ErrorKind::CrossesDevices, "renames stay in one directory"));
        }
        if let Some(dir) = state.dirs.get_mut(&parent) {
            dir.current.remove(&from_name);
            dir.current.insert(to_name.clone(), inode);
            dir.pending.push(DirChange::Rename(from_name, to_name));
        }
        Ok(())
    }

    fn exists(&mut self, path: &Path) -> bool {
        let state = self.0.borrow();
        state.dirs.contains_key(path) || state.lookup(path).is_ok()
    }

    fn create_dir_all(&mut self, dir: &Path) -> io::Result<()> {
        let mut state = self.0.borrow_mut();
        state.check_alive()?;
        for ancestor in dir.ancestors() {
            state.dirs.entry(ancestor.to_path_buf()).or_default();
        }
        Ok(())
    }

    fn list_dir(&mut self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.0.borrow();
        state.check_alive()?;
        let dir = state.dirs.get(dir).ok_or_else(|| not_found(dir))?;
        Ok(dir.current.keys().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk_with_dir() -> (SimDisk, PathBuf) {
        let mut disk = SimDisk::new(1);
        let dir = PathBuf::from("/node/shard-0");
        disk.create_dir_all(&dir).expect("a new directory");
        (disk, dir)
    }

    #[test]
    fn synced_data_survives_power_loss_and_unsynced_may_not() {
        let mut lost = 0;
        for seed in 0..50 {
            let (mut disk, dir) = disk_with_dir();
            let path = dir.join("a.seg");
            let file = disk.open(&path, OpenMode::CreateNew).expect("created");
            let handle = disk.open_dir(&dir).expect("dir");
            disk.sync_dir(&handle).expect("dir synced");
            disk.write_all_at(&file, &[1; 1000], 0).expect("written");
            disk.sync_data(&file).expect("synced");
            disk.write_all_at(&file, &[2; 3000], 1000).expect("written");
            disk.crash(true, &mut Rng::new(seed));
            let bytes = disk.read(&path).expect("the file survives: its creation was synced");
            assert_eq!(&bytes[..1000], &[1; 1000][..], "synced data is intact");
            lost += u64::from(bytes.len() < 4000 || bytes[1000..].iter().any(|byte| *byte != 2));
        }
        assert!(lost > 0, "some power losses lose unsynced data");
    }

    #[test]
    fn unsynced_creation_can_vanish_and_process_crash_keeps_everything() {
        let (mut disk, dir) = disk_with_dir();
        let path = dir.join("b.seg");
        let file = disk.open(&path, OpenMode::CreateNew).expect("created");
        disk.write_all_at(&file, b"hello", 0).expect("written");
        disk.crash(false, &mut Rng::new(3));
        assert_eq!(disk.read(&path).expect("kept"), b"hello");
        let mut vanished = false;
        for seed in 0..20 {
            let (mut disk, dir) = disk_with_dir();
            let path = dir.join("c.seg");
            let file = disk.open(&path, OpenMode::CreateNew).expect("created");
            disk.write_all_at(&file, b"x", 0).expect("written");
            disk.sync_data(&file).expect("synced");
            disk.crash(true, &mut Rng::new(seed));
            vanished |= !disk.exists(&path);
        }
        assert!(vanished, "a creation that was never synced in its directory can be lost");
    }

    #[test]
    fn full_disk_writes_what_fits_then_fails_with_enospc() {
        let (mut disk, dir) = disk_with_dir();
        let file = disk.open(&dir.join("d.seg"), OpenMode::CreateNew).expect("created");
        disk.set_faults(DiskFaults { capacity_bytes: Some(100), ..DiskFaults::default() });
        let error = disk.write_all_at(&file, &[7; 150], 0).expect_err("no room for 150 bytes");
        assert_eq!(error.raw_os_error(), Some(ERRNO_NO_SPACE));
        assert_eq!(disk.used_bytes(), 100);
        disk.write_all_at(&file, &[8; 10], 0).expect("overwriting needs no space");
    }

    #[test]
    fn a_power_cut_stops_every_call_until_the_crash() {
        let (mut disk, dir) = disk_with_dir();
        let file = disk.open(&dir.join("e.seg"), OpenMode::CreateNew).expect("created");
        let handle = disk.open_dir(&dir).expect("dir");
        disk.sync_dir(&handle).expect("dir synced");
        disk.cut_power_after_syncs(1);
        disk.sync_data(&file).expect("the first sync returns");
        assert!(disk.sync_data(&file).is_err(), "the second never does");
        assert!(disk.write_all_at(&file, b"x", 0).is_err(), "the power is gone");
        disk.crash(true, &mut Rng::new(1));
        assert!(disk.write_all_at(&file, b"x", 0).is_ok(), "a restarted node writes again");
    }

    #[test]
    fn corrupt_reads_hit_only_checked_bytes() {
        const RECORD: u8 = 0x11;
        let (mut disk, dir) = disk_with_dir();
        let path = dir.join("f.seg");
        let file = disk.open(&path, OpenMode::CreateNew).expect("created");
        let mut expected = vec![RECORD; 64];
        disk.write_all_at(&file, &expected, 0).expect("written");
        disk.sync_data(&file).expect("synced");
        let flipped = |bytes: &[u8], expected: &[u8]| -> Vec<usize> {
            (0..bytes.len()).filter(|at| bytes[*at] != expected[*at]).collect()
        };
        disk.set_faults(DiskFaults { corrupt_next_read: true, ..DiskFaults::default() });
        assert_eq!(disk.read(&path).expect("read"), expected, "nothing below the last sync's data yet");
        disk.write_all_at(&file, &[RECORD; 64], 64).expect("written");
        expected.extend([RECORD; 64]);
        disk.sync_data(&file).expect("synced");
        let bytes = disk.read(&path).expect("read");
        let at = flipped(&bytes, &expected);
        assert_eq!(at.len(), 1, "one bit");
        assert!(at[0] < 64, "below the data of the last sync");
        assert_eq!(disk.stats().corrupt_reads, 1);
        assert_eq!(disk.read(&path).expect("read"), expected, "one read only");
        // A sync of data written over bytes the file had (K3: records over
        // preallocated zeros) moves the mark down to where that data starts.
        disk.write_all_at(&file, &[RECORD; 8], 16).expect("written");
        disk.sync_data(&file).expect("synced");
        disk.set_faults(DiskFaults { corrupt_next_read: true, ..DiskFaults::default() });
        let at = flipped(&disk.read(&path).expect("read"), &expected);
        assert!(at.len() == 1 && at[0] < 16, "below the data of the last sync: {at:?}");
        // A write the storage cut back (a full disk) holds no record: a
        // sync of it and its cut leaves the mark where it was.
        disk.write_all_at(&file, &[RECORD; 8], 128).expect("written");
        disk.set_len(&file, 128).expect("cut back");
        disk.sync_data(&file).expect("synced");
        disk.set_faults(DiskFaults { corrupt_next_read: true, ..DiskFaults::default() });
        let at = flipped(&disk.read(&path).expect("read"), &expected);
        assert!(at.len() == 1 && at[0] < 16, "a cut-back write moves nothing: {at:?}");
        // Nor does a write of zeros alone (H2: a torn tail zeroed by
        // recovery holds no record that could follow what is below it).
        disk.write_all_at(&file, &[0; 8], 8).expect("written");
        expected[8..16].fill(0);
        disk.sync_data(&file).expect("synced");
        disk.set_faults(DiskFaults { corrupt_next_read: true, ..DiskFaults::default() });
        let at = flipped(&disk.read(&path).expect("read"), &expected);
        assert!(at.len() == 1 && at[0] < 16, "a write of zeros moves nothing: {at:?}");
    }

    #[test]
    fn h2_a_cut_segment_loses_its_end_durably_and_a_hole_takes_no_room() {
        let (mut disk, dir) = disk_with_dir();
        let file = disk.open(&dir.join("wal-00000000000000000001.seg"), OpenMode::CreateNew).expect("created");
        disk.write_all_at(&file, &[7; 200], 0).expect("written");
        disk.set_len(&file, 4096).expect("sized");
        disk.sync_data(&file).expect("synced");
        let handle = disk.open_dir(&dir).expect("dir");
        disk.sync_dir(&handle).expect("dir synced");
        assert_eq!(disk.used_bytes(), 200, "the hole past the records takes no room");
        assert!(disk.cut_newest_segment(&dir, &mut Rng::new(3)), "a segment with records is cut");
        let path = dir.join("wal-00000000000000000001.seg");
        let len = disk.len(&path).expect("len");
        assert!((32..200).contains(&len), "cut past its header, before its last record byte: {len}");
        disk.crash(true, &mut Rng::new(4));
        assert_eq!(disk.len(&path).expect("len"), len, "durably");
        assert_eq!(disk.stats().segments_cut, 1);
    }
}
