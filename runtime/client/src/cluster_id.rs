//! The cluster id as people and files write it: 1 to 32 hex digits. One
//! parser and one format for every place that reads or writes one (the
//! `cluster-id` file `cohort certs init` writes, `[node] cluster_id`,
//! `--cluster-id`, [`read_cluster_id`]), so that an id one of them accepts
//! is never refused by another.
//!
//! Why a client crate holds it: every program that talks to a cluster
//! needs the id (a node closes, without a word, a connection whose
//! Handshake names another cluster, R18), and this crate is the lowest one
//! that both the node's crates and a client-only program depend on.

use std::path::Path;

use cohort_messages::ClusterId;

use crate::error::ClientError;

/// The file `cohort certs init` writes the cluster id to, beside `ca.pem`.
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// The most hex digits a cluster id has (128 bits).
pub const CLUSTER_ID_DIGITS_MAX: usize = 32;

/// Why a text is not a cluster id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterIdError {
    /// Nothing but whitespace (or `0x` alone).
    #[error("empty: a cluster id is 1 to 32 hex digits")]
    Empty,
    /// More digits than 128 bits hold.
    #[error("{digits} digits: a cluster id is 1 to 32 hex digits")]
    TooLong {
        /// How many there were.
        digits: usize,
    },
    /// A character that is not a hex digit (signs and inner spaces included).
    #[error("{found:?} is not a hex digit: a cluster id is 1 to 32 hex digits, e.g. 10ca1c1a57e2")]
    NotHex {
        /// The first such character.
        found: char,
    },
}

/// The cluster id as files and configs hold it: 32 lowercase hex digits.
///
/// ```
/// use cohort_client::ClusterId;
/// assert_eq!(cohort_client::format_cluster_id(ClusterId(255)), "000000000000000000000000000000ff");
/// ```
pub fn format_cluster_id(cluster: ClusterId) -> String {
    format!("{:0width$x}", cluster.0, width = CLUSTER_ID_DIGITS_MAX)
}

/// Parse a cluster id: 1 to 32 hex digits, either case, with at most one
/// `0x` in front; whitespace around it (a file's newline) is ignored. A
/// sign, inner whitespace or a second `0x` is refused, and the error says
/// why.
///
/// ```
/// use cohort_client::ClusterId;
/// assert_eq!(cohort_client::parse_cluster_id("00ff\n"), Ok(ClusterId(255)));
/// assert!(cohort_client::parse_cluster_id("not hex").is_err());
/// ```
pub fn parse_cluster_id(text: &str) -> Result<ClusterId, ClusterIdError> {
    let trimmed = text.trim();
    let digits = trimmed.strip_prefix("0x").unwrap_or(trimmed);
    if digits.is_empty() {
        return Err(ClusterIdError::Empty);
    }
    if let Some(found) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(ClusterIdError::NotHex { found });
    }
    if digits.len() > CLUSTER_ID_DIGITS_MAX {
        return Err(ClusterIdError::TooLong { digits: digits.len() });
    }
    let value = u128::from_str_radix(digits, 16);
    debug_assert!(value.is_ok(), "1 to 32 hex digits always fit in 128 bits");
    value.map(ClusterId).map_err(|_| ClusterIdError::TooLong { digits: digits.len() })
}

/// Read the cluster id from a `cluster-id` file ([`CLUSTER_ID_FILE`]).
pub fn read_cluster_id(path: impl AsRef<Path>) -> Result<ClusterId, ClientError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|error| ClientError::config(path.display().to_string(), error.to_string()))?;
    parse_cluster_id(&text).map_err(|error| ClientError::config(path.display().to_string(), error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_accepted_forms_of_a_cluster_id() {
        let cases = [
            ("10ca1c1a57e2", 0x10CA_1C1A_57E2),
            ("10CA1C1A57E2", 0x10CA_1C1A_57E2),
            ("0x10ca1c1a57e2", 0x10CA_1C1A_57E2),
            ("  00ff\n", 0xff),
            ("0", 0),
            ("ffffffffffffffffffffffffffffffff", u128::MAX),
            ("0xffffffffffffffffffffffffffffffff", u128::MAX),
        ];
        for (text, id) in cases {
            assert_eq!(parse_cluster_id(text), Ok(ClusterId(id)), "{text:?}");
        }
    }

    #[test]
    fn c1_refused_forms_of_a_cluster_id_say_why() {
        let cases = [
            ("", ClusterIdError::Empty),
            ("  \n", ClusterIdError::Empty),
            ("0x", ClusterIdError::Empty),
            ("0x0x12", ClusterIdError::NotHex { found: 'x' }),
            ("+ff", ClusterIdError::NotHex { found: '+' }),
            ("-1", ClusterIdError::NotHex { found: '-' }),
            ("12 34", ClusterIdError::NotHex { found: ' ' }),
            ("1_000", ClusterIdError::NotHex { found: '_' }),
            ("seven", ClusterIdError::NotHex { found: 's' }),
            ("0X12", ClusterIdError::NotHex { found: 'X' }),
            ("1ffffffffffffffffffffffffffffffff", ClusterIdError::TooLong { digits: 33 }),
        ];
        for (text, error) in cases {
            assert_eq!(parse_cluster_id(text), Err(error), "{text:?}");
        }
    }

    #[test]
    fn c1_the_format_parses_back() {
        for id in [0, 1, 0x10CA_1C1A_57E2, u128::MAX] {
            let text = format_cluster_id(ClusterId(id));
            assert_eq!(text.len(), CLUSTER_ID_DIGITS_MAX);
            assert_eq!(parse_cluster_id(&text), Ok(ClusterId(id)));
        }
    }

    #[test]
    fn c1_a_cluster_id_file_is_read_as_cohort_certs_writes_it() {
        let dir = std::env::temp_dir().join(format!("cohort-client-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(CLUSTER_ID_FILE);
        std::fs::write(&path, format!("{}\n", format_cluster_id(ClusterId(0x10CA_1C1A)))).expect("write");
        assert_eq!(read_cluster_id(&path), Ok(ClusterId(0x10CA_1C1A)));
        std::fs::write(&path, "zz\n").expect("write");
        let error = read_cluster_id(&path).expect_err("not an id");
        assert!(error.to_string().contains("not a hex digit"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
