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
//! stderr. Every command fails with the exit codes of [`super::exit`], and
//! with `--json` prints its error as one JSON object on stdout.
//!
//! The flags every command that talks to a cluster shares (`--profile`,
//! `--admin`, `--token`, `--json`) are global: they go before or after the
//! subcommand. Where a setting comes from is decided in one place,
//! [`Context`]: the command line, then the environment (`COHORT_ADMIN`,
//! `COHORT_CLUSTER`, `COHORT_ADMIN_TOKEN`, `COHORT_PROFILE`), then the
//! client profile ([`super::profile`]), then the default.
//!
//! It lives in the library, not in `src/bin/cohort.rs` (which only calls
//! [`run`]), so that the commands' modules stay private to the crate: the
//! binary is one more user of the public API, and the CLI is not part of
//! it.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::connect::ConnectArgs;
use crate::cli::exit::{CliError, Exit};
use crate::cli::groups::{ListArgs, describe_command, list_command};
use crate::cli::profile::{Settings, load, profile_path};
use crate::cli::status::GroupRows;
use crate::cli::{
    AdminAction, BenchArgs, DataArgs, WriteArgs, admin_command, bench_command, print_line, read_command, write_command,
};
use crate::demo::{self, DemoOptions};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cohort", version, about = "cohort: a replication engine for Rust programs")]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The flags of every command that talks to a cluster, valid before or
/// after the subcommand. Precedence, per setting: the flag, then its
/// environment variable, then the client profile, then the default.
#[derive(Clone, Debug, Default, clap::Args)]
#[command(next_help_heading = "Global options")]
struct GlobalArgs {
    /// The client profile to use, from ~/.config/cohort/profiles.toml (or
    /// $COHORT_PROFILE_FILE): its cluster and admin addresses,
    /// certificates and token. Default: the file's `default` profile.
    #[arg(long, global = true, env = "COHORT_PROFILE", value_name = "NAME")]
    profile: Option<String>,
    /// The admin ports (each node's `[node] admin`), HOST:PORT or a port
    /// alone for 127.0.0.1, comma-separated: the first that answers is
    /// used. Default: the profile's `admin`.
    #[arg(long, global = true, env = "COHORT_ADMIN", value_name = "HOST:PORT,...", value_delimiter = ',')]
    admin: Vec<String>,
    /// The nodes' admin token (`[admin] token`): operator commands need
    /// it, and without it `status` redacts session ids and incarnations.
    /// Prefer the environment variable or a profile's `token_file`: a flag
    /// shows in the process list.
    #[arg(long, global = true, env = "COHORT_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print answers, and errors, as one JSON object on stdout.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node from a configuration file until Ctrl-C or SIGTERM.
    Node {
        /// The configuration file (see config/example-node.toml).
        #[arg(long)]
        config: std::path::PathBuf,
    },
    /// Print a node's view of the cluster: nodes up or down, groups counted,
    /// operations in flight.
    ///
    /// From the node's admin port (GET /status): the nodes, up or down as
    /// that node reaches them now, with their sessions, primaries and acked
    /// epochs; the groups counted (live, without a primary, led by a node
    /// that is down); the operations in flight. With --json, the document
    /// as served. Exit code 4: no admin port answered.
    Status {
        /// Also print these groups' rows (members, learners, incarnation,
        /// owner), comma-separated.
        #[arg(long, value_name = "ID,...", value_delimiter = ',', value_parser = group_id_arg)]
        group: Vec<u64>,
        /// Also print every group's row (long at thousands of groups; see
        /// `cohort groups list` for filters and paging).
        #[arg(long, conflicts_with = "group")]
        all_groups: bool,
    },
    /// List groups with filters and paging, or describe one.
    ///
    /// From a node's admin port (GET /status).
    Groups {
        #[command(subcommand)]
        action: GroupsCommand,
    },
    /// Operator commands: move, replace, join, decommission, create or
    /// delete groups, transfer a primary, freeze.
    ///
    /// Through a node's admin port, with the nodes' admin token. Exit code
    /// 1: refused; 2: usage (also: no or a wrong token); 3: no result in
    /// time (it may still apply); 4: no admin port answered.
    Admin {
        #[command(subcommand)]
        action: AdminCommand,
    },
    /// Print a shell completion script.
    ///
    /// bash: `cohort completions bash > /etc/bash_completion.d/cohort`;
    /// zsh: into a directory of $fpath as `_cohort`; fish:
    /// ~/.config/fish/completions/cohort.fish.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
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

/// What `cohort groups` does.
#[derive(Subcommand)]
enum GroupsCommand {
    /// The groups that pass every filter given, by id, a page at a time;
    /// the last line (JSON: `next_after`) says where the next page starts.
    List(ListArgs),
    /// One group: kind, incarnation, primary, each replica's role and
    /// whether it is up, and the operations that touch it. Exit code 1: no
    /// such group.
    Describe {
        /// The group.
        #[arg(long, value_parser = group_id_arg)]
        group: u64,
    },
}

/// A group id, plain or as printed (`group:3`).
fn group_id_arg(text: &str) -> Result<u64, String> {
    let digits = text.strip_prefix("group:").unwrap_or(text);
    digits.parse::<u64>().map_err(|_| format!("{text:?} is not a group id"))
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

/// Print a command's answer, or its error with its exit code (JSON on
/// stdout with `json`, else on stderr).
fn answer(what: &str, result: Result<String, CliError>, json: bool) -> ExitCode {
    match result {
        Ok(text) => print(what, &text),
        Err(error) => error.report(what, json),
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

/// The matches of the subcommand that runs (the deepest).
fn leaf(matches: &ArgMatches) -> &ArgMatches {
    match matches.subcommand() {
        Some((_, sub)) => leaf(sub),
        None => matches,
    }
}

/// The TLS settings of a command line: a profile's apply only if none is given.
const TLS_FLAGS: [&str; 6] = ["certs", "client", "ca", "cert", "key", "insecure"];

/// Where each setting of a command comes from: the command line and the
/// environment (clap already put them in the flags), then the profile.
struct Context {
    global: GlobalArgs,
    /// The profile's settings, read on first use.
    settings: Option<Settings>,
}

impl Context {
    /// The profile's settings (empty with no profile file and no name).
    fn settings(&mut self) -> Result<&Settings, CliError> {
        if self.settings.is_none() {
            let path = profile_path(|name| std::env::var(name).ok());
            self.settings = Some(load(self.global.profile.as_deref(), path.as_deref())?);
        }
        Ok(self.settings.get_or_insert_with(Settings::default))
    }

    /// The admin addresses: `--admin`, `COHORT_ADMIN`, the profile's `admin`.
    fn admins(&mut self) -> Result<Vec<String>, CliError> {
        let given = crate::cli::http::admin_list(&self.global.admin);
        if !given.is_empty() {
            return Ok(given);
        }
        let settings = self.settings()?;
        if settings.admin.is_empty() {
            return Err(CliError::usage(format!(
                "--admin: missing: give a node's admin port (--admin HOST:PORT,...), set COHORT_ADMIN, or give the \
                 profile an `admin` ({})",
                settings.describe()
            )));
        }
        Ok(settings.admin.clone())
    }

    /// The token: `--token`, `COHORT_ADMIN_TOKEN`, the profile's `token` or `token_file`.
    fn token(&mut self) -> Result<Option<String>, CliError> {
        if let Some(token) = &self.global.token {
            return Ok(Some(token.clone()));
        }
        Ok(self.settings()?.token.clone())
    }

    /// The client ports: `--cluster`, `COHORT_CLUSTER`, the profile's `cluster`.
    fn cluster(&mut self, given: &[String]) -> Result<Vec<String>, CliError> {
        if !given.is_empty() {
            return Ok(given.to_vec());
        }
        let settings = self.settings()?;
        if settings.cluster.is_empty() {
            return Err(CliError::usage(format!(
                "--cluster: missing: give the nodes' client ports (--cluster HOST:PORT,...), set COHORT_CLUSTER, or \
                 give the profile a `cluster` ({})",
                settings.describe()
            )));
        }
        Ok(settings.cluster.clone())
    }

    /// `connect` with the profile's settings where `matches` (the command's
    /// own) has no flag: the TLS block only if no TLS flag was given, the
    /// cluster id if `--cluster-id` was not.
    fn connect(&mut self, connect: &mut ConnectArgs, matches: &ArgMatches) -> Result<(), CliError> {
        let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        let tls_given = TLS_FLAGS.iter().any(|id| given(id));
        let cluster_id_given = given("cluster_id");
        let settings = self.settings()?;
        if !tls_given && settings.has_tls() {
            if let Some(certs) = &settings.certs {
                connect.certs = certs.clone();
            }
            if let Some(client) = &settings.client {
                connect.client = client.clone();
            }
            if let Some((ca, cert, key)) = &settings.files {
                (connect.ca, connect.cert, connect.key) = (Some(ca.clone()), Some(cert.clone()), Some(key.clone()));
            }
            connect.insecure = settings.insecure;
        }
        if !cluster_id_given && let Some(cluster) = settings.cluster_id {
            connect.cluster_id = Some(cluster);
        }
        Ok(())
    }
}

/// A clap error: help and version as clap prints them; with `--json` on the
/// command line, a usage error as JSON; else clap's text (exit 2).
fn parse_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let json = std::env::args_os().any(|arg| arg == "--json");
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => error.exit(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand if json => {
            CliError::usage("a subcommand is missing: `cohort --help` lists them").report("cohort", true)
        }
        _ if json => {
            let text = error.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            let message = first.strip_prefix("error: ").unwrap_or(first);
            CliError::usage(message).report("cohort", true)
        }
        _ => error.exit(),
    }
}

/// `--json` on a command that prints no JSON: refused, so that with
/// `--json` stdout only ever holds JSON.
fn no_json(what: &str) -> CliError {
    CliError::usage(format!("--json: {what} prints no JSON"))
}

/// Parse the command line and run the command; the process's exit code.
pub(crate) fn run() -> ExitCode {
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(error) => return parse_error(error),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => return parse_error(error),
    };
    let json = cli.global.json;
    let mut context = Context { global: cli.global, settings: None };
    let leaf = leaf(&matches);
    match cli.command {
        Command::Certs { .. } | Command::Node { .. } | Command::Completions { .. } if json => {
            let what = match cli.command {
                Command::Certs { .. } => "cohort certs",
                Command::Node { .. } => "cohort node",
                _ => "cohort completions",
            };
            no_json(what).report(what, true)
        }
        Command::Certs { action } => {
            let action = match action {
                CertsCommand::Init { dir, nodes } => crate::cli::CertsAction::Init { dir, nodes },
                CertsCommand::Node { dir, id } => crate::cli::CertsAction::Node { dir, id },
                CertsCommand::Client { dir, name } => crate::cli::CertsAction::Client { dir, name },
            };
            // Every file is written before the first line is printed.
            let result =
                crate::cli::certs_command(&action).map_err(|error| CliError::new(Exit::Failed, error.to_string()));
            answer("cohort certs", result, false)
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "cohort", &mut script);
            print("cohort completions", String::from_utf8_lossy(&script).trim_end())
        }
        Command::Bench(mut args) => {
            args.json = json;
            let result = context.connect(&mut args.connect, leaf).and_then(|()| {
                bench_command(&args).map_err(|error| CliError::new(Exit::of_code(error.exit_code()), error.to_string()))
            });
            answer("cohort bench", result, json)
        }
        Command::Write(mut args) => {
            args.data.json = json;
            let result = data_context(&mut context, &mut args.data, leaf).and_then(|()| {
                write_command(&args).map_err(|error| CliError::new(Exit::of_code(error.exit_code()), error.to_string()))
            });
            answer("cohort write", result, json)
        }
        Command::Read(mut args) => {
            args.json = json;
            let result = data_context(&mut context, &mut args, leaf).and_then(|()| {
                read_command(&args).map_err(|error| CliError::new(Exit::of_code(error.exit_code()), error.to_string()))
            });
            answer("cohort read", result, json)
        }
        Command::Node { config } => run_node(&config),
        Command::Status { group, all_groups } => {
            let rows = match (group.is_empty(), all_groups) {
                (false, _) => GroupRows::Only(group),
                (true, true) => GroupRows::All,
                (true, false) => GroupRows::Summary,
            };
            let result = admin_context(&mut context)
                .and_then(|(admins, token)| crate::cli::status_command(&admins, token.as_deref(), &rows, json));
            answer("cohort status", result, json)
        }
        Command::Groups { action } => {
            let result = admin_context(&mut context).and_then(|(admins, token)| match &action {
                GroupsCommand::List(args) => list_command(&admins, token.as_deref(), args, json),
                GroupsCommand::Describe { group } => describe_command(&admins, token.as_deref(), *group, json),
            });
            answer("cohort groups", result, json)
        }
        Command::Admin { action } => {
            let result = admin_context(&mut context)
                .and_then(|(admins, token)| admin_command(&admins, token.as_deref(), &action.action(), json));
            answer("cohort admin", result, json)
        }
        Command::Demo { nodes, partitions, duration_secs, shards, writers, keep_data, otlp_endpoint, quiesce_secs } => {
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
                Err(error) => CliError::usage(error.to_string()).report("cohort demo", json),
            }
        }
    }
}

/// The admin addresses and token of an admin-port command.
fn admin_context(context: &mut Context) -> Result<(Vec<String>, Option<String>), CliError> {
    Ok((context.admins()?, context.token()?))
}

/// The client ports and connection settings of `write` and `read`.
fn data_context(context: &mut Context, data: &mut DataArgs, matches: &ArgMatches) -> Result<(), CliError> {
    data.cluster = context.cluster(&data.cluster)?;
    context.connect(&mut data.connect, matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cohort").chain(args.iter().copied()))
    }

    #[test]
    fn o4_global_flags_go_before_or_after_the_subcommand() {
        for args in [
            &["--admin", "7301", "--token", "t", "--json", "admin", "freeze"][..],
            &["admin", "--admin", "7301", "freeze", "--token", "t", "--json"][..],
            &["admin", "freeze", "--json", "--admin", "7301", "--token", "t"][..],
        ] {
            let cli = parse(args).unwrap_or_else(|error| panic!("{args:?}: {error}"));
            assert_eq!(
                (cli.global.admin, cli.global.token, cli.global.json),
                (vec!["7301".into()], Some("t".into()), true)
            );
        }
        let cli = parse(&["read", "--group", "3", "--json", "--profile", "prod"]).expect("parses");
        assert_eq!((cli.global.json, cli.global.profile.as_deref()), (true, Some("prod")));
        let cli = parse(&["--json", "groups", "list", "--node", "2", "--role", "primary"]).expect("parses");
        assert!(cli.global.json);
        assert!(parse(&["groups", "list", "--role", "primary"]).is_err(), "--role needs --node");
        assert!(parse(&["groups", "list", "--limit", "0"]).is_err());
        assert!(parse(&["status", "--group", "3", "--all-groups"]).is_err());
        assert!(parse(&["status", "--group", "group:3,4"]).is_ok());
    }

    #[test]
    fn o4_the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn o4_completions_name_every_command() {
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "cohort", &mut script);
            let script = String::from_utf8_lossy(&script);
            for word in ["status", "groups", "describe", "freeze", "profile", "all-groups"] {
                assert!(script.contains(word), "{shell:?} lacks {word}");
            }
        }
    }
}
