//! A network client of a cohort cluster (C1), for any tokio program: no
//! actix, no node in the process.
//!
//! Why a crate of its own: a process that does not host a group's primary,
//! or hosts no node at all, must still write to it; the embedded `Client`
//! of cohort-runtime reaches only the nodes of its own process, and a
//! program that talks to a cluster should not have to link a node's actors
//! to do so. The client speaks the nodes' client port: mTLS with a
//! certificate of the cluster's CA (T2), a Handshake, then Request frames,
//! answered by Reply or Redirect frames, and RouteQuery frames, answered by
//! Routes from any node's copy of the metadata (see `docs/client.md` and
//! `docs/protocol.md`).
//!
//! What it does for the caller:
//! - **routing**: it asks any node where a group's primary is, caches the
//!   answer, and refreshes it when a Redirect or a failure says otherwise
//!   ([`Route`]);
//! - **pipelining**: one connection per node carries every request to it at
//!   once, answers matched by (client id, group, request number);
//! - **exactly once**: random 128-bit client ids that the nodes bind to the
//!   client's certificate, one in-order write per group at a time, and
//!   retries with the same id and number after a redirect, a failover or a
//!   timeout;
//! - **bounds**: every wait has a timeout and every queue a limit
//!   ([`ClientLimits`]); every failure is a [`ClientError`] that says
//!   whether a write may have applied.
//!
//! A program needs no other cohort crate: the types its calls take and
//! return (group ids, requests, ops, error codes, [`Bytes`]) are re-exported
//! here, and so is the whole message crate as [`messages`]. Its
//! `Cargo.toml` names `cohort-client` and the tokio it runs on
//! (`docs/client.md` has the lines).
//!
//! ```no_run
//! use cohort_client::{ClusterClient, GroupId, TlsFiles, read_cluster_id};
//!
//! # async fn example() -> Result<(), cohort_client::ClientError> {
//! let client = ClusterClient::builder(read_cluster_id("certs/cluster-id")?, ["10.0.0.1:7400", "10.0.0.2:7400"])
//!     .tls(TlsFiles::client_in("certs", "app"))
//!     .build()?;
//! client.write(GroupId(0), "hello").await?;
//! assert_eq!(client.read(GroupId(0), "").await?.result, "hello");
//! # Ok(())
//! # }
//! ```

#![warn(unreachable_pub)]

mod call;
mod client;
mod cluster_id;
mod config;
mod connection;
mod error;
mod id;
mod pool;
mod routes;
mod tls;

pub use call::{Committed, CommittedBatch};
pub use client::{ClusterClient, ClusterClientBuilder};
pub use cluster_id::{
    CLUSTER_ID_DIGITS_MAX, CLUSTER_ID_FILE, ClusterIdError, format_cluster_id, parse_cluster_id, read_cluster_id,
};
pub use config::{ClientLimits, Security, TlsFiles};
pub use error::ClientError;
pub use id::{NoRandomness, fresh_client_id};
pub use routes::Route;
pub use tls::NODES_SERVER_NAME;

// What callers name, so that `cohort-client` is a program's one cohort
// dependency (C1): ids, requests and ops from the messages crate, the
// numbering every cohort client shares, and the byte and certificate types.
pub use bytes::Bytes;
pub use cohort_core::client::Sequence;
pub use cohort_messages as messages;
pub use cohort_messages::{
    ClientId, ClusterId, GroupId, NodeId, OPERATION_SIZE_MAX_BYTES, Op, ReplyError, Request, RequestKind,
    RequestNumber, View,
};
pub use rustls_pki_types::CertificateDer;
