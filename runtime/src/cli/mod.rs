//! The operator's side of the command line: `cohort status` and
//! `cohort admin` talk to a node's admin port over HTTP; `cohort certs`
//! makes a cluster's certificates.

pub mod admin;
pub mod certs;
mod http;
pub mod status;

pub use admin::{AdminAction, AdminError, admin_command};
pub use certs::{CertsAction, certs_command};
pub use status::status_command;
