//! What the node tells its operators: Prometheus metrics ([`metrics`]) and
//! the admin HTTP port that serves them ([`admin`]); spans of every message
//! flow, exported over OTLP ([`otlp`]) with their context carried in frame
//! headers ([`trace_context`]).
//!
//! The core counts (see `cohort_actors::core::metrics`), the runtime
//! publishes: shard actors and peer links push snapshots and events into one
//! shared [`NodeMetrics`], and the admin server encodes it on each scrape. The
//! list of metrics, with their requirements, is in `docs/metrics.md`; the
//! spans and how to see them in Jaeger are in `docs/tracing.md`.

pub mod admin;
pub mod metrics;
pub mod otlp;
pub mod trace_context;

pub use admin::{AdminLimits, serve, serve_node, serve_with_limits};
pub use metrics::{DEFAULT_GROUP_KIND, DropReason, GroupKindMetrics, GroupState, NodeMetrics, RejectLevel};
pub use otlp::{TracingError, TracingGuard, init_tracing, otlp_layer};

mod drops;
pub use drops::Drops;
