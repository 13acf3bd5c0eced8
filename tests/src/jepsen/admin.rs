//! The harness's operator: what it asks of the nodes' admin ports, the way
//! an operator would. Metadata changes go through the real `cohort admin`
//! command (the CLI an operator runs, T4's token included); what it reads
//! back (`/status`, `/metrics`) is a plain GET with the token. Every call
//! has a deadline: a node that is stopped (SIGSTOP) or cut off must not
//! hold the nemesis or the workload.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::jepsen::nodes::ADMIN_TOKEN;

/// How long a GET may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
/// How long a GET may take to answer.
const READ_TIMEOUT: Duration = Duration::from_millis(1_500);
/// The most of an answer a GET reads (a `/status` of a few groups is a few KiB).
const ANSWER_SIZE_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// How long one `cohort admin` command may run before it is killed: a
/// little more than the node's own wait for the metadata (10 s).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(12);
/// How often a running command is looked at.
const COMMAND_POLL: Duration = Duration::from_millis(20);

/// What a `cohort admin` command ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandResult {
    /// Its exit code; `None` if the harness killed it at its deadline.
    pub code: Option<i32>,
    /// Its stdout and stderr.
    pub text: String,
}

/// A group's record in a node's copy of the metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    /// The metadata's epoch in that copy.
    pub epoch: u64,
    /// The group's incarnation.
    pub incarnation: u64,
    /// False once deleted.
    pub live: bool,
    /// True if some member reported that it leads it.
    pub owned: bool,
}

/// The admin ports of a run's nodes and the binary that talks to them.
#[derive(Clone, Debug)]
pub struct Operator {
    binary: PathBuf,
    admins: Vec<SocketAddr>,
}

impl Operator {
    /// An operator of the nodes whose admin ports are `admins`.
    pub fn new(binary: &Path, admins: Vec<SocketAddr>) -> Operator {
        assert!(!admins.is_empty(), "an operator needs a node");
        Operator { binary: binary.to_path_buf(), admins }
    }

    /// How many nodes.
    pub fn nodes(&self) -> usize {
        self.admins.len()
    }

    /// `cohort admin --admin <node index> --token … <action>`, killed at
    /// [`COMMAND_TIMEOUT`].
    pub fn command(&self, index: usize, action: &[&str]) -> CommandResult {
        let mut command = Command::new(&self.binary);
        command
            .args(["admin", "--admin", &self.admins[index].to_string(), "--token", ADMIN_TOKEN])
            .args(action)
            .env_remove("COHORT_PROFILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => return CommandResult { code: None, text: format!("cannot run cohort admin: {error}") },
        };
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(COMMAND_POLL),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return CommandResult { code: None, text: format!("killed after {COMMAND_TIMEOUT:?}") };
                }
            }
        }
        match child.wait_with_output() {
            Ok(output) => CommandResult {
                code: output.status.code(),
                text: String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr),
            },
            Err(error) => CommandResult { code: None, text: format!("cohort admin: {error}") },
        }
    }

    /// GET `path` from node `index`'s admin port: the body, if it answered 200.
    pub fn get(&self, index: usize, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect_timeout(&self.admins[index], CONNECT_TIMEOUT).ok()?;
        stream.set_read_timeout(Some(READ_TIMEOUT)).ok()?;
        stream.set_write_timeout(Some(READ_TIMEOUT)).ok()?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: cohort\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = String::new();
        stream.take(ANSWER_SIZE_MAX_BYTES).read_to_string(&mut answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_string())
    }

    /// `group`'s record in the newest copy of the metadata among the nodes
    /// that answer (`None`: no node answered, or none knows the group).
    pub fn group_record(&self, group: u64) -> Option<GroupRecord> {
        (0..self.admins.len())
            .filter_map(|index| record_in(&self.get(index, "/status")?, group))
            .max_by_key(|record| record.epoch)
    }

    /// H1: members hosted without their data on node `index` that are done
    /// recovering (`cohort_recoveries_done_total` plus
    /// `cohort_recoveries_founded_total`, over its shards), and the groups
    /// it hosts (`cohort_groups`, over its shards and states); `None` if it
    /// did not answer. The counters start at 0 with each process.
    pub fn recoveries(&self, index: usize) -> Option<(u64, u64)> {
        let text = self.get(index, "/metrics")?;
        let sum = |name: &str| -> u64 {
            text.lines()
                .filter(|line| {
                    line.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                })
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .map(|value| value as u64)
                .sum()
        };
        Some((sum("cohort_recoveries_done_total") + sum("cohort_recoveries_founded_total"), sum("cohort_groups")))
    }
}

/// `group`'s record in a `/status` answer.
fn record_in(status: &str, group: u64) -> Option<GroupRecord> {
    let status: serde_json::Value = serde_json::from_str(status).ok()?;
    let metadata = &status["metadata"];
    let record = metadata["groups"].as_array()?.iter().find(|record| record["id"] == group)?;
    Some(GroupRecord {
        epoch: metadata["epoch"].as_u64().unwrap_or(0),
        incarnation: record["incarnation"].as_u64()?,
        live: record["live"].as_bool().unwrap_or(true),
        owned: !record["owner"].is_null(),
    })
}

/// The incarnation a `cohort admin create-group` line names
/// (`created 100 (kind default, incarnation 2, members 1, 2, 3) at epoch 40`).
pub fn created_incarnation(text: &str) -> Option<u64> {
    let (_, rest) = text.split_once("incarnation ")?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h3_the_incarnation_of_a_created_line() {
        let line = "created 100 (kind default, incarnation 12, members 1, 2, 3) at epoch 40\n";
        assert_eq!(created_incarnation(line), Some(12));
        assert_eq!(created_incarnation("refused by the metadata: exists"), None);
    }

    #[test]
    fn h3_a_record_is_read_from_a_status() {
        let status = r#"{"metadata":{"epoch":41,"groups":[{"id":3,"incarnation":1,"live":true,"owner":null},
            {"id":100,"incarnation":2,"live":false,"owner":{"node":1}}]}}"#;
        assert_eq!(record_in(status, 100), Some(GroupRecord { epoch: 41, incarnation: 2, live: false, owned: true }));
        assert_eq!(record_in(status, 7), None);
    }
}
