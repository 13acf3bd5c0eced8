//! K5 in the simulator: every write is an op batch (`--op-batches`), some of
//! several puts of one key, across crashes, partitions, lost disks and view
//! changes. A batch is one log entry, so a view change keeps or loses it
//! whole; the checkers hold it to that: linearizability (the batch's puts
//! as one put of the last value), exactly-once and agreement on the whole
//! entry, and the client's check that a batch's results are its ops' one
//! after another.

use cohort_sim::SimConfig;
use cohort_sim::cli::run_catching;
use cohort_sim::storage::StateKind;

/// Seeds `seeds` of `shape` run clean with op batches, and batches of
/// several puts were acknowledged in them.
fn clean_with_batches(seeds: std::ops::Range<u64>, shape: impl Fn(&mut SimConfig)) {
    let mut batches = 0;
    for seed in seeds {
        let mut config = SimConfig::new(seed);
        config.op_batches = true;
        shape(&mut config);
        let report = run_catching(config).unwrap_or_else(|panic| panic!("seed {seed}: {panic}"));
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
        batches += report.batches_acknowledged;
    }
    assert!(batches > 0, "the runs acknowledged batches of several puts");
}

#[test]
fn k5_batches_of_ops_hold_under_every_fault_with_state_in_memory() {
    clean_with_batches(0..40, |_| {});
}

#[test]
fn k5_batches_of_ops_hold_with_state_on_disk_applied_off_the_shard() {
    clean_with_batches(0..30, |config| config.state = StateKind::Disk);
}

#[test]
fn k5_batches_of_ops_hold_across_view_changes_with_five_nodes() {
    clean_with_batches(0..20, |config| config.nodes = 5);
}
