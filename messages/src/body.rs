//! Variable-size message bodies and their validation.
//!
//! Each message type has one `validate` function that returns the reason a
//! decoded value is invalid; code past the decoder trusts validated values.
//! Field order is the wire order (bincode encodes fields in declaration
//! order): append new fields only with a revision bump.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::error::{FrameError, Invalid, invalid};
use crate::header::WIRE_REVISION;
use crate::ids::{
    ClientId, ClusterId, Epoch, GroupId, Incarnation, MemberIndex, NodeId, Op, RequestNumber, SessionId, View,
};
use crate::limits::{
    OPERATION_SIZE_MAX_BYTES, REPAIR_OPS_MAX, REPLICAS_MAX, SHARD_COUNT_MAX, STATE_CHUNK_SIZE_MAX_BYTES,
    VIEW_CHANGE_LOG_ENTRIES_MAX,
};

fn check_member(command: Command, replica: MemberIndex) -> Result<(), Invalid> {
    if (replica.0 as usize) < REPLICAS_MAX { Ok(()) } else { Err(invalid(command, "replica index out of range")) }
}

/// First frame on every peer connection, in both directions (R18).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handshake {
    /// The sender's replica wire revision.
    pub revision: u16,
    /// The sender's cluster.
    pub cluster: ClusterId,
    /// The sender's node id.
    pub node: NodeId,
    /// How many shards the sender runs.
    pub shard_count: u16,
}

impl Handshake {
    /// Validate the value itself.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.shard_count == 0 || self.shard_count > SHARD_COUNT_MAX {
            return Err(invalid(Command::Handshake, "shard_count must be in 1..=1024"));
        }
        Ok(())
    }

    /// R18: accept the peer only on our revision and our cluster; the error
    /// says which check failed and with which values.
    pub fn check_peer(&self, cluster: ClusterId) -> Result<(), FrameError> {
        if self.revision != WIRE_REVISION {
            return Err(FrameError::Revision { got: self.revision, expected: WIRE_REVISION });
        }
        if self.cluster != cluster {
            return Err(FrameError::ClusterMismatch { got: self.cluster.0, expected: cluster.0 });
        }
        Ok(())
    }
}

/// Read or write.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestKind {
    /// Goes through the log; exactly once per (client, request number).
    Write,
    /// Served by the primary from its state while its quorum window holds (V7).
    Read,
    /// K5: a write whose operation is many ops
    /// ([`crate::op_batch`]), to a group whose state machine takes op
    /// batches; otherwise like `Write`. A group refuses a batch its state
    /// machine does not take, and a plain write to one that takes batches
    /// (`Rejected`), so neither is applied as the other.
    WriteBatch,
}

impl RequestKind {
    /// Every kind.
    pub const ALL: [RequestKind; 3] = [RequestKind::Write, RequestKind::Read, RequestKind::WriteBatch];

    /// True for the kinds that go through the log.
    pub fn is_write(self) -> bool {
        matches!(self, RequestKind::Write | RequestKind::WriteBatch)
    }

    /// A short snake_case name (the `kind` label of `cohort_client_requests_total`).
    pub fn name(self) -> &'static str {
        match self {
            RequestKind::Write => "write",
            RequestKind::Read => "read",
            RequestKind::WriteBatch => "write_batch",
        }
    }
}

/// A client operation for one group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The client.
    pub client: ClientId,
    /// The client's request number; retries reuse it.
    pub request: RequestNumber,
    /// The target group.
    pub group: GroupId,
    /// Read or write.
    pub kind: RequestKind,
    /// The state machine's operation, opaque to cohort.
    #[serde(with = "crate::serde_fields::payload")]
    pub operation: Bytes,
}

impl Request {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.operation.len() > OPERATION_SIZE_MAX_BYTES {
            return Err(invalid(Command::Request, "operation exceeds OPERATION_SIZE_MAX_BYTES"));
        }
        if self.client == ClientId::SEAL {
            return Err(invalid(Command::Request, "client 0 is reserved for seal entries"));
        }
        Ok(())
    }
}

/// Why a request failed, as a stable code a client can act on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplyError {
    /// The primary is outside its quorum window (R24) and may be stale: retry later or elsewhere.
    QuorumWindowExpired,
    /// The pipeline is full: back off and retry.
    Busy,
    /// The group is changing view: retry after a short wait.
    ViewChange,
    /// The group does not exist on this node.
    UnknownGroup,
    /// The request number is older than the client's latest: it was superseded.
    Superseded,
    /// The state machine rejected the operation.
    Rejected,
    /// T3: the request is not allowed where it was sent: a client may not
    /// reach a reserved group (the metadata group) through the client port
    /// or `NodeHandle`. Not retryable.
    Forbidden,
    /// O5: the cluster's metadata, as this node holds it, knows no such
    /// group (never created, or deleted). Another node's copy may be newer
    /// for a moment after a create, so a client retries elsewhere, and
    /// gives up once every node it reached said so.
    NoSuchGroup,
}

impl ReplyError {
    /// Every code.
    pub const ALL: [ReplyError; 8] = [
        ReplyError::QuorumWindowExpired,
        ReplyError::Busy,
        ReplyError::ViewChange,
        ReplyError::UnknownGroup,
        ReplyError::Superseded,
        ReplyError::Rejected,
        ReplyError::Forbidden,
        ReplyError::NoSuchGroup,
    ];

    /// A short snake_case name (the `kind` label of `cohort_client_errors_total`).
    pub fn name(self) -> &'static str {
        match self {
            ReplyError::QuorumWindowExpired => "quorum_window_expired",
            ReplyError::Busy => "busy",
            ReplyError::ViewChange => "view_change",
            ReplyError::UnknownGroup => "unknown_group",
            ReplyError::Superseded => "superseded",
            ReplyError::Rejected => "rejected",
            ReplyError::Forbidden => "forbidden",
            ReplyError::NoSuchGroup => "no_such_group",
        }
    }
}

/// The outcome of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Applied (or read); the state machine's result.
    Ok(#[serde(with = "crate::serde_fields::payload")] Bytes),
    /// Not applied.
    Error {
        /// What happened.
        code: ReplyError,
        /// Human-readable context.
        #[serde(with = "crate::serde_fields::text")]
        detail: String,
    },
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The client.
    pub client: ClientId,
    /// The request answered.
    pub request: RequestNumber,
    /// The group.
    pub group: GroupId,
    /// The view it was answered in.
    pub view: View,
    /// The op it was committed at (0 for reads and errors).
    pub op: Op,
    /// Result or error.
    pub outcome: Outcome,
}

impl Reply {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        match &self.outcome {
            Outcome::Ok(result) if result.len() > OPERATION_SIZE_MAX_BYTES => {
                Err(invalid(Command::Reply, "result exceeds OPERATION_SIZE_MAX_BYTES"))
            }
            Outcome::Error { detail, .. } if detail.len() > 4096 => {
                Err(invalid(Command::Reply, "error detail exceeds 4096 bytes"))
            }
            _ => Ok(()),
        }
    }
}

/// One entry of a group's log, as replicated and as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Its op number.
    pub op: Op,
    /// The view in which a primary assigned the op.
    pub view: View,
    /// The client that asked for it.
    pub client: ClientId,
    /// The client's request number.
    pub request: RequestNumber,
    /// The operation, opaque to cohort.
    #[serde(with = "crate::serde_fields::payload")]
    pub operation: Bytes,
}

impl LogEntry {
    fn validate(&self, command: Command) -> Result<(), Invalid> {
        if self.op.0 == 0 {
            return Err(invalid(command, "log entry op 0 (op 0 is the empty log)"));
        }
        if self.operation.len() > OPERATION_SIZE_MAX_BYTES {
            return Err(invalid(command, "log entry operation exceeds OPERATION_SIZE_MAX_BYTES"));
        }
        if self.client == ClientId::SEAL && crate::seal::Seal::decode(&self.operation).is_err() {
            return Err(invalid(command, "seal entry whose operation is not a valid seal"));
        }
        Ok(())
    }
}

/// Check a log suffix: bounded, ops contiguous and ascending, ending at `op`,
/// no entry from a view after `view_max`.
fn validate_log(command: Command, log: &[LogEntry], op: Op, view_max: View) -> Result<(), Invalid> {
    if log.len() > VIEW_CHANGE_LOG_ENTRIES_MAX {
        return Err(invalid(command, "log exceeds VIEW_CHANGE_LOG_ENTRIES_MAX entries"));
    }
    for pair in log.windows(2) {
        if pair[1].op.0 != pair[0].op.0.wrapping_add(1) {
            return Err(invalid(command, "log ops are not contiguous"));
        }
        if pair[1].view < pair[0].view {
            return Err(invalid(command, "log views go backwards"));
        }
    }
    for entry in log {
        entry.validate(command)?;
        if entry.view > view_max {
            return Err(invalid(command, "log entry from a later view"));
        }
    }
    if let Some(last) = log.last()
        && last.op != op
    {
        return Err(invalid(command, "log does not end at op"));
    }
    Ok(())
}

/// Primary → backup: make this entry durable, then answer PrepareOk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepare {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The primary's current view.
    pub view: View,
    /// The primary's commit point.
    pub commit: Op,
    /// The primary's member index.
    pub replica: MemberIndex,
    /// The entry.
    pub entry: LogEntry,
}

impl Prepare {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::Prepare, self.replica)?;
        self.entry.validate(Command::Prepare)?;
        if self.entry.view > self.view {
            return Err(invalid(Command::Prepare, "entry view after the message view"));
        }
        Ok(())
    }
}

/// Backup → primary: op is durable here.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrepareOk {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The backup's view.
    pub view: View,
    /// The highest op durable at the backup with its log consistent with the view.
    pub op: Op,
    /// The backup's member index.
    pub replica: MemberIndex,
}

impl PrepareOk {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::PrepareOk, self.replica)?;
        if self.op.0 == 0 {
            return Err(invalid(Command::PrepareOk, "op 0 cannot be acknowledged"));
        }
        Ok(())
    }
}

/// Any member → all members: I gave up on the view before `view`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartViewChange {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The proposed new view.
    pub view: View,
    /// The sender's member index.
    pub replica: MemberIndex,
}

impl StartViewChange {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::StartViewChange, self.replica)?;
        if self.view.0 == 0 {
            return Err(invalid(Command::StartViewChange, "view 0 cannot be started by a view change"));
        }
        Ok(())
    }
}

/// Member → primary of `view`: my log, for choosing the new view's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoViewChange {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The new view.
    pub view: View,
    /// The last view in which the sender's status was normal.
    pub log_view: View,
    /// The sender's highest op.
    pub op: Op,
    /// The sender's commit point.
    pub commit: Op,
    /// The sender's member index.
    pub replica: MemberIndex,
    /// The sender's log suffix, ending at `op`.
    pub log: Vec<LogEntry>,
}

impl DoViewChange {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::DoViewChange, self.replica)?;
        if self.log_view >= self.view {
            return Err(invalid(Command::DoViewChange, "log_view must be before view"));
        }
        if self.commit > self.op {
            return Err(invalid(Command::DoViewChange, "commit after op"));
        }
        validate_log(Command::DoViewChange, &self.log, self.op, self.log_view)
    }
}

/// New primary → backups: the log of the new view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartView {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The new view.
    pub view: View,
    /// The view's highest op.
    pub op: Op,
    /// The new primary's commit point.
    pub commit: Op,
    /// The new primary's member index.
    pub replica: MemberIndex,
    /// The log suffix, ending at `op`.
    pub log: Vec<LogEntry>,
}

impl StartView {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::StartView, self.replica)?;
        if self.commit > self.op {
            return Err(invalid(Command::StartView, "commit after op"));
        }
        validate_log(Command::StartView, &self.log, self.op, self.view)
    }
}

/// Lagging member → primary: resend prepares `op_min..=op_max`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestPrepares {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The requester's view.
    pub view: View,
    /// The requester's member index.
    pub replica: MemberIndex,
    /// First op wanted.
    pub op_min: Op,
    /// Last op wanted.
    pub op_max: Op,
}

impl RequestPrepares {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::RequestPrepares, self.replica)?;
        if self.op_min.0 == 0 || self.op_min > self.op_max {
            return Err(invalid(Command::RequestPrepares, "op range is empty or starts at 0"));
        }
        if self.op_max.0 - self.op_min.0 >= REPAIR_OPS_MAX {
            return Err(invalid(Command::RequestPrepares, "op range exceeds REPAIR_OPS_MAX"));
        }
        Ok(())
    }
}

/// Lagging member → primary: send the snapshot from `offset_bytes`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestStateTransfer {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The requester's view.
    pub view: View,
    /// The requester's member index.
    pub replica: MemberIndex,
    /// The op of the snapshot being fetched (0: the newest).
    pub snapshot_op: Op,
    /// Resume point within the snapshot.
    pub offset_bytes: u64,
}

impl RequestStateTransfer {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::RequestStateTransfer, self.replica)
    }
}

/// H1: a member created without its data → every other voter: what is your
/// state? Its answers decide whether the group is new (every voter holds
/// nothing) or whose log it must take before it may vote or acknowledge.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryQuery {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The asking member's index.
    pub replica: MemberIndex,
    /// Names this round of questions: an answer must carry it back, so an
    /// answer to an earlier round (of an earlier process, say) is not taken
    /// for the state of now.
    pub nonce: u64,
}

impl RecoveryQuery {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::RecoveryQuery, self.replica)
    }
}

/// H1: a voter → a recovering member: its state when it answered.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryAnswer {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The answering member's index.
    pub replica: MemberIndex,
    /// The nonce of the query answered.
    pub nonce: u64,
    /// The answering member's view.
    pub view: View,
    /// Its log view.
    pub log_view: View,
    /// The last op of its log.
    pub op: Op,
    /// Its commit point.
    pub commit: Op,
    /// True if it is recovering itself: it knows nothing of the group.
    pub recovering: bool,
    /// True if it is the primary of `view`, in normal status.
    pub primary: bool,
}

impl RecoveryAnswer {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::RecoveryAnswer, self.replica)?;
        if self.log_view > self.view {
            return Err(invalid(Command::RecoveryAnswer, "log view after view"));
        }
        if self.recovering && self.primary {
            return Err(invalid(Command::RecoveryAnswer, "a recovering member is no primary"));
        }
        Ok(())
    }
}

/// Primary → lagging member: one chunk of the snapshot at `snapshot_op`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChunk {
    /// The group.
    pub group: GroupId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The sender's view.
    pub view: View,
    /// The sender's member index.
    pub replica: MemberIndex,
    /// The op the snapshot covers (all ops up to and including it).
    pub snapshot_op: Op,
    /// The view of the entry at `snapshot_op`.
    pub snapshot_view: View,
    /// Where this chunk starts.
    pub offset_bytes: u64,
    /// The snapshot's whole size.
    pub total_size_bytes: u64,
    /// The chunk.
    #[serde(with = "crate::serde_fields::payload")]
    pub chunk: Bytes,
}

impl StateChunk {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_member(Command::StateChunk, self.replica)?;
        if self.chunk.len() > STATE_CHUNK_SIZE_MAX_BYTES {
            return Err(invalid(Command::StateChunk, "chunk exceeds STATE_CHUNK_SIZE_MAX_BYTES"));
        }
        let end = self.offset_bytes.checked_add(self.chunk.len() as u64);
        if end.is_none_or(|end| end > self.total_size_bytes) {
            return Err(invalid(Command::StateChunk, "chunk ends past total_size_bytes"));
        }
        Ok(())
    }

    /// True if this chunk completes the snapshot. False (not a panic) for a
    /// chunk whose end overflows, which [`StateChunk::validate`] refuses.
    pub fn is_last(&self) -> bool {
        self.offset_bytes.checked_add(self.chunk.len() as u64) == Some(self.total_size_bytes)
    }
}

/// Non-primary → client: this member is not the primary (V5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redirect {
    /// The group.
    pub group: GroupId,
    /// The client.
    pub client: ClientId,
    /// The request being redirected.
    pub request: RequestNumber,
    /// The view this member knows.
    pub view: View,
    /// The primary of that view, if this member knows one.
    pub primary: Option<NodeId>,
}

impl Redirect {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        Ok(())
    }
}

/// Node → metadata group: open a session.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOpen {
    /// The node.
    pub node: NodeId,
    /// Which attempt this is since the last session expired (S3).
    pub attempt: u32,
}

impl SessionOpen {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        Ok(())
    }
}

/// Metadata group → node: the session is open.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOpened {
    /// The node.
    pub node: NodeId,
    /// The new session.
    pub session: SessionId,
    /// The metadata epoch at which it opened.
    pub epoch: Epoch,
}

impl SessionOpened {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.session.0 == 0 {
            return Err(invalid(Command::SessionOpened, "session 0 is reserved"));
        }
        Ok(())
    }
}

/// After the Handshake on a peer connection: the sender's shard this
/// connection carries. The receiver hands the connection to its own shard
/// of that index (all nodes of a cluster run the same shard count, so the
/// same-index shard hosts the same groups).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkShard {
    /// The sender's shard index.
    pub shard: u16,
}

impl LinkShard {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.shard >= SHARD_COUNT_MAX {
            return Err(invalid(Command::LinkShard, "shard index must be below 1024"));
        }
        Ok(())
    }
}

/// Node → metadata group: keep the session alive (S1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionKeepalive {
    /// The node.
    pub node: NodeId,
    /// Its session.
    pub session: SessionId,
}

impl SessionKeepalive {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.session.0 == 0 {
            return Err(invalid(Command::SessionKeepalive, "session 0 is reserved"));
        }
        Ok(())
    }
}

/// Metadata group → node: the session expired (S1, S3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionExpired {
    /// The node.
    pub node: NodeId,
    /// The session that expired.
    pub session: SessionId,
    /// The metadata epoch of the expiry event.
    pub epoch: Epoch,
}

impl SessionExpired {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        Ok(())
    }
}

/// The most groups one [`RouteQuery`] may ask about (so a [`Routes`]
/// answer stays a small frame).
pub const ROUTE_QUERY_GROUPS_MAX: usize = 1024;

/// Client → any node: where are these groups' primaries (C1)? Any node
/// answers from its copy of the metadata; a client caches the answer and
/// refreshes it when a Redirect says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteQuery {
    /// The groups, 1 to [`ROUTE_QUERY_GROUPS_MAX`].
    pub groups: Vec<GroupId>,
}

impl RouteQuery {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.groups.is_empty() || self.groups.len() > ROUTE_QUERY_GROUPS_MAX {
            return Err(invalid(Command::RouteQuery, "1 to 1024 groups per route query"));
        }
        Ok(())
    }
}

/// Where one group's primary is, as the answering node knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The group.
    pub group: GroupId,
    /// The view of the primary named (the newest the node knows).
    pub view: View,
    /// The primary, if the node knows one; `None` also for a group it does
    /// not know.
    pub primary: Option<NodeId>,
}

/// Node → client: the answer to a [`RouteQuery`], one route per group asked,
/// in the order asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routes {
    /// The routes.
    pub routes: Vec<Route>,
}

impl Routes {
    /// Validate the value.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.routes.len() > ROUTE_QUERY_GROUPS_MAX {
            return Err(invalid(Command::Routes, "at most 1024 routes per answer"));
        }
        if self.routes.iter().any(|route| route.primary.is_some_and(|node| node.0 == 0)) {
            return Err(invalid(Command::Routes, "node 0 is not a primary"));
        }
        Ok(())
    }
}
