//! The storage conformance suite (shared with `MemoryStorage`) on real files,
//! and the property test of recovery over random call sequences compared
//! with the reference model.

mod common;

use cohort_core::storage::conformance::{self, StorageStep, run_steps};
use proptest::prelude::*;

use common::{FileHarness, roomy_config, small_segments_config};

#[test]
fn file_storage_passes_the_conformance_suite() {
    conformance::run_all(&mut FileHarness::new(roomy_config()));
}

#[test]
fn file_storage_with_small_segments_passes_the_conformance_suite() {
    // Rotation and segment removal under every check (the 64 KiB entry check
    // needs larger records, so it runs in the test above only).
    let mut harness = FileHarness::new(small_segments_config());
    for (name, check) in conformance::all_checks::<FileHarness>() {
        if name != "entry_contents_roundtrip" {
            eprintln!("storage conformance (small segments): {name}");
            check(&mut harness);
        }
    }
}

fn steps() -> impl Strategy<Value = Vec<StorageStep>> {
    prop::collection::vec(
        (any::<u8>(), any::<u8>(), any::<u64>()).prop_map(|(action, group, value)| StorageStep {
            action,
            group,
            value,
        }),
        0..250,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Recovery after any sequence of append/truncate/superblock/flush/
    /// snapshot/remove/crash equals the model's.
    #[test]
    fn recovery_agrees_with_the_model_over_random_sequences(steps in steps()) {
        run_steps(&mut FileHarness::new(small_segments_config()), &steps);
    }
}
