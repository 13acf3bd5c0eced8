//! Node-to-node transport over TCP.
//!
//! Each node dials every peer and sends on that connection only; frames from a
//! peer arrive on the connection the peer dialed. So the [`PeerLink`] actor of
//! a peer owns the outbound connection (handshake, reconnect with backoff),
//! and the [`listener`] owns inbound connections (handshake check, frame
//! reading, routing to shards).

pub mod client_port;
pub mod listener;
mod peer_link;

pub use peer_link::{PeerLink, SendFrames};
