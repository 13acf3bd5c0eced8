//! What the node tells its operators: Prometheus metrics ([`metrics`]) and
//! the admin HTTP port that serves them ([`admin`]).
//!
//! The core counts (see `cohort_actors::core::metrics`), the runtime
//! publishes: shard actors and peer links push snapshots and events into one
//! shared [`NodeMetrics`], and the admin server encodes it on each scrape. The
//! list of metrics, with their requirements, is in `docs/metrics.md`.

pub mod admin;
pub mod metrics;

pub use admin::{AdminLimits, serve, serve_with_limits};
pub use metrics::{DropReason, GroupState, NodeMetrics, RejectLevel};

mod drops;
pub use drops::Drops;
