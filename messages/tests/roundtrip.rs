//! Round trips: every message, encoded into a frame and decoded again through
//! both the stream decoder and the one-shot decoder, is the same message; and a
//! stream of frames cut anywhere decodes to the same frames.

mod common;

use bytes::Bytes;
use cohort_messages::*;
use common::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// Encode `message`, decode it through [`FrameDecoder`] and through
/// [`Frame::decode`], and check both give back the same header and message.
fn assert_round_trip(message: &Message) -> Result<(), TestCaseError> {
    let bytes = frame_bytes(message);
    // H4: the size a sender charges before encoding is the size it encodes.
    prop_assert_eq!(message.frame_size_bytes(), bytes.len());

    let streamed = decode_stream([&bytes[..]]);
    prop_assert_eq!(streamed.len(), 1);
    let frame = streamed.into_iter().next().expect("one result").map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(frame.header.cluster, CLUSTER);
    prop_assert_eq!(frame.header.sender, SENDER);
    prop_assert_eq!(frame.header.command, message.command());
    prop_assert_eq!(frame.header.revision, WIRE_REVISION);
    prop_assert_eq!(frame.header.trace, trace());
    prop_assert_eq!(&Message::decode(&frame), &Ok(message.clone()));

    // K2: the frame appended to a turn's buffer is the very same bytes.
    let mut turn = bytes::BytesMut::from(&b"earlier frames"[..]);
    message.encode_into(CLUSTER, SENDER, trace(), &mut turn);
    prop_assert_eq!(&turn[b"earlier frames".len()..], &bytes[..]);
    // And with a large payload left apart, the buffer and the payload
    // after it are those bytes again.
    let mut turn = bytes::BytesMut::from(&b"earlier frames"[..]);
    let apart = message.encode_into_parts(CLUSTER, SENDER, trace(), &mut turn);
    let mut joined = turn[b"earlier frames".len()..].to_vec();
    joined.extend_from_slice(apart.as_deref().unwrap_or_default());
    prop_assert_eq!(&joined[..], &bytes[..]);

    let one_shot = Frame::decode(bytes.clone(), CLUSTER);
    prop_assert_eq!(&one_shot, &Ok(frame));
    prop_assert_eq!(decode_message(bytes, CLUSTER).map(|(_, decoded)| decoded), Ok(message.clone()));
    Ok(())
}

/// For a batch, also check that iterating the decoded batch gives back every
/// entry, in order, each `Ok`.
fn assert_entries_round_trip<E>(sent: &[E], received: &Batch<E>) -> Result<(), TestCaseError>
where
    E: FixedEntry + PartialEq + std::fmt::Debug,
{
    prop_assert_eq!(received.len(), sent.len());
    prop_assert_eq!(received.body().len(), sent.len() * E::SIZE_BYTES);
    let decoded: Vec<E> =
        received.entries().collect::<Result<_, _>>().map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(decoded.as_slice(), sent);
    Ok(())
}

macro_rules! round_trip {
    ($($test:ident: $strategy:expr => $variant:ident;)*) => {
        proptest! {
            $(
                #[test]
                fn $test(value in $strategy) {
                    assert_round_trip(&Message::$variant(value))?;
                }
            )*
        }
    };
}

round_trip! {
    handshake_round_trip: handshake() => Handshake;
    request_round_trip: request() => Request;
    reply_round_trip: reply() => Reply;
    prepare_round_trip: prepare() => Prepare;
    prepare_ok_round_trip: prepare_ok() => PrepareOk;
    start_view_change_round_trip: start_view_change() => StartViewChange;
    do_view_change_round_trip: do_view_change() => DoViewChange;
    start_view_round_trip: start_view() => StartView;
    request_prepares_round_trip: request_prepares() => RequestPrepares;
    request_state_transfer_round_trip: request_state_transfer() => RequestStateTransfer;
    state_chunk_round_trip: state_chunk() => StateChunk;
    redirect_round_trip: redirect() => Redirect;
    session_open_round_trip: session_open() => SessionOpen;
    session_keepalive_round_trip: session_keepalive() => SessionKeepalive;
    session_expired_round_trip: session_expired() => SessionExpired;
    session_opened_round_trip: session_opened() => SessionOpened;
    link_shard_round_trip: link_shard() => LinkShard;
    route_query_round_trip: route_query() => RouteQuery;
    routes_round_trip: routes() => Routes;
}

proptest! {
    #[test]
    fn r10_commit_batch_round_trip(entries in commit_entries()) {
        let message = Message::Commit(CommitBatch::encode(&entries));
        assert_round_trip(&message)?;
        let Ok(Message::Commit(batch)) = decode_one(&frame_bytes(&message)) else {
            return Err(TestCaseError::fail("not a Commit"));
        };
        assert_entries_round_trip(&entries, &batch)?;
    }

    #[test]
    fn r26_reply_batch_round_trip(entries in commit_reply_entries()) {
        let message = Message::CommitReply(CommitReplyBatch::encode(&entries));
        assert_round_trip(&message)?;
        let Ok(Message::CommitReply(batch)) = decode_one(&frame_bytes(&message)) else {
            return Err(TestCaseError::fail("not a CommitReply"));
        };
        assert_entries_round_trip(&entries, &batch)?;
    }

    /// Whatever mix of messages is sent, and wherever TCP cuts the stream, the
    /// receiver gets the same frames in the same order.
    #[test]
    fn stream_cut_anywhere_decodes_to_the_same_frames(
        messages in vec(message(), 1..8),
        cuts in vec(any::<prop::sample::Index>(), 0..24),
    ) {
        let mut stream = Vec::new();
        for message in &messages {
            stream.extend_from_slice(&frame_bytes(message));
        }
        let cuts = cuts.iter().map(|cut| cut.index(stream.len() + 1)).collect();
        let chunks = split_at_points(&stream, cuts);

        let frames = decode_stream(chunks);
        prop_assert_eq!(frames.len(), messages.len());
        for (frame, sent) in frames.iter().zip(&messages) {
            let frame = frame.as_ref().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&Message::decode(frame), &Ok(sent.clone()));
        }
    }

    /// The same holds byte by byte, the worst case for buffering.
    #[test]
    fn stream_fed_one_byte_at_a_time_decodes_to_the_same_frames(messages in vec(message(), 1..4)) {
        let mut stream = Vec::new();
        for message in &messages {
            stream.extend_from_slice(&frame_bytes(message));
        }
        let frames = decode_stream(stream.chunks(1));
        let decoded: Vec<Message> = frames
            .into_iter()
            .map(|frame| frame.map_err(DecodeError::from).and_then(|frame| Ok(Message::decode(&frame)?)))
            .collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(decoded, messages);
    }

    /// Arbitrary bytes in arbitrary chunks never make the stream decoder or the
    /// message decoder panic; the decoder never yields more body than it was fed.
    #[test]
    fn arbitrary_bytes_never_panic_the_stream_decoder(
        bytes in vec(any::<u8>(), 0..600),
        cuts in vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let cuts = cuts.iter().map(|cut| cut.index(bytes.len() + 1)).collect();
        for frame in decode_stream(split_at_points(&bytes, cuts)).into_iter().flatten() {
            prop_assert!(frame.body.len() <= bytes.len());
            decode_and_walk(&frame);
        }
    }

    /// Random bytes rarely pass a checksum, so seal arbitrary header bytes into
    /// a well-formed header of our cluster and revision: the body decoders then
    /// see arbitrary bodies of every command.
    #[test]
    fn arbitrary_sealed_frames_never_panic(
        header in vec(any::<u8>(), HEADER_SIZE_BYTES),
        body in vec(any::<u8>(), 0..400),
        command in prop::sample::select(Command::ALL.to_vec()),
    ) {
        let mut frame = header;
        frame[at::RESERVED].fill(0);
        frame[at::REVISION..at::REVISION + 2].copy_from_slice(&WIRE_REVISION.to_le_bytes());
        frame[at::COMMAND] = command as u8;
        frame[8..24].copy_from_slice(&CLUSTER.0.to_le_bytes());
        frame[at::BODY_SIZE..at::BODY_SIZE + 4].copy_from_slice(&(body.len() as u32).to_le_bytes());
        frame[4..8].copy_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        reseal_header(&mut frame);
        frame.extend_from_slice(&body);

        let results = decode_stream([&frame[..]]);
        prop_assert_eq!(results.len(), 1);
        let frame = results.into_iter().next().expect("one result").map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(frame.header.command, command);
        decode_and_walk(&frame);
    }

    /// `Message::decode` on a frame that skipped the checksum checks entirely
    /// (any command, any body) returns a value or an error, never a panic.
    #[test]
    fn arbitrary_bodies_never_panic_the_message_decoder(
        body in vec(any::<u8>(), 0..400),
        command in prop::sample::select(Command::ALL.to_vec()),
    ) {
        let header = Header::new(CLUSTER, SENDER, command, TraceContext::NONE);
        decode_and_walk(&Frame { header, body: Bytes::from(body) });
    }
}

/// Decode a frame's message and, for a batch, every entry; any outcome but a
/// panic is fine. A message that decodes is valid and encodes back to the
/// same body.
fn decode_and_walk(frame: &Frame) {
    match Message::decode(frame) {
        Ok(Message::Commit(batch)) => assert_eq!(batch.entries().count(), batch.len()),
        Ok(Message::CommitReply(batch)) => assert_eq!(batch.entries().count(), batch.len()),
        Ok(message) => {
            assert_eq!(message.validate(), Ok(()));
            assert_eq!(message.encode_body(), frame.body, "a decoded body re-encodes to the same bytes");
        }
        Err(_) => {}
    }
}

/// K2, D3: a state chunk's large payload is left out of the turn's buffer
/// and written after it; the frame is byte for byte the one `encode_into`
/// makes, and decodes to the same chunk, at the sizes around the cut-off
/// and at the largest chunk; the receiver's payload is a slice of the
/// frame.
#[test]
fn k2_a_large_state_chunk_is_encoded_apart_into_the_same_frame_and_decoded_in_place() {
    let sizes = [PAYLOAD_APART_SIZE_MIN_BYTES - 1, PAYLOAD_APART_SIZE_MIN_BYTES, 1 << 20, STATE_CHUNK_SIZE_MAX_BYTES];
    for size in sizes {
        let payload: Vec<u8> = (0..size).map(|index| (index * 7 + index / 251) as u8).collect();
        let message = Message::StateChunk(StateChunk {
            group: GroupId(9),
            incarnation: Incarnation(2),
            view: View(3),
            replica: MemberIndex(1),
            snapshot_op: Op(40),
            snapshot_view: View(2),
            offset_bytes: 8 << 20,
            total_size_bytes: 64 << 20,
            chunk: Bytes::from(payload),
        });
        let whole = frame_bytes(&message);
        // docs/protocol.md: a head of 57 bytes, then the payload.
        assert_eq!(whole.len() - HEADER_SIZE_BYTES - size, 57, "the head's size");
        let mut turn = bytes::BytesMut::new();
        let apart = message.encode_into_parts(CLUSTER, SENDER, trace(), &mut turn);
        assert_eq!(apart.is_some(), size >= PAYLOAD_APART_SIZE_MIN_BYTES, "{size} bytes");
        let mut joined = turn.to_vec();
        joined.extend_from_slice(apart.as_deref().unwrap_or_default());
        assert!(joined == whole[..], "{size} bytes: the parts make the whole frame");
        let frame = Frame::decode(Bytes::from(joined), CLUSTER).expect("checksums hold");
        let decoded = Message::decode(&frame);
        assert_eq!(decoded, Ok(message));
        // The receiver's payload is the frame's own bytes, not a copy.
        let Ok(Message::StateChunk(decoded)) = decoded else { unreachable!("checked above") };
        let body = frame.body.as_ptr_range();
        assert!(body.contains(&decoded.chunk.as_ptr()), "{size} bytes: the payload is a slice of the frame");
    }
}
