//! cohort's node runtime: the actix shell around the sans-IO core.
//!
//! - [`node`]: build and start a node from code ([`node::NodeBuilder`]), group kinds, submit requests.
//! - [`client`]: writes and linearizable reads that follow redirects and retry exactly once.
//! - [`local`]: a whole cluster of real nodes in one process, for tests and examples.
//! - [`prelude`]: what host code needs in one `use`.
//! - [`shard`]: one Arbiter per shard: the shard actor, its outboxes, its storage worker,
//!   group actors and a host's custom group actors ([`shard::custom`]).
//! - [`transport`]: TCP peer links (handshake, reconnect) and inbound routing.
//! - [`storage`]: the shard's write-ahead log on real files.
//! - [`config`]: TOML configuration with documented defaults and boot checks.
//! - [`telemetry`]: Prometheus metrics and the admin HTTP endpoint.
//! - [`demo`]: `cohort demo`, a real cluster through a crash.

pub mod client;
pub mod config;
pub mod demo;
pub mod local;
pub mod node;
pub mod prelude;
pub mod shard;
pub mod storage;
pub mod telemetry;
pub mod transport;
