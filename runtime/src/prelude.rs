//! What host code needs, in one `use`: building and running nodes, kinds and
//! placements, the client, custom group actors, the state machine trait and
//! the ids.
//!
//! ```
//! use cohort_runtime::prelude::*;
//! let placement = GroupPlacement::new(GroupId(1), vec![NodeId(1)]).write_mode(WriteMode::Sync);
//! assert_eq!(placement.kind, GroupKind::default());
//! ```

pub use bytes::Bytes;
pub use cohort_core::{Durability, StateExport, StateMachine, WriteMode};
pub use cohort_messages::{
    ClientId, ClusterId, GroupId, Incarnation, NodeId, Op, ReplyError, RequestKind, RequestNumber, SessionId, View,
};

pub use crate::client::{Client, ClientError, ClusterClient, CommittedBatch};
pub use crate::custom::{Applied, AppliedOp, CustomGroupActor, GroupReplica, Restored};
pub use crate::group::{GroupEvent, GroupRole, RoleChanged};
pub use crate::linger::{Linger, LingerConfig, Lingered};
pub use crate::local::{LocalCluster, LocalClusterBuilder};
pub use crate::node::{
    Committed, DetachedNode, GroupKind, GroupKindError, GroupPlacement, Node, NodeBuilder, NodeError, NodeHandle,
    QuorumWait, Register, Security, SubmitError, WaitQuorumError,
};
pub use crate::op_batch::{OpBatch, OpResults};
pub use crate::tls::TlsFiles;
