//! The operator's side of the command line: `cohort status` and
//! `cohort admin` talk to a node's admin port over HTTP.

pub mod admin;
mod http;
pub mod status;

pub use admin::{AdminAction, AdminError, admin_command};
pub use status::status_command;
