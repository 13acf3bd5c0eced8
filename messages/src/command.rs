//! The command byte of a frame header.
//!
//! Numbers are part of the wire format and never reused: a retired command
//! keeps its number. The table in docs/protocol.md lists sender, receiver and
//! purpose of each.

use std::fmt;

/// The kind of message a frame carries.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Command {
    /// First frame on a peer connection, both ways: revision, cluster, node, shards.
    Handshake = 1,
    /// A client operation (read or write) for one group.
    Request = 2,
    /// The result of a request.
    Reply = 3,
    /// Primary → backup: one log entry to make durable.
    Prepare = 4,
    /// Backup → primary: the entry is durable here.
    PrepareOk = 5,
    /// Any member → all: this member gave up on the current view.
    StartViewChange = 6,
    /// Member → primary of the new view: my log and log view.
    DoViewChange = 7,
    /// New primary → backups: the view's log; normal operation resumes.
    StartView = 8,
    /// Primary node → peer node: a batch of 40-byte Commit entries (R10).
    Commit = 9,
    /// Backup node → primary node: a batch of CommitReply entries (R26).
    CommitReply = 10,
    /// Lagging member → primary: resend the prepares in an op range.
    RequestPrepares = 11,
    /// Lagging member → primary: send the snapshot, from a byte offset.
    RequestStateTransfer = 12,
    /// Primary → lagging member: one chunk of a snapshot.
    StateChunk = 13,
    /// Non-primary → client: ask the primary this member knows.
    Redirect = 14,
    /// Node → metadata group: open a session.
    SessionOpen = 15,
    /// Node → metadata group: the session is alive.
    SessionKeepalive = 16,
    /// Metadata group → node: the session expired.
    SessionExpired = 17,
    /// Metadata group → node: the session is open.
    SessionOpened = 18,
    /// Second frame on a peer connection, after the Handshake: which of the
    /// sender's shards the connection carries (K2: each shard has its own
    /// connection to each peer).
    LinkShard = 19,
    /// Client → any node: where are these groups' primaries (C1)?
    RouteQuery = 20,
    /// Node → client: the primary each asked group has, as that node knows.
    Routes = 21,
    /// Node → peer node: many groups' StartViewChange, DoViewChange and
    /// StartView messages in one frame (Z4, see `view_change_batch`).
    ViewChangeBatch = 22,
    /// Shard → same-index shard of a peer: liveness of the groups quiesced
    /// between them, as a digest, and changes to that set (Z3, opt-in).
    PairHeartbeat = 23,
    /// The answer to a PairHeartbeat: digests matched or not, proposals taken.
    PairHeartbeatReply = 24,
    /// Member created without its data → other voters: your state? (H1)
    RecoveryQuery = 25,
    /// Voter → recovering member: my view, log view, op, commit (H1).
    RecoveryAnswer = 26,
}

impl Command {
    /// Every command, in number order.
    pub const ALL: [Command; 26] = [
        Command::Handshake,
        Command::Request,
        Command::Reply,
        Command::Prepare,
        Command::PrepareOk,
        Command::StartViewChange,
        Command::DoViewChange,
        Command::StartView,
        Command::Commit,
        Command::CommitReply,
        Command::RequestPrepares,
        Command::RequestStateTransfer,
        Command::StateChunk,
        Command::Redirect,
        Command::SessionOpen,
        Command::SessionKeepalive,
        Command::SessionExpired,
        Command::SessionOpened,
        Command::LinkShard,
        Command::RouteQuery,
        Command::Routes,
        Command::ViewChangeBatch,
        Command::PairHeartbeat,
        Command::PairHeartbeatReply,
        Command::RecoveryQuery,
        Command::RecoveryAnswer,
    ];

    /// T5: the largest body a frame of this command may declare, checked
    /// from the header before a byte of the body is buffered. Small
    /// messages get a 64 KiB envelope (far above any valid encoding);
    /// payload-carrying ones their payload limit plus that envelope; only
    /// batches and view-change logs may use the whole frame.
    pub fn body_size_max_bytes(self) -> usize {
        use crate::limits::{BODY_SIZE_MAX_BYTES, OPERATION_SIZE_MAX_BYTES, STATE_CHUNK_SIZE_MAX_BYTES};
        const ENVELOPE_BYTES: usize = 64 * 1024;
        match self {
            Command::Request | Command::Reply | Command::Prepare => OPERATION_SIZE_MAX_BYTES + ENVELOPE_BYTES,
            Command::StateChunk => STATE_CHUNK_SIZE_MAX_BYTES + ENVELOPE_BYTES,
            Command::DoViewChange
            | Command::StartView
            | Command::Commit
            | Command::CommitReply
            | Command::ViewChangeBatch => BODY_SIZE_MAX_BYTES,
            // Two lists of QUIET_CHANGES_MAX 24-byte entries, with room to spare.
            Command::PairHeartbeat | Command::PairHeartbeatReply => 4 * ENVELOPE_BYTES,
            Command::Handshake
            | Command::PrepareOk
            | Command::StartViewChange
            | Command::RequestPrepares
            | Command::RequestStateTransfer
            | Command::Redirect
            | Command::SessionOpen
            | Command::SessionKeepalive
            | Command::SessionExpired
            | Command::SessionOpened
            | Command::LinkShard
            | Command::RouteQuery
            | Command::Routes
            | Command::RecoveryQuery
            | Command::RecoveryAnswer => ENVELOPE_BYTES,
        }
    }

    /// The command for a wire byte, or `None` for an unknown one.
    pub fn from_u8(value: u8) -> Option<Command> {
        Command::ALL.iter().copied().find(|command| *command as u8 == value)
    }

    /// A short lowercase name, for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Command::Handshake => "handshake",
            Command::Request => "request",
            Command::Reply => "reply",
            Command::Prepare => "prepare",
            Command::PrepareOk => "prepare_ok",
            Command::StartViewChange => "start_view_change",
            Command::DoViewChange => "do_view_change",
            Command::StartView => "start_view",
            Command::Commit => "commit",
            Command::CommitReply => "commit_reply",
            Command::RequestPrepares => "request_prepares",
            Command::RequestStateTransfer => "request_state_transfer",
            Command::StateChunk => "state_chunk",
            Command::Redirect => "redirect",
            Command::SessionOpen => "session_open",
            Command::SessionKeepalive => "session_keepalive",
            Command::SessionExpired => "session_expired",
            Command::SessionOpened => "session_opened",
            Command::LinkShard => "link_shard",
            Command::RouteQuery => "route_query",
            Command::Routes => "routes",
            Command::ViewChangeBatch => "view_change_batch",
            Command::PairHeartbeat => "pair_heartbeat",
            Command::PairHeartbeatReply => "pair_heartbeat_reply",
            Command::RecoveryQuery => "recovery_query",
            Command::RecoveryAnswer => "recovery_answer",
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), *self as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_numbers_are_stable() {
        // These numbers are the wire format. Changing one breaks every peer.
        assert_eq!(Command::Commit as u8, 9);
        assert_eq!(Command::CommitReply as u8, 10);
        for (index, command) in Command::ALL.iter().enumerate() {
            assert_eq!(*command as u8 as usize, index + 1);
            assert_eq!(Command::from_u8(*command as u8), Some(*command));
        }
        assert_eq!(Command::from_u8(0), None);
        assert_eq!(Command::from_u8(22), Some(Command::ViewChangeBatch));
        assert_eq!(Command::from_u8(24), Some(Command::PairHeartbeatReply));
        assert_eq!(Command::from_u8(25), Some(Command::RecoveryQuery));
        assert_eq!(Command::from_u8(26), Some(Command::RecoveryAnswer));
        assert_eq!(Command::from_u8(27), None);
        assert_eq!(Command::from_u8(255), None);
    }
}
