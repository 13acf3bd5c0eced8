//! The command line beyond `cohort node`: the operator's side (`cohort
//! status` and `cohort admin` talk to a node's admin port over HTTP;
//! `cohort certs` makes a cluster's certificates) and the user's side
//! (`cohort write`, `cohort read` and `cohort bench --cluster` use a
//! running cluster's data through its client ports, C2).

pub mod admin;
pub mod bench;
pub mod certs;
pub mod connect;
pub mod data;
pub(crate) mod http;
pub mod operation;
pub mod output;
pub mod status;

pub use admin::{AdminAction, AdminError, admin_command};
pub use bench::{BenchArgs, BenchError, bench_command};
pub use certs::{CertsAction, certs_command};
pub use connect::{ConnectArgs, ConnectError};
pub use data::{DataArgs, DataError, WriteArgs, read_command, write_command};
pub use output::print_line;
pub use status::status_command;
