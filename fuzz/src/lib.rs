//! Shared code of cohort's fuzz targets and of the seed corpus generator.
//!
//! The targets check more than "does not panic": each decoded value must
//! re-encode to the bytes it came from (the encoding is canonical), a stream
//! fed in chunks must decode exactly as the same stream fed at once, and a
//! batch must yield exactly one result per entry. The `shard_inputs`
//! target's driver is its own module, [`shard_inputs`].

pub mod shard_inputs;

use bytes::{Bytes, BytesMut};
use cohort_messages::{
    Batch, ClusterId, Command, CommitBatch, CommitReplyBatch, EncodedFrame, FixedEntry, Frame, FrameDecoder,
    FrameError, HEADER_SIZE_BYTES, Header, Message, NodeId, TraceContext,
};

/// The cluster of every seed frame and of the decoders under test.
pub const CLUSTER: ClusterId = ClusterId(0x00c0_4a27_f022_0000_0000_0000_0000_0001);
/// The sender of every seed frame.
pub const SENDER: NodeId = NodeId(3);

/// Body size field of a header (see messages/src/header.rs).
const BODY_SIZE_AT: usize = 56;

/// Rewrite both checksums of every frame in `stream` so that random or
/// mutated bytes get past the checksums and reach the header fields and body
/// decoders behind them. A body size that runs past the input is cut to what
/// is left, so the last frame is complete.
pub fn seal_stream(stream: &mut [u8]) {
    let mut at = 0;
    while stream.len() - at >= HEADER_SIZE_BYTES {
        let body_start = at + HEADER_SIZE_BYTES;
        let declared = u32::from_le_bytes(read4(stream, at + BODY_SIZE_AT)) as usize;
        let body_size = declared.min(stream.len() - body_start);
        stream[at + BODY_SIZE_AT..at + BODY_SIZE_AT + 4].copy_from_slice(&(body_size as u32).to_le_bytes());
        let body_checksum = crc32c::crc32c(&stream[body_start..body_start + body_size]);
        stream[at + 4..at + 8].copy_from_slice(&body_checksum.to_le_bytes());
        let header_checksum = crc32c::crc32c(&stream[at + 4..body_start]);
        stream[at..at + 4].copy_from_slice(&header_checksum.to_le_bytes());
        at = body_start + body_size;
    }
}

fn read4(bytes: &[u8], at: usize) -> [u8; 4] {
    [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]
}

/// Chunk sizes drawn from a small xorshift generator seeded by the input, so
/// that the same input always cuts the stream the same way.
pub struct Chunker(u32);

impl Chunker {
    /// A chunker for `seed`.
    pub fn new(seed: u8) -> Chunker {
        Chunker(u32::from(seed).wrapping_mul(2_654_435_761) | 1)
    }

    /// The next chunk size, 1..=128 bytes.
    pub fn next_size_bytes(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        (self.0 % 128) as usize + 1
    }
}

/// Feed `stream` into a [`FrameDecoder`] in the chunks `sizes` gives and return
/// every result, stopping where a real connection would close. Panics if the
/// decoder asks to keep a connection open without consuming the bad frame.
pub fn decode_stream(stream: &[u8], mut sizes: impl FnMut() -> usize) -> Vec<Result<Frame, FrameError>> {
    let mut decoder = FrameDecoder::new(CLUSTER);
    let mut buffer = BytesMut::new();
    let mut results = Vec::new();
    let mut fed = 0;
    while fed < stream.len() {
        let next = (fed + sizes()).min(stream.len());
        buffer.extend_from_slice(&stream[fed..next]);
        fed = next;
        loop {
            let buffered_bytes = buffer.len();
            match decoder.decode(&mut buffer) {
                Ok(None) => break,
                Ok(Some(frame)) => results.push(Ok(frame)),
                Err(error) if error.closes_connection() => {
                    results.push(Err(error));
                    return results;
                }
                Err(error) => {
                    assert!(buffer.len() < buffered_bytes, "{error} keeps the connection but consumed nothing");
                    results.push(Err(error));
                }
            }
        }
    }
    results
}

/// Check one frame the decoder accepted: its body has the declared size; its
/// message decodes or is refused without panicking; a decoded message is
/// valid and re-encodes to the same body; a batch yields one result per entry.
pub fn check_frame(frame: &Frame) {
    assert_eq!(frame.body.len(), frame.header.body_size as usize);
    match Message::decode(frame) {
        Ok(Message::Commit(batch)) => check_batch(&batch),
        Ok(Message::CommitReply(batch)) => check_batch(&batch),
        Ok(message) => {
            assert_eq!(message.command(), frame.header.command);
            assert_eq!(message.validate(), Ok(()));
            assert_eq!(message.encode_body(), frame.body, "accepted a non-canonical body");
        }
        Err(error) => {
            let _ = error.kind();
        }
    }
}

/// Walk every entry of a batch: one result per entry, in order; a good entry
/// re-encodes to its bytes; a bad entry names its own position.
pub fn check_batch<E: FixedEntry>(batch: &Batch<E>) {
    let mut count = 0;
    for (index, (result, bytes)) in batch.entries().zip(batch.body().chunks_exact(E::SIZE_BYTES)).enumerate() {
        match result {
            Ok(entry) => {
                let mut encoded = vec![0u8; E::SIZE_BYTES];
                entry.encode(&mut encoded);
                assert_eq!(encoded, bytes, "entry {index} does not re-encode to its bytes");
            }
            Err(error) => {
                assert_eq!(error.index, index);
                assert_eq!(error.command, E::COMMAND);
            }
        }
        count += 1;
    }
    assert_eq!(count, batch.len());
    assert_eq!(batch.body().len(), batch.len() * E::SIZE_BYTES);
}

/// Check `body` as the body of a Commit and of a CommitReply frame, both
/// directly and wrapped in a frame that goes through the stream decoder.
pub fn check_batch_body(body: &[u8]) {
    let body = Bytes::copy_from_slice(body);
    check_one_batch_kind::<cohort_messages::CommitEntry>(&body);
    check_one_batch_kind::<cohort_messages::CommitReplyEntry>(&body);
}

fn check_one_batch_kind<E: FixedEntry>(body: &Bytes) {
    let direct = Batch::<E>::from_body(body.clone());
    assert_eq!(direct.is_ok(), body.len().is_multiple_of(E::SIZE_BYTES));
    if let Ok(batch) = &direct {
        check_batch(batch);
    }
    let frame = EncodedFrame::new(Header::new(CLUSTER, SENDER, E::COMMAND, TraceContext::NONE), body.clone());
    let bytes = frame.to_bytes();
    let results = decode_stream(&bytes, || bytes.len());
    let [Ok(frame)] = &results[..] else { panic!("a sealed batch frame was refused: {results:?}") };
    let via_frame = Message::decode(frame);
    match (E::COMMAND, &via_frame, &direct) {
        (Command::Commit, Ok(Message::Commit(batch)), Ok(_)) => assert_eq!(batch.body(), body),
        (Command::CommitReply, Ok(Message::CommitReply(batch)), Ok(_)) => assert_eq!(batch.body(), body),
        (_, Err(_), Err(_)) => {}
        _ => panic!("frame and direct decoding disagree: {via_frame:?}"),
    }
}

/// Encode `message` as one frame of [`CLUSTER`].
pub fn frame_of(message: &Message) -> Bytes {
    message.encode(CLUSTER, SENDER, TraceContext::NONE).to_bytes()
}

/// One Commit batch and one CommitReply batch body, for seeds.
pub fn sample_batches() -> (CommitBatch, CommitReplyBatch) {
    use cohort_messages::*;
    let commits: Vec<CommitEntry> = (1..=3)
        .map(|group| CommitEntry {
            group: GroupId(group),
            partition_incarnation: Incarnation(1),
            view: View(2),
            commit: Op(group * 10),
            timestamp_monotonic: Timestamp(100 + group),
            heartbeat_state: [HeartbeatState::Busy, HeartbeatState::Idle, HeartbeatState::Eager][group as usize % 3],
            replica: MemberIndex(0),
        })
        .collect();
    let replies: Vec<CommitReplyEntry> = commits
        .iter()
        .map(|commit| CommitReplyEntry {
            group: commit.group,
            partition_incarnation: commit.partition_incarnation,
            view: commit.view,
            timestamp_monotonic: commit.timestamp_monotonic,
            replica: MemberIndex(1),
        })
        .collect();
    (CommitBatch::encode(&commits), CommitReplyBatch::encode(&replies))
}
