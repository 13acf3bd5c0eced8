//! serde helpers for the length-prefixed fields of variable bodies (opaque
//! payloads and text).
//!
//! Deserializing `Bytes` or `String` the default way asks the format for an
//! owned buffer: bincode then allocates the full length named by the prefix
//! (up to the codec's decode limit, 64 MiB) before it finds that the body is
//! shorter. A hostile 100-byte frame would cost a 64 MiB allocation. These
//! helpers ask for *borrowed* bytes instead, so the length is compared with
//! the bytes actually present before anything is allocated, and only a real
//! payload is copied. The wire bytes are unchanged: a u64 length, then the
//! bytes (golden tests in `tests/golden.rs` pin them).

use std::fmt;

use bytes::Bytes;
use serde::de::{Error, SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

/// Largest capacity reserved up front when a format hands bytes over as a
/// sequence (bincode never does; self-describing formats may).
const SEQUENCE_PREALLOCATION_MAX_BYTES: usize = 4096;

/// `#[serde(with = "crate::serde_fields::payload")]` for a [`Bytes`] field.
pub(crate) mod payload {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(value: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(value)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        deserializer.deserialize_bytes(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Bytes;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a byte string")
        }

        fn visit_bytes<E: Error>(self, value: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(value))
        }

        fn visit_byte_buf<E: Error>(self, value: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(value))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut sequence: A) -> Result<Bytes, A::Error> {
            let hint = sequence.size_hint().unwrap_or(0).min(SEQUENCE_PREALLOCATION_MAX_BYTES);
            let mut value = Vec::with_capacity(hint);
            while let Some(byte) = sequence.next_element::<u8>()? {
                value.push(byte);
            }
            Ok(Bytes::from(value))
        }
    }
}

/// `#[serde(with = "crate::serde_fields::text")]` for a [`String`] field.
pub(crate) mod text {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(value: &str, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(value)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }

    struct TextVisitor;

    impl Visitor<'_> for TextVisitor {
        type Value = String;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a UTF-8 string")
        }

        fn visit_str<E: Error>(self, value: &str) -> Result<String, E> {
            Ok(value.to_owned())
        }

        fn visit_string<E: Error>(self, value: String) -> Result<String, E> {
            Ok(value)
        }
    }
}
