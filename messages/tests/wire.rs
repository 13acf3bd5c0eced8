//! The wire format's requirements, one test per requirement id of the Commit
//! batching spec (R10–R29), plus the header layout, reserved bytes, unknown
//! commands, truncation and trailing bytes.

mod common;

use bytes::Bytes;
use cohort_messages::*;
use common::*;

fn prepare_ok() -> Message {
    Message::PrepareOk(PrepareOk {
        group: GroupId(5),
        incarnation: Incarnation(1),
        view: View(2),
        op: Op(9),
        replica: MemberIndex(1),
    })
}

fn commit_batch_frame(groups: std::ops::RangeInclusive<u64>) -> (Vec<CommitEntry>, Bytes) {
    let entries: Vec<CommitEntry> = groups.map(commit_entry).collect();
    let frame = frame_bytes(&Message::Commit(CommitBatch::encode(&entries)));
    (entries, frame)
}

fn decode_commit_batch(frame: &[u8]) -> CommitBatch {
    match decode_one(frame) {
        Ok(Message::Commit(batch)) => batch,
        other => panic!("expected a Commit batch, got {other:?}"),
    }
}

fn decode_reply_batch(frame: &[u8]) -> CommitReplyBatch {
    match decode_one(frame) {
        Ok(Message::CommitReply(batch)) => batch,
        other => panic!("expected a CommitReply batch, got {other:?}"),
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

// --- Header layout ---------------------------------------------------------

#[test]
fn header_fields_sit_at_their_documented_offsets() {
    let frame = frame_bytes(&prepare_ok());
    let header = &frame[..HEADER_SIZE_BYTES];
    let body = &frame[HEADER_SIZE_BYTES..];
    assert_eq!(HEADER_SIZE_BYTES, 80);
    assert_eq!(u32_at(header, 0), crc32c::crc32c(&header[4..80]), "checksum_header covers bytes 4..80");
    assert_eq!(u32_at(header, 4), crc32c::crc32c(body), "checksum_body");
    assert_eq!(u128::from_le_bytes(header[8..24].try_into().expect("16 bytes")), CLUSTER.0);
    assert_eq!(u64_at(header, 24), SENDER.0);
    assert_eq!(header[32..48], trace().trace_id);
    assert_eq!(header[48..56], trace().span_id);
    assert_eq!(u32_at(header, 56) as usize, body.len());
    assert_eq!(u16::from_le_bytes([header[60], header[61]]), WIRE_REVISION);
    assert_eq!(header[62], Command::PrepareOk as u8);
    assert_eq!(header[63], trace().flags);
    assert!(header[64..80].iter().all(|byte| *byte == 0), "reserved bytes are zero on send");
}

// --- R10: Commit entries are 40 bytes ---------------------------------------

#[test]
fn r10_commit_entry_is_40_bytes() {
    assert_eq!(COMMIT_ENTRY_SIZE_BYTES, 40);
    assert_eq!(<CommitEntry as FixedEntry>::SIZE_BYTES, 40);
    let (_, frame) = commit_batch_frame(1..=3);
    assert_eq!(frame.len(), HEADER_SIZE_BYTES + 3 * 40, "one header, then one 40-byte entry per group");
}

#[test]
fn r10_commit_entry_fields_sit_at_their_documented_offsets() {
    let entry = CommitEntry {
        group: GroupId(0x0102_0304_0506_0708),
        partition_incarnation: Incarnation(0x1112_1314_1516_1718),
        view: View(0x2122_2324),
        commit: Op(0x3132_3334_3536_3738),
        timestamp_monotonic: Timestamp(0x4142_4344_4546_4748),
        heartbeat_state: HeartbeatState::Eager,
        replica: MemberIndex(63),
    };
    let batch = CommitBatch::encode([&entry]);
    let bytes = batch.body();
    assert_eq!(u64_at(bytes, 0), entry.group.0);
    assert_eq!(u64_at(bytes, 8), entry.partition_incarnation.0);
    assert_eq!(u32_at(bytes, 16), entry.view.0);
    assert_eq!(u64_at(bytes, 20), entry.commit.0);
    assert_eq!(u64_at(bytes, 28), entry.timestamp_monotonic.0);
    assert_eq!(bytes[36], 3, "heartbeat_state Eager");
    assert_eq!(bytes[37], 63, "replica");
    assert_eq!(bytes[38..40], [0, 0], "reserved");
}

#[test]
fn r10_the_header_names_cluster_and_sender_once_per_batch() {
    let (entries, frame) = commit_batch_frame(1..=50);
    let results = decode_stream([&frame[..]]);
    let Ok(received) = &results[0] else { panic!("{results:?}") };
    assert_eq!((received.header.cluster, received.header.sender), (CLUSTER, SENDER));
    assert_eq!(received.header.command, Command::Commit);
    assert_eq!(decode_commit_batch(&frame).len(), entries.len());
}

// --- R13: a batch fits one frame, never split -------------------------------

#[test]
fn r13_batch_limit_fits_frame() {
    // The same relations the crate asserts statically, restated here.
    const {
        assert!(HEADER_SIZE_BYTES + COMMIT_BATCH_ENTRIES_MAX * COMMIT_ENTRY_SIZE_BYTES <= FRAME_SIZE_MAX_BYTES);
        assert!(HEADER_SIZE_BYTES + (COMMIT_BATCH_ENTRIES_MAX + 1) * COMMIT_ENTRY_SIZE_BYTES > FRAME_SIZE_MAX_BYTES);
        assert!(
            HEADER_SIZE_BYTES + COMMIT_REPLY_BATCH_ENTRIES_MAX * COMMIT_REPLY_ENTRY_SIZE_BYTES <= FRAME_SIZE_MAX_BYTES
        );
        assert!(
            HEADER_SIZE_BYTES + (COMMIT_REPLY_BATCH_ENTRIES_MAX + 1) * COMMIT_REPLY_ENTRY_SIZE_BYTES
                > FRAME_SIZE_MAX_BYTES
        );
        assert!(COMMIT_BATCH_ENTRIES_MAX > 1_600_000 && COMMIT_BATCH_ENTRIES_MAX < 1_800_000);
    }

    // The largest batch really goes out as one frame and comes back whole.
    let entry = commit_entry(1);
    let batch = CommitBatch::encode(std::iter::repeat_n(&entry, COMMIT_BATCH_ENTRIES_MAX));
    let frame = Message::Commit(batch).encode(CLUSTER, SENDER, trace());
    assert!(frame.size_bytes() <= FRAME_SIZE_MAX_BYTES);
    let received = Frame::decode(frame.to_bytes(), CLUSTER).expect("the largest batch is one valid frame");
    let Ok(Message::Commit(received)) = received.message() else { panic!("not a Commit") };
    assert_eq!(received.len(), COMMIT_BATCH_ENTRIES_MAX);
    assert_eq!(received.entries().last(), Some(Ok(entry)));

    // A header announcing the largest full batch is accepted; one more byte
    // than the frame can hold is refused and, the framing being unknown,
    // closes the connection.
    let mut header = Header::new(CLUSTER, SENDER, Command::Commit, TraceContext::NONE);
    header.body_size = (COMMIT_BATCH_ENTRIES_MAX * COMMIT_ENTRY_SIZE_BYTES) as u32;
    let mut bytes = [0u8; HEADER_SIZE_BYTES];
    header.encode(&mut bytes);
    assert_eq!(Header::decode(&bytes), Ok(header));

    let mut too_large = bytes;
    too_large[at::BODY_SIZE..at::BODY_SIZE + 4].copy_from_slice(&(BODY_SIZE_MAX_BYTES as u32 + 1).to_le_bytes());
    reseal_header(&mut too_large);
    let error = Header::decode(&too_large).expect_err("body too large");
    assert_eq!(
        error,
        FrameError::BodyTooLarge { size_bytes: BODY_SIZE_MAX_BYTES as u64 + 1, max_bytes: BODY_SIZE_MAX_BYTES }
    );
    assert!(error.closes_connection());
    assert_eq!(decode_stream([&too_large[..]]), vec![Err(error)]);
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "R13")]
fn r13_encoder_debug_asserts_the_batch_limit() {
    let entry = commit_entry(1);
    let _ = CommitBatch::encode(std::iter::repeat_n(&entry, COMMIT_BATCH_ENTRIES_MAX + 1));
}

// --- R15: a bad checksum drops the whole frame ------------------------------

#[test]
fn r15_bad_checksum_drops_whole_frame() {
    let (_, before) = commit_batch_frame(1..=4);
    let after = frame_bytes(&Message::CommitReply(CommitReplyBatch::encode(&[commit_reply_entry(8)])));
    let mut damaged = frame_bytes(&prepare_ok()).to_vec();
    damaged[HEADER_SIZE_BYTES + 3] ^= 0x10;

    // A damaged body: that frame alone is dropped, the stream goes on.
    let stream = [&before[..], &damaged, &after].concat();
    let results = decode_stream([&stream[..]]);
    assert_eq!(results.len(), 3);
    assert_eq!(results[0], Frame::decode(before.clone(), CLUSTER));
    let Err(error) = &results[1] else { panic!("damaged body was accepted: {results:?}") };
    assert!(matches!(error, FrameError::BodyChecksum { command: Command::PrepareOk, .. }), "{error}");
    assert!(!error.closes_connection());
    assert_eq!(results[2], Frame::decode(after.clone(), CLUSTER));
    assert!(matches!(
        Frame::decode(Bytes::from(damaged), CLUSTER),
        Err(FrameError::BodyChecksum { command: Command::PrepareOk, .. })
    ));

    // A damaged header: nothing in it can be trusted, not even the body
    // size, so the connection is closed and nothing after it is read.
    let mut damaged = frame_bytes(&prepare_ok()).to_vec();
    damaged[30] ^= 0x01;
    let stream = [&damaged[..], &after].concat();
    let results = decode_stream([&stream[..]]);
    assert_eq!(results.len(), 1, "no frame is read past a bad header: {results:?}");
    let Err(error) = &results[0] else { panic!("damaged header was accepted") };
    assert!(matches!(error, FrameError::HeaderChecksum { .. }), "{error}");
    assert!(error.closes_connection());
    assert!(matches!(Frame::decode(Bytes::from(damaged), CLUSTER), Err(FrameError::HeaderChecksum { .. })));
}

#[test]
fn r15_every_single_bit_flip_is_caught() {
    let (_, frame) = commit_batch_frame(1..=2);
    for bit in 0..frame.len() * 8 {
        let mut damaged = frame.to_vec();
        damaged[bit / 8] ^= 1 << (bit % 8);
        let error = Frame::decode(Bytes::from(damaged), CLUSTER).expect_err("a flipped bit passed");
        if bit / 8 < HEADER_SIZE_BYTES {
            assert!(matches!(error, FrameError::HeaderChecksum { .. }), "bit {bit}: {error}");
        } else {
            assert!(matches!(error, FrameError::BodyChecksum { .. }), "bit {bit}: {error}");
        }
    }
}

#[test]
fn r15_body_checksum_error_waits_for_the_whole_body_then_drops_it() {
    let mut damaged = frame_bytes(&prepare_ok()).to_vec();
    damaged[HEADER_SIZE_BYTES] ^= 0x80;
    let good = frame_bytes(&prepare_ok());
    let stream = [&damaged[..], &good].concat();
    let results = decode_stream(stream.chunks(7));
    assert_eq!(results.len(), 2);
    assert!(matches!(results[0], Err(FrameError::BodyChecksum { .. })));
    assert_eq!(results[1], Frame::decode(good, CLUSTER));
}

// --- R17: a bad Commit entry is rejected alone -------------------------------

#[test]
fn r17_bad_entry_rejected_alone() {
    let (entries, frame) = commit_batch_frame(1..=5);
    let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
    body[2 * COMMIT_ENTRY_SIZE_BYTES + 36] = 0; // entry 2: no such heartbeat_state
    let batch = decode_commit_batch(&frame_with_body(Command::Commit, body));

    let results: Vec<_> = batch.entries().collect();
    assert_eq!(results.len(), 5);
    for (index, result) in results.iter().enumerate() {
        if index == 2 {
            let expected =
                EntryError { command: Command::Commit, index: 2, group: GroupId(3), reason: "unknown heartbeat_state" };
            assert_eq!(result, &Err(expected));
        } else {
            assert_eq!(result, &Ok(entries[index]), "entry {index} is handled as if sent alone");
        }
    }

    let mut counters = RejectCounters::default();
    results.iter().filter_map(|result| result.as_ref().err()).for_each(|error| counters.entry(error));
    assert_eq!(counters.total(), 1);
    assert_eq!(counters.entries.get("unknown heartbeat_state"), Some(&1));
}

#[test]
fn r17_several_bad_entries_leave_the_good_ones_between_them() {
    let (entries, frame) = commit_batch_frame(1..=6);
    let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
    body[38] = 1; // entry 0: reserved byte set
    body[3 * COMMIT_ENTRY_SIZE_BYTES + 36] = 9; // entry 3: unknown heartbeat_state
    body[5 * COMMIT_ENTRY_SIZE_BYTES + 37] = REPLICAS_MAX as u8; // entry 5: replica out of range
    let batch = decode_commit_batch(&frame_with_body(Command::Commit, body));
    let bad: Vec<(usize, &str)> = batch.entries().filter_map(Result::err).map(|e| (e.index, e.reason)).collect();
    assert_eq!(
        bad,
        vec![(0, "reserved bytes are not zero"), (3, "unknown heartbeat_state"), (5, "replica index out of range")]
    );
    let good: Vec<CommitEntry> = batch.entries().filter_map(Result::ok).collect();
    assert_eq!(good, vec![entries[1], entries[2], entries[4]]);
}

// --- R18: revision 2 only, one cluster only ---------------------------------

#[test]
fn r18_revision_1_rejected() {
    let revision_1 = FrameError::Revision { got: 1, expected: 2 };

    // In the frame header.
    let frame = frame_bytes(&prepare_ok());
    let old = with_header_byte(&frame, at::REVISION, 1);
    assert_eq!(Frame::decode(Bytes::from(old.clone()), CLUSTER), Err(revision_1.clone()));
    assert_eq!(decode_stream([&old[..]]), vec![Err(revision_1.clone())]);
    assert!(revision_1.closes_connection());
    assert!(revision_1.to_string().contains("revision 1"), "{revision_1}");

    // In the handshake: the error says which check failed.
    let handshake = Handshake { revision: 1, cluster: CLUSTER, node: NodeId(2), shard_count: 2 };
    assert_eq!(handshake.check_peer(CLUSTER), Err(revision_1));
    let foreign = Handshake { revision: WIRE_REVISION, cluster: FOREIGN_CLUSTER, node: NodeId(2), shard_count: 2 };
    let mismatch = FrameError::ClusterMismatch { got: FOREIGN_CLUSTER.0, expected: CLUSTER.0 };
    assert_eq!(foreign.check_peer(CLUSTER), Err(mismatch.clone()));
    assert!(mismatch.to_string().contains(&format!("{:#x}", FOREIGN_CLUSTER.0)), "{mismatch}");
    let current = Handshake { revision: WIRE_REVISION, cluster: CLUSTER, node: NodeId(2), shard_count: 2 };
    assert_eq!(current.check_peer(CLUSTER), Ok(()));
}

#[test]
fn r18_frame_from_a_foreign_cluster_closes_the_connection() {
    let frame = prepare_ok().encode(FOREIGN_CLUSTER, SENDER, trace()).to_bytes();
    let mismatch = FrameError::ClusterMismatch { got: FOREIGN_CLUSTER.0, expected: CLUSTER.0 };
    assert_eq!(Frame::decode(frame.clone(), CLUSTER), Err(mismatch.clone()));
    assert_eq!(decode_stream([&frame[..]]), vec![Err(mismatch.clone())]);
    assert!(mismatch.closes_connection());
}

#[test]
fn r18_every_revision_but_2_is_rejected() {
    let frame = frame_bytes(&prepare_ok());
    for revision in [0u16, 1, 3, 0x0100, u16::MAX] {
        let mut bytes = frame.to_vec();
        bytes[at::REVISION..at::REVISION + 2].copy_from_slice(&revision.to_le_bytes());
        reseal_header(&mut bytes);
        assert_eq!(
            Frame::decode(Bytes::from(bytes), CLUSTER),
            Err(FrameError::Revision { got: revision, expected: 2 })
        );
    }
}

// --- R21: heartbeat_state is one of three values ----------------------------

#[test]
fn r21_unknown_heartbeat_state_is_bad_entry() {
    let (entries, frame) = commit_batch_frame(1..=1);
    for value in 0..=u8::MAX {
        let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
        body[36] = value;
        let batch = decode_commit_batch(&frame_with_body(Command::Commit, body));
        let result = batch.entries().next().expect("one entry");
        let expected = match value {
            1 => Some(HeartbeatState::Busy),
            2 => Some(HeartbeatState::Idle),
            3 => Some(HeartbeatState::Eager),
            _ => None,
        };
        match expected {
            Some(state) => assert_eq!(result, Ok(CommitEntry { heartbeat_state: state, ..entries[0] })),
            None => assert_eq!(
                result,
                Err(EntryError {
                    command: Command::Commit,
                    index: 0,
                    group: GroupId(1),
                    reason: "unknown heartbeat_state"
                })
            ),
        }
    }
}

// --- R26: CommitReply batches -----------------------------------------------

#[test]
fn r26_reply_entry_is_32_bytes_at_documented_offsets() {
    assert_eq!(COMMIT_REPLY_ENTRY_SIZE_BYTES, 32);
    let entry = CommitReplyEntry {
        group: GroupId(0x0102_0304_0506_0708),
        partition_incarnation: Incarnation(0x1112_1314_1516_1718),
        view: View(0x2122_2324),
        timestamp_monotonic: Timestamp(0x4142_4344_4546_4748),
        replica: MemberIndex(5),
    };
    let batch = CommitReplyBatch::encode([&entry, &entry]);
    let bytes = batch.body();
    assert_eq!(bytes.len(), 64);
    assert_eq!(u64_at(bytes, 0), entry.group.0);
    assert_eq!(u64_at(bytes, 8), entry.partition_incarnation.0);
    assert_eq!(u32_at(bytes, 16), entry.view.0);
    assert_eq!(u64_at(bytes, 20), entry.timestamp_monotonic.0);
    assert_eq!(bytes[28], 5);
    assert_eq!(bytes[29..32], [0, 0, 0]);
    assert_eq!(bytes[32..], bytes[..32]);
}

// --- R29: a bad CommitReply entry is rejected alone ---------------------------

#[test]
fn r29_bad_reply_entry_rejected_alone() {
    let entries: Vec<CommitReplyEntry> = (1..=4).map(commit_reply_entry).collect();
    let frame = frame_bytes(&Message::CommitReply(CommitReplyBatch::encode(&entries)));
    let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
    body[COMMIT_REPLY_ENTRY_SIZE_BYTES + 30] = 0xff; // entry 1: reserved byte set
    let batch = decode_reply_batch(&frame_with_body(Command::CommitReply, body));

    let results: Vec<_> = batch.entries().collect();
    assert_eq!(
        results,
        vec![
            Ok(entries[0]),
            Err(EntryError {
                command: Command::CommitReply,
                index: 1,
                group: GroupId(2),
                reason: "reserved bytes are not zero"
            }),
            Ok(entries[2]),
            Ok(entries[3]),
        ]
    );
}

#[test]
fn r29_bad_reply_frame_checksum_drops_the_whole_batch() {
    let entries: Vec<CommitReplyEntry> = (1..=4).map(commit_reply_entry).collect();
    let mut frame = frame_bytes(&Message::CommitReply(CommitReplyBatch::encode(&entries))).to_vec();
    frame[HEADER_SIZE_BYTES + 70] ^= 4;
    let results = decode_stream([&frame[..]]);
    assert!(matches!(results[..], [Err(FrameError::BodyChecksum { command: Command::CommitReply, .. })]));
}

// --- Reserved bytes, member indexes, batch sizes ------------------------------

#[test]
fn reserved_header_bytes_must_be_zero() {
    let frame = frame_bytes(&prepare_ok());
    for offset in at::RESERVED {
        let bytes = with_header_byte(&frame, offset, 1);
        assert_eq!(
            Frame::decode(Bytes::from(bytes.clone()), CLUSTER),
            Err(FrameError::ReservedNotZero),
            "byte {offset}"
        );
        let results = decode_stream([&bytes[..]]);
        assert_eq!(results, vec![Err(FrameError::ReservedNotZero)]);
        assert!(FrameError::ReservedNotZero.closes_connection());
    }
}

#[test]
fn reserved_entry_bytes_must_be_zero() {
    let (_, frame) = commit_batch_frame(7..=7);
    for offset in [38, 39] {
        let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
        body[offset] = 0x80;
        let batch = decode_commit_batch(&frame_with_body(Command::Commit, body));
        let error = batch.entries().next().expect("one entry").expect_err("reserved byte set");
        assert_eq!((error.index, error.group, error.reason), (0, GroupId(7), "reserved bytes are not zero"));
    }
    let frame = frame_bytes(&Message::CommitReply(CommitReplyBatch::encode(&[commit_reply_entry(7)])));
    for offset in [29, 30, 31] {
        let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
        body[offset] = 1;
        let batch = decode_reply_batch(&frame_with_body(Command::CommitReply, body));
        let error = batch.entries().next().expect("one entry").expect_err("reserved byte set");
        assert_eq!((error.index, error.group, error.reason), (0, GroupId(7), "reserved bytes are not zero"));
    }
}

#[test]
fn entry_with_replica_out_of_range_is_bad_entry() {
    // A member index is one byte and 255 names no replica (REPLICAS_MAX), so
    // that index must not reach the core as a valid entry. Indexes past the
    // 64 voters are learners' (Z5): whether one names a member of the group
    // is the replica's check.
    let (entries, frame) = commit_batch_frame(1..=1);
    let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
    body[37] = REPLICAS_MAX as u8;
    let batch = decode_commit_batch(&frame_with_body(Command::Commit, body));
    let error = batch.entries().next().expect("one entry").expect_err("replica out of range");
    assert_eq!(error.reason, "replica index out of range");
    for replica in [GROUP_MEMBERS_MAX as u8 - 1, GROUP_MEMBERS_MAX as u8, REPLICAS_MAX as u8 - 1] {
        let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
        body[37] = replica;
        let batch = decode_commit_batch(&frame_with_body(Command::Commit, body));
        assert_eq!(batch.entries().next(), Some(Ok(CommitEntry { replica: MemberIndex(replica), ..entries[0] })));
    }

    let frame = frame_bytes(&Message::CommitReply(CommitReplyBatch::encode(&[commit_reply_entry(1)])));
    let mut body = frame[HEADER_SIZE_BYTES..].to_vec();
    body[28] = REPLICAS_MAX as u8;
    let batch = decode_reply_batch(&frame_with_body(Command::CommitReply, body));
    let error = batch.entries().next().expect("one entry").expect_err("replica out of range");
    assert_eq!(error.reason, "replica index out of range");
}

#[test]
fn batch_body_that_is_not_whole_entries_is_a_bad_body() {
    for extra in 1..COMMIT_ENTRY_SIZE_BYTES {
        let frame = frame_with_body(Command::Commit, vec![0u8; COMMIT_ENTRY_SIZE_BYTES + extra]);
        let error = decode_one(&frame).expect_err("partial entry accepted");
        assert_eq!(
            error,
            DecodeError::Body(BodyError::BatchSize {
                command: Command::Commit,
                size_bytes: COMMIT_ENTRY_SIZE_BYTES + extra,
                entry_size_bytes: COMMIT_ENTRY_SIZE_BYTES,
            })
        );
    }
    let frame = frame_with_body(Command::CommitReply, vec![0u8; 33]);
    assert!(matches!(decode_one(&frame), Err(DecodeError::Body(BodyError::BatchSize { .. }))));
}

#[test]
fn empty_batches_are_valid_and_have_no_entries() {
    let batch = decode_commit_batch(&frame_bytes(&Message::Commit(CommitBatch::encode(&[]))));
    assert!(batch.is_empty());
    assert_eq!(batch.entries().count(), 0);
    let batch = decode_reply_batch(&frame_bytes(&Message::CommitReply(CommitReplyBatch::encode(&[]))));
    assert!(batch.is_empty());
}

// --- Unknown commands ----------------------------------------------------------

#[test]
fn unknown_command_drops_that_frame_and_the_stream_goes_on() {
    // Regression: the stream decoder reported an unknown command as "drop
    // this frame, keep the connection" but left the frame in the buffer, so
    // a caller following that advice got the same error forever.
    let good = frame_bytes(&prepare_ok());
    let unknown = with_header_byte(&frame_bytes(&prepare_ok()), at::COMMAND, 200);
    assert_eq!(Frame::decode(Bytes::from(unknown.clone()), CLUSTER), Err(FrameError::UnknownCommand(200)));
    assert!(!FrameError::UnknownCommand(200).closes_connection());

    let stream = [&good[..], &unknown, &good].concat();
    for chunk_size_bytes in [1, 5, 80, 81, stream.len()] {
        let results = decode_stream(stream.chunks(chunk_size_bytes));
        assert_eq!(results.len(), 3, "chunks of {chunk_size_bytes}: {results:?}");
        assert_eq!(results[0], Frame::decode(good.clone(), CLUSTER));
        assert_eq!(results[1], Err(FrameError::UnknownCommand(200)));
        assert_eq!(results[2], Frame::decode(good.clone(), CLUSTER));
    }
}

#[test]
fn unknown_command_from_a_foreign_cluster_still_closes_the_connection() {
    let foreign = prepare_ok().encode(FOREIGN_CLUSTER, SENDER, trace()).to_bytes();
    let unknown = with_header_byte(&foreign, at::COMMAND, 0);
    let mismatch = FrameError::ClusterMismatch { got: FOREIGN_CLUSTER.0, expected: CLUSTER.0 };
    assert_eq!(decode_stream([&unknown[..]]), vec![Err(mismatch.clone())]);
    assert_eq!(Frame::decode(Bytes::from(unknown), CLUSTER), Err(mismatch));
}

// --- Truncation and trailing bytes ----------------------------------------------

#[test]
fn truncated_frames_are_rejected_by_the_one_shot_decoder_and_awaited_by_the_stream() {
    let frame = frame_bytes(&prepare_ok());
    assert_eq!(
        Frame::decode(frame.slice(..40), CLUSTER),
        Err(FrameError::Truncated { got_bytes: 40, needed_bytes: HEADER_SIZE_BYTES })
    );
    let body_size_bytes = (frame.len() - HEADER_SIZE_BYTES) as u32;
    assert_eq!(
        Frame::decode(frame.slice(..frame.len() - 1), CLUSTER),
        Err(FrameError::BodySizeMismatch {
            declared_bytes: body_size_bytes,
            actual_bytes: body_size_bytes as usize - 1
        })
    );
    for cut in 0..frame.len() {
        assert_eq!(decode_stream([&frame[..cut]]), vec![], "a partial frame waits for more bytes");
    }
}

#[test]
fn trailing_bytes_after_a_frame_are_rejected_by_the_one_shot_decoder() {
    let mut bytes = frame_bytes(&prepare_ok()).to_vec();
    bytes.push(0);
    let body_size_bytes = (bytes.len() - 1 - HEADER_SIZE_BYTES) as u32;
    assert_eq!(
        Frame::decode(Bytes::from(bytes), CLUSTER),
        Err(FrameError::BodySizeMismatch {
            declared_bytes: body_size_bytes,
            actual_bytes: body_size_bytes as usize + 1
        })
    );
}

#[test]
fn trailing_bytes_after_a_body_are_rejected() {
    let mut body = prepare_ok().encode_body().to_vec();
    body.extend_from_slice(&[0, 0, 0]);
    let error = decode_one(&frame_with_body(Command::PrepareOk, body)).expect_err("trailing bytes accepted");
    assert_eq!(error, DecodeError::Body(BodyError::TrailingBytes { command: Command::PrepareOk, trailing_bytes: 3 }));
    assert_eq!(error.kind(), "trailing_bytes");
}

#[test]
fn a_body_of_the_wrong_command_does_not_decode() {
    let body = prepare_ok().encode_body();
    let error = decode_one(&frame_with_body(Command::Request, body)).expect_err("PrepareOk body read as a Request");
    assert!(matches!(error, DecodeError::Body(BodyError::Codec { command: Command::Request, .. })), "{error}");
}

// --- Rejection counters ----------------------------------------------------------

#[test]
fn reject_counters_count_each_level_by_kind() {
    let mut counters = RejectCounters::default();
    counters.frame(&FrameError::ReservedNotZero);
    counters.frame(&FrameError::ReservedNotZero);
    counters.body(&BodyError::TrailingBytes { command: Command::Reply, trailing_bytes: 1 });
    counters.entry(&EntryError {
        command: Command::Commit,
        index: 0,
        group: GroupId(1),
        reason: "unknown heartbeat_state",
    });
    assert_eq!(counters.frames.get("reserved_not_zero"), Some(&2));
    assert_eq!(counters.bodies.get("trailing_bytes"), Some(&1));
    assert_eq!(counters.entries.get("unknown heartbeat_state"), Some(&1));
    assert_eq!(counters.total(), 4);
}
