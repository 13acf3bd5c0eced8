//! One segment file: its records' format, a reader that checks each record
//! it returns, and the sparse index that finds an offset's record without
//! reading the segment from its start.
//!
//! A record is the message's length (`u32`), a CRC-32C (`u32`) of those four
//! length bytes and the message, then the message; integers little-endian.
//! The checksum covers the length too, so a damaged length is caught rather
//! than followed. CRC-32C because the workspace already uses it (the
//! write-ahead log's records).
//!
//! The index holds one entry (a relative offset and a position, 8 bytes)
//! for a segment's first record and then for the first record at least
//! [`INDEX_INTERVAL_BYTES`] past the previous entry: at most 8 bytes per
//! 4 KiB of segment, and a read starts at most 4 KiB (and one record)
//! before the record it wants. It lives in memory and is rebuilt by
//! scanning the segment when the store opens.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::encoding::MESSAGE_SIZE_MAX_BYTES;

/// Bytes of a record before its message: length and checksum.
pub(super) const RECORD_HEADER_SIZE_BYTES: u64 = 8;

/// The largest `segment_size_max_bytes` a store takes: with one record
/// over it, a position still fits the index's `u32`.
pub const SEGMENT_SIZE_LIMIT_BYTES: u64 = 1 << 30;

/// The longest a segment file can be: a segment is cut before a record
/// would take it past its maximum, unless it is that record's alone.
pub(super) const SEGMENT_FILE_SIZE_MAX_BYTES: u64 =
    SEGMENT_SIZE_LIMIT_BYTES + RECORD_HEADER_SIZE_BYTES + MESSAGE_SIZE_MAX_BYTES as u64;

/// An index entry at least every this many bytes of segment.
pub(super) const INDEX_INTERVAL_BYTES: u64 = 4 * 1024;

/// The reader fetches this much of a segment at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

const _: () = {
    // Positions and relative offsets (a record takes at least its header)
    // fit the index's u32s.
    assert!(SEGMENT_FILE_SIZE_MAX_BYTES <= u32::MAX as u64);
    assert!(MESSAGE_SIZE_MAX_BYTES <= u32::MAX as usize);
};

/// The record of `message`, as written to a segment.
pub(super) fn encode_record(out: &mut Vec<u8>, message: &[u8]) {
    debug_assert!(message.len() <= MESSAGE_SIZE_MAX_BYTES, "apply refuses larger messages");
    let length = (message.len() as u32).to_le_bytes();
    let checksum = crc32c::crc32c_append(crc32c::crc32c(&length), message);
    out.reserve(RECORD_HEADER_SIZE_BYTES as usize + message.len());
    out.extend_from_slice(&length);
    out.extend_from_slice(&checksum.to_le_bytes());
    out.extend_from_slice(message);
}

/// A segment file's name: its first offset, 20 digits, so names sort as
/// offsets do.
pub(super) fn file_name(base: u64) -> String {
    format!("{base:020}.log")
}

/// The first offset a segment file's name says; `None` if it is not one.
pub(super) fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log").filter(|digits| digits.len() == 20)?;
    digits.bytes().all(|byte| byte.is_ascii_digit()).then(|| digits.parse().ok()).flatten()
}

/// Where the index finds a record: its offset relative to the segment's
/// first, and its position in the file.
#[derive(Clone, Copy, Debug)]
struct IndexEntry {
    relative_offset: u32,
    position: u32,
}

/// One segment, as the store knows it in memory.
#[derive(Debug)]
pub(super) struct Segment {
    /// The offset of its first message (its file's name).
    pub(super) base: u64,
    /// Its messages.
    pub(super) count: u64,
    /// Its records' bytes: where the next record goes.
    pub(super) size_bytes: u64,
    /// Sparse, in offset order; the first entry is the first record's.
    index: Vec<IndexEntry>,
}

impl Segment {
    /// A segment with no record yet, starting at `base`.
    pub(super) fn new(base: u64) -> Segment {
        Segment { base, count: 0, size_bytes: 0, index: Vec::new() }
    }

    /// The offset after its last message.
    pub(super) fn end(&self) -> u64 {
        self.base + self.count
    }

    /// Count a record of `record_size` bytes just written at its end.
    pub(super) fn push(&mut self, record_size: u64) {
        let position = self.size_bytes;
        debug_assert!(position + record_size <= SEGMENT_FILE_SIZE_MAX_BYTES, "segments are cut before that");
        if self.index.last().is_none_or(|entry| position - u64::from(entry.position) >= INDEX_INTERVAL_BYTES) {
            self.index.push(IndexEntry { relative_offset: self.count as u32, position: position as u32 });
        }
        self.count += 1;
        self.size_bytes += record_size;
    }

    /// The nearest indexed record at or before `offset` (which the segment
    /// holds): its offset and its position.
    pub(super) fn seek(&self, offset: u64) -> (u64, u64) {
        debug_assert!(self.base <= offset && offset < self.end(), "{offset} is in the segment");
        let relative = offset - self.base;
        let after = self.index.partition_point(|entry| u64::from(entry.relative_offset) <= relative);
        let entry = self.index[after.max(1) - 1];
        (self.base + u64::from(entry.relative_offset), u64::from(entry.position))
    }

    /// Give back the index's spare capacity: the segment takes no more
    /// records.
    pub(super) fn seal(&mut self) {
        self.index.shrink_to_fit();
    }

    /// The index's entries (for the docs' memory figure and its test).
    pub(super) fn index_entries(&self) -> usize {
        self.index.len()
    }

    /// Read the segment in `file` from its start to `size_bytes`, check
    /// every record, and build its index. `Err` says what is damaged where.
    pub(super) fn scan(file: &File, path: &Path, base: u64, size_bytes: u64) -> Result<Segment, String> {
        let mut segment = Segment::new(base);
        let mut records = Records::new(file, path, 0, size_bytes);
        while let Some((position, message)) = records.next()? {
            debug_assert_eq!(position, segment.size_bytes, "records follow one another");
            segment.push(RECORD_HEADER_SIZE_BYTES + message.len() as u64);
        }
        debug_assert_eq!(segment.size_bytes, size_bytes, "the scan reads to the end");
        Ok(segment)
    }
}

/// The records of a segment file from `position` to `end`, each checked.
pub(super) struct Records<'a> {
    file: &'a File,
    path: &'a Path,
    position: u64,
    end: u64,
    /// Bytes of the file from `buffered_at`.
    buffer: Vec<u8>,
    buffered_at: u64,
}

impl<'a> Records<'a> {
    /// Read `file` (at `path`, for errors) from `position`, a record's
    /// start, up to `end`, a record's end.
    pub(super) fn new(file: &'a File, path: &'a Path, position: u64, end: u64) -> Records<'a> {
        debug_assert!(position <= end);
        Records { file, path, position, end, buffer: Vec::new(), buffered_at: 0 }
    }

    /// The next record's position and message; `None` at the end. `Err`:
    /// an I/O error, or a record damaged (a length over
    /// [`MESSAGE_SIZE_MAX_BYTES`], cut short, a wrong checksum).
    pub(super) fn next(&mut self) -> Result<Option<(u64, &[u8])>, String> {
        let at = self.position;
        if at == self.end {
            return Ok(None);
        }
        let path = self.path;
        let damaged = |what: String| format!("{}: the record at byte {at} {what}", path.display());
        if self.end - at < RECORD_HEADER_SIZE_BYTES {
            return Err(damaged("has its header cut short".into()));
        }
        let header = self.bytes(at, RECORD_HEADER_SIZE_BYTES as usize)?;
        let (length, checksum) = (le_u32(&header[..4]), le_u32(&header[4..]));
        if length as usize > MESSAGE_SIZE_MAX_BYTES {
            return Err(damaged(format!("says {length} bytes, over MESSAGE_SIZE_MAX_BYTES")));
        }
        let record_end = at + RECORD_HEADER_SIZE_BYTES + u64::from(length);
        if record_end > self.end {
            return Err(damaged(format!("says {length} bytes, {} are left", self.end - at - RECORD_HEADER_SIZE_BYTES)));
        }
        let message = self.bytes(at + RECORD_HEADER_SIZE_BYTES, length as usize)?;
        if crc32c::crc32c_append(crc32c::crc32c(&length.to_le_bytes()), message) != checksum {
            return Err(damaged("fails its checksum".into()));
        }
        self.position = record_end;
        let start = (at + RECORD_HEADER_SIZE_BYTES - self.buffered_at) as usize;
        Ok(Some((at, &self.buffer[start..start + length as usize])))
    }

    /// `length` bytes of the file from `at` (within `end`), from the buffer,
    /// which is refilled from `at` when it does not hold them.
    fn bytes(&mut self, at: u64, length: usize) -> Result<&[u8], String> {
        debug_assert!(at + length as u64 <= self.end, "callers check against the end");
        let buffered_end = self.buffered_at + self.buffer.len() as u64;
        if at < self.buffered_at || at + length as u64 > buffered_end {
            let wanted = (length.max(READ_CHUNK_BYTES) as u64).min(self.end - at) as usize;
            self.buffer.resize(wanted, 0);
            self.buffered_at = at;
            if let Err(error) = self.file.read_exact_at(&mut self.buffer, at) {
                self.buffer.clear();
                return Err(format!("{}: could not read {wanted} bytes at byte {at}: {error}", self.path.display()));
            }
        }
        let start = (at - self.buffered_at) as usize;
        Ok(&self.buffer[start..start + length])
    }
}

fn le_u32(bytes: &[u8]) -> u32 {
    bytes.iter().rev().fold(0, |n, byte| (n << 8) | u32::from(*byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d1_log_store_segment_names_sort_as_offsets() {
        assert_eq!(file_name(42), "00000000000000000042.log");
        assert_eq!(parse_file_name(&file_name(u64::MAX)), Some(u64::MAX));
        for name in ["42.log", "0000000000000000004x.log", "00000000000000000042.tmp", "+0000000000000000042.log"] {
            assert_eq!(parse_file_name(name), None, "{name}");
        }
    }

    #[test]
    fn d1_log_store_the_index_finds_every_offset_near_its_record() {
        let mut segment = Segment::new(100);
        let sizes: Vec<u64> = (0..2_000).map(|i| RECORD_HEADER_SIZE_BYTES + (i * 37) % 900).collect();
        let mut positions = Vec::new();
        for size in &sizes {
            positions.push(segment.size_bytes);
            segment.push(*size);
        }
        let total: u64 = sizes.iter().sum();
        assert!(segment.index_entries() as u64 <= total / INDEX_INTERVAL_BYTES + 1, "one entry per 4 KiB");
        for (relative, position) in positions.iter().enumerate() {
            let (found, at) = segment.seek(100 + relative as u64);
            assert!(found <= 100 + relative as u64);
            assert_eq!(at, positions[(found - 100) as usize], "the entry points at its record");
            assert!(
                position - at < INDEX_INTERVAL_BYTES + 900 + RECORD_HEADER_SIZE_BYTES,
                "at most 4 KiB and a record back"
            );
        }
    }
}
