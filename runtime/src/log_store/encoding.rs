//! What crosses cohort for a partition: a fetch query and its answer, an
//! append's result, and the whole-state snapshot of a state transfer. Each
//! decoder checks every length against a named limit and says why it
//! refuses bytes; the rest of the store trusts what they return.

use bytes::Bytes;
use cohort_messages::OPERATION_SIZE_MAX_BYTES;

/// A fetch answers at most this many messages.
pub const FETCH_MESSAGES_MAX: u32 = 64;

/// A fetch's answer takes at most this many bytes: it travels as a reply's
/// result, which cohort caps at [`OPERATION_SIZE_MAX_BYTES`].
pub const FETCH_SIZE_MAX_BYTES: usize = OPERATION_SIZE_MAX_BYTES;

/// Bytes of a message's length prefix in an answer and in a snapshot.
const LENGTH_PREFIX_BYTES: usize = 4;

/// The largest message a partition takes, so that any message fits a
/// fetch's answer on its own. A larger one is refused, not appended
/// ([`appended_offset`] says `None`).
pub const MESSAGE_SIZE_MAX_BYTES: usize = FETCH_SIZE_MAX_BYTES - LENGTH_PREFIX_BYTES;

/// The highest offset a partition counts to; decoders refuse more, so that
/// appends never overflow (2^62 messages: never reached).
pub(super) const OFFSET_MAX: u64 = 1 << 62;

/// Where an answer's first length prefix would be: a trimmed answer.
const TRIMMED_MARKER: u32 = u32::MAX;
/// Where an answer's first length prefix would be: a failed read.
const FAILED_MARKER: u32 = u32::MAX - 1;

/// The first bytes of a snapshot ([`decode_snapshot`]).
const SNAPSHOT_MAGIC: &[u8; 8] = b"logsnap1";
/// The first bytes of what a member sends when it could not read its own
/// partition: [`decode_snapshot`] refuses it with the reason that follows.
const SNAPSHOT_FAILED_MAGIC: &[u8; 8] = b"logsnap!";
/// Bytes before a snapshot's first message: magic, earliest, next.
const SNAPSHOT_HEADER_SIZE_BYTES: usize = 8 + 8 + 8;

/// What an append of a message over [`MESSAGE_SIZE_MAX_BYTES`] answers.
const REFUSED_TOO_LARGE: &[u8] = b"refused: message over MESSAGE_SIZE_MAX_BYTES";

const _: () = {
    // The markers cannot be a message's length.
    assert!(MESSAGE_SIZE_MAX_BYTES < FAILED_MARKER as usize && FAILED_MARKER < TRIMMED_MARKER);
    // A refusal is never read as an offset.
    assert!(REFUSED_TOO_LARGE.len() != 8);
    assert!(FETCH_MESSAGES_MAX > 0);
};

/// The query that reads up to `count` messages (at most
/// [`FETCH_MESSAGES_MAX`]) from `offset`: the offset (`u64`), then the count
/// (`u32`), little-endian.
pub fn fetch(offset: u64, count: u32) -> Bytes {
    [&offset.to_le_bytes()[..], &count.to_le_bytes()].concat().into()
}

/// A fetch query's offset and count (at most [`FETCH_MESSAGES_MAX`]).
pub(super) fn decode_fetch(query: &[u8]) -> Result<(u64, u32), String> {
    let (Some(offset), Some(count), 12) = (query.first_chunk::<8>(), query.get(8..12), query.len()) else {
        return Err(format!("a fetch is 12 bytes (offset u64, count u32), not {}", query.len()));
    };
    let count = u32::from_le_bytes(count.try_into().map_err(|_| "fetch: count")?);
    Ok((u64::from_le_bytes(*offset), count.min(FETCH_MESSAGES_MAX)))
}

/// A fetch's answer, decoded.
///
/// The encodings, integers little-endian:
/// - **Messages**: each message's length (`u32`), then its bytes, one after
///   the other from the offset asked for; nothing (no bytes) when no
///   message is there yet. At most [`FETCH_MESSAGES_MAX`] messages and
///   [`FETCH_SIZE_MAX_BYTES`] bytes (always at least one message if one is
///   there).
/// - **Trimmed**: `FF FF FF FF`, then the earliest offset kept (`u64`): the
///   offset asked for lies below it, deleted by retention.
/// - **Failed**: `FE FF FF FF`, then why (UTF-8): a malformed query, or a
///   segment this member could not read.
///
/// A message is never longer than [`MESSAGE_SIZE_MAX_BYTES`], so the two
/// markers are never a message's length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The messages from the offset asked for, in offset order.
    Messages(Vec<Bytes>),
    /// The offset asked for was deleted by retention; reading can go on from
    /// `earliest`.
    Trimmed {
        /// The partition's oldest kept offset.
        earliest: u64,
    },
    /// The read failed; why.
    Failed(String),
}

/// Decode a fetch's answer ([`Answer`] has the encodings), or say why it is
/// not one.
pub fn decode_answer(answer: &[u8]) -> Result<Answer, String> {
    let marker = answer.first_chunk::<4>().map(|prefix| u32::from_le_bytes(*prefix));
    match marker {
        Some(TRIMMED_MARKER) => {
            let earliest = answer.get(4..).and_then(|rest| rest.try_into().ok()).map(u64::from_le_bytes);
            earliest.map(|earliest| Answer::Trimmed { earliest }).ok_or_else(|| "trimmed: not an offset".into())
        }
        Some(FAILED_MARKER) => Ok(Answer::Failed(String::from_utf8_lossy(&answer[4..]).into_owned())),
        _ => decode_messages(answer, "answer").map(Answer::Messages),
    }
}

/// Messages each prefixed by its length, back to back, none above
/// [`MESSAGE_SIZE_MAX_BYTES`].
fn decode_messages(mut input: &[u8], what: &str) -> Result<Vec<Bytes>, String> {
    let mut messages = Vec::new();
    while !input.is_empty() {
        let (message, rest) =
            split_message(input).map_err(|error| format!("{what}: message {}: {error}", messages.len()))?;
        messages.push(Bytes::copy_from_slice(message));
        input = rest;
    }
    Ok(messages)
}

/// Split off one length-prefixed message: the message and what follows.
fn split_message(input: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let (prefix, rest) = input.split_first_chunk::<LENGTH_PREFIX_BYTES>().ok_or("length cut short")?;
    let length = u32::from_le_bytes(*prefix) as usize;
    if length > MESSAGE_SIZE_MAX_BYTES {
        return Err(format!("{length} bytes, over MESSAGE_SIZE_MAX_BYTES"));
    }
    rest.split_at_checked(length).ok_or_else(|| format!("{length} bytes, {} left", rest.len()))
}

/// A fetch's answer as it is built: messages until the count or the byte
/// cap is reached.
pub(super) struct Fetched {
    out: Vec<u8>,
    messages: u32,
    messages_max: u32,
}

impl Fetched {
    /// An empty answer that takes at most `messages_max` messages.
    pub(super) fn new(messages_max: u32) -> Fetched {
        debug_assert!(messages_max <= FETCH_MESSAGES_MAX);
        Fetched { out: Vec::new(), messages: 0, messages_max }
    }

    /// Whether another message may still be added.
    pub(super) fn open(&self) -> bool {
        self.messages < self.messages_max && self.out.len() < FETCH_SIZE_MAX_BYTES
    }

    /// Add `message` if it fits; `false` (and nothing added) once full.
    pub(super) fn push(&mut self, message: &[u8]) -> bool {
        debug_assert!(message.len() <= MESSAGE_SIZE_MAX_BYTES, "checked where it was read");
        let fits = self.messages == 0 || self.out.len() + LENGTH_PREFIX_BYTES + message.len() <= FETCH_SIZE_MAX_BYTES;
        if !self.open() || !fits {
            return false;
        }
        self.out.extend_from_slice(&(message.len() as u32).to_le_bytes());
        self.out.extend_from_slice(message);
        self.messages += 1;
        debug_assert!(self.out.len() <= FETCH_SIZE_MAX_BYTES, "one message fits alone, more within the cap");
        true
    }

    /// The encoded answer.
    pub(super) fn finish(self) -> Bytes {
        self.out.into()
    }
}

/// The answer to a fetch below the earliest offset kept.
pub(super) fn trimmed(earliest: u64) -> Bytes {
    [&TRIMMED_MARKER.to_le_bytes()[..], &earliest.to_le_bytes()].concat().into()
}

/// The answer to a fetch that failed, and why.
pub(super) fn failed(reason: &str) -> Bytes {
    [&FAILED_MARKER.to_le_bytes()[..], reason.as_bytes()].concat().into()
}

/// An append's result: the message's offset (`u64`, little-endian).
pub(super) fn appended(offset: u64) -> Bytes {
    Bytes::copy_from_slice(&offset.to_le_bytes())
}

/// An append's result for a message over [`MESSAGE_SIZE_MAX_BYTES`].
pub(super) fn refused_too_large() -> Bytes {
    Bytes::from_static(REFUSED_TOO_LARGE)
}

/// The offset an append's result names; `None` if the message was refused
/// (over [`MESSAGE_SIZE_MAX_BYTES`]) or `result` is not an append's.
pub fn appended_offset(result: &[u8]) -> Option<u64> {
    result.try_into().ok().map(u64::from_le_bytes)
}

/// Encode a snapshot of the messages from `earliest` on, given in offset
/// order, in [`decode_snapshot`]'s format.
pub(super) struct SnapshotWriter {
    out: Vec<u8>,
    earliest: u64,
    messages: u64,
}

impl SnapshotWriter {
    /// A snapshot of a partition whose oldest kept offset is `earliest`,
    /// with room for `size_bytes` of messages.
    pub(super) fn new(earliest: u64, size_bytes: usize) -> SnapshotWriter {
        let mut out = Vec::with_capacity(SNAPSHOT_HEADER_SIZE_BYTES + size_bytes);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&earliest.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes()); // next, written by `finish`
        SnapshotWriter { out, earliest, messages: 0 }
    }

    /// Add the next message.
    pub(super) fn push(&mut self, message: &[u8]) {
        debug_assert!(message.len() <= MESSAGE_SIZE_MAX_BYTES, "checked where it was read");
        self.out.extend_from_slice(&(message.len() as u32).to_le_bytes());
        self.out.extend_from_slice(message);
        self.messages += 1;
    }

    /// The snapshot, its next offset written in.
    pub(super) fn finish(mut self) -> Bytes {
        let next = self.earliest + self.messages;
        self.out[16..SNAPSHOT_HEADER_SIZE_BYTES].copy_from_slice(&next.to_le_bytes());
        self.out.into()
    }
}

/// What a member sends instead of a snapshot when it could not read its
/// partition; the receiver's [`decode_snapshot`] refuses it with `reason`.
pub(super) fn snapshot_failed(reason: &str) -> Bytes {
    [&SNAPSHOT_FAILED_MAGIC[..], reason.as_bytes()].concat().into()
}

/// A decoded snapshot: a partition's kept messages, checked, still in the
/// snapshot's bytes (a snapshot is as big as the partition: it is not
/// copied again).
#[derive(Clone, Copy, Debug)]
pub struct PartitionSnapshot<'a> {
    /// The oldest offset kept (what came before was deleted by retention).
    pub earliest: u64,
    /// The offset the next append takes.
    pub next: u64,
    /// `next - earliest` length-prefixed messages, each checked.
    body: &'a [u8],
}

impl<'a> PartitionSnapshot<'a> {
    /// The messages, in offset order from `earliest`.
    pub fn messages(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        let mut rest = self.body;
        std::iter::from_fn(move || {
            let (message, after) = split_message(rest).ok()?;
            rest = after;
            Some(message)
        })
    }
}

/// Decode a snapshot, or say why it is not one: wrong magic (or the
/// sender's report that it could not read its partition), offsets out of
/// order or above 2^62, a message over [`MESSAGE_SIZE_MAX_BYTES`] or cut
/// short, a count of messages other than `next - earliest`, bytes after
/// them.
///
/// The format, integers little-endian: `logsnap1`, the earliest offset
/// kept (`u64`), the next offset (`u64`), then each message from the
/// earliest on as its length (`u32`) and its bytes.
pub fn decode_snapshot(snapshot: &[u8]) -> Result<PartitionSnapshot<'_>, String> {
    if let Some(reason) = snapshot.strip_prefix(SNAPSHOT_FAILED_MAGIC) {
        return Err(format!("snapshot: the sender could not read its partition: {}", String::from_utf8_lossy(reason)));
    }
    let rest = snapshot.strip_prefix(SNAPSHOT_MAGIC).ok_or("snapshot: not a log snapshot (wrong magic)")?;
    let (earliest, rest) = rest.split_first_chunk::<8>().ok_or("snapshot: earliest offset cut short")?;
    let (next, body) = rest.split_first_chunk::<8>().ok_or("snapshot: next offset cut short")?;
    let (earliest, next) = (u64::from_le_bytes(*earliest), u64::from_le_bytes(*next));
    if earliest > next || next > OFFSET_MAX {
        return Err(format!("snapshot: offsets {earliest}..{next} out of order or above 2^62"));
    }
    let (mut rest, mut count) = (body, 0u64);
    while !rest.is_empty() {
        let (_, after) =
            split_message(rest).map_err(|error| format!("snapshot: offset {}: {error}", earliest + count))?;
        rest = after;
        count += 1;
    }
    if count != next - earliest {
        return Err(format!("snapshot: offsets {earliest}..{next}, but {count} messages"));
    }
    Ok(PartitionSnapshot { earliest, next, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d1_log_store_answers_decode_to_what_was_encoded() {
        let mut fetched = Fetched::new(2);
        assert!(fetched.push(b"a") && fetched.push(b"") && !fetched.push(b"c"));
        let messages = vec![Bytes::from_static(b"a"), Bytes::new()];
        assert_eq!(decode_answer(&fetched.finish()), Ok(Answer::Messages(messages)));
        assert_eq!(decode_answer(&[]), Ok(Answer::Messages(Vec::new())));
        assert_eq!(decode_answer(&trimmed(7)), Ok(Answer::Trimmed { earliest: 7 }));
        assert_eq!(decode_answer(&failed("why")), Ok(Answer::Failed("why".into())));
        assert!(decode_answer(&[0xFF; 5]).is_err(), "a trimmed answer is 12 bytes");
        assert!(decode_answer(&[9, 0, 0, 0, 1]).is_err(), "a message cut short");
    }

    #[test]
    fn d1_log_store_a_fetch_answer_stays_within_its_byte_cap() {
        let big = vec![7u8; MESSAGE_SIZE_MAX_BYTES];
        let mut fetched = Fetched::new(FETCH_MESSAGES_MAX);
        assert!(fetched.push(&big), "one message of the largest size fits alone");
        assert!(!fetched.push(b"x"), "nothing more fits");
        assert_eq!(fetched.finish().len(), FETCH_SIZE_MAX_BYTES);
    }

    #[test]
    fn d1_log_store_fetch_queries_are_twelve_bytes() {
        assert_eq!(decode_fetch(&fetch(5, 1_000)), Ok((5, FETCH_MESSAGES_MAX)));
        assert!(decode_fetch(&fetch(5, 1)[..11]).is_err());
        assert!(decode_fetch(&[0; 13]).is_err());
    }

    #[test]
    fn d1_log_store_appended_offsets_and_refusals_differ() {
        assert_eq!(appended_offset(&appended(42)), Some(42));
        assert_eq!(appended_offset(&refused_too_large()), None);
    }
}
