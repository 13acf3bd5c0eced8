//! The simulator's `MemoryStorage`: the conformance suite, its crash model
//! (prefix rule, log before superblocks) and its fault injection (R12).

use cohort_core::storage::conformance::{
    self, Harness, Model, StorageStep, assert_recovered_a_prefix, entry, run_steps, superblock,
};
use cohort_core::storage::memory::MemoryStorage;
use cohort_core::storage::{Storage, StorageError};
use cohort_messages::{GroupId, Op};
use proptest::prelude::*;

struct MemoryHarness;

impl Harness for MemoryHarness {
    type Storage = MemoryStorage;

    fn open_empty(&mut self) -> MemoryStorage {
        MemoryStorage::new()
    }

    fn crash_and_reopen(&mut self, mut storage: MemoryStorage) -> MemoryStorage {
        storage.crash();
        storage
    }
}

/// The model itself passes the suite (so a failure elsewhere is not the suite's).
struct ModelHarness;

impl Harness for ModelHarness {
    type Storage = Model;

    fn open_empty(&mut self) -> Model {
        Model::new()
    }

    fn crash_and_reopen(&mut self, mut storage: Model) -> Model {
        storage.crash();
        storage
    }
}

#[test]
fn memory_storage_passes_the_conformance_suite() {
    conformance::run_all(&mut MemoryHarness);
}

#[test]
fn model_passes_the_conformance_suite() {
    conformance::run_all(&mut ModelHarness);
}

fn expect_ok(result: Result<(), StorageError>) {
    if let Err(error) = result {
        panic!("storage call failed: {error}");
    }
}

/// Stage the same calls on storage and model: a flushed base, then a staged
/// tail of appends, truncations and superblocks over three groups.
fn stage_interrupted_flush(storage: &mut MemoryStorage, model: &mut Model, seed: u64) {
    for target in [storage as &mut dyn Storage, model as &mut dyn Storage] {
        for group in 1..=3 {
            for op in 1..=3 {
                expect_ok(target.append(GroupId(group), &entry(op, 1, group)));
            }
            expect_ok(target.stage_superblock(GroupId(group), &superblock(1, 1)));
        }
        expect_ok(target.flush());
        for group in 1..=3 {
            expect_ok(target.append(GroupId(group), &entry(4, 1, seed)));
            expect_ok(target.truncate_after(GroupId(group), Op(2 + seed % 3)));
            expect_ok(target.append(GroupId(group), &entry(3, 2, seed)));
            expect_ok(target.stage_superblock(GroupId(group), &superblock(2, 3)));
        }
    }
}

#[test]
fn crash_mid_flush_keeps_a_prefix_of_staged_records() {
    let mut kept_lengths = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let mut storage = MemoryStorage::new();
        let mut model = Model::new();
        stage_interrupted_flush(&mut storage, &mut model, seed);
        let staged = storage.staged_record_count();
        storage.crash_mid_flush(seed);
        let recovered = storage.recovered();
        assert_recovered_a_prefix(&recovered, &model, &format!("crash_mid_flush seed {seed}"));
        let flushed = model.recovered();
        let changed = recovered.groups != flushed.groups;
        kept_lengths.insert(changed);
        assert_eq!(storage.staged_record_count(), 0, "seed {seed}: staged records left after a crash ({staged})");
    }
    assert!(kept_lengths.contains(&true) && kept_lengths.contains(&false), "seeds never varied the outcome");
}

#[test]
fn crash_mid_flush_writes_superblocks_only_after_the_whole_log() {
    for seed in 0..200 {
        let mut storage = MemoryStorage::new();
        let mut model = Model::new();
        stage_interrupted_flush(&mut storage, &mut model, seed);
        storage.crash_mid_flush(seed);
        let recovered = storage.recovered();
        let mut whole_log = model.clone();
        expect_ok(whole_log.flush());
        let whole = whole_log.recovered();
        for (group, state) in &recovered.groups {
            if state.superblock == Some(superblock(2, 3)) {
                let want = whole.groups.get(group).map(|state| &state.entries);
                assert_eq!(
                    Some(&state.entries),
                    want,
                    "seed {seed}: {group} has a new superblock but not the whole log"
                );
            }
        }
    }
}

#[test]
fn crash_loses_everything_staged() {
    let mut storage = MemoryStorage::new();
    expect_ok(storage.append(GroupId(1), &entry(1, 1, 1)));
    expect_ok(storage.flush());
    expect_ok(storage.append(GroupId(1), &entry(2, 1, 1)));
    expect_ok(storage.stage_superblock(GroupId(1), &superblock(1, 1)));
    storage.crash();
    let recovered = storage.recovered();
    let group = &recovered.groups[&GroupId(1)];
    assert_eq!(group.entries, vec![entry(1, 1, 1)]);
    assert_eq!(group.superblock, None);
    // The cursor follows the recovered log: op 2 is the next allowed append.
    expect_ok(storage.append(GroupId(1), &entry(2, 2, 2)));
}

#[test]
fn r12_failed_superblock_stage_affects_one_group() {
    let mut storage = MemoryStorage::new();
    storage.fail_next_superblock_stage(GroupId(2));
    expect_ok(storage.stage_superblock(GroupId(1), &superblock(1, 1)));
    assert_eq!(
        storage.stage_superblock(GroupId(2), &superblock(1, 1)),
        Err(StorageError::Injected("superblock stage"))
    );
    expect_ok(storage.stage_superblock(GroupId(3), &superblock(1, 1)));
    expect_ok(storage.flush());
    storage.crash();
    let recovered = storage.recovered();
    assert!(recovered.groups[&GroupId(1)].superblock.is_some());
    assert!(!recovered.groups.contains_key(&GroupId(2)));
    assert!(recovered.groups[&GroupId(3)].superblock.is_some());
    // The fault fired once; the retry succeeds.
    expect_ok(storage.stage_superblock(GroupId(2), &superblock(1, 1)));
    expect_ok(storage.flush());
    assert!(storage.recovered().groups[&GroupId(2)].superblock.is_some());
    assert_eq!(storage.stats().faults_fired, 1);
}

#[test]
fn failed_appends_stage_nothing() {
    let mut storage = MemoryStorage::new();
    storage.fail_next_appends(2);
    assert!(storage.append(GroupId(1), &entry(1, 1, 1)).is_err());
    assert!(storage.append(GroupId(1), &entry(1, 1, 1)).is_err());
    assert_eq!(storage.staged_record_count(), 0);
    expect_ok(storage.append(GroupId(1), &entry(1, 1, 1)));
    assert_eq!(storage.staged_record_count(), 1);
}

#[test]
fn failed_flush_makes_nothing_durable() {
    let mut storage = MemoryStorage::new();
    expect_ok(storage.append(GroupId(1), &entry(1, 1, 1)));
    expect_ok(storage.stage_superblock(GroupId(1), &superblock(1, 1)));
    storage.fail_next_flush();
    assert_eq!(storage.flush(), Err(StorageError::Injected("flush")));
    assert!(storage.recovered().groups.is_empty());
    storage.crash();
    assert!(storage.recovered().groups.is_empty());
}

#[test]
fn clones_are_independent_disks() {
    let mut storage = MemoryStorage::new();
    for op in 0..100 {
        expect_ok(storage.append(GroupId(op % 10), &entry(op / 10 + 1, 1, 1)));
        if op % 10 == 9 {
            expect_ok(storage.flush());
        }
    }
    let before = storage.clone();
    expect_ok(storage.truncate_after(GroupId(1), Op(0)));
    expect_ok(storage.flush());
    assert_ne!(before.recovered(), storage.recovered());
    assert!(before.recovered().groups.contains_key(&GroupId(1)));
}

#[test]
#[should_panic(expected = "leaves a gap")]
fn append_with_a_gap_is_a_caller_bug() {
    let mut storage = MemoryStorage::new();
    let _ = storage.append(GroupId(1), &entry(2, 1, 1));
}

fn steps() -> impl Strategy<Value = Vec<StorageStep>> {
    prop::collection::vec(
        (any::<u8>(), any::<u8>(), any::<u64>()).prop_map(|(action, group, value)| StorageStep {
            action,
            group,
            value,
        }),
        0..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn memory_storage_agrees_with_the_model(steps in steps()) {
        run_steps(&mut MemoryHarness, &steps);
    }
}
