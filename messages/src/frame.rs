//! Frames: encoding, one-shot decoding, and splitting a byte stream.
//!
//! [`FrameDecoder`] turns the bytes of a TCP connection into checked frames.
//! A bad header checksum means the stream's framing is lost, so the error says
//! to close the connection; a bad body checksum drops that frame only (R15)
//! and the decoder moves on to the next one.

use bytes::{Buf, Bytes, BytesMut};

use crate::command::Command;
use crate::error::{DecodeError, FrameError};
use crate::header::{HEADER_SIZE_BYTES, Header};
use crate::ids::ClusterId;
use crate::message::Message;

/// A frame ready to send: the encoded header and the body, kept apart so a
/// large batch body is written without copying it behind the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedFrame {
    /// The 80 header bytes.
    pub header: [u8; HEADER_SIZE_BYTES],
    /// The body.
    pub body: Bytes,
}

impl EncodedFrame {
    /// Fill in body size and both checksums, and encode the header.
    pub fn new(mut header: Header, body: Bytes) -> EncodedFrame {
        assert!(
            body.len() <= crate::limits::BODY_SIZE_MAX_BYTES,
            "R13: frame body of {} bytes exceeds the limit",
            body.len()
        );
        header.body_size = body.len() as u32;
        header.checksum_body = crc32c::crc32c(&body);
        let mut bytes = [0u8; HEADER_SIZE_BYTES];
        header.encode(&mut bytes);
        EncodedFrame { header: bytes, body }
    }

    /// Size on the wire.
    pub fn size_bytes(&self) -> usize {
        HEADER_SIZE_BYTES + self.body.len()
    }

    /// Header and body in one buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.size_bytes());
        crate::message::write_frame(self, &mut out);
        out.freeze()
    }
}

/// A received frame whose header and body checksums are good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The validated header.
    pub header: Header,
    /// The body, `header.body_size` bytes.
    pub body: Bytes,
}

impl Frame {
    /// Check one complete frame held in `bytes` (header, body, nothing else)
    /// against `cluster`.
    pub fn decode(bytes: Bytes, cluster: ClusterId) -> Result<Frame, FrameError> {
        let header_bytes: &[u8; HEADER_SIZE_BYTES] = bytes
            .get(..HEADER_SIZE_BYTES)
            .and_then(|slice| slice.try_into().ok())
            .ok_or(FrameError::Truncated { got_bytes: bytes.len(), needed_bytes: HEADER_SIZE_BYTES })?;
        let header = checked_header(header_bytes, cluster)?;
        let body = bytes.slice(HEADER_SIZE_BYTES..);
        header.check_body(&body)?;
        Ok(Frame { header, body })
    }

    /// Decode the message this frame carries.
    pub fn message(&self) -> Result<Message, crate::error::BodyError> {
        Message::decode(self)
    }
}

/// Decode a header and check that it is of `cluster`. A header whose only
/// fault is an unknown command is still checked for its cluster first, so a
/// foreign peer is always refused as such (and the connection closed).
fn checked_header(bytes: &[u8; HEADER_SIZE_BYTES], cluster: ClusterId) -> Result<Header, FrameError> {
    match Header::decode(bytes) {
        Ok(header) => {
            header.check_cluster(cluster)?;
            Ok(header)
        }
        Err(FrameError::UnknownCommand(command_byte)) => {
            let (sender_cluster, _) = Header::framing_of(bytes);
            if sender_cluster != cluster {
                return Err(FrameError::ClusterMismatch { got: sender_cluster.0, expected: cluster.0 });
            }
            Err(FrameError::UnknownCommand(command_byte))
        }
        Err(error) => Err(error),
    }
}

/// Decode a complete frame and its message in one call.
pub fn decode_message(bytes: Bytes, cluster: ClusterId) -> Result<(Header, Message), DecodeError> {
    let frame = Frame::decode(bytes, cluster)?;
    let message = frame.message()?;
    Ok((frame.header, message))
}

/// Splits a byte stream into frames.
///
/// Feed received bytes into a [`BytesMut`] and call [`FrameDecoder::decode`]
/// until it returns `Ok(None)` (needs more bytes). On an error, count it; if
/// [`FrameError::closes_connection`] is true, close the connection, else keep
/// decoding: the bad frame was already consumed (a frame with a bad body
/// checksum or an unknown command is reported once all of it has arrived, and
/// is then gone from the buffer).
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    cluster: ClusterId,
    /// A header already decoded whose body has not fully arrived.
    pending: Option<Header>,
    /// The largest body this connection accepts, whatever the command.
    body_max_bytes: usize,
}

/// The most a decoder reserves ahead of bytes that arrived (T5): a header
/// that declares a large body gets its buffer as the body comes, so a
/// connection that sends a header and stalls holds this much at most.
pub const DECODER_RESERVE_MAX_BYTES: usize = 64 * 1024;

impl FrameDecoder {
    /// A decoder that accepts frames of `cluster` only, each command up to
    /// its own body limit ([`crate::Command::body_size_max_bytes`]).
    pub fn new(cluster: ClusterId) -> FrameDecoder {
        FrameDecoder { cluster, pending: None, body_max_bytes: crate::limits::BODY_SIZE_MAX_BYTES }
    }

    /// A decoder that also refuses any body above `body_max_bytes` (a port
    /// that expects only small frames, or a connection not yet greeted).
    pub fn with_body_max(cluster: ClusterId, body_max_bytes: usize) -> FrameDecoder {
        FrameDecoder { cluster, pending: None, body_max_bytes }
    }

    /// Lower or raise this connection's body limit (e.g. once its peer is
    /// authenticated).
    pub fn set_body_max(&mut self, body_max_bytes: usize) {
        self.body_max_bytes = body_max_bytes;
    }

    /// Take the next complete frame from the front of `buffer`, if any.
    pub fn decode(&mut self, buffer: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let header = match self.pending {
            Some(header) => header,
            None => {
                let Some(header_bytes) = buffer.get(..HEADER_SIZE_BYTES) else {
                    return Ok(None);
                };
                let header_bytes: &[u8; HEADER_SIZE_BYTES] = header_bytes
                    .try_into()
                    .map_err(|_| FrameError::Truncated { got_bytes: buffer.len(), needed_bytes: HEADER_SIZE_BYTES })?;
                let header = match checked_header(header_bytes, self.cluster) {
                    Ok(header) => header,
                    Err(FrameError::UnknownCommand(command_byte)) => {
                        let (_, body_size) = Header::framing_of(header_bytes);
                        // A command this build does not know gets the small envelope.
                        let limit = Command::Handshake.body_size_max_bytes().min(self.body_max_bytes);
                        if body_size as usize > limit {
                            return Err(FrameError::BodyTooLarge {
                                size_bytes: u64::from(body_size),
                                max_bytes: limit,
                            });
                        }
                        return Self::skip_unknown_command(buffer, body_size, command_byte);
                    }
                    Err(error) => return Err(error),
                };
                let limit = header.command.body_size_max_bytes().min(self.body_max_bytes);
                if header.body_size as usize > limit {
                    return Err(FrameError::BodyTooLarge { size_bytes: u64::from(header.body_size), max_bytes: limit });
                }
                buffer.advance(HEADER_SIZE_BYTES);
                header
            }
        };
        let body_size = header.body_size as usize;
        if buffer.len() < body_size {
            self.pending = Some(header);
            buffer.reserve((body_size - buffer.len()).min(DECODER_RESERVE_MAX_BYTES));
            return Ok(None);
        }
        self.pending = None;
        let body = buffer.split_to(body_size).freeze();
        header.check_body(&body)?;
        Ok(Some(Frame { header, body }))
    }

    /// Drop a whole frame whose command byte this build does not know, so the
    /// stream goes on with the next frame as [`FrameError::closes_connection`]
    /// promises. Its header is sound (checksum, revision, body size), so its
    /// extent is known; the error is returned once all of it has arrived.
    fn skip_unknown_command(
        buffer: &mut BytesMut,
        body_size: u32,
        command_byte: u8,
    ) -> Result<Option<Frame>, FrameError> {
        let frame_size_bytes = HEADER_SIZE_BYTES + body_size as usize;
        if buffer.len() < frame_size_bytes {
            buffer.reserve((frame_size_bytes - buffer.len()).min(DECODER_RESERVE_MAX_BYTES));
            return Ok(None);
        }
        buffer.advance(frame_size_bytes);
        Err(FrameError::UnknownCommand(command_byte))
    }
}
