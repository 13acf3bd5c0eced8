//! The per-group superblocks: one file per shard, one slot per group, two
//! copies per slot.
//!
//! Why this scheme: a flush may carry superblocks of thousands of groups, and
//! each must be replaced atomically. Write-new/fsync/rename/fsync-dir per
//! group would cost two syncs *per group*; rewriting one whole file per flush
//! would cost O(all groups) bytes. Here a flush writes only the changed
//! slots, each into the copy that does *not* hold the slot's newest durable
//! version, then syncs the file once: O(1) syncs and O(changed groups) bytes.
//! A torn write can only damage the copy being written, which recovery then
//! rejects by its checksum and falls back to the other copy (the previous
//! version). Copies are 1 KiB and 1 KiB-aligned, so no two copies share a
//! 512-byte sector.
//!
//! Each copy carries a per-slot sequence number (the higher valid copy wins)
//! and the log's next LSN when it was written (`log_lsn`): recovery uses it to
//! check that the log still holds everything the superblock was written after
//! (the log is synced first), and to recognise a superblock older than a
//! `RemoveGroup` record whose removal a crash interrupted.
//!
//! `remove_group` writes a *tombstone* copy, which frees the slot for reuse;
//! a new owner writes into the other copy, so a torn first write leaves the
//! tombstone (slot free) rather than the old group's superblock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use cohort_core::storage::{StorageError, Superblock};
use cohort_messages::{GROUP_MEMBERS_MAX, GroupId, Incarnation, NodeId, Op, View};

use super::disk::{Disk, FileSystem, OpenMode, SyncOf};
use super::format::{FORMAT_VERSION, u16_at, u32_at, u64_at};

/// The superblock file's name in the shard directory.
pub const SUPERBLOCK_FILE_NAME: &str = "superblocks";

/// Size of one superblock copy (and of the file header).
pub const SUPERBLOCK_COPY_SIZE_BYTES: usize = 1024;

const FILE_HEADER_SIZE_BYTES: u64 = SUPERBLOCK_COPY_SIZE_BYTES as u64;
const SLOT_SIZE_BYTES: u64 = 2 * SUPERBLOCK_COPY_SIZE_BYTES as u64;
const MAGIC: [u8; 8] = *b"cohortsb";
const MEMBERS_OFFSET: usize = 64;

const _: () = {
    // Every member fits its copy.
    assert!(MEMBERS_OFFSET + GROUP_MEMBERS_MAX * 8 <= SUPERBLOCK_COPY_SIZE_BYTES);
    // Copies never share a sector.
    assert!(SUPERBLOCK_COPY_SIZE_BYTES.is_multiple_of(512));
};

const STATE_LIVE: u8 = 1;
const STATE_REMOVED: u8 = 2;

/// One decoded, checksummed copy.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Copy {
    sequence: u64,
    group: GroupId,
    log_lsn: u64,
    /// `None` for a tombstone.
    superblock: Option<Superblock>,
}

/// What a copy position holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CopyRead {
    /// Never written (all zero, or past the end of the file).
    Empty,
    Valid(Copy),
    Invalid(&'static str),
}

fn encode_copy(copy: &Copy) -> [u8; SUPERBLOCK_COPY_SIZE_BYTES] {
    let mut raw = [0u8; SUPERBLOCK_COPY_SIZE_BYTES];
    raw[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    raw[8..16].copy_from_slice(&copy.sequence.to_le_bytes());
    raw[16..24].copy_from_slice(&copy.group.get().to_le_bytes());
    raw[24..32].copy_from_slice(&copy.log_lsn.to_le_bytes());
    match &copy.superblock {
        None => raw[6] = STATE_REMOVED,
        Some(block) => {
            raw[6] = STATE_LIVE;
            raw[7] = block.members.len() as u8;
            raw[32..36].copy_from_slice(&block.view.get().to_le_bytes());
            raw[36..40].copy_from_slice(&block.log_view.get().to_le_bytes());
            raw[40..48].copy_from_slice(&block.commit.get().to_le_bytes());
            raw[48..56].copy_from_slice(&block.incarnation.get().to_le_bytes());
            raw[56] = block.replication_quorum;
            raw[57] = crate::format::superblock_flags(block);
            for (index, member) in block.members.iter().enumerate() {
                let at = MEMBERS_OFFSET + index * 8;
                raw[at..at + 8].copy_from_slice(&member.get().to_le_bytes());
            }
        }
    }
    let checksum = crc32c::crc32c(&raw[4..]);
    raw[0..4].copy_from_slice(&checksum.to_le_bytes());
    raw
}

fn decode_copy(bytes: &[u8]) -> CopyRead {
    let Ok(raw) = <&[u8; SUPERBLOCK_COPY_SIZE_BYTES]>::try_from(bytes) else {
        // A copy cut short by the end of the file: an interrupted growth.
        return if bytes.iter().all(|byte| *byte == 0) { CopyRead::Empty } else { CopyRead::Invalid("copy cut short") };
    };
    if raw.iter().all(|byte| *byte == 0) {
        return CopyRead::Empty;
    }
    if u32_at(raw, 0) != crc32c::crc32c(&raw[4..]) {
        return CopyRead::Invalid("superblock checksum mismatch");
    }
    if u16_at(raw, 4) != FORMAT_VERSION {
        return CopyRead::Invalid("unknown superblock format version");
    }
    let member_count = raw[7] as usize;
    if member_count > GROUP_MEMBERS_MAX {
        return CopyRead::Invalid("superblock member count above GROUP_MEMBERS_MAX");
    }
    if raw[57] & !crate::format::SUPERBLOCK_FLAGS_KNOWN != 0 {
        return CopyRead::Invalid("unknown superblock flags");
    }
    let superblock = match raw[6] {
        STATE_LIVE => Some(Superblock {
            view: View(u32_at(raw, 32)),
            log_view: View(u32_at(raw, 36)),
            commit: Op(u64_at(raw, 40)),
            incarnation: Incarnation(u64_at(raw, 48)),
            members: (0..member_count).map(|index| NodeId(u64_at(raw, MEMBERS_OFFSET + index * 8))).collect(),
            replication_quorum: raw[56],
            recovering: raw[57] & crate::format::SUPERBLOCK_FLAG_RECOVERING != 0,
        }),
        STATE_REMOVED => None,
        _ => return CopyRead::Invalid("unknown superblock state"),
    };
    CopyRead::Valid(Copy {
        sequence: u64_at(raw, 8),
        group: GroupId(u64_at(raw, 16)),
        log_lsn: u64_at(raw, 24),
        superblock,
    })
}

fn encode_file_header() -> [u8; FILE_HEADER_SIZE_BYTES as usize] {
    let mut raw = [0u8; FILE_HEADER_SIZE_BYTES as usize];
    raw[4..12].copy_from_slice(&MAGIC);
    raw[12..14].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    raw[16..20].copy_from_slice(&(SUPERBLOCK_COPY_SIZE_BYTES as u32).to_le_bytes());
    let checksum = crc32c::crc32c(&raw[4..]);
    raw[0..4].copy_from_slice(&checksum.to_le_bytes());
    raw
}

fn file_header_is_valid(bytes: &[u8]) -> bool {
    bytes.get(..FILE_HEADER_SIZE_BYTES as usize) == Some(&encode_file_header()[..])
}

fn copy_offset(slot: u32, copy: u8) -> u64 {
    FILE_HEADER_SIZE_BYTES + u64::from(slot) * SLOT_SIZE_BYTES + u64::from(copy) * SUPERBLOCK_COPY_SIZE_BYTES as u64
}

/// What the file knows about one slot.
#[derive(Clone, Debug, Default)]
struct Slot {
    /// The copy holding the newest durable version, if any.
    current: Option<u8>,
    /// Its sequence number (0 if none).
    sequence: u64,
    /// The group whose live superblock is durable here.
    live: Option<GroupId>,
    /// A group that staged a superblock and was given this free slot.
    reserved: Option<GroupId>,
}

/// A superblock found by recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoadedSuperblock {
    pub(crate) superblock: Superblock,
    /// The log's next LSN when it was written.
    pub(crate) log_lsn: u64,
}

/// The superblock file. See the module docs.
#[derive(Debug)]
pub(crate) struct SuperblockFile<F: FileSystem> {
    dir: PathBuf,
    path: PathBuf,
    file: F::File,
    slots: Vec<Slot>,
    by_group: HashMap<GroupId, u32>,
    free: BTreeSet<u32>,
    groups_max: u32,
    /// Slots whose first copy is unreadable and whose second was never
    /// written: a torn first checkpoint of a group, or a damaged copy.
    /// Recovery decides which (see [`SuperblockFile::check_unreadable`]).
    unreadable: Vec<u32>,
}

impl<F: FileSystem> SuperblockFile<F> {
    /// Open (or create) the file and read every slot. `log_exists` says
    /// that the directory holds log segments or snapshots: the file's header
    /// was made durable before the first of them was created, so a missing
    /// or unreadable header is then corruption, never a new file (T5).
    pub(crate) fn open(
        dir: &Path,
        groups_max: u32,
        log_exists: bool,
        disk: &mut Disk<F>,
    ) -> Result<(Self, HashMap<GroupId, LoadedSuperblock>, bool), StorageError> {
        let path = dir.join(SUPERBLOCK_FILE_NAME);
        let file = disk.open(&path, OpenMode::CreateOrOpen, "opening the superblock file")?;
        let bytes = disk.read(&path, "reading the superblock file")?;
        let mut this = Self {
            dir: dir.to_path_buf(),
            path,
            file,
            slots: Vec::new(),
            by_group: HashMap::new(),
            free: BTreeSet::new(),
            groups_max,
            unreadable: Vec::new(),
        };
        if !file_header_is_valid(&bytes) {
            if bytes.len() as u64 > FILE_HEADER_SIZE_BYTES {
                return Err(this.corrupt(0, "bad superblock file header"));
            }
            if log_exists {
                return Err(
                    this.corrupt(0, "superblock file missing or its header unreadable while log segments exist")
                );
            }
            // New, or its creation was interrupted before any slot was written.
            this.write_file_header(disk)?;
            return Ok((this, HashMap::new(), true));
        }
        let loaded = this.load_slots(&bytes)?;
        Ok((this, loaded, false))
    }

    /// Write the header of a new file (or of one whose creation a crash
    /// interrupted), then make the file and its directory entry durable.
    fn write_file_header(&mut self, disk: &mut Disk<F>) -> Result<(), StorageError> {
        disk.write_at(&self.file, &self.path, &encode_file_header(), 0, "writing the superblock file header")?;
        disk.sync_data(&self.file, &self.path, SyncOf::Superblocks)?;
        disk.sync_dir(&self.dir)
    }

    /// Sync the file (recovery does this once, so that what it read from the
    /// page cache after a process crash is also on the disk).
    pub(crate) fn sync(&mut self, disk: &mut Disk<F>) -> Result<(), StorageError> {
        disk.sync_data(&self.file, &self.path, SyncOf::Superblocks)
    }

    fn corrupt(&self, offset: u64, reason: &str) -> StorageError {
        StorageError::Corrupt { path: self.path.display().to_string(), offset, reason: reason.to_string() }
    }

    fn load_slots(&mut self, bytes: &[u8]) -> Result<HashMap<GroupId, LoadedSuperblock>, StorageError> {
        let body_bytes = bytes.len() as u64 - FILE_HEADER_SIZE_BYTES;
        let slot_count = body_bytes.div_ceil(SLOT_SIZE_BYTES);
        if slot_count > u64::from(super::config::GROUPS_LIMIT) {
            return Err(self.corrupt(0, "superblock file larger than GROUPS_LIMIT slots"));
        }
        let mut loaded = HashMap::new();
        for slot_index in 0..slot_count as u32 {
            let read = |copy| {
                let start = copy_offset(slot_index, copy) as usize;
                let end = (start + SUPERBLOCK_COPY_SIZE_BYTES).min(bytes.len());
                decode_copy(bytes.get(start..end).unwrap_or_default())
            };
            let (first, second) = (read(0), read(1));
            if matches!((&first, &second), (CopyRead::Invalid(_), CopyRead::Empty)) {
                self.unreadable.push(slot_index);
            }
            let (slot, newest) = self.choose_copy(slot_index, first, second)?;
            if let Some(Copy { group, log_lsn, superblock: Some(superblock), .. }) = newest {
                if self.by_group.insert(group, slot_index).is_some() {
                    return Err(self.corrupt(copy_offset(slot_index, 0), "a group has live superblocks in two slots"));
                }
                loaded.insert(group, LoadedSuperblock { superblock, log_lsn });
            } else {
                self.free.insert(slot_index);
            }
            self.slots.push(slot);
        }
        Ok(loaded)
    }

    /// Pick the newest valid copy of a slot. Both copies invalid (or one
    /// invalid where the other was never written after it) means a durable
    /// copy was damaged: writes only ever go to the copy that is not current,
    /// and copy 0 is the first written.
    fn choose_copy(&self, slot: u32, first: CopyRead, second: CopyRead) -> Result<(Slot, Option<Copy>), StorageError> {
        let pick = |copy: Copy, index: u8| {
            let slot = Slot {
                current: Some(index),
                sequence: copy.sequence,
                live: copy.superblock.as_ref().map(|_| copy.group),
                reserved: None,
            };
            (slot, Some(copy))
        };
        match (first, second) {
            (CopyRead::Empty, CopyRead::Empty) | (CopyRead::Invalid(_), CopyRead::Empty) => Ok((Slot::default(), None)),
            (CopyRead::Valid(copy), CopyRead::Empty | CopyRead::Invalid(_)) => Ok(pick(copy, 0)),
            (CopyRead::Empty | CopyRead::Invalid(_), CopyRead::Valid(copy)) => Ok(pick(copy, 1)),
            (CopyRead::Valid(a), CopyRead::Valid(b)) => {
                if a.sequence == b.sequence {
                    return Err(self.corrupt(copy_offset(slot, 0), "both superblock copies have the same sequence"));
                }
                Ok(if a.sequence > b.sequence { pick(a, 0) } else { pick(b, 1) })
            }
            (CopyRead::Empty, CopyRead::Invalid(reason)) | (CopyRead::Invalid(_), CopyRead::Invalid(reason)) => {
                Err(self.corrupt(copy_offset(slot, 1), reason))
            }
        }
    }

    /// Decide the slots whose only written copy is unreadable. A checkpoint
    /// writes a group's first copy only for a superblock the log holds as a
    /// record, and no segment is removed before that checkpoint's sync
    /// returns; so a torn first copy leaves its group's superblock in the
    /// log, in a group the file has no copy of. `log_only_groups` counts
    /// those groups. More unreadable slots than that means a durable copy
    /// was damaged since: corruption naming the file and the first slot,
    /// never a silent empty group (T5).
    pub(crate) fn check_unreadable(&self, log_only_groups: usize) -> Result<(), StorageError> {
        match self.unreadable.first() {
            Some(slot) if self.unreadable.len() > log_only_groups => Err(self.corrupt(
                copy_offset(*slot, 0),
                "superblock copy unreadable and the log holds no superblock it could be a torn checkpoint of",
            )),
            _ => Ok(()),
        }
    }

    /// Give `group` a slot for the superblock it is staging (R12: this fails
    /// for this group alone when every slot is taken).
    pub(crate) fn reserve(&mut self, group: GroupId) -> Result<(), StorageError> {
        if self.by_group.contains_key(&group) {
            return Ok(());
        }
        let slot = match self.free.pop_first() {
            Some(slot) => slot,
            None if (self.slots.len() as u64) < u64::from(self.groups_max) => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
            None => {
                return Err(StorageError::TooLarge {
                    what: "superblock file (groups_max slots of 2 KiB)",
                    size_bytes: (u64::from(self.groups_max) + 1) * SLOT_SIZE_BYTES,
                    max_bytes: u64::from(self.groups_max) * SLOT_SIZE_BYTES,
                });
            }
        };
        self.slots[slot as usize].reserved = Some(group);
        self.by_group.insert(group, slot);
        Ok(())
    }

    /// Write the staged superblocks (each reserved at staging) and sync once.
    /// Slots change only once the sync succeeded.
    pub(crate) fn write(
        &mut self,
        staged: &BTreeMap<GroupId, Superblock>,
        log_lsn: u64,
        disk: &mut Disk<F>,
    ) -> Result<(), StorageError> {
        let mut written = Vec::with_capacity(staged.len());
        for (group, superblock) in staged {
            self.reserve(*group)?;
            let slot_index = self.by_group[group];
            let slot = &self.slots[slot_index as usize];
            let copy_index = slot.current.map_or(0, |current| 1 - current);
            let copy =
                Copy { sequence: slot.sequence + 1, group: *group, log_lsn, superblock: Some(superblock.clone()) };
            let offset = copy_offset(slot_index, copy_index);
            disk.write_at(&self.file, &self.path, &encode_copy(&copy), offset, "writing a superblock")?;
            written.push((slot_index, copy_index, copy.sequence, *group));
        }
        disk.sync_data(&self.file, &self.path, SyncOf::Superblocks)?;
        disk.stats.superblocks_written += written.len() as u64;
        for (slot_index, copy_index, sequence, group) in written {
            let slot = &mut self.slots[slot_index as usize];
            *slot = Slot { current: Some(copy_index), sequence, live: Some(group), reserved: None };
        }
        Ok(())
    }

    /// Durably remove `group`'s superblock (a tombstone copy) and free its slot.
    pub(crate) fn remove(&mut self, group: GroupId, log_lsn: u64, disk: &mut Disk<F>) -> Result<(), StorageError> {
        let Some(&slot_index) = self.by_group.get(&group) else { return Ok(()) };
        let slot = &self.slots[slot_index as usize];
        if slot.live == Some(group) {
            let copy_index = slot.current.map_or(0, |current| 1 - current);
            let copy = Copy { sequence: slot.sequence + 1, group, log_lsn, superblock: None };
            let offset = copy_offset(slot_index, copy_index);
            disk.write_at(&self.file, &self.path, &encode_copy(&copy), offset, "writing a superblock tombstone")?;
            disk.sync_data(&self.file, &self.path, SyncOf::Superblocks)?;
            self.slots[slot_index as usize] =
                Slot { current: Some(copy_index), sequence: copy.sequence, ..Slot::default() };
        } else {
            self.slots[slot_index as usize].reserved = None;
        }
        self.by_group.remove(&group);
        self.free.insert(slot_index);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            view: View(9),
            log_view: View(8),
            commit: Op(77),
            incarnation: Incarnation(3),
            members: vec![NodeId(1), NodeId(2), NodeId(3)],
            replication_quorum: 2,
            recovering: false,
        }
    }

    #[test]
    fn copy_roundtrips_and_every_bit_flip_is_detected() {
        let copy = Copy { sequence: 5, group: GroupId(11), log_lsn: 1234, superblock: Some(sample()) };
        let raw = encode_copy(&copy);
        assert_eq!(decode_copy(&raw), CopyRead::Valid(copy));
        for bit in (0..raw.len() * 8).step_by(7) {
            let mut damaged = raw;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(matches!(decode_copy(&damaged), CopyRead::Invalid(_)), "flip of bit {bit} went unnoticed");
        }
    }

    #[test]
    fn tombstone_roundtrips() {
        let copy = Copy { sequence: 6, group: GroupId(11), log_lsn: 1300, superblock: None };
        assert_eq!(decode_copy(&encode_copy(&copy)), CopyRead::Valid(copy));
    }

    #[test]
    fn zeros_are_an_empty_copy() {
        assert_eq!(decode_copy(&[0u8; SUPERBLOCK_COPY_SIZE_BYTES]), CopyRead::Empty);
        assert_eq!(decode_copy(&[0u8; 10]), CopyRead::Empty);
    }
}
