//! `cohort-jepsen`: one Jepsen-style fault run of real `cohort node`
//! processes in network namespaces (needs root, `ip` and `nft`). Prints the
//! seed first and a summary table at the end (with `--json`, one JSON object
//! as the last line); writes summary.json, history.jsonl and run.svg into
//! `--out`. Exit code 0: linearizable, nothing lost, no read of an earlier
//! life of the re-created group; 1: an anomaly; 2:
//! usage or setup; 3: inconclusive (a search timed out or a final read got
//! no answer). See docs/faults.md.

use std::path::PathBuf;
use std::process::ExitCode;

use cohort_sim::jepsen::checker::Verdict;
use cohort_sim::jepsen::{self, Config};

const USAGE: &str = "usage: cohort-jepsen [--seed N] [--seconds S] [--nodes 3] [--out DIR] [--binary PATH] [--json]
  --seed N       nemesis seed (default: from the clock; printed at start)
  --seconds S    workload length, final heal included (default 150)
  --nodes N      nodes (default 3)
  --out DIR      output directory (default target/jepsen/seed-N)
  --binary PATH  the cohort binary (default $COHORT_BINARY, else the newer of
                 target/release/cohort and target/debug/cohort)
  --json         print the summary as one JSON line at the end";

struct Args {
    seed: u64,
    seconds: u64,
    nodes: usize,
    out: Option<PathBuf>,
    binary: Option<PathBuf>,
    json: bool,
}

fn parse(argv: Vec<String>) -> Result<Args, String> {
    let default_seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_secs());
    let mut args = Args { seed: default_seed, seconds: 150, nodes: 3, out: None, binary: None, json: false };
    let mut argv = argv.into_iter();
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--nodes" => args.nodes = value()?.parse().map_err(|e| format!("--nodes: {e}"))?,
            "--out" => args.out = Some(PathBuf::from(value()?)),
            "--binary" => args.binary = Some(PathBuf::from(value()?)),
            "--json" => args.json = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if !(3..=9).contains(&args.nodes) {
        return Err("--nodes must be 3..=9".into());
    }
    if args.seconds < 30 {
        return Err("--seconds must be at least 30".into());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1).collect()) {
        Ok(args) => args,
        Err(error) => {
            if !error.is_empty() {
                eprintln!("cohort-jepsen: {error}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let out = args.out.unwrap_or_else(|| PathBuf::from(format!("target/jepsen/seed-{}", args.seed)));
    let mut config = Config::new(args.seed, args.seconds, out);
    config.nodes = args.nodes;
    config.binary = args.binary;
    eprintln!("cohort-jepsen: seed {} (rerun the same schedule with --seed {})", args.seed, args.seed);
    let report = match jepsen::run(&config) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("cohort-jepsen: {error}");
            return ExitCode::from(2);
        }
    };
    println!("{}", report.table());
    if args.json {
        println!("{}", report.json());
    }
    if report.linearizable == Verdict::No || report.lost_acked_writes > 0 || report.earlier_life_reads > 0 {
        ExitCode::from(1)
    } else if !report.passed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
