//! The checkpoint file: the commit point of a partition. It names what the
//! checkpoint's state is (the generation directory of its segments, the
//! offsets kept, how long its last segment is) and holds cohort's record.
//! It is replaced atomically: written to `checkpoint.tmp`, synced, renamed
//! over `checkpoint`, and the directory synced.
//!
//! The format, integers little-endian: `logckpt1`, the generation (`u64`),
//! the earliest offset kept (`u64`), the next offset (`u64`), the last
//! segment's length in bytes (`u64`, 0 when no message is kept), the
//! record's length (`u32`), the record, then a CRC-32C (`u32`) of
//! everything before it.

use std::io::{ErrorKind, Write};
use std::path::Path;

use bytes::Bytes;

use super::encoding::OFFSET_MAX;
use super::files;
use super::segment::{RECORD_HEADER_SIZE_BYTES, SEGMENT_FILE_SIZE_MAX_BYTES};

/// The first bytes of a checkpoint file.
const MAGIC: &[u8; 8] = b"logckpt1";
/// Bytes before the record: magic, four `u64`s, the record's length.
const FIXED_SIZE_BYTES: usize = 8 + 4 * 8 + 4;
/// Bytes of the checksum after the record.
const CHECKSUM_SIZE_BYTES: usize = 4;
/// The longest record a checkpoint file holds (its length is a `u32`).
pub(super) const RECORD_SIZE_MAX_BYTES: usize = u32::MAX as usize;
/// The file's name in the partition's directory.
pub(super) const FILE_NAME: &str = "checkpoint";
/// Where it is written before it is renamed.
pub(super) const TEMPORARY_FILE_NAME: &str = "checkpoint.tmp";

/// A partition's checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Checkpoint {
    /// The directory of its segments (`generation-<n>`).
    pub(super) generation: u64,
    /// The oldest offset kept.
    pub(super) earliest: u64,
    /// The offset the next append takes.
    pub(super) next: u64,
    /// The last segment's length: what follows it was applied after.
    pub(super) active_size_bytes: u64,
    /// cohort's record.
    pub(super) record: Bytes,
}

impl Checkpoint {
    fn encode(&self) -> Vec<u8> {
        debug_assert!(self.record.len() <= RECORD_SIZE_MAX_BYTES, "checkpoint() refuses longer records");
        let mut out = Vec::with_capacity(FIXED_SIZE_BYTES + self.record.len() + CHECKSUM_SIZE_BYTES);
        out.extend_from_slice(MAGIC);
        for field in [self.generation, self.earliest, self.next, self.active_size_bytes] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        out.extend_from_slice(&(self.record.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.record);
        let checksum = crc32c::crc32c(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    /// Decode a checkpoint file, or say why it is not one.
    fn decode(bytes: &[u8]) -> Result<Checkpoint, String> {
        let (body, checksum) = bytes.split_last_chunk::<CHECKSUM_SIZE_BYTES>().ok_or("shorter than its checksum")?;
        if crc32c::crc32c(body) != u32::from_le_bytes(*checksum) {
            return Err("fails its checksum".into());
        }
        let rest = body.strip_prefix(MAGIC).ok_or("not a checkpoint file (wrong magic)")?;
        let mut fields = [0u64; 4];
        let mut rest = rest;
        for field in &mut fields {
            let (value, after) = rest.split_first_chunk::<8>().ok_or("cut short")?;
            *field = u64::from_le_bytes(*value);
            rest = after;
        }
        let [generation, earliest, next, active_size_bytes] = fields;
        let (length, record) = rest.split_first_chunk::<4>().ok_or("cut short")?;
        if u32::from_le_bytes(*length) as usize != record.len() {
            return Err(format!("says a record of {} bytes, holds {}", u32::from_le_bytes(*length), record.len()));
        }
        if earliest > next || next > OFFSET_MAX {
            return Err(format!("offsets {earliest}..{next} out of order or above 2^62"));
        }
        let empty = earliest == next;
        if empty != (active_size_bytes == 0)
            || (!empty && active_size_bytes < RECORD_HEADER_SIZE_BYTES)
            || active_size_bytes > SEGMENT_FILE_SIZE_MAX_BYTES
        {
            return Err(format!("a last segment of {active_size_bytes} bytes for offsets {earliest}..{next}"));
        }
        Ok(Checkpoint { generation, earliest, next, active_size_bytes, record: Bytes::copy_from_slice(record) })
    }
}

/// The checkpoint in `dir`, `None` if there is none. `Err`: one that could
/// not be read, or is damaged (and why).
pub(super) fn read(dir: &Path) -> Result<Option<Checkpoint>, String> {
    let path = dir.join(FILE_NAME);
    let failed = |error: String| format!("{}: {error}", path.display());
    let size_max_bytes = (FIXED_SIZE_BYTES + RECORD_SIZE_MAX_BYTES + CHECKSUM_SIZE_BYTES) as u64;
    match std::fs::metadata(&path) {
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(failed(error.to_string())),
        Ok(metadata) if metadata.len() > size_max_bytes => {
            return Err(failed(format!("{} bytes, more than a checkpoint takes", metadata.len())));
        }
        Ok(_) => {}
    }
    let bytes = std::fs::read(&path).map_err(|error| failed(error.to_string()))?;
    Checkpoint::decode(&bytes).map(Some).map_err(failed)
}

/// Replace the checkpoint in `dir` with `checkpoint`, durably: once this
/// returns `Ok`, a restart finds it; if it fails, a restart finds the
/// previous one or (the rename done, its sync not) this one.
pub(super) fn write(dir: &Path, checkpoint: &Checkpoint) -> Result<(), String> {
    let (temporary, path) = (dir.join(TEMPORARY_FILE_NAME), dir.join(FILE_NAME));
    let failed = |what: &str, error: std::io::Error| format!("{}: could not {what}: {error}", temporary.display());
    let mut file = std::fs::File::create(&temporary).map_err(|error| failed("create", error))?;
    file.write_all(&checkpoint.encode()).map_err(|error| failed("write", error))?;
    file.sync_all().map_err(|error| failed("sync", error))?;
    drop(file);
    std::fs::rename(&temporary, &path).map_err(|error| failed("rename it to checkpoint", error))?;
    files::sync(dir)
}

/// Remove the checkpoint in `dir`, durably.
pub(super) fn remove(dir: &Path) -> Result<(), String> {
    files::remove_file(&dir.join(FILE_NAME))?;
    match dir.exists() {
        true => files::sync(dir),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn checkpoint() -> Checkpoint {
        Checkpoint { generation: 3, earliest: 10, next: 20, active_size_bytes: 90, record: Bytes::from_static(b"rec") }
    }

    #[test]
    fn d1_log_store_checkpoint_files_round_trip() {
        assert_eq!(Checkpoint::decode(&checkpoint().encode()), Ok(checkpoint()));
        let empty = Checkpoint { earliest: 20, active_size_bytes: 0, ..checkpoint() };
        assert_eq!(Checkpoint::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn d1_log_store_checkpoint_files_that_contradict_themselves_are_refused() {
        for bad in [
            Checkpoint { earliest: 21, ..checkpoint() },
            Checkpoint { active_size_bytes: 0, ..checkpoint() },
            Checkpoint { earliest: 20, ..checkpoint() },
            Checkpoint { active_size_bytes: SEGMENT_FILE_SIZE_MAX_BYTES + 1, ..checkpoint() },
            Checkpoint { next: OFFSET_MAX + 1, ..checkpoint() },
        ] {
            assert!(Checkpoint::decode(&bad.encode()).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn d1_log_store_a_damaged_checkpoint_file_is_refused_without_a_panic(
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
            cut in any::<prop::sample::Index>(),
            bytes in prop::collection::vec(any::<u8>(), 0..80),
        ) {
            let mut encoded = checkpoint().encode();
            let i = at.index(encoded.len());
            encoded[i] ^= flip;
            prop_assert!(Checkpoint::decode(&encoded).is_err(), "one byte changed is caught");
            let encoded = checkpoint().encode();
            prop_assert!(Checkpoint::decode(&encoded[..cut.index(encoded.len())]).is_err(), "a cut file is caught");
            let _ = Checkpoint::decode(&bytes);
        }
    }
}
