//! cohort's node runtime: shards, transport, storage, config, telemetry.
//!
//! The actix runtime arrives with the runtime issue; today this crate holds the
//! `cohort` binary's entry point.
