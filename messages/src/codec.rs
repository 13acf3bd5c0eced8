//! The one place that uses bincode.
//!
//! Variable bodies (view-change logs, state chunks, client operations) are
//! encoded with bincode 2 through its serde API, with a fixed configuration:
//! little-endian, fixed-width integers, and a decode limit of the largest
//! body so that a hostile length prefix cannot make the decoder allocate
//! more than a frame could carry. Payload and text fields go further (see
//! `serde_fields`): their length is checked against the bytes present before
//! anything is allocated. bincode is flagged unmaintained
//! (RUSTSEC-2025-0141); see docs/protocol.md for why that is acceptable for a
//! frozen format and how it would be replaced without a wire change.

use bincode::config::{Configuration, Fixint, Limit, LittleEndian};
use bytes::BufMut;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::command::Command;
use crate::error::BodyError;
use crate::limits::BODY_SIZE_MAX_BYTES;

type Config = Configuration<LittleEndian, Fixint, Limit<BODY_SIZE_MAX_BYTES>>;

const CONFIG: Config =
    bincode::config::standard().with_little_endian().with_fixed_int_encoding().with_limit::<BODY_SIZE_MAX_BYTES>();

/// Append the encoding of `value` to `out`.
///
/// # Panics
/// If the value cannot be encoded, which for the plain data types of this
/// crate means a bug (they hold no maps with non-string keys, no closures).
pub(crate) fn encode_into<T: Serialize>(value: &T, out: &mut impl BufMut) {
    let mut writer = out.writer();
    bincode::serde::encode_into_std_write(value, &mut writer, CONFIG).expect("message bodies always encode");
}

/// The number of bytes [`encode_into`] appends for `value`, counted
/// without writing them (nothing is allocated).
///
/// # Panics
/// As [`encode_into`].
pub(crate) fn encoded_size_bytes<T: Serialize>(value: &T) -> usize {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, CONFIG).expect("message bodies always encode");
    size.bytes_written
}

/// Decode a whole body into `T`; trailing bytes are an error.
pub(crate) fn decode<T: DeserializeOwned>(command: Command, body: &[u8]) -> Result<T, BodyError> {
    let (value, used) = bincode::serde::decode_from_slice::<T, Config>(body, CONFIG)
        .map_err(|error| BodyError::Codec { command, reason: error.to_string() })?;
    if used != body.len() {
        return Err(BodyError::TrailingBytes { command, trailing_bytes: body.len() - used });
    }
    Ok(value)
}
