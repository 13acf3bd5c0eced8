//! Fuzz target: arbitrary bytes through the stream decoder, then every frame's
//! message and every batch entry.
//!
//! Input: one control byte, then the stream. Bit 0 of the control byte asks
//! for the stream's checksums to be rewritten first (so mutations reach the
//! header fields and bodies behind them); the other bits seed the chunk sizes
//! in which the stream is fed. Checked: no panic; feeding in chunks decodes
//! exactly as feeding at once; a stream that is one whole frame decodes the
//! same through the one-shot decoder; decoded messages are valid and
//! canonical; batches yield one result per entry.

#![no_main]

use bytes::Bytes;
use cohort_fuzz::{CLUSTER, Chunker, check_frame, decode_stream, seal_stream};
use cohort_messages::{Frame, HEADER_SIZE_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let mut stream = stream.to_vec();
    if control & 1 == 1 {
        seal_stream(&mut stream);
    }
    let mut chunker = Chunker::new(control >> 1);
    let chunked = decode_stream(&stream, || chunker.next_size_bytes());
    let whole = decode_stream(&stream, || stream.len());
    assert_eq!(chunked, whole, "the chunking changed what was decoded");

    for frame in whole.iter().flatten() {
        check_frame(frame);
    }

    let one_shot = Frame::decode(Bytes::copy_from_slice(&stream), CLUSTER);
    if let [Ok(frame)] = &whole[..]
        && HEADER_SIZE_BYTES + frame.body.len() == stream.len()
    {
        assert_eq!(one_shot.as_ref(), Ok(frame), "one-shot and stream decoders disagree");
    }
});
