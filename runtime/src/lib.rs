//! cohort's node: what a host builds, starts and talks to.
//!
//! - [`node`]: build and start a node from code ([`node::NodeBuilder`]): group
//!   kinds, placements, submit requests through a [`node::NodeHandle`].
//! - [`client`]: writes and linearizable reads that follow redirects and retry exactly once.
//! - [`network`]: the network client of the client ports, for processes that host no primary of a group.
//! - [`local`]: a whole cluster of real nodes in one process, for tests and examples.
//! - [`prelude`]: what host code needs in one `use`.
//! - [`config`]: TOML configuration with documented defaults and boot checks.
//! - [`client_port`]: the TCP port where other processes send requests.
//! - [`admin`]: the admin HTTP port (`/metrics`, `/health`, `/status`, operator commands).
//! - [`otlp`]: span export to an OTLP collector (Jaeger).
//! - [`cli`]: `cohort status`, `cohort admin` and `cohort certs` (the operator's side), `cohort write`, `cohort read` and `cohort bench --cluster` (a running cluster's data).
//! - [`demo`]: `cohort demo`, a real cluster through a crash.
//! - [`mod@bench`]: `cohort bench`, replicated writes at the machine's limit, measured.
//!
//! The actors a node is made of are in `cohort-actors`, the protocol they
//! shell in `cohort-core`, the write-ahead log in `cohort-wal` and the wire
//! in `cohort-messages`. What a host may rely on is what `docs/embedding.md`
//! documents; it is re-exported here.

#![warn(unreachable_pub)]

pub mod admin;
pub mod bench;
pub mod cli;
pub mod client;
pub mod client_port;
pub mod config;
pub mod demo;
pub mod local;
pub mod node;
pub mod otlp;
pub mod prelude;

/// Custom group actors: a host's own actor per group replica (see
/// [`cohort_actors::custom`] for what cohort guarantees to it).
pub mod custom {
    pub use cohort_actors::custom::{
        Applied, AppliedOp, CustomGroupActor, GROUP_ACTOR_MAILBOX_MAX, GroupReplica, Restored,
    };
}

/// A replica's role and the events a subscriber hears.
pub mod group {
    pub use cohort_actors::group::{GroupEvent, GroupRole, RoleChanged, SUBSCRIBER_EVENTS_MAX};
}

/// TLS and the cluster's certificates (T1, T2): what `cohort certs` makes
/// and [`crate::node::NodeBuilder::tls`] takes.
pub mod tls {
    pub use cohort_actors::certs::{
        Authority, CA_CERT_FILE, CA_KEY_FILE, CLUSTER_ID_FILE, CertsError, LocalCerts, client_files, cluster_hex,
        local_cluster, node_files, parse_cluster_hex,
    };
    pub use cohort_actors::tls::{Credentials, TlsError, TlsFiles, client_config, client_name, node_name};
}

/// The network client of the nodes' client ports (C1): the `cohort-client`
/// crate, which needs no actix and no node, re-exported for hosts that
/// depend on this crate ([`client::Client`] uses it for groups led by other
/// processes' nodes).
pub mod network {
    pub use cohort_client::*;
}

/// The node's metrics, as `/metrics` serves them.
pub mod metrics {
    pub use cohort_actors::listener::InboundStats;
    pub use cohort_actors::metrics::{AnswerBudget, ClientAnswerBytes, DropReason, NodeMetrics};
    pub use cohort_actors::shard::ShardReport;
}
