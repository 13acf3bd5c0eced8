//! cohort's node: what a host builds, starts and talks to.
//!
//! This crate's public API is exactly what `docs/embedding.md` and
//! `docs/client.md` document; everything else is private to the crate.
//!
//! - [`prelude`]: what host code needs in one `use`.
//! - [`node`]: build and start a node from code ([`node::NodeBuilder`]): group
//!   kinds, placements, submit requests through a [`node::NodeHandle`].
//! - [`client`]: writes and linearizable reads that follow redirects and retry exactly once.
//! - [`network`]: the network client of the client ports, for processes that host no primary of a group.
//! - [`local`]: a whole cluster of real nodes in one process, for tests and examples.
//! - [`custom`], [`group`]: custom group actors, roles and the events a subscriber hears.
//! - [`config`]: TOML configuration with documented defaults and boot checks.
//! - [`admin`]: the admin port's settings and token, and the `/status` document.
//! - [`metrics`]: the node's metrics, as `/metrics` serves them.
//! - [`tls`]: the cluster's certificates and TLS settings.
//! - [`log_store`]: a partitioned message log's state machine, its messages in
//!   segment files on disk (D1, K5): what the `log` example and `cohort bench
//!   --state message-log` run.
//! - [`logs`]: the node's log on stderr, text or JSON, filtered (O1).
//! - [`otlp`]: span export to an OTLP collector (Jaeger).
//!
//! The `cohort` binary (`src/bin/cohort.rs`) is a user of this crate like
//! any other: its commands (`cohort node`, `status`, `admin`, `certs`,
//! `write`, `read`, `bench`, `demo`) live in private modules and are reached
//! through one hidden entry point, [`cli_main`]. The actors a node is made
//! of are in `cohort-actors`, the protocol they shell in `cohort-core`, the
//! write-ahead log in `cohort-wal` and the wire in `cohort-messages`; what a
//! host may rely on of them is re-exported here.

#![warn(unreachable_pub, unnameable_types)]

pub mod admin;
pub mod client;
pub mod config;
pub mod linger;
pub mod local;
pub mod log_store;
pub mod logs;
pub mod node;
pub mod otlp;
pub mod prelude;

mod bench;
mod cli;
mod client_port;
mod demo;

/// The `cohort` command line: parse the arguments, run the command, and
/// return the process's exit code. Only `src/bin/cohort.rs` calls it; it is
/// not part of the API.
#[doc(hidden)]
pub fn cli_main() -> std::process::ExitCode {
    cli::command::run()
}

/// Custom group actors: a host's own actor per group replica (see
/// [`CustomGroupActor`](custom::CustomGroupActor) and `docs/embedding.md`
/// for what cohort guarantees to it).
pub mod custom {
    pub use cohort_actors::{Applied, AppliedOp, CustomGroupActor, GROUP_ACTOR_MAILBOX_MAX, GroupReplica, Restored};
}

/// A replica's role and the events a subscriber hears.
pub mod group {
    pub use cohort_actors::{GroupEvent, GroupRole, RoleChanged, SUBSCRIBER_EVENTS_MAX};
}

/// TLS and the cluster's certificates (T1, T2): what `cohort certs` makes
/// and [`crate::node::NodeBuilder::tls`] takes.
pub mod tls {
    pub use cohort_actors::{
        Authority, CA_CERT_FILE, CA_KEY_FILE, CLUSTER_ID_FILE, CertsError, LocalCerts, client_files, local_cluster,
        node_files,
    };
    pub use cohort_actors::{Credentials, TlsError, TlsFiles, client_config, client_name, node_name};
    pub use cohort_client::{ClusterIdError, format_cluster_id, parse_cluster_id, read_cluster_id};
}

/// The network client of the nodes' client ports (C1): the `cohort-client`
/// crate, which needs no actix and no node, re-exported for hosts that
/// depend on this crate ([`client::Client`] uses it for groups led by other
/// processes' nodes).
pub mod network {
    pub use cohort_client::*;
}

/// K5: op batches, many ops in one request ([`client::Client::write_batch`],
/// `StateMachine::apply_op_batch`): the encoding, and the borrowed batch and
/// results builder a state machine that takes them is handed.
pub mod op_batch {
    pub use cohort_messages::op_batch::*;
}

/// The node's metrics, as `/metrics` serves them.
pub mod metrics {
    pub use cohort_actors::InboundStats;
    pub use cohort_actors::ShardReport;
    pub use cohort_actors::{
        AnswerBudget, ClientAnswerBytes, DropReason, LinkEvent, Mailbox, NodeMetrics, Port, SyncKind,
    };
}
