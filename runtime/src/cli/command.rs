//! The `cohort` command: `cohort node` runs one node from a configuration
//! file, `cohort status` and `cohort admin` talk to a running node's admin
//! port, `cohort write` and `cohort read` use a running cluster's groups
//! through its client ports, `cohort demo` runs a local demo cluster,
//! `cohort bench` measures replicated writes on a local cluster, or on a
//! running one with `--cluster`. `node` and `demo` write their log to
//! stderr as `[log]` (or `COHORT_LOG`) says, and export spans over OTLP
//! when told to (`[telemetry] otlp_endpoint`, `--otlp-endpoint` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), and flush them before exiting.
//!
//! Answers go to stdout through [`print_line`], which does not panic when
//! the reader is gone (`cohort certs init … | head`); diagnostics go to
//! stderr.
//!
//! It lives in the library, not in `src/bin/cohort.rs` (which only calls
//! [`run`]), so that the commands' modules stay private to the crate: the
//! binary is one more user of the public API, and the CLI is not part of
//! it.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{
    AdminAction, BenchArgs, DataArgs, WriteArgs, admin_command, bench_command, print_line, read_command, write_command,
};
use crate::demo::{self, DemoOptions};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cohort", version, about = "cohort: a replication engine for Rust programs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node from a configuration file until Ctrl-C or SIGTERM.
    Node {
        /// The configuration file (see config/example-node.toml).
        #[arg(long)]
        config: std::path::PathBuf,
    },
    /// Print a node's view of the cluster: nodes with their sessions and
    /// acked epochs, groups with members, incarnation and owner, and the
    /// in-flight operations (from the node's admin port, GET /status).
    Status {
        /// The node's admin address (`[node] admin`), HOST:PORT, or a port
        /// alone for 127.0.0.1.
        #[arg(long)]
        admin: String,
        /// The node's admin token (`[admin] token`): without it, session ids
        /// and incarnations are redacted.
        #[arg(long, env = "COHORT_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Print the JSON document as served instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Start or cancel a multi-step operation (move, replace, join,
    /// decommission) through a node's admin port (POST /admin/operations),
    /// with the node's admin token. Exit code 1: refused by the metadata
    /// or the node, or no answer; 2: usage (also: no or a wrong token).
    Admin {
        /// The node's admin address (`[node] admin`), HOST:PORT, or a port
        /// alone for 127.0.0.1.
        #[arg(long)]
        admin: String,
        /// The node's admin token (`[admin] token`), required. Prefer the
        /// environment variable: a flag shows in the process list.
        #[arg(long, global = true, env = "COHORT_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Print the node's JSON answer instead of one line.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: AdminCommand,
    },
    /// Run a real cluster on this machine under a write workload, crash and
    /// restart the busiest node, and report what happened.
    Demo {
        /// Nodes in the cluster (at least 3).
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Partition groups.
        #[arg(long, default_value_t = 1000)]
        partitions: usize,
        /// How long the workload runs.
        #[arg(long, default_value_t = 30)]
        duration_secs: u64,
        /// Shards (threads) per node.
        #[arg(long, default_value_t = 2)]
        shards: usize,
        /// Concurrent writers.
        #[arg(long, default_value_t = 64)]
        writers: usize,
        /// Print one JSON object as the last line instead of the table.
        #[arg(long)]
        json: bool,
        /// Keep the data directory afterwards.
        #[arg(long)]
        keep_data: bool,
        /// Export spans to this OTLP/HTTP URL, e.g. http://127.0.0.1:4318/v1/traces
        /// (default: $OTEL_EXPORTER_OTLP_ENDPOINT if set, else no export).
        #[arg(long)]
        otlp_endpoint: Option<String>,
        /// Z3, opt-in: groups idle this many seconds quiesce (the
        /// `commit_quiesce_timeout` key); absent, seed 000's heartbeats.
        #[arg(long)]
        quiesce_secs: Option<u64>,
    },
    /// Make a cluster's CA and certificates (mTLS between nodes and for
    /// clients): `init` once, then `node`/`client` for later identities.
    Certs {
        #[command(subcommand)]
        action: CertsCommand,
    },
    /// Measure replicated writes on a cluster in this process (loopback TCP,
    /// real write-ahead logs): writes/s, latency, and CPU time, socket writes,
    /// syncs and context switches per write, beside the physical floor of
    /// the same run; or, with --cluster, on a running cluster through its
    /// client ports. See docs/benchmarks.md and docs/client.md.
    Bench(BenchArgs),
    /// Write a value to a group of a running cluster, through any of its
    /// nodes' client ports; prints the op it committed at and the result.
    /// Exit code 1: failed, nothing applied; 2: usage; 3: no definite
    /// answer in time (the write may still commit).
    Write(WriteArgs),
    /// Read a group's value from a running cluster (linearizable), through
    /// any of its nodes' client ports; prints the op it saw and the value.
    Read(DataArgs),
}

/// What `cohort certs` makes.
#[derive(Subcommand)]
enum CertsCommand {
    /// A new CA and random cluster id in DIR, and certificates for nodes
    /// 1..=N; prints each node's config snippet.
    Init {
        /// Where the files go (created if missing; refused if it holds a CA).
        #[arg(long)]
        dir: std::path::PathBuf,
        /// Node certificates to make now.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
    },
    /// A certificate for one more node, signed by DIR's CA.
    Node {
        /// The CA's directory (from `cohort certs init`).
        #[arg(long)]
        dir: std::path::PathBuf,
        /// The node id.
        #[arg(long)]
        id: u64,
    },
    /// A client certificate for the client port, signed by DIR's CA.
    Client {
        /// The CA's directory (from `cohort certs init`).
        #[arg(long)]
        dir: std::path::PathBuf,
        /// The client's name: letters, digits and '-'.
        #[arg(long)]
        name: String,
    },
}

/// The operator commands of `cohort admin`.
#[derive(Subcommand)]
enum AdminCommand {
    /// Move a group's replica from one node to another: add the new one as
    /// a learner, promote it once caught up, remove the old one.
    Move {
        /// The group (`metadata` names the metadata group, Z6).
        #[arg(long, value_parser = group_arg)]
        group: u64,
        /// The node giving up its replica.
        #[arg(long)]
        from: u64,
        /// The node taking it (registered).
        #[arg(long)]
        to: u64,
    },
    /// Replace a group's replica on a dead node (a move whose source need not ack).
    Replace {
        /// The group (`metadata` names the metadata group, Z6).
        #[arg(long, value_parser = group_arg)]
        group: u64,
        /// The dead node.
        #[arg(long)]
        dead: u64,
        /// Its replacement (registered).
        #[arg(long)]
        with: u64,
    },
    /// Add a registered node as a replica of each of the groups.
    Join {
        /// The node.
        #[arg(long)]
        node: u64,
        /// The groups, comma-separated (e.g. 1,2; `metadata` names the metadata group).
        #[arg(long, value_delimiter = ',', required = true, value_parser = group_arg)]
        groups: Vec<u64>,
    },
    /// Move every replica off a node (the metadata group's voters change
    /// only by `move`, `replace`, `join` and `shrink`).
    Decommission {
        /// The node.
        #[arg(long)]
        node: u64,
    },
    /// Take a voter out of a group, which runs on one voter fewer (Z6; a
    /// metadata voter goes on as a learner of the metadata log).
    Shrink {
        /// The group (`metadata` names the metadata group).
        #[arg(long, value_parser = group_arg)]
        group: u64,
        /// The voter leaving.
        #[arg(long)]
        node: u64,
    },
    /// Cancel an in-flight operation: its applied steps are reverted.
    Cancel {
        /// The operation id (as `started operation:7` printed it: 7).
        #[arg(long)]
        operation: u64,
    },
    /// Create a group on running nodes: its members host it within a few ticks.
    CreateGroup {
        /// The group id (unused, or deleted before).
        #[arg(long)]
        group: u64,
        /// Its kind: the name its state machine is registered under on every
        /// member (`cohort node` hosts the register under `default`).
        #[arg(long, default_value = "default")]
        kind: String,
        /// Its members in member-index order, comma-separated (e.g. 1,2,3).
        #[arg(long, value_delimiter = ',', required = true)]
        members: Vec<u64>,
        /// Its replication quorum (default: a majority of the members).
        #[arg(long)]
        replication_quorum: Option<u8>,
    },
    /// Delete a group: every member removes its replica and data.
    DeleteGroup {
        /// The group.
        #[arg(long)]
        group: u64,
    },
    /// Hand a group's primary to one of its members, once it is caught up.
    TransferPrimary {
        /// The group.
        #[arg(long)]
        group: u64,
        /// The member that is to lead it.
        #[arg(long)]
        to: u64,
    },
    /// Freeze the cluster metadata for an upgrade: operations, group
    /// changes, transfers and balancing are refused; data keeps flowing.
    Freeze,
    /// End a freeze.
    Unfreeze,
}

/// A group id, or `metadata` for the metadata group (Z6).
fn group_arg(text: &str) -> Result<u64, String> {
    if text == "metadata" {
        return Ok(cohort_messages::GroupId::METADATA.0);
    }
    let digits = text.strip_prefix("group:").unwrap_or(text);
    digits.parse::<u64>().map_err(|_| format!("{text:?} is neither a group id nor `metadata`"))
}

impl AdminCommand {
    fn action(self) -> AdminAction {
        match self {
            AdminCommand::Move { group, from, to } => AdminAction::Move { group, from, to },
            AdminCommand::Replace { group, dead, with } => AdminAction::Replace { group, dead, with },
            AdminCommand::Join { node, groups } => AdminAction::Join { node, groups },
            AdminCommand::Decommission { node } => AdminAction::Decommission { node },
            AdminCommand::Shrink { group, node } => AdminAction::Shrink { group, node },
            AdminCommand::Cancel { operation } => AdminAction::Cancel { operation },
            AdminCommand::CreateGroup { group, kind, members, replication_quorum } => {
                AdminAction::CreateGroup { group, kind, members, replication_quorum }
            }
            AdminCommand::DeleteGroup { group } => AdminAction::DeleteGroup { group },
            AdminCommand::TransferPrimary { group, to } => AdminAction::TransferPrimary { group, to },
            AdminCommand::Freeze => AdminAction::Freeze,
            AdminCommand::Unfreeze => AdminAction::Unfreeze,
        }
    }
}

/// Start the log as `log` says and span export as `telemetry` says; `Err`
/// is the exit code after the error was printed.
fn start_tracing(
    what: &str,
    log: &crate::config::LogSection,
    telemetry: &crate::config::TelemetryConfig,
    instance: Option<&str>,
) -> Result<Option<crate::otlp::TracingGuard>, ExitCode> {
    match crate::logs::init_logs(log, telemetry, instance) {
        Ok(Some(guard)) => {
            let endpoint = guard.endpoint().to_string();
            tracing::info!(%endpoint, "{what}: exporting spans to {endpoint}");
            Ok(Some(guard))
        }
        Ok(None) => Ok(None),
        Err(error) => {
            eprintln!("{what}: {error}");
            Err(ExitCode::from(2))
        }
    }
}

/// Send the spans still queued and stop exporting (after the System ended).
fn stop_tracing(what: &str, guard: Option<crate::otlp::TracingGuard>) {
    if let Some(guard) = guard
        && let Err(error) = guard.shutdown()
    {
        eprintln!("{what}: {error}");
    }
}

fn run_node(path: &std::path::Path) -> ExitCode {
    let config = match crate::config::Config::from_file(path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("cohort node: {error}");
            return ExitCode::from(2);
        }
    };
    let builder = match crate::node::NodeBuilder::from_config(&config) {
        Ok(builder) => builder,
        Err(error) => {
            eprintln!("cohort node: {error}");
            return ExitCode::from(2);
        }
    };
    let admin_token = config.admin.token.is_some() || config.admin.token_file.is_some();
    let instance = format!("node-{}", config.node.as_ref().map_or(0, |node| node.id));
    let tracing = match start_tracing("cohort node", &config.log, &config.telemetry, Some(&instance)) {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    let system = actix_rt::System::new();
    // From here on the node speaks through its log ([log]): in JSON when
    // asked, every line is an object.
    let code = system.block_on(async move {
        let node = match builder.start() {
            Ok(node) => node,
            Err(error) => {
                tracing::error!(%error, "cohort node: {error}");
                return ExitCode::from(1);
            }
        };
        let handle = node.handle();
        let id = handle.node().0;
        let (peers, clients, admin) = (
            node.listen_address().to_string(),
            node.client_address().map_or("(none)".into(), |a| a.to_string()),
            node.admin_address().map_or("(none)".into(), |a| a.to_string()),
        );
        tracing::info!(node = id, peers, clients, admin, "cohort node {id}: peers on {peers}, clients on {clients}, metrics on {admin}");
        if let Some(metrics) = node.metrics_address() {
            tracing::info!(node = id, %metrics, "cohort node {id}: /metrics and /health only on {metrics}");
        }
        if node.admin_address().is_some() && !admin_token {
            tracing::warn!(node = id, "cohort node {id}: no [admin] token: the admin port refuses every operator command");
        }
        let stop = async {
            let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => "interrupt",
                _ = async { match terminate.as_mut() { Some(signal) => { signal.recv().await; } None => std::future::pending::<()>().await } } => "terminate",
            }
        };
        let session = handle.clone();
        let session_stopped = tokio::select! {
            why = stop => {
                tracing::info!(node = id, why, "cohort node {id}: {why}, stopping");
                None
            }
            reason = session.wait_session_stopped() => Some(reason),
        };
        node.stop();
        if let Some(reason) = session_stopped {
            // S3: the session expired and the policy says stop.
            tracing::error!(node = id, %reason, "cohort node {id}: stopped: {reason}");
            return ExitCode::from(3);
        }
        match handle.fatal() {
            Some(fatal) => {
                tracing::error!(node = id, %fatal, "cohort node {id}: stopped after a fatal error: {fatal}");
                ExitCode::from(1)
            }
            None => ExitCode::SUCCESS,
        }
    });
    stop_tracing("cohort node", tracing);
    code
}

/// Print a command's answer, or its error on stderr with its exit code.
fn answer<E: std::fmt::Display>(what: &str, result: Result<String, E>, code: impl Fn(&E) -> u8) -> ExitCode {
    match result {
        Ok(text) => print(what, &text),
        Err(error) => {
            eprintln!("{what}: {error}");
            ExitCode::from(code(&error))
        }
    }
}

/// Print `text` on stdout; a reader that left early is fine, any other
/// failure to print is an error (exit 1).
fn print(what: &str, text: &str) -> ExitCode {
    match print_line(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{what}: cannot print the answer: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Parse the command line and run the command; the process's exit code.
pub(crate) fn run() -> ExitCode {
    match Cli::parse().command {
        Command::Certs { action } => {
            let action = match action {
                CertsCommand::Init { dir, nodes } => crate::cli::CertsAction::Init { dir, nodes },
                CertsCommand::Node { dir, id } => crate::cli::CertsAction::Node { dir, id },
                CertsCommand::Client { dir, name } => crate::cli::CertsAction::Client { dir, name },
            };
            // Every file is written before the first line is printed.
            answer("cohort certs", crate::cli::certs_command(&action), |_| 1)
        }
        Command::Bench(args) => answer("cohort bench", bench_command(&args), |error| error.exit_code()),
        Command::Write(args) => answer("cohort write", write_command(&args), |error| error.exit_code()),
        Command::Read(args) => answer("cohort read", read_command(&args), |error| error.exit_code()),
        Command::Node { config } => run_node(&config),
        Command::Status { admin, token, json } => {
            answer("cohort status", crate::cli::status_command(&admin, token.as_deref(), json), |_| 2)
        }
        Command::Admin { admin, token, json, action } => {
            match admin_command(&admin, token.as_deref(), &action.action(), json) {
                Ok(line) => print("cohort admin", &line),
                Err(error) if json => {
                    let _ = print_line(&error.message);
                    ExitCode::from(error.code)
                }
                Err(error) => {
                    eprintln!("cohort admin: {}", error.message);
                    ExitCode::from(error.code)
                }
            }
        }
        Command::Demo {
            nodes,
            partitions,
            duration_secs,
            shards,
            writers,
            json,
            keep_data,
            otlp_endpoint,
            quiesce_secs,
        } => {
            let telemetry =
                crate::config::TelemetryConfig { otlp_endpoint, ..crate::config::TelemetryConfig::default() };
            // The demo's own lines are its report; its nodes speak only
            // when something is wrong (COHORT_LOG turns them up).
            let log = crate::config::LogSection { level: "warn".into(), ..crate::config::LogSection::default() };
            let tracing = match start_tracing("cohort demo", &log, &telemetry, None) {
                Ok(guard) => guard,
                Err(code) => return code,
            };
            let options = DemoOptions {
                nodes,
                partitions,
                duration: Duration::from_secs(duration_secs),
                shards,
                writers,
                keep_data,
                progress: true,
                quiesce: quiesce_secs.map(Duration::from_secs),
            };
            if let Err(error) = options.check() {
                eprintln!("cohort demo: {error}");
                return ExitCode::from(2);
            }
            eprintln!(
                "cohort demo: {nodes} nodes on loopback TCP, {partitions} partitions, {duration_secs} s of writes; \
                 the busiest node is killed at 1/3 and restarted at 2/3, once its groups failed over"
            );
            let result = demo::run(options);
            stop_tracing("cohort demo", tracing);
            match result {
                Ok(summary) => {
                    let printed = print("cohort demo", &if json { summary.json() } else { summary.table() });
                    if summary.unverified_groups > 0 {
                        eprintln!(
                            "cohort demo: {} groups did not answer the read-back in time; their {} acknowledged \
                             writes are not verified",
                            summary.unverified_groups, summary.unverified_writes
                        );
                    }
                    let clean = summary.lost_acked_writes == 0 && summary.unverified_groups == 0;
                    if clean { printed } else { ExitCode::FAILURE }
                }
                Err(error) => {
                    eprintln!("cohort demo: {error}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
