//! The `cohort` command: `cohort demo` runs a local demo cluster.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use cohort_runtime::demo::{self, DemoOptions};

#[derive(Parser)]
#[command(name = "cohort", version, about = "cohort: a replication engine for Rust programs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Demo { nodes, partitions, duration_secs, shards, writers, json, keep_data } => {
            let options = DemoOptions {
                nodes,
                partitions,
                duration: Duration::from_secs(duration_secs),
                shards,
                writers,
                keep_data,
                progress: true,
            };
            eprintln!(
                "cohort demo: {nodes} nodes on loopback TCP, {partitions} partitions, {duration_secs} s of writes; \
                 the busiest node is killed at 1/3 and restarted at 2/3"
            );
            match demo::run(options) {
                Ok(summary) => {
                    if json {
                        println!("{}", summary.json());
                    } else {
                        println!("{}", summary.table());
                    }
                    if summary.lost_acked_writes == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
                }
                Err(error) => {
                    eprintln!("cohort demo: {error}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
