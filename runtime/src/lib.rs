//! cohort's node runtime: the actix shell around the sans-IO core.
//!
//! - [`node`]: build and start a node from code ([`node::NodeBuilder`]), submit requests.
//! - [`shard`]: one Arbiter per shard: the shard actor, its outboxes, its storage worker.
//! - [`transport`]: TCP peer links (handshake, reconnect) and inbound routing.
//! - [`storage`]: the shard's write-ahead log on real files.
//! - [`config`]: TOML configuration with documented defaults and boot checks.
//! - [`telemetry`]: Prometheus metrics and the admin HTTP endpoint.
//! - [`demo`]: `cohort demo`, a real cluster through a crash.

pub mod config;
pub mod demo;
pub mod node;
pub mod shard;
pub mod storage;
pub mod telemetry;
pub mod transport;
