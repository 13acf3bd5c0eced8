//! T5, T6: the simulator with a forging peer (`sim/forger.rs`).
//!
//! Each test runs seeds of the binary's default shape with `--forger` and
//! fails with every failing seed, its first violation (or panic) and the
//! command that reproduces it. A seed fails on a panic in any node, on any
//! checker's violation (every node's safety checkers, linearizability,
//! liveness after healing), on a shard whose footprint passes its bounds
//! (`check/footprint.rs`), and, for the replaying member, on any refusal
//! that only forged input causes. The 2,000-seed release sweeps of both
//! modes are recorded in docs/simulator.md ("Forging peer"); these keep CI
//! fast (about 10 s each unoptimised on two cores).

use std::ops::Range;

use cohort_sim::cli::{reproduce, run_catching};
use cohort_sim::sim::Report;
use cohort_sim::{ForgerMode, SimConfig};

/// Seeds per mode.
const SEEDS: Range<u64> = 0..30;

/// Run `mode` over [`SEEDS`]; fail with all failing seeds at once. The
/// reports of the seeds, for checks of what the forger did.
fn run_seeds(mode: ForgerMode) -> Vec<Report> {
    let mut failures = Vec::new();
    let mut reports = Vec::new();
    for seed in SEEDS {
        let config = SimConfig { forger: Some(mode), ..SimConfig::new(seed) };
        match run_catching(config.clone()) {
            Ok(report) if report.violations.is_empty() => reports.push(report),
            Ok(report) => failures.push(format!(
                "seed {seed}: {} violations, first: {} (reproduce: {})",
                report.violations.len(),
                report.violations[0],
                reproduce(&config)
            )),
            Err(panic) => failures.push(format!("seed {seed}: panic: {panic} (reproduce: {})", reproduce(&config))),
        }
    }
    assert!(failures.is_empty(), "{} of {} seeds failed:\n{}", failures.len(), SEEDS.end, failures.join("\n"));
    reports
}

#[test]
fn t5_t6_a_forging_non_member_breaks_no_honest_node() {
    let reports = run_seeds(ForgerMode::NonMember);
    let forged: u64 = reports.iter().map(|report| report.forged_frames).sum();
    let refused: u64 = reports.iter().map(|report| report.refusals.total()).sum();
    let door: u64 = reports.iter().map(|report| report.refusals.not_the_member).sum();
    assert!(forged > 1000, "the forger sent {forged} frames");
    assert!(door > 100 && refused > door, "{refused} refusals, {door} of them at the door: its messages were refused");
}

#[test]
fn t5_t6_a_member_replaying_old_messages_breaks_no_honest_node() {
    let reports = run_seeds(ForgerMode::Replay);
    let replayed: u64 = reports.iter().map(|report| report.forged_frames).sum();
    let others: u64 = reports.iter().map(|report| report.refusals.not_the_member).sum();
    assert!(replayed > 1000, "the member replayed {replayed} frames");
    assert!(others > 0, "frames other members wrote, resent by the replaying member, are refused at the door");
}
