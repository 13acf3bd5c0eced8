//! `cohort-sim`: run seeds of the deterministic simulator.

use std::process::ExitCode;

use cohort_sim::{Sim, SimConfig};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse::<u64>().ok())
    };
    let seeds = value("--seeds").unwrap_or(10);
    let start = value("--seed-start").unwrap_or(0);
    let nodes = value("--nodes").unwrap_or(3) as usize;
    let groups = value("--groups").unwrap_or(4) as usize;
    let quorum = value("--replication-quorum").map(|q| q as usize);
    let (mut violations, mut ops, mut views) = (0u64, 0u64, 0u64);
    for seed in start..start + seeds {
        let mut config = SimConfig::new(seed);
        config.nodes = nodes;
        config.groups = groups;
        config.replication_quorum = quorum;
        let report = match std::panic::catch_unwind(|| Sim::new(config).run()) {
            Ok(report) => report,
            Err(_) => {
                println!("seed={seed} violation: an invariant panicked (rerun with --seeds 1 --seed-start {seed})");
                violations += 1;
                continue;
            }
        };
        for violation in &report.violations {
            println!("seed={seed} violation: {violation}");
        }
        violations += report.violations.len() as u64;
        ops += report.ops_committed;
        views += report.view_changes;
    }
    println!("seeds={seeds} violations={violations} ops_committed={ops} view_changes={views}");
    if violations == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
