//! `cohort write` and `cohort read` (C2): one write or one linearizable
//! read of a running cluster's group, through any of its nodes' client
//! ports, over the network client ([`cohort_client::ClusterClient`]: it
//! finds the group's primary, follows redirects and failovers, and retries
//! a write exactly once).
//!
//! What a command prints: one line for people (`group:3 committed at op:17;
//! replaced "old"`, `group:3 at op:17: "hello"`) or, with `--json`, one JSON
//! object. The value's bytes are the group's state machine's; the formats
//! spoken are in [`super::operation`].
//!
//! Exit codes, for scripts: 0 done; 1 failed, and nothing was applied; 2 a
//! usage error (a flag, a certificate or the cluster id, the last also when
//! a node answers that it is of another cluster); 3 a write whose
//! outcome is unknown (no definite answer in time: it may still commit,
//! and `cohort read` shows whether it did).

use std::time::Duration;

use cohort_client::{ClientError, ClusterClient, Committed};
use cohort_messages::GroupId;
use serde_json::{Map, Value, json};

use super::connect::{ConnectArgs, ConnectError};
use super::operation::{Format, ReadValue, json_bytes};

/// The flags `cohort write` and `cohort read` share.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct DataArgs {
    /// The nodes' client ports (each node's `[node] client`), HOST:PORT,
    /// comma-separated. Any one is enough to start; give every node's, so
    /// the client can reach each group's primary and survive a failover.
    /// Default: a profile's `cluster`.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',', env = "COHORT_CLUSTER")]
    pub cluster: Vec<String>,
    /// The group.
    #[arg(long)]
    pub group: u64,
    /// For a group whose state machine is a key-value map in the `kv`
    /// example's format (not what `cohort node` runs): the key. Without it,
    /// the group is a register, as `cohort node` runs it.
    #[arg(long, value_name = "KEY")]
    pub kv_key: Option<String>,
    /// Print one JSON object instead of a line (the global `--json`).
    #[arg(skip)]
    pub json: bool,
    #[command(flatten, next_help_heading = "Connection")]
    #[allow(missing_docs)]
    pub connect: ConnectArgs,
}

/// `cohort write`'s flags.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct WriteArgs {
    /// The value to write (its UTF-8 bytes are the operation; with
    /// `--kv-key`, the key's new value).
    #[arg(long)]
    pub value: String,
    // Last: its connection flags open a help heading of their own.
    #[command(flatten)]
    #[allow(missing_docs)]
    pub data: DataArgs,
}

/// Why `cohort write` or `cohort read` failed; [`DataError::exit_code`]
/// says how the process exits.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DataError {
    /// A flag, file or cluster id is unusable (exit 2).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A flag's value is unusable (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The call failed (exit 1; 3 if a write may still commit; 2 if the
    /// node is of another cluster id or wire revision).
    #[error("{what} group:{group} through {addresses}: {message}")]
    Failed {
        /// `write to` or `read of`.
        what: &'static str,
        /// The group.
        group: u64,
        /// The addresses given.
        addresses: String,
        /// What the client said.
        source: Box<ClientError>,
        /// What happened and what to do next, in a shell user's words
        /// ([`shell_message`]).
        message: String,
    },
    /// No async runtime could be started (exit 1).
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

impl DataError {
    /// The process's exit code (see the module docs).
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            DataError::Connect(_) | DataError::Usage(_) => 2,
            DataError::Failed { source, .. } if matches!(**source, ClientError::Mismatch { .. }) => 2,
            DataError::Failed { source, .. } if source.may_have_applied() => 3,
            DataError::Failed { .. } | DataError::Runtime(_) => 1,
        }
    }
}

/// `cohort write`: write `--value` to `--group`; the line (or JSON) to print.
pub(crate) fn write_command(args: &WriteArgs) -> Result<String, DataError> {
    let data = &args.data;
    let format = Format::of(data.kv_key.as_deref()).map_err(DataError::Usage)?;
    let operation = format.write(args.value.as_bytes());
    let client = data.connect.client(&data.cluster)?;
    let group = GroupId(data.group);
    let written = block_on(async { client.write(group, operation).await })?
        .map_err(|source| failed(data, "write to", &client, source))?;
    Ok(if data.json { write_json(data.group, &format, &written) } else { write_line(data.group, &format, &written) })
}

/// `cohort read`: read `--group`'s value; the line (or JSON) to print.
pub(crate) fn read_command(args: &DataArgs) -> Result<String, DataError> {
    let format = Format::of(args.kv_key.as_deref()).map_err(DataError::Usage)?;
    let client = args.connect.client(&args.cluster)?;
    let group = GroupId(args.group);
    let read = block_on(async { client.read(group, format.query()).await })?
        .map_err(|source| failed(args, "read of", &client, source))?;
    Ok(if args.json { read_json(args.group, &format, &read) } else { read_line(args.group, &format, &read) })
}

/// Run `future` on a runtime of its own (one thread: one call needs no more).
fn block_on<T>(future: impl Future<Output = T>) -> Result<T, DataError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(DataError::Runtime)?;
    let result = runtime.block_on(future);
    // Connections still open close with the runtime; nothing waits for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(result)
}

fn failed(args: &DataArgs, what: &'static str, client: &ClusterClient, source: ClientError) -> DataError {
    let message = shell_message(&source, args.group, what == "write to");
    DataError::Failed {
        what,
        group: args.group,
        addresses: client.addresses().join(","),
        source: Box::new(source),
        message,
    }
}

/// O5: what the client's error means for someone at a shell: the flags and
/// commands to use, not the library's calls (`ClusterClient::retry` is of
/// no use to a shell user).
pub(crate) fn shell_message(error: &ClientError, group: u64, write: bool) -> String {
    let seconds = |waited: &Duration| format!("{:.1} s", waited.as_secs_f64());
    let unknown = format!(
        "the write may still commit: `cohort read --group {group}` with the same flags shows whether it did; \
         write again only if it did not"
    );
    let again = "try again, or give more time with --timeout-secs";
    match error {
        ClientError::Timeout { waited, attempts, last, .. } => {
            let then = if write { unknown } else { again.to_string() };
            format!("no definite answer within {} after {attempts} attempts (last: {last}); {then}", seconds(waited))
        }
        ClientError::Busy { waited, reason, .. } => {
            let then = if write { unknown } else { again.to_string() };
            format!("the cluster stayed busy for {} (last: {reason}); {then}", seconds(waited))
        }
        ClientError::NoRoute { waited, .. } => format!(
            "no node knew a primary for it within {}: check --group (`cohort status` lists the groups); a group \
             whose primary died fails over within about {} s: {again}",
            seconds(waited),
            crate::config::ClusterConfig::default().idle_failover_bound().as_secs()
        ),
        // O5: the node answered with its own Handshake, of another cluster.
        ClientError::Mismatch { .. } => {
            format!("{error} (here: --cluster-id, the profile's cluster_id, or the cluster-id file in --certs)")
        }
        // A node that closes the connection before its Handshake without
        // one (a plaintext client on a TLS port, say).
        ClientError::Io { detail, .. } if detail.contains("Handshake") => format!(
            "{error} (check --cluster-id or the cluster-id file in --certs, and --insecure against the nodes' TLS)"
        ),
        other => other.to_string(),
    }
}

fn write_line(group: u64, format: &Format, written: &Committed) -> String {
    format!("group:{group} committed at {}; {}", written.op, format.describe_write(&written.result))
}

fn read_line(group: u64, format: &Format, read: &Committed) -> String {
    format!("group:{group} at {}: {}", read.op, format.describe_read(&read.result))
}

fn with_key(mut object: Map<String, Value>, format: &Format) -> Map<String, Value> {
    if let Format::Kv { key } = format {
        object.extend(json_bytes("key", key));
    }
    object
}

fn write_json(group: u64, format: &Format, written: &Committed) -> String {
    let mut object = Map::new();
    object.insert("group".into(), json!(group));
    object.insert("op".into(), json!(written.op.0));
    object.extend(json_bytes("result", &written.result));
    Value::Object(with_key(object, format)).to_string()
}

fn read_json(group: u64, format: &Format, read: &Committed) -> String {
    let mut object = Map::new();
    object.insert("group".into(), json!(group));
    object.insert("op".into(), json!(read.op.0));
    match format.read_value(&read.result) {
        ReadValue::Value(value) => {
            object.extend(json_bytes("value", &value));
            if matches!(format, Format::Kv { .. }) {
                object.insert("found".into(), json!(true));
            }
        }
        ReadValue::Absent => {
            object.insert("value".into(), Value::Null);
            object.insert("found".into(), json!(false));
        }
        ReadValue::Unexpected(answer) => {
            object.extend(json_bytes("answer", &answer));
            object.insert("found".into(), Value::Null);
        }
    }
    Value::Object(with_key(object, format)).to_string()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use clap::Parser;
    use cohort_messages::{ClusterId, Op};

    use super::*;

    #[derive(Parser)]
    struct Write {
        #[command(flatten)]
        args: WriteArgs,
    }

    #[derive(Parser)]
    struct Read {
        #[command(flatten)]
        args: DataArgs,
    }

    fn write(args: &[&str]) -> Result<WriteArgs, clap::Error> {
        Write::try_parse_from(std::iter::once("write").chain(args.iter().copied())).map(|flags| flags.args)
    }

    fn read(args: &[&str]) -> Result<DataArgs, clap::Error> {
        Read::try_parse_from(std::iter::once("read").chain(args.iter().copied())).map(|flags| flags.args)
    }

    #[test]
    fn c2_write_takes_the_cluster_list_a_group_and_a_value() {
        let args =
            write(&["--cluster", "10.0.0.1:7201,10.0.0.2:7201", "--group", "3", "--value", "hello"]).expect("parses");
        assert_eq!(args.data.cluster, ["10.0.0.1:7201", "10.0.0.2:7201"]);
        assert_eq!((args.data.group, args.value.as_str(), args.data.kv_key.as_deref()), (3, "hello", None));
        assert_eq!(args.data.connect, ConnectArgs::default());
        let kv = write(&["--cluster", "a:1", "--group", "0", "--value", "v", "--kv-key", "k"]).expect("parses");
        assert_eq!(kv.data.kv_key.as_deref(), Some("k"));
        // No --cluster parses: COHORT_CLUSTER or a profile may give it (the
        // command refuses an empty list before it dials).
        for missing in [&["--cluster", "a:1", "--value", "v"][..], &["--cluster", "a:1", "--group", "3"][..]] {
            assert!(write(missing).is_err(), "{missing:?}");
        }
        assert!(write(&["--cluster", "a:1", "--group", "-1", "--value", "v"]).is_err());
    }

    #[test]
    fn c2_read_takes_the_cluster_list_and_a_group_and_tls_flags() {
        let args = read(&["--cluster", "a:1", "--group", "7", "--insecure", "--cluster-id", "ff"]).expect("parses");
        assert_eq!((args.group, args.connect.insecure, args.connect.cluster_id), (7, true, Some(ClusterId(255))));
        assert!(read(&["--cluster", "a:1"]).is_err(), "no group");
        assert!(read(&["--cluster", "a:1", "--group", "1", "--value", "v"]).is_err(), "read takes no value");
    }

    #[test]
    fn c2_a_failed_call_names_the_group_and_the_addresses_and_exits_by_outcome() {
        let args =
            read(&["--cluster", "127.0.0.1:1", "--group", "4", "--insecure", "--cluster-id", "1"]).expect("parses");
        let client = args.connect.client(&args.cluster).expect("a client");
        let io = ClientError::Io {
            address: "127.0.0.1:1".into(),
            kind: std::io::ErrorKind::ConnectionRefused,
            detail: "refused".into(),
        };
        let error = failed(&args, "read of", &client, io);
        assert_eq!(error.exit_code(), 1);
        assert!(error.to_string().starts_with("read of group:4 through 127.0.0.1:1: 127.0.0.1:1: refused"), "{error}");
        let timeout = ClientError::Timeout {
            group: GroupId(4),
            waited: Duration::from_secs(1),
            attempts: 2,
            last: "x".into(),
            request: None,
        };
        let error = failed(&args, "write to", &client, timeout);
        assert_eq!(error.exit_code(), 3);
        assert!(error.to_string().contains("`cohort read --group 4`"), "{error}");
        assert_eq!(DataError::Usage("x".into()).exit_code(), 2);
    }

    #[test]
    fn c2_results_print_the_op_and_the_value() {
        let committed = Committed { op: Op(17), result: Bytes::from_static(b"old") };
        assert_eq!(write_line(3, &Format::Register, &committed), "group:3 committed at op:17; replaced \"old\"");
        assert_eq!(read_line(3, &Format::Register, &committed), "group:3 at op:17: \"old\"");
        let json: Value = serde_json::from_str(&read_json(3, &Format::Register, &committed)).expect("JSON");
        assert_eq!(json, json!({"group": 3, "op": 17, "value": "old", "value_hex": "6f6c64"}));
        let kv = Format::of(Some("k")).expect("a key");
        let absent = Committed { op: Op(2), result: Bytes::from_static(b"\x00") };
        let json: Value = serde_json::from_str(&read_json(1, &kv, &absent)).expect("JSON");
        assert_eq!(json["found"], json!(false));
        assert_eq!(json["key"], json!("k"));
        let json: Value = serde_json::from_str(&write_json(1, &kv, &committed)).expect("JSON");
        assert_eq!((json["op"].as_u64(), json["result"].as_str()), (Some(17), Some("old")));
    }
}
