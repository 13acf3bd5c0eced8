//! cohort's actors: the actix shell around the sans-IO core
//! ([`cohort_core`]).
//!
//! Each file is one actor, or one task or thread beside them:
//! - [`shard`]: the shard actor, one per Arbiter, owning a `cohort_core::Shard`
//!   (every group replica of the shard) and executing its effects.
//! - [`group`]: the group actor, one per group replica, with its typed role.
//! - [`custom`]: a host's custom group actor, fed by the shard.
//! - [`outbox`]: one per shard and peer, turning a shard turn into frames.
//! - [`peer_link`]: one per peer, owning the TCP connection to it.
//! - [`listener`]: the task that accepts peer connections and routes frames.
//! - [`storage_worker`]: the thread that runs the shard's write-ahead log.
//! - [`agent`]: the node's metadata agent (sessions, re-owning, operations).
//! - [`supervisor`]: re-creates dead actors, built as at start ([`parts`]).
//!
//! Beneath them, the vocabulary they share: group [`kind`]s, the
//! [`directory`] of live actors, run-time [`placements`], the node's copy of
//! the metadata ([`shared_metadata`], [`status`]), [`metrics`], [`drops`] and
//! the spans of every message flow ([`traces`], [`trace_context`]).
//!
//! Hosts use `cohort-runtime`, which builds a node out of these actors.

#![warn(unreachable_pub)]

pub mod agent;
pub mod certs;
pub mod client_id;
pub mod custom;
pub mod directory;
pub mod drops;
pub mod group;
pub mod inbound;
pub mod kind;
pub mod listener;
pub mod metrics;
pub mod observed;
pub mod operator_client;
pub mod outbox;
pub mod parts;
pub mod peer_link;
pub mod placement_recorder;
pub mod placements;
pub mod registry;
pub mod shard;
pub mod shared_metadata;
pub mod status;
pub mod storage_worker;
pub mod supervisor;
pub mod tls;
pub mod trace_context;
pub mod traces;
