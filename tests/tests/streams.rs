//! D1 and D3 in the simulator: state on disk under the faults of
//! `--state disk` (docs/simulator.md, "State on disk"): replicas rebuilt
//! when their state machine came back behind, streamed state transfers in
//! chunks of 64 bytes staged on the simulated disk, receivers crashed
//! mid-transfer.

use cohort_sim::cli::run_catching;
use cohort_sim::storage::StateKind;
use cohort_sim::{Scenario, SimConfig};

fn disk_run(seed: u64, scenario: Scenario) -> SimConfig {
    let mut config = SimConfig::new(seed);
    config.state = StateKind::Disk;
    config.scenario = scenario;
    config
}

fn run_clean(config: SimConfig) -> cohort_sim::Report {
    let seed = config.seed;
    let report = run_catching(config).unwrap_or_else(|panic| panic!("seed {seed}: {panic}"));
    assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
    report
}

/// Reconfigure shape, seed 6008391: a backup took the first chunk of a
/// stream, then its log brought it to the streamed op before the other
/// chunks came; it ignored them (nothing newer than its state) but kept
/// the transfer, asked for it again and again and never repaired from the
/// log, and the group stalled. A transfer the log overtook is now dropped.
#[test]
fn d3_regression_seed_6008391_a_transfer_the_log_overtook_is_dropped() {
    run_clean(disk_run(6_008_391, Scenario::Reconfigure));
}

/// Quiesce-ticks-20 shape, seed 6007052: a replica whose state machine came
/// back behind its storage was rebuilt: its storage removed, then joined
/// empty. A crash after the removal was durable but before its recovering
/// superblock was left no trace of the group, and the next start hosted it
/// as a member that never acknowledged anything; it voted, and an
/// acknowledged write was lost. The removal and the recovering superblock
/// are now one step (`Storage::reset_group`). (With the simulated node put
/// back to remove-then-join, the seed failed again at `dea16d6`.) The
/// mechanism itself is pinned by
/// `d1_a_rebuilt_member_still_recovers_after_a_crash_right_after_its_reset`
/// (actors/core/tests/driver.rs) and the WAL's
/// `d1_an_interrupted_reset_leaves_the_group_whole_or_recovering`.
#[test]
fn d1_regression_seed_6007052_a_rebuild_cut_by_a_crash_still_recovers() {
    let mut config = disk_run(6_007_052, Scenario::Default);
    config.core.timing.commit_quiesce_timeout_ticks = Some(20);
    let report = run_clean(config);
    assert!(report.checkpoints.rebuilt >= 1, "the seed rebuilds a replica");
}

/// Streams install, and some are resumed by a receiver that crashed
/// mid-transfer, in the first hundred seeds of the default disk shape.
#[test]
fn d3_streams_install_and_resume_after_a_receiver_crash() {
    let (mut installed, mut resumed) = (0, 0);
    for seed in 6_000_000..6_000_100 {
        let report = run_clean(disk_run(seed, Scenario::Default));
        installed += report.checkpoints.streamed;
        resumed += report.checkpoints.resumed;
    }
    assert!(installed > 100, "{installed} streams installed");
    assert!(resumed > 5, "{resumed} streams resumed");
}
