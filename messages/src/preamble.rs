//! The connection preamble: 9 plaintext bytes a dialing node sends before
//! anything else on a peer connection (before TLS, when the cluster uses it).
//!
//! Why a preamble outside the frames: each shard drives its own peer
//! connections on its own thread (K2), so the listener must hand a new
//! connection to the right shard's thread *before* the TLS handshake (the
//! TLS session state cannot move between threads once it exists). The
//! preamble names that shard and whether TLS follows; it decides nothing
//! else. Every trust decision happens after the handshake, on the shard's
//! thread, from the certificate and the authenticated Handshake and
//! LinkShard frames (which must repeat the shard).
//!
//! Layout (little-endian): `b"COHL"`, revision `u16`, shard `u16`, mode `u8`
//! (0 plaintext, 1 TLS).

use crate::header::WIRE_REVISION;

/// Bytes of a preamble.
pub const PREAMBLE_SIZE_BYTES: usize = 9;

/// The preamble's first four bytes.
pub const PREAMBLE_MAGIC: [u8; 4] = *b"COHL";

/// What follows the preamble.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Frames in the clear (`[tls] insecure = true` on both nodes).
    Plaintext,
    /// A TLS handshake, then frames inside it.
    Tls,
}

/// The preamble of a peer connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Preamble {
    /// The dialer's wire revision (R18: must equal ours).
    pub revision: u16,
    /// The shard, on both nodes, whose link this connection is.
    pub shard: u16,
    /// Whether TLS follows.
    pub mode: LinkMode,
}

/// Why a preamble was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreambleError {
    /// The first bytes are not [`PREAMBLE_MAGIC`]: not a cohort peer.
    #[error("not a cohort peer connection (bad preamble magic)")]
    Magic,
    /// Another wire revision (R18).
    #[error("wire revision {got}, this node speaks {WIRE_REVISION}")]
    Revision {
        /// The dialer's revision.
        got: u16,
    },
    /// The mode byte is neither 0 nor 1.
    #[error("unknown connection mode {0}")]
    Mode(u8),
}

impl Preamble {
    /// A preamble of this node's revision.
    pub fn new(shard: u16, mode: LinkMode) -> Preamble {
        Preamble { revision: WIRE_REVISION, shard, mode }
    }

    /// The bytes on the wire.
    pub fn encode(&self) -> [u8; PREAMBLE_SIZE_BYTES] {
        let mut bytes = [0u8; PREAMBLE_SIZE_BYTES];
        bytes[..4].copy_from_slice(&PREAMBLE_MAGIC);
        bytes[4..6].copy_from_slice(&self.revision.to_le_bytes());
        bytes[6..8].copy_from_slice(&self.shard.to_le_bytes());
        bytes[8] = match self.mode {
            LinkMode::Plaintext => 0,
            LinkMode::Tls => 1,
        };
        bytes
    }

    /// Check and decode a preamble. Any 9 bytes give a value or an error.
    pub fn decode(bytes: &[u8; PREAMBLE_SIZE_BYTES]) -> Result<Preamble, PreambleError> {
        if bytes[..4] != PREAMBLE_MAGIC {
            return Err(PreambleError::Magic);
        }
        let revision = u16::from_le_bytes([bytes[4], bytes[5]]);
        if revision != WIRE_REVISION {
            return Err(PreambleError::Revision { got: revision });
        }
        let shard = u16::from_le_bytes([bytes[6], bytes[7]]);
        let mode = match bytes[8] {
            0 => LinkMode::Plaintext,
            1 => LinkMode::Tls,
            other => return Err(PreambleError::Mode(other)),
        };
        Ok(Preamble { revision, shard, mode })
    }
}
