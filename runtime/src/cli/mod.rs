//! The command line beyond `cohort node`: the operator's side (`cohort
//! status` and `cohort admin` talk to a node's admin port over HTTP;
//! `cohort certs` makes a cluster's certificates) and the user's side
//! (`cohort write`, `cohort read` and `cohort bench --cluster` use a
//! running cluster's data through its client ports, C2). `cohort groups`
//! lists and describes groups from the admin port's `/status`. Exit codes,
//! JSON errors and client profiles are shared by every command (`exit.rs`,
//! `profile.rs`; O4).

mod admin;
mod bench;
mod certs;
pub(crate) mod command;
mod connect;
mod data;
mod exit;
mod groups;
pub(crate) mod http;
mod operation;
mod output;
mod profile;
mod status;

pub(crate) use admin::{AdminAction, admin_command};
pub(crate) use bench::{BenchArgs, bench_command};
pub(crate) use certs::{CertsAction, certs_command};
pub(crate) use data::{DataArgs, WriteArgs, read_command, write_command};
pub(crate) use output::print_line;
pub(crate) use status::status_command;
