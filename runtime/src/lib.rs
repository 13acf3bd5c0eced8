//! cohort's node runtime: shards, transport, storage, config, telemetry.
//!
//! Today this crate holds the configuration ([`config`]), the shard's durable
//! [`storage`] and the `cohort` binary's entry point; the actix runtime
//! arrives with the runtime issue.

pub mod config;
pub mod storage;
pub mod telemetry;
