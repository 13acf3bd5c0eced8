//! Writes that bypass the page cache (`O_DIRECT`), for bulk bytes that are
//! written once and synced: a streamed state's staging (D3) and the disk
//! floor it is read against.
//!
//! Why: on this project's machine a synced 4 MiB write through the page
//! cache ran at 0.2 to 1.0 GB/s from one minute to the next, and a
//! profile of a catch-up spent 41 % of the process's CPU copying chunks
//! into the page cache (`copy_folio_from_iter_atomic` under `pwrite`),
//! while the same writes with `O_DIRECT` ran at 1.1 to 1.7 GB/s. The
//! kernel reads direct writes straight from the caller's buffer, which
//! must be aligned (`ALIGN_BYTES`, as must the offset and the length);
//! anything unaligned, or a file system that refuses `O_DIRECT` (tmpfs),
//! takes the ordinary path. A sync is still needed after a direct write:
//! it flushes the device's cache and the file's size.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The alignment of a direct write's buffer, offset and length: the page
/// size, a multiple of every logical block size in use.
pub(crate) const ALIGN_BYTES: usize = 4096;

/// Open `path` for direct writes (created if `create`); `Ok(None)` if the
/// file system refuses `O_DIRECT`.
pub(crate) fn open(path: &Path, create: bool) -> io::Result<Option<File>> {
    let flags = rustix::fs::OFlags::DIRECT.bits() as i32;
    match OpenOptions::new().write(true).create(create).truncate(false).custom_flags(flags).open(path) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => Ok(None),
        Err(error) => Err(error),
    }
}

/// A reusable buffer whose bytes start at an `ALIGN_BYTES` boundary (a
/// `Vec` over-allocated by one alignment, used from its first aligned
/// byte: no unsafe code).
#[derive(Default)]
pub(crate) struct AlignedBuffer {
    bytes: Vec<u8>,
}

impl AlignedBuffer {
    /// Whether `bytes` at `offset_bytes` can go as a direct write.
    pub(crate) fn fits(offset_bytes: u64, bytes: &[u8]) -> bool {
        offset_bytes.is_multiple_of(ALIGN_BYTES as u64) && bytes.len().is_multiple_of(ALIGN_BYTES)
    }

    /// Write `bytes` at `offset_bytes` of `file` (opened by [`open`])
    /// through the aligned buffer; the caller checked [`AlignedBuffer::fits`].
    pub(crate) fn write_at(&mut self, file: &File, offset_bytes: u64, bytes: &[u8]) -> io::Result<()> {
        debug_assert!(Self::fits(offset_bytes, bytes), "a direct write is aligned");
        let capacity = bytes.len() + ALIGN_BYTES;
        if self.bytes.len() < capacity {
            self.bytes = vec![0; capacity];
        }
        let start = self.bytes.as_ptr().align_offset(ALIGN_BYTES);
        let aligned = &mut self.bytes[start..start + bytes.len()];
        aligned.copy_from_slice(bytes);
        file.write_all_at(aligned, offset_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direct_write_reads_back_as_written_and_an_unaligned_one_does_not_fit() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("direct");
        let Some(file) = open(&path, true).expect("opens") else {
            return; // The temporary directory's file system refuses O_DIRECT.
        };
        let bytes: Vec<u8> = (0..2 * ALIGN_BYTES).map(|index| (index % 251) as u8).collect();
        let mut buffer = AlignedBuffer::default();
        assert!(AlignedBuffer::fits(ALIGN_BYTES as u64, &bytes));
        buffer.write_at(&file, ALIGN_BYTES as u64, &bytes).expect("direct write");
        file.sync_data().expect("sync");
        let read = std::fs::read(&path).expect("reads");
        assert_eq!(&read[ALIGN_BYTES..], &bytes[..]);
        assert!(!AlignedBuffer::fits(1, &bytes), "an unaligned offset");
        assert!(!AlignedBuffer::fits(0, &bytes[1..]), "an unaligned length");
    }
}
