//! What `cohort write` and `cohort read` send a group, and how they show
//! its answer.
//!
//! Operations are the group's state machine's bytes, opaque to cohort, so
//! the command must speak the state machine's format. Two are built in:
//!
//! - **register** (the default): what `cohort node` runs for every group
//!   ([`crate::node::Register`]). A write's operation is the value's bytes
//!   and its result the value it replaced; a read's query is empty and its
//!   answer the current value.
//! - **kv** (`--kv-key KEY`): a key-value map in the format of the `kv`
//!   example (`examples/src/bin/kv.rs`), for hosts that run one behind their
//!   client ports. A put is `P`, the key's length as a little-endian u16,
//!   the key, then the value; its result is `new` or `existed`. A read's
//!   query is the key; its answer is `1` followed by the value, or `0` if
//!   the key is absent.

use bytes::Bytes;
use serde_json::{Value, json};

/// The longest `--kv-key`: its length travels as a u16.
pub(super) const KV_KEY_SIZE_MAX_BYTES: usize = u16::MAX as usize;

/// The state machine format a command speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Format {
    /// One value per group ([`crate::node::Register`]).
    Register,
    /// A key of a key-value map (the `kv` example's format).
    Kv {
        /// The key.
        key: Bytes,
    },
}

/// A read's answer, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ReadValue {
    /// The value.
    Value(Bytes),
    /// The key is absent (kv).
    Absent,
    /// The answer does not fit the format (another state machine?).
    Unexpected(Bytes),
}

impl Format {
    /// The format of `--kv-key`, if given; the error says why the key is unusable.
    pub(super) fn of(kv_key: Option<&str>) -> Result<Format, String> {
        match kv_key {
            None => Ok(Format::Register),
            Some(key) if key.len() > KV_KEY_SIZE_MAX_BYTES => {
                Err(format!("--kv-key has {} bytes; at most {KV_KEY_SIZE_MAX_BYTES}", key.len()))
            }
            Some(key) => Ok(Format::Kv { key: Bytes::copy_from_slice(key.as_bytes()) }),
        }
    }

    /// The operation that writes `value`.
    pub(super) fn write(&self, value: &[u8]) -> Bytes {
        match self {
            Format::Register => Bytes::copy_from_slice(value),
            Format::Kv { key } => {
                // `of` bounds the key, so its length fits the u16.
                let length = u16::try_from(key.len()).unwrap_or(u16::MAX);
                [&b"P"[..], &length.to_le_bytes(), key, value].concat().into()
            }
        }
    }

    /// The query of a read.
    pub(super) fn query(&self) -> Bytes {
        match self {
            Format::Register => Bytes::new(),
            Format::Kv { key } => key.clone(),
        }
    }

    /// A read's answer.
    pub(super) fn read_value(&self, answer: &Bytes) -> ReadValue {
        match self {
            Format::Register => ReadValue::Value(answer.clone()),
            Format::Kv { .. } => match answer.first() {
                Some(1) => ReadValue::Value(answer.slice(1..)),
                Some(0) if answer.len() == 1 => ReadValue::Absent,
                _ => ReadValue::Unexpected(answer.clone()),
            },
        }
    }

    /// What a write's result means, for people.
    pub(super) fn describe_write(&self, result: &[u8]) -> String {
        match self {
            Format::Register => format!("replaced {}", shown(result)),
            Format::Kv { key } => match result {
                b"new" => format!("key {} was new", shown(key)),
                b"existed" => format!("key {} existed and was replaced", shown(key)),
                other => format!("key {}: the group answered {}", shown(key), shown(other)),
            },
        }
    }

    /// A read's value, for people.
    pub(super) fn describe_read(&self, answer: &Bytes) -> String {
        let key = match self {
            Format::Register => None,
            Format::Kv { key } => Some(shown(key)),
        };
        match (self.read_value(answer), key) {
            (ReadValue::Value(value), None) => shown(&value),
            (ReadValue::Value(value), Some(key)) => format!("{key} = {}", shown(&value)),
            (ReadValue::Absent, key) => format!("{} is absent", key.unwrap_or_default()),
            (ReadValue::Unexpected(answer), _) => {
                format!("{} (not a kv answer: does the group run the kv format?)", shown(&answer))
            }
        }
    }
}

/// Bytes as a quoted string if they are UTF-8 (control characters
/// escaped), else as hex: `"hello"`, `""`, `0x00ff`.
pub(super) fn shown(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => format!("{text:?}"),
        Err(_) => format!("0x{}", hex(bytes)),
    }
}

/// Bytes as lowercase hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Bytes as JSON: `name` holds the text if it is UTF-8 (else null), and
/// `name_hex` always holds the hex.
pub(super) fn json_bytes(name: &str, bytes: &[u8]) -> [(String, Value); 2] {
    let text = std::str::from_utf8(bytes).map_or(Value::Null, |text| json!(text));
    [(name.to_string(), text), (format!("{name}_hex"), json!(hex(bytes)))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c2_a_register_write_is_the_value_and_a_read_asks_nothing() {
        let format = Format::of(None).expect("no key");
        assert_eq!(format, Format::Register);
        assert_eq!(format.write(b"hello"), Bytes::from_static(b"hello"));
        assert!(format.query().is_empty());
        assert_eq!(format.describe_write(b""), "replaced \"\"");
        assert_eq!(format.describe_read(&Bytes::from_static(b"hi\n")), "\"hi\\n\"");
        assert_eq!(format.describe_read(&Bytes::from_static(&[0, 0xff])), "0x00ff");
    }

    #[test]
    fn c2_a_kv_put_is_encoded_as_the_kv_example_decodes_it() {
        let format = Format::of(Some("greeting")).expect("a key");
        let put = format.write(b"hello");
        assert_eq!(&put[..3], &[b'P', 8, 0]);
        assert_eq!(&put[3..11], b"greeting");
        assert_eq!(&put[11..], b"hello");
        assert_eq!(format.query(), Bytes::from_static(b"greeting"));
        assert_eq!(
            format.read_value(&Bytes::from_static(b"\x01hello")),
            ReadValue::Value(Bytes::from_static(b"hello"))
        );
        assert_eq!(format.read_value(&Bytes::from_static(b"\x00")), ReadValue::Absent);
        assert!(matches!(format.read_value(&Bytes::from_static(b"raw")), ReadValue::Unexpected(_)));
        assert_eq!(format.describe_write(b"new"), "key \"greeting\" was new");
        assert_eq!(format.describe_read(&Bytes::from_static(b"\x00")), "\"greeting\" is absent");
        assert!(Format::of(Some(&"k".repeat(KV_KEY_SIZE_MAX_BYTES + 1))).is_err());
    }

    #[test]
    fn c2_json_bytes_carry_text_where_there_is_text_and_hex_always() {
        let [(name, text), (hex_name, hex)] = json_bytes("value", b"ok");
        assert_eq!((name.as_str(), text, hex_name.as_str(), hex), ("value", json!("ok"), "value_hex", json!("6f6b")));
        let [(_, binary), _] = json_bytes("value", &[0xff]);
        assert_eq!(binary, Value::Null);
    }
}
