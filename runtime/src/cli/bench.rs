//! `cohort bench`'s flags, and which bench they run: without `--cluster`,
//! a cluster started in this process ([`crate::bench::run`], K1); with it,
//! a running cluster over its client ports ([`crate::bench::network`],
//! C2). The shared flags (groups, writers, window, op size, `--json`) mean
//! the same in both; the local cluster's shape (`--nodes`, `--shards`,
//! `--data-dir`, `--state`, `--timeline-secs`) conflicts with `--cluster`,
//! and the network's (`--metrics` and the connection flags) needs it.

use super::connect::{ConnectArgs, ConnectError};
use crate::bench::network::NetworkOptions;
use crate::bench::{self, BenchOptions, StateShape};

/// `cohort bench`'s flags.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct BenchArgs {
    /// Nodes in the cluster started in this process.
    #[arg(long, default_value_t = 3, conflicts_with = "cluster")]
    pub nodes: usize,
    /// Groups (0..N; in this process every node a member of each).
    #[arg(long, default_value_t = 1)]
    pub groups: usize,
    /// Concurrent writers, one write at a time each.
    #[arg(long, default_value_t = 256)]
    pub writers: usize,
    /// The measured window.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Writes before the window, not measured.
    #[arg(long, default_value_t = 2)]
    pub warmup_secs: u64,
    /// Bytes per write.
    #[arg(long, default_value_t = 8)]
    pub op_size_bytes: usize,
    /// Writes per request (K5): above 1, each request carries this many
    /// writes as one op batch, and the groups' state machines take op
    /// batches; every write of a batch counts as a write.
    #[arg(long, default_value_t = 1, conflicts_with = "cluster")]
    pub batch_ops: usize,
    /// Shards (threads) per node of the cluster started in this process.
    #[arg(long, default_value_t = 1, conflicts_with = "cluster")]
    pub shards: usize,
    /// Where the logs of the cluster started in this process go (default:
    /// the system's temp dir; a tmpfs path such as /dev/shm takes the sync
    /// cost away).
    #[arg(long, conflicts_with = "cluster")]
    pub data_dir: Option<std::path::PathBuf>,
    /// What the groups of the cluster started in this process keep:
    /// `register` replaces one value per write, `log` appends every write,
    /// so the state grows for the whole run, `disk-log` appends to a
    /// file of its own that cohort checkpoints instead of snapshotting (D1),
    /// and `message-log` makes each group a partition of the message log
    /// (K7): writers are producers of batches of stamped messages
    /// (--batch-ops of --op-size-bytes, at least 8), read by --consumers.
    #[arg(long, value_enum, default_value_t = StateShape::Register, conflicts_with = "cluster")]
    pub state: StateShape,
    /// With --state message-log: consumers reading the partitions by
    /// offset while the producers write, consumer i reading partition
    /// i mod --groups (default: one per partition).
    #[arg(long, conflicts_with = "cluster")]
    pub consumers: Option<usize>,
    /// A timeline line (writes/s, MB/s, p50, p99, state bytes, RSS) every
    /// this many seconds of the measured window; 0 turns it off.
    #[arg(long, default_value_t = 5, conflicts_with = "cluster")]
    pub timeline_secs: u64,
    /// After the window, stop the last node, remove its data directory and
    /// start it again: its replicas fetch the grown state from the
    /// primaries while the writes go on, and the report gives the rate
    /// beside the disk's floor (D3; with `--state disk-log` the state is
    /// streamed).
    #[arg(long, conflicts_with = "cluster")]
    pub catch_up: bool,
    /// With --catch-up: stop the new node again once half the state went
    /// out, and start it at once (its disk kept): the transfer resumes.
    #[arg(long, requires = "catch_up")]
    pub catch_up_interrupt: bool,
    /// After the window (before --catch-up), stop the last node and start
    /// it again with its disk: the report gives how long it took to open
    /// and to hold again as much state as the other nodes, while the
    /// writes go on (D1: a restart does not rebuild state that is on disk).
    #[arg(long, conflicts_with = "cluster")]
    pub restart: bool,
    /// With --state disk-log: apply on each shard's own thread instead of
    /// its apply worker (D2), to compare the two in the same setup.
    #[arg(long, conflicts_with = "cluster")]
    pub apply_inline: bool,
    /// Print one JSON object as the last line instead of the table (the
    /// global `--json`).
    #[arg(skip)]
    pub json: bool,
    /// Drive a running cluster instead, through these client ports
    /// (`[node] client`), HOST:PORT, comma-separated. It writes to groups
    /// 0..--groups: on `cohort node`'s registers it replaces their values,
    /// so only this flag chooses it (not COHORT_CLUSTER or a profile's
    /// `cluster`; the connection settings do come from the profile).
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    pub cluster: Option<Vec<String>>,
    /// With --cluster: each node's admin port (or `[admin] metrics_listen`),
    /// HOST:PORT, comma-separated, to report the nodes' own figures from
    /// their /metrics over the window.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',', requires = "cluster")]
    pub metrics: Vec<String>,
    #[command(flatten, next_help_heading = "Connection (with --cluster)")]
    #[allow(missing_docs)]
    pub connect: ConnectArgs,
}

/// Why `cohort bench` failed; [`BenchError::exit_code`] says how it exits.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// A connection flag or file is unusable (exit 2).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The bench could not run (exit 2, as it always has for the local bench).
    #[error("{0}")]
    Local(String),
    /// The network bench could not run or a writer hit what retrying cannot fix (exit 1).
    #[error("{0}")]
    Network(String),
}

impl BenchError {
    /// The process's exit code.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            BenchError::Connect(_) | BenchError::Local(_) => 2,
            BenchError::Network(_) => 1,
        }
    }
}

/// Run the bench `args` ask for; the report to print (one JSON line with
/// `--json`, else a table). Progress goes to stderr.
pub(crate) fn bench_command(args: &BenchArgs) -> Result<String, BenchError> {
    match &args.cluster {
        None => {
            let options = local_options(args);
            eprintln!(
                "cohort bench: {} nodes x {} shards, {} groups ({} state), {} writers; {} s warm-up, {} s measured",
                options.nodes,
                options.shards,
                options.groups,
                options.state.as_str(),
                options.writers,
                options.warmup_secs,
                options.seconds
            );
            let report = bench::run(options).map_err(BenchError::Local)?;
            Ok(if args.json { report.json() } else { report.table() })
        }
        Some(addresses) => {
            let client = args.connect.client(addresses)?;
            eprintln!(
                "cohort bench: the cluster at {}, {} groups, {} writers; {} s warm-up, {} s measured{}",
                addresses.join(","),
                args.groups,
                args.writers,
                args.warmup_secs,
                args.seconds,
                if args.metrics.is_empty() {
                    String::new()
                } else {
                    format!("; /metrics of {}", args.metrics.join(","))
                }
            );
            let report = bench::network::run(client, network_options(args)).map_err(BenchError::Network)?;
            Ok(if args.json { report.json() } else { report.table() })
        }
    }
}

fn local_options(args: &BenchArgs) -> BenchOptions {
    BenchOptions {
        nodes: args.nodes,
        groups: args.groups,
        writers: args.writers,
        seconds: args.seconds,
        warmup_secs: args.warmup_secs,
        op_size_bytes: args.op_size_bytes,
        batch_ops: args.batch_ops,
        shards: args.shards,
        data_dir: args.data_dir.clone(),
        state: args.state,
        timeline_secs: args.timeline_secs,
        catch_up: args.catch_up,
        catch_up_interrupt: args.catch_up_interrupt,
        restart: args.restart,
        apply_inline: args.apply_inline,
        consumers: args.consumers.unwrap_or(match args.state {
            StateShape::MessageLog => args.groups,
            _ => 0,
        }),
        progress: true,
    }
}

fn network_options(args: &BenchArgs) -> NetworkOptions {
    NetworkOptions {
        groups: args.groups,
        writers: args.writers,
        seconds: args.seconds,
        warmup_secs: args.warmup_secs,
        op_size_bytes: args.op_size_bytes,
        metrics: args.metrics.clone(),
        progress: true,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Flags::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|flags| flags.args)
    }

    #[test]
    fn k1_without_cluster_the_bench_runs_in_this_process_as_before() {
        let args = parse(&["--nodes", "5", "--shards", "2", "--seconds", "3"]).expect("parses");
        assert_eq!(args.cluster, None);
        let options = local_options(&args);
        assert_eq!((options.nodes, options.shards, options.seconds, options.writers), (5, 2, 3, 256));
        assert_eq!((options.state, options.timeline_secs), (StateShape::Register, 5), "today's bench by default");
    }

    #[test]
    fn d5_state_and_timeline_choose_the_shape_and_the_sampling() {
        let args = parse(&["--state", "log", "--timeline-secs", "10", "--op-size-bytes", "4096"]).expect("parses");
        let options = local_options(&args);
        assert_eq!((options.state, options.timeline_secs, options.op_size_bytes), (StateShape::Log, 10, 4096));
        assert_eq!(local_options(&parse(&["--timeline-secs", "0"]).expect("parses")).timeline_secs, 0);
        assert!(parse(&["--state", "kv"]).is_err(), "an unknown shape");
        assert!(parse(&["--cluster", "a:1", "--state", "log"]).is_err(), "the local cluster's shape");
        assert!(parse(&["--cluster", "a:1", "--timeline-secs", "1"]).is_err());
    }

    #[test]
    fn k5_batch_ops_sets_the_writes_per_request_of_the_local_cluster() {
        assert_eq!(local_options(&parse(&[]).expect("parses")).batch_ops, 1, "no batches by default");
        assert_eq!(local_options(&parse(&["--batch-ops", "64"]).expect("parses")).batch_ops, 64);
        assert!(parse(&["--cluster", "a:1", "--batch-ops", "4"]).is_err(), "the local cluster's state machines");
    }

    #[test]
    fn k7_the_message_log_has_a_consumer_per_partition_unless_told() {
        let args = parse(&["--state", "message-log", "--groups", "16", "--batch-ops", "64"]).expect("parses");
        let options = local_options(&args);
        assert_eq!((options.state, options.consumers, options.batch_ops), (StateShape::MessageLog, 16, 64));
        let told = parse(&["--state", "message-log", "--groups", "4", "--consumers", "8"]).expect("parses");
        assert_eq!(local_options(&told).consumers, 8);
        assert_eq!(local_options(&parse(&[]).expect("parses")).consumers, 0, "no consumers of a register");
        assert!(parse(&["--cluster", "a:1", "--consumers", "2"]).is_err(), "the local cluster's partitions");
    }

    #[test]
    fn c2_bench_cluster_takes_addresses_metrics_and_the_connection_flags() {
        let args = parse(&[
            "--cluster",
            "10.0.0.1:7201,10.0.0.2:7201",
            "--metrics",
            "10.0.0.1:7301",
            "--writers",
            "8",
            "--groups",
            "4",
            "--insecure",
            "--cluster-id",
            "ab",
        ])
        .expect("parses");
        assert_eq!(args.cluster.as_deref(), Some(&["10.0.0.1:7201".to_string(), "10.0.0.2:7201".to_string()][..]));
        let options = network_options(&args);
        assert_eq!((options.writers, options.groups, options.metrics.len()), (8, 4, 1));
        assert!(args.connect.insecure);
    }

    #[test]
    fn c2_the_local_clusters_shape_conflicts_with_cluster_and_metrics_need_it() {
        assert!(parse(&["--cluster", "a:1", "--nodes", "3"]).is_err());
        assert!(parse(&["--cluster", "a:1", "--shards", "2"]).is_err());
        assert!(parse(&["--cluster", "a:1", "--data-dir", "/tmp"]).is_err());
        assert!(parse(&["--metrics", "a:2"]).is_err(), "--metrics without --cluster");
    }
}
