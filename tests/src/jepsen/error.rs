//! The harness's one error type: a setup or environment problem (not root,
//! `ip` or `nft` missing, a command that failed), with the text that says
//! what to do. Anomalies in the system under test are not errors: they are
//! what the report is for.

use std::fmt;

/// A setup or environment failure, with what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What went wrong, and what to install or change.
    pub message: String,
}

impl Error {
    /// An error saying `message`.
    pub fn new(message: impl Into<String>) -> Error {
        Error { message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
