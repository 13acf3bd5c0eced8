//! The log's on-disk format: the segment header and the record codec.
//!
//! Everything is little-endian. Each record carries its own crc32c over its
//! header and payload, its log sequence number (LSN: one counter per shard,
//! +1 per record) and the LSN its flush started at (`batch_lsn`). The LSN
//! makes a missing or misplaced record detectable; `batch_lsn` lets recovery
//! tell a torn tail (records of the last, unsynced flush) from damage to
//! records that an earlier flush had already synced: see `recovery.rs` and
//! docs/storage.md, which lists every field with its offset.
//!
//! Decoding never panics and never trusts a length: a bad record is a
//! [`RecordFault`] value naming what is wrong.

use bytes::Bytes;
use cohort_core::storage::Superblock;
use cohort_messages::{ClientId, GroupId, Incarnation, LogEntry, NodeId, Op, RequestNumber, View};

/// The current version of every file format of the storage.
pub const FORMAT_VERSION: u16 = 1;

/// The magic at offset 4 of a segment header.
pub const SEGMENT_MAGIC: [u8; 8] = *b"cohortwl";

/// Size of the header at the start of every segment file.
pub const SEGMENT_HEADER_SIZE_BYTES: usize = 32;

/// Size of every record header.
pub const RECORD_HEADER_SIZE_BYTES: usize = 48;

/// Size of an entry record's fixed payload fields (client, request).
pub const ENTRY_FIXED_SIZE_BYTES: usize = 24;

/// Size of a superblock record's fixed payload fields (log view,
/// incarnation, replication quorum, member count, 2 reserved bytes); the
/// members follow, 8 bytes each.
pub const SUPERBLOCK_FIXED_SIZE_BYTES: usize = 16;

/// What a record says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// A log entry: replaces the group's entries at `op` and above.
    Entry = 1,
    /// Drop the group's entries after `op`.
    TruncateAfter = 2,
    /// Drop everything of the group written before this record.
    RemoveGroup = 3,
    /// The group's superblock (K3: it travels in the same flush, and the
    /// same sync, as the log records it describes; the superblock file is a
    /// checkpoint). `op` is its commit point, `view` its view.
    Superblock = 4,
    /// D1, H1: drop everything of the group written before this record and
    /// take the superblock it carries (laid out as a Superblock record's):
    /// a removal and the superblock that must outlive it in one checksummed
    /// record, so no crash leaves the group gone in between.
    ResetGroup = 5,
}

impl RecordKind {
    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(RecordKind::Entry),
            2 => Some(RecordKind::TruncateAfter),
            3 => Some(RecordKind::RemoveGroup),
            4 => Some(RecordKind::Superblock),
            5 => Some(RecordKind::ResetGroup),
            _ => None,
        }
    }
}

/// A record header, decoded.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Bytes of payload after the header.
    pub payload_size: u32,
    /// This record's log sequence number.
    pub lsn: u64,
    /// The LSN of the first record of the flush that wrote this one: every
    /// record below it was durable before this one was written.
    pub batch_lsn: u64,
    /// The group.
    pub group: GroupId,
    /// Entry: its op; TruncateAfter: the last op kept; RemoveGroup: 0.
    pub op: Op,
    /// Entry: its view; otherwise 0.
    pub view: View,
    /// The kind.
    pub kind: RecordKind,
}

/// Why a record could not be decoded.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RecordFault {
    /// The file ends inside the record.
    Truncated,
    /// The checksum does not match.
    Checksum,
    /// A field is impossible.
    Invalid(&'static str),
}

impl std::fmt::Display for RecordFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordFault::Truncated => write!(f, "the file ends inside the record"),
            RecordFault::Checksum => write!(f, "record checksum mismatch"),
            RecordFault::Invalid(reason) => write!(f, "invalid record: {reason}"),
        }
    }
}

/// A decoded record borrowing its payload from the segment buffer.
#[derive(Copy, Clone, Debug)]
pub struct DecodedRecord<'a> {
    /// The header.
    pub header: RecordHeader,
    /// The payload.
    pub payload: &'a [u8],
}

impl DecodedRecord<'_> {
    /// Header plus payload.
    pub fn size_bytes(&self) -> usize {
        RECORD_HEADER_SIZE_BYTES + self.payload.len()
    }
}

/// What a segment header says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The LSN of the segment's first record.
    pub base_lsn: u64,
    /// H2: the file's length as created, durable before the segment got
    /// its name (so never shorter unless the file was cut); 0 when not
    /// known (preallocation off, or a segment written before this field).
    pub created_size_bytes: u64,
}

/// The segment header of `header`.
pub fn encode_segment_header(header: SegmentHeader) -> [u8; SEGMENT_HEADER_SIZE_BYTES] {
    let mut raw = [0u8; SEGMENT_HEADER_SIZE_BYTES];
    raw[4..12].copy_from_slice(&SEGMENT_MAGIC);
    raw[12..14].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    raw[16..24].copy_from_slice(&header.base_lsn.to_le_bytes());
    raw[24..32].copy_from_slice(&header.created_size_bytes.to_le_bytes());
    let checksum = crc32c::crc32c(&raw[4..]);
    raw[0..4].copy_from_slice(&checksum.to_le_bytes());
    raw
}

/// Decode a segment header.
pub fn decode_segment_header(file: &[u8]) -> Result<SegmentHeader, &'static str> {
    let header: &[u8; SEGMENT_HEADER_SIZE_BYTES] = file
        .get(..SEGMENT_HEADER_SIZE_BYTES)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or("the file is shorter than a segment header")?;
    if u32_at(header, 0) != crc32c::crc32c(&header[4..]) {
        return Err("segment header checksum mismatch");
    }
    if header[4..12] != SEGMENT_MAGIC {
        return Err("not a segment file (bad magic)");
    }
    if u16_at(header, 12) != FORMAT_VERSION {
        return Err("unknown segment format version");
    }
    if header[14..16] != [0, 0] {
        return Err("reserved segment header bytes are not zero");
    }
    let created_size_bytes = u64_at(header, 24);
    if created_size_bytes != 0 && created_size_bytes < SEGMENT_HEADER_SIZE_BYTES as u64 {
        return Err("segment created shorter than its header");
    }
    Ok(SegmentHeader { base_lsn: u64_at(header, 16), created_size_bytes })
}

/// Append one record to `buf`: the header, then `payload_parts` in order.
pub fn encode_record(buf: &mut Vec<u8>, header: &RecordHeader, payload_parts: &[&[u8]]) {
    let start = buf.len();
    let payload_size: usize = payload_parts.iter().map(|part| part.len()).sum();
    debug_assert_eq!(payload_size, header.payload_size as usize, "payload size field and payload differ");
    let mut raw = [0u8; RECORD_HEADER_SIZE_BYTES];
    raw[4..8].copy_from_slice(&header.payload_size.to_le_bytes());
    raw[8..16].copy_from_slice(&header.lsn.to_le_bytes());
    raw[16..24].copy_from_slice(&header.batch_lsn.to_le_bytes());
    raw[24..32].copy_from_slice(&header.group.get().to_le_bytes());
    raw[32..40].copy_from_slice(&header.op.get().to_le_bytes());
    raw[40..44].copy_from_slice(&header.view.get().to_le_bytes());
    raw[44] = header.kind as u8;
    buf.extend_from_slice(&raw);
    for part in payload_parts {
        buf.extend_from_slice(part);
    }
    let checksum = crc32c::crc32c(&buf[start + 4..]);
    buf[start..start + 4].copy_from_slice(&checksum.to_le_bytes());
}

/// The header and payload of `entry` as a record of `group`.
pub fn entry_record(group: GroupId, entry: &LogEntry, lsn: u64, batch_lsn: u64) -> (RecordHeader, [u8; 24]) {
    let mut fixed = [0u8; ENTRY_FIXED_SIZE_BYTES];
    fixed[0..16].copy_from_slice(&entry.client.get().to_le_bytes());
    fixed[16..24].copy_from_slice(&entry.request.get().to_le_bytes());
    let header = RecordHeader {
        payload_size: (ENTRY_FIXED_SIZE_BYTES + entry.operation.len()) as u32,
        lsn,
        batch_lsn,
        group,
        op: entry.op,
        view: entry.view,
        kind: RecordKind::Entry,
    };
    (header, fixed)
}

/// The size of the record `entry` needs.
pub fn entry_record_size_bytes(entry: &LogEntry) -> u64 {
    (RECORD_HEADER_SIZE_BYTES + ENTRY_FIXED_SIZE_BYTES) as u64 + entry.operation.len() as u64
}

/// Decode the record at `offset` of `file`.
pub fn decode_record(file: &[u8], offset: usize) -> Result<DecodedRecord<'_>, RecordFault> {
    let rest = file.get(offset..).ok_or(RecordFault::Truncated)?;
    let raw: &[u8; RECORD_HEADER_SIZE_BYTES] =
        rest.get(..RECORD_HEADER_SIZE_BYTES).and_then(|bytes| bytes.try_into().ok()).ok_or(RecordFault::Truncated)?;
    let payload_size = u32_at(raw, 4);
    let payload = rest
        .get(RECORD_HEADER_SIZE_BYTES..RECORD_HEADER_SIZE_BYTES + payload_size as usize)
        .ok_or(RecordFault::Truncated)?;
    let mut checksum = crc32c::crc32c(&raw[4..]);
    checksum = crc32c::crc32c_append(checksum, payload);
    if checksum != u32_at(raw, 0) {
        return Err(RecordFault::Checksum);
    }
    let header = validate_header(raw, payload_size)?;
    Ok(DecodedRecord { header, payload })
}

/// The fields of a checksummed header, checked for sense.
fn validate_header(raw: &[u8; RECORD_HEADER_SIZE_BYTES], payload_size: u32) -> Result<RecordHeader, RecordFault> {
    let kind = RecordKind::from_byte(raw[44]).ok_or(RecordFault::Invalid("unknown record kind"))?;
    if raw[45..48] != [0, 0, 0] {
        return Err(RecordFault::Invalid("reserved record header bytes are not zero"));
    }
    let header = RecordHeader {
        payload_size,
        lsn: u64_at(raw, 8),
        batch_lsn: u64_at(raw, 16),
        group: GroupId(u64_at(raw, 24)),
        op: Op(u64_at(raw, 32)),
        view: View(u32_at(raw, 40)),
        kind,
    };
    if header.batch_lsn > header.lsn || header.batch_lsn == 0 {
        return Err(RecordFault::Invalid("batch LSN is 0 or after the record's LSN"));
    }
    let payload_ok = match kind {
        RecordKind::Entry => payload_size as usize >= ENTRY_FIXED_SIZE_BYTES && header.op.get() > 0,
        RecordKind::TruncateAfter => payload_size == 0 && header.view.get() == 0,
        RecordKind::RemoveGroup => payload_size == 0 && header.view.get() == 0 && header.op.get() == 0,
        RecordKind::Superblock | RecordKind::ResetGroup => {
            let members = (payload_size as usize).checked_sub(SUPERBLOCK_FIXED_SIZE_BYTES);
            members.is_some_and(|bytes| bytes.is_multiple_of(8) && bytes / 8 <= cohort_messages::GROUP_MEMBERS_MAX)
        }
    };
    if !payload_ok {
        return Err(RecordFault::Invalid("fields do not fit the record kind"));
    }
    Ok(header)
}

/// The log entry an Entry record holds.
pub fn decode_entry(record: &DecodedRecord<'_>) -> Result<LogEntry, RecordFault> {
    let fixed: &[u8; ENTRY_FIXED_SIZE_BYTES] = record
        .payload
        .get(..ENTRY_FIXED_SIZE_BYTES)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(RecordFault::Invalid("entry payload shorter than its fixed fields"))?;
    let operation = record.payload.get(ENTRY_FIXED_SIZE_BYTES..).unwrap_or_default();
    Ok(LogEntry {
        op: record.header.op,
        view: record.header.view,
        client: ClientId(u128_at(fixed, 0)),
        request: RequestNumber(u64_at(fixed, 16)),
        operation: Bytes::copy_from_slice(operation),
    })
}

/// The header and payload of a superblock record of `group`.
pub fn superblock_record(group: GroupId, superblock: &Superblock, lsn: u64, batch_lsn: u64) -> (RecordHeader, Vec<u8>) {
    debug_assert!(superblock.members.len() <= cohort_messages::GROUP_MEMBERS_MAX);
    let mut payload = Vec::with_capacity(superblock_payload_size_bytes(superblock));
    payload.extend_from_slice(&superblock.log_view.get().to_le_bytes());
    payload.extend_from_slice(&superblock.incarnation.get().to_le_bytes());
    payload.push(superblock.replication_quorum);
    payload.push(superblock.members.len() as u8);
    payload.extend_from_slice(&[superblock_flags(superblock), 0]);
    for member in &superblock.members {
        payload.extend_from_slice(&member.get().to_le_bytes());
    }
    let header = RecordHeader {
        payload_size: payload.len() as u32,
        lsn,
        batch_lsn,
        group,
        op: superblock.commit,
        view: superblock.view,
        kind: RecordKind::Superblock,
    };
    (header, payload)
}

/// The payload size of `superblock`'s record.
pub fn superblock_payload_size_bytes(superblock: &Superblock) -> usize {
    SUPERBLOCK_FIXED_SIZE_BYTES + 8 * superblock.members.len()
}

/// The superblock a Superblock or ResetGroup record holds.
pub fn decode_superblock(record: &DecodedRecord<'_>) -> Result<Superblock, RecordFault> {
    let fixed: &[u8; SUPERBLOCK_FIXED_SIZE_BYTES] = record
        .payload
        .get(..SUPERBLOCK_FIXED_SIZE_BYTES)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(RecordFault::Invalid("superblock payload shorter than its fixed fields"))?;
    let member_count = fixed[13] as usize;
    if fixed[14] & !SUPERBLOCK_FLAGS_KNOWN != 0 || fixed[15] != 0 {
        return Err(RecordFault::Invalid("reserved superblock bytes are not zero"));
    }
    let members_bytes = record.payload.get(SUPERBLOCK_FIXED_SIZE_BYTES..).unwrap_or_default();
    if members_bytes.len() != member_count * 8 {
        return Err(RecordFault::Invalid("superblock member count does not fit its payload"));
    }
    let members = members_bytes
        .chunks_exact(8)
        .map(|chunk| {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(chunk);
            NodeId(u64::from_le_bytes(raw))
        })
        .collect();
    Ok(Superblock {
        view: record.header.view,
        log_view: View(u32_at(fixed, 0)),
        commit: record.header.op,
        incarnation: Incarnation(u64_at(fixed, 4)),
        members,
        replication_quorum: fixed[12],
        recovering: fixed[14] & SUPERBLOCK_FLAG_RECOVERING != 0,
    })
}

/// Superblock flag bit: the member is recovering (H1).
pub const SUPERBLOCK_FLAG_RECOVERING: u8 = 1;
/// Every superblock flag bit this format knows; any other set is damage.
pub const SUPERBLOCK_FLAGS_KNOWN: u8 = SUPERBLOCK_FLAG_RECOVERING;

/// The flags byte of `superblock`, in a record and in a superblock file copy.
pub fn superblock_flags(superblock: &Superblock) -> u8 {
    if superblock.recovering { SUPERBLOCK_FLAG_RECOVERING } else { 0 }
}

// Little-endian reads at constant offsets of fixed-size arrays: the callers
// pass offsets of their layout, inside the array.

pub(crate) fn u16_at<const N: usize>(buf: &[u8; N], at: usize) -> u16 {
    let mut raw = [0u8; 2];
    raw.copy_from_slice(&buf[at..at + 2]);
    u16::from_le_bytes(raw)
}

pub(crate) fn u32_at<const N: usize>(buf: &[u8; N], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(raw)
}

pub(crate) fn u64_at<const N: usize>(buf: &[u8; N], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(raw)
}

pub(crate) fn u128_at<const N: usize>(buf: &[u8; N], at: usize) -> u128 {
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&buf[at..at + 16]);
    u128::from_le_bytes(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_entry() -> LogEntry {
        LogEntry {
            op: Op(7),
            view: View(3),
            client: ClientId(u128::MAX - 5),
            request: RequestNumber(99),
            operation: Bytes::from_static(b"hello"),
        }
    }

    fn encoded(entry: &LogEntry) -> Vec<u8> {
        let (header, fixed) = entry_record(GroupId(42), entry, 10, 9);
        let mut buf = Vec::new();
        encode_record(&mut buf, &header, &[&fixed, &entry.operation]);
        buf
    }

    #[test]
    fn entry_record_roundtrips() {
        let entry = sample_entry();
        let buf = encoded(&entry);
        assert_eq!(buf.len() as u64, entry_record_size_bytes(&entry));
        let record = decode_record(&buf, 0).expect("decodes");
        assert_eq!(record.header.group, GroupId(42));
        assert_eq!(record.header.lsn, 10);
        assert_eq!(record.header.batch_lsn, 9);
        assert_eq!(decode_entry(&record).expect("entry"), entry);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let buf = encoded(&sample_entry());
        for bit in 0..buf.len() * 8 {
            let mut damaged = buf.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_record(&damaged, 0).is_err(), "flip of bit {bit} went unnoticed");
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let buf = encoded(&sample_entry());
        for len in 0..buf.len() {
            assert_eq!(decode_record(&buf[..len], 0).err(), Some(RecordFault::Truncated), "length {len}");
        }
    }

    #[test]
    fn segment_header_roundtrips_and_rejects_damage() {
        let fields = SegmentHeader { base_lsn: 12345, created_size_bytes: 4096 };
        let header = encode_segment_header(fields);
        assert_eq!(decode_segment_header(&header), Ok(fields));
        let mut damaged = header;
        damaged[20] ^= 4;
        assert!(decode_segment_header(&damaged).is_err());
        assert!(decode_segment_header(&header[..31]).is_err());
    }
}
