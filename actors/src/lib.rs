//! cohort's actors: the actix shell around the sans-IO core
//! (`cohort_core`).
//!
//! Each file is one actor, or one task or thread beside them:
//! - `shard.rs`: the shard actor, one per Arbiter, owning a
//!   `cohort_core::Shard` (every group replica of the shard) and executing
//!   its effects.
//! - `group.rs`: the group actor, one per group replica, with its typed role.
//! - `custom.rs`: a host's custom group actor, fed by the shard.
//! - `outbox.rs`: one per shard and peer, turning a shard turn into frames.
//! - `peer_link.rs`: one per peer, owning the TCP connection to it.
//! - `listener.rs`: the task that accepts peer connections and routes frames.
//! - `storage_worker.rs`: the thread that runs the shard's write-ahead log.
//! - `agent.rs`: the node's metadata agent (sessions, re-owning, operations).
//! - `supervisor.rs`: re-creates dead actors, built as at start (`parts.rs`).
//!
//! Beneath them, the vocabulary they share: group kinds (`kind.rs`), the
//! directory of live actors (`directory.rs`), run-time placements
//! (`placements.rs`), the node's copy of the metadata (`shared_metadata.rs`,
//! `status.rs`), metrics (`metrics.rs`, `drops.rs`, and `scraped.rs` with
//! `process_stats.rs` for what is read at scrape time), the spans of every
//! message flow (`traces.rs`, `trace_context.rs`), repeated warnings logged
//! once per window with a count (`repeats.rs`) and the steps of operations
//! as the log tells them (`operation_log.rs`).
//!
//! Every module is private. What `cohort-runtime` builds a node from is
//! re-exported here, at the root; hosts use `cohort-runtime`, whose façade
//! re-exports what they may rely on. Tests of this crate reach the rest
//! through [`test_support`], which is not part of the API.

#![warn(unreachable_pub)]

// Being rewritten (the agent's timing moves into the core, issue 32): its
// `pub` items that only this crate uses become `pub(crate)` with that
// rewrite; until then the lint is allowed there alone.
#[allow(unreachable_pub)]
mod agent;
mod apply_worker;
mod certs;
mod client_id;
mod custom;
mod directory;
mod drops;
mod group;
mod inbound;
mod kind;
mod listener;
mod metrics;
mod observed;
mod operation_log;
mod operator_client;
mod outbox;
mod parts;
mod peer_link;
mod placement_recorder;
mod placements;
mod process_stats;
mod registry;
mod repeats;
mod scraped;
mod shard;
mod shared_metadata;
mod status;
mod storage_worker;
mod supervisor;
mod tls;
mod trace_context;
mod traces;

pub use agent::{AgentSetup, MetadataAgentActor, OperatorSubmit, SessionStop};
pub use certs::{
    Authority, CA_CERT_FILE, CA_KEY_FILE, CLUSTER_ID_FILE, CertsError, LocalCerts, client_files, local_cluster,
    node_files,
};
pub use client_id::bound_client_id;
pub use custom::{
    Applied, AppliedOp, CustomGroupActor, GROUP_ACTOR_MAILBOX_MAX, GroupReplica, Restored,
    factory as custom_actor_factory,
};
pub use directory::{Directory, Links};
pub use drops::Drops;
pub use group::{GetCustomActor, GroupEvent, GroupRole, RoleChanged, SUBSCRIBER_EVENTS_MAX};
pub use inbound::InboundRoutes;
pub use kind::{GroupKind, GroupKindError, HostedGroup};
pub use listener::{InboundStats, Router, serve as serve_listener};
pub use metrics::{
    AnswerBudget, BUILD_REVISION, BUILD_VERSION, ClientAnswerBytes, DropReason, LinkEvent, Mailbox, NodeMetrics,
    OPENMETRICS_CONTENT_TYPE, Port, SyncKind,
};
pub use operator_client::OperatorFailure;
pub use outbox::Outbox;
pub use parts::{PartError, Parts};
pub use peer_link::{LinkState, LinkTiming, REDIAL_BACKOFF_MIN};
pub use placement_recorder::PlacementRecorder;
pub use placements::{PLACEMENTS_FILE, PlacementFile, PlacementFileError};
pub use registry::{KindRegistrations, Kinds, unknown as unknown_kind};
pub use repeats::admit as admit_repeated_warning;
#[doc(hidden)]
pub use shard::SubscribeGroup;
pub use shard::{CancelQuorumWait, ClientAnswer, GetGroupActor, GetReport, ShardReport, StartQuorumWait, Submit};
/// Test hook: a shard driver's recording (the recorded-trace test).
#[doc(hidden)]
pub use shard::{DriverRecording, TakeDriverRecording};
pub use shared_metadata::SharedMetadata;
pub use status::StatusBoard;
pub use storage_worker::StartError;
pub use supervisor::{InjectFault, Supervisor};
pub use tls::{
    Credentials, NodeTls, Stream, TlsError, TlsFiles, certifies_node, client_config, client_name, identity_of,
    node_name,
};
pub use traces::{client_request_span, submit_span};

/// What this crate's own integration tests drive directly (a peer link
/// without a node). Not part of the API.
#[doc(hidden)]
pub mod test_support {
    pub use crate::peer_link::{LinkIdentity, PeerLink, SendFrames};
}
