//! The sans-IO protocol core.
//!
//! Nothing in this module tree may import actix, tokio, `std::net`, `std::fs`
//! or read a clock; `actors/core/tests/sans_io.rs` fails if one appears. Time comes
//! in as tick numbers, messages come in as values, and everything the core
//! wants done goes out as a [`Effect`]. The protocol's driving contract is on
//! [`Shard`]; how a node runs a shard (ticks, turns, links, answers to
//! peers, storage jobs) is [`driver`], which the node's actors and the
//! simulator share.

#![warn(unreachable_pub)]

pub mod client;
pub mod client_table;
pub mod config;
pub mod driver;
pub mod effect;
pub mod effects;
pub mod footprint;
pub mod group_map;
pub mod log;
pub mod metadata;
pub mod metrics;
pub mod mutants;
pub mod quiesce;
pub mod quorum;
pub mod refusal;
pub mod replica;
pub mod routing;
pub mod shard;
pub mod state_machine;
pub mod storage;

pub use config::{CoreConfig, CoreConfigError, TimingConfig};
pub use effect::{ApplyId, Effect, EffectKind, FlushId, QuorumWaitError, Role, WaitId};
pub use footprint::Footprint;
pub use metrics::{HeartbeatGauges, ShardMetrics};
pub use quorum::Quorums;
pub use refusal::{Refusal, Refusals};
pub use replica::{GroupSpec, Replica, Status, TransferError, WriteMode};
pub use shard::{Shard, ShardError};
pub use state_machine::{Done, Durability, LentState, StateExport, StateMachine, Work, apply_run, work_on};
