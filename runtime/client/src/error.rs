//! Why a call failed, and what the caller can do about it.
//!
//! The rule that matters most is in each variant's doc: whether a write the
//! call carried may still commit. Only [`ClientError::Timeout`] and
//! [`ClientError::Busy`] leave it unknown; both carry the request, so the
//! caller can resubmit the very same one with
//! [`crate::ClusterClient::retry`] (it applies at most once) or read to find
//! out.

use std::time::Duration;

use cohort_messages::{GroupId, ReplyError, Request};

/// Why a [`crate::ClusterClient`] call failed.
///
/// ```
/// use cohort_client::{ClientError, GroupId};
/// let error = ClientError::NoRoute { group: GroupId(7), waited: std::time::Duration::from_secs(1), asked: 3 };
/// assert!(error.to_string().contains("check the group id"));
/// assert!(!error.may_have_applied());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No definite answer in time. For a write the outcome is unknown.
    #[error(
        "{group}: no answer within {waited:?} after {attempts} attempts (last: {last}); a write may still commit: pass `request` to `ClusterClient::retry` to resubmit it exactly once, or read to find out"
    )]
    Timeout {
        /// The group.
        group: GroupId,
        /// How long the call tried.
        waited: Duration,
        /// Attempts made.
        attempts: u32,
        /// What the last attempt got.
        last: String,
        /// For a write: the request, to resubmit with `ClusterClient::retry`.
        /// `None` for a read, and for a write whose client's registration
        /// got no definite answer: the write itself was not sent.
        request: Option<Box<Request>>,
    },
    /// Until the timeout no node named a primary for the group, and none
    /// served it: the group does not exist, or has no primary now (every
    /// member down). Nothing was applied.
    #[error(
        "{group}: no node knows a primary for it after {waited:?} ({asked} route queries): check the group id; if a failover is under way, retry later"
    )]
    NoRoute {
        /// The group.
        group: GroupId,
        /// How long the call tried.
        waited: Duration,
        /// Route queries answered.
        asked: u32,
    },
    /// O5: every node reached (a majority of the list) said the cluster's
    /// metadata knows no such group: never created, or deleted. Nothing was
    /// applied. Answered at once, not at the timeout.
    #[error("{group}: no such group: {reason}")]
    NoSuchGroup {
        /// The group.
        group: GroupId,
        /// What the last node said, with the metadata epoch it judged by.
        reason: String,
    },
    /// The group refused the request for good; the same request would be
    /// refused again. Nothing was applied.
    #[error("{group}: refused ({code:?}): {reason}")]
    Refused {
        /// `Superseded` (a newer request of this client id was applied, or
        /// the id was evicted from the client table: the client moves to a
        /// fresh id by itself) or `Rejected` (the state machine refused it).
        code: ReplyError,
        /// The group.
        group: GroupId,
        /// Why, from the group.
        reason: String,
    },
    /// T3: the request may not go where it was sent (the metadata group, or
    /// an operation the group's state machine does not admit from clients).
    /// Nothing was applied.
    #[error("{group}: forbidden: {reason}")]
    Forbidden {
        /// The group.
        group: GroupId,
        /// Why.
        reason: String,
    },
    /// Until the timeout the cluster answered `Busy` (backpressure: a full
    /// pipeline or mailbox, or no answer inside the node's own deadline).
    /// Slow down. A write may still commit: `request` resubmits it.
    #[error(
        "{group}: the cluster stayed busy for {waited:?} (last: {reason}); slow down; a write may still commit: pass `request` to `ClusterClient::retry`"
    )]
    Busy {
        /// The group.
        group: GroupId,
        /// How long the call tried.
        waited: Duration,
        /// The last answer's detail.
        reason: String,
        /// For a write: the request, to resubmit with `ClusterClient::retry`.
        /// `None` for a read, and for a write whose client's registration
        /// got no definite answer: the write itself was not sent.
        request: Option<Box<Request>>,
    },
    /// Until the timeout no node of the list could be reached (connect,
    /// read or write failed). Nothing reached a node, so nothing was applied.
    #[error(
        "{address}: {detail} ({kind:?}); no node answered in time: check the addresses (each node's client port, `[node] client`) and that the nodes run"
    )]
    Io {
        /// The address of the last failure.
        address: String,
        /// Its kind.
        kind: std::io::ErrorKind,
        /// What failed.
        detail: String,
    },
    /// TLS failed for a reason retrying cannot fix: the node's certificate
    /// is not of this CA, or the node refused ours.
    #[error(
        "{address}: TLS: {detail}: give the cluster's CA and a client certificate it signed (`cohort certs client`), or --insecure for a plaintext cluster"
    )]
    Tls {
        /// The node's address.
        address: String,
        /// What rustls said.
        detail: String,
    },
    /// A node answered that it is of another cluster or speaks another
    /// wire revision (R18): retrying will not help, so the call fails at
    /// once. Nothing reached a node's state machine.
    #[error(
        "{address}: {detail}: give the nodes' cluster id (their `[node] cluster_id`, or the `cluster-id` file `cohort certs init` wrote), and a client of the nodes' release"
    )]
    Mismatch {
        /// The node's address.
        address: String,
        /// Which side has which cluster id or revision.
        detail: String,
    },
    /// The client could not be set up: files, addresses, limits.
    #[error("{what}: {reason}")]
    Config {
        /// The setting or file.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The operation is larger than a request may carry.
    #[error("operation of {size} bytes exceeds {max} bytes: split it into smaller operations")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit (`OPERATION_SIZE_MAX_BYTES`).
        max: usize,
    },
    /// K5: the ops make no op batch (none, more than
    /// `op_batch::OP_BATCH_OPS_MAX`, or together more than a request
    /// carries: nothing was sent), or a batch's answer was not one result
    /// per op (the batch committed, but its group's state machine answered
    /// something else).
    #[error("{group}: {detail}")]
    OpBatch {
        /// The group.
        group: GroupId,
        /// What is wrong, and what to do.
        detail: String,
    },
    /// The system's random source failed, so no unguessable client id can
    /// be drawn (T2); nothing was sent.
    #[error("the system's random source failed: no unguessable client id can be drawn")]
    NoRandomness,
}

impl From<crate::id::NoRandomness> for ClientError {
    fn from(_: crate::id::NoRandomness) -> ClientError {
        ClientError::NoRandomness
    }
}

impl ClientError {
    /// Whether a write that failed with this error may still commit (then
    /// [`ClientError::request`] resubmits it exactly once).
    pub fn may_have_applied(&self) -> bool {
        matches!(self, ClientError::Timeout { .. } | ClientError::Busy { .. })
    }

    /// For a write whose outcome is unknown: the request to resubmit.
    pub fn request(&self) -> Option<&Request> {
        match self {
            ClientError::Timeout { request, .. } | ClientError::Busy { request, .. } => request.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn config(what: impl Into<String>, reason: impl Into<String>) -> ClientError {
        ClientError::Config { what: what.into(), reason: reason.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_errors_say_what_to_do_and_whether_a_write_may_have_applied() {
        let timeout = ClientError::Timeout {
            group: GroupId(1),
            waited: Duration::from_secs(1),
            attempts: 3,
            last: "x".into(),
            request: None,
        };
        assert!(timeout.to_string().contains("ClusterClient::retry"));
        assert!(timeout.may_have_applied());
        let tls = ClientError::Tls { address: "a:1".into(), detail: "unknown CA".into() };
        assert!(tls.to_string().contains("cohort certs client"));
        assert!(!tls.may_have_applied() && tls.request().is_none());
        let mismatch = ClientError::Mismatch { address: "a:1".into(), detail: "the node is in cluster 2".into() };
        assert!(mismatch.to_string().contains("cluster-id") && !mismatch.may_have_applied());
        let refused = ClientError::Refused { group: GroupId(2), code: ReplyError::Rejected, reason: "no".into() };
        assert!(!refused.may_have_applied());
    }
}
