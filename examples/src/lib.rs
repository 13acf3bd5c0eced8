//! Plumbing shared by the examples, kept out of them so each example shows
//! only its use of cohort: command-line flags ([`args`]) and a minimal,
//! bounded HTTP/1.1 request reader and response writer ([`http`]) for the
//! `kv` example's front end.
//!
//! The examples themselves are the binaries in `src/bin/`; `tests/` runs each
//! one as a process, as CI does.

pub mod args;
pub mod http;
