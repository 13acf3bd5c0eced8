//! cohort's node runtime: shards, transport, storage, config, telemetry.
//!
//! The actix runtime arrives with the runtime issue; today this crate holds
//! the shard's durable [`storage`] and the `cohort` binary's entry point.

pub mod storage;
