//! One conformance suite for every [`Storage`] implementation.
//!
//! The simulator trusts [`MemoryStorage`](super::memory::MemoryStorage) to
//! behave like the file storage the runtime uses; this suite is what makes
//! that trust earned. Each check is a plain function that panics with a
//! message naming the check and what differed, so it runs under any test
//! framework (or none). An implementation plugs in through a [`Harness`]:
//! how to get an empty storage and how to crash and reopen one.
//!
//! Run everything with [`run_all`]. [`run_steps`] drives an implementation
//! and the naive [`Model`] through the same sequence of calls, crashing both
//! along the way, and compares what each recovers; the property tests of
//! both implementations feed it random sequences.

mod checks;
mod model;

use bytes::Bytes;
use cohort_messages::{ClientId, GroupId, Incarnation, LogEntry, NodeId, Op, RequestNumber, View};

pub use checks::*;
pub use model::Model;

use super::{Recovered, RecoveredGroup, Snapshot, Storage, StorageError, Superblock};

/// How the suite gets at an implementation.
pub trait Harness {
    /// The implementation under test.
    type Storage: Storage;

    /// A new, empty storage (for files: a new directory). `recover` has not
    /// been called on it yet.
    fn open_empty(&mut self) -> Self::Storage;

    /// Crash: drop `storage` without flushing anything (as SIGKILL would) and
    /// return what a restarted node opens at the same place. `recover` has
    /// not been called on it yet.
    fn crash_and_reopen(&mut self, storage: Self::Storage) -> Self::Storage;
}

/// A check of the suite.
pub type Check<H> = fn(&mut H);

/// Every check, by name.
pub fn all_checks<H: Harness>() -> Vec<(&'static str, Check<H>)> {
    vec![
        ("empty_storage_recovers_nothing", empty_storage_recovers_nothing::<H>),
        ("flushed_entries_survive_a_crash", flushed_entries_survive_a_crash::<H>),
        ("staged_calls_do_not_survive_a_crash", staged_calls_do_not_survive_a_crash::<H>),
        ("append_replaces_the_suffix_at_its_op", append_replaces_the_suffix_at_its_op::<H>),
        ("append_replaces_within_one_flush", append_replaces_within_one_flush::<H>),
        ("truncate_after_drops_the_suffix", truncate_after_drops_the_suffix::<H>),
        ("group_without_anything_left_is_absent", group_without_anything_left_is_absent::<H>),
        ("superblock_is_durable_only_after_flush", superblock_is_durable_only_after_flush::<H>),
        ("superblocks_of_many_groups_share_one_flush", superblocks_of_many_groups_share_one_flush::<H>),
        ("superblock_fields_roundtrip", superblock_fields_roundtrip::<H>),
        (
            "snapshot_is_durable_on_return_and_hides_older_entries",
            snapshot_is_durable_on_return_and_hides_older_entries::<H>,
        ),
        (
            "deferred_snapshot_waits_until_written_then_hides_older_entries",
            deferred_snapshot_waits_until_written_then_hides_older_entries::<H>,
        ),
        ("deferred_snapshot_past_the_log_is_saved_at_once", deferred_snapshot_past_the_log_is_saved_at_once::<H>),
        ("truncation_or_save_after_a_deferred_snapshot", truncation_or_save_after_a_deferred_snapshot::<H>),
        ("snapshot_beyond_the_log_then_append", snapshot_beyond_the_log_then_append::<H>),
        ("newer_snapshot_replaces_older", newer_snapshot_replaces_older::<H>),
        ("staged_entries_stay_staged_across_a_snapshot", staged_entries_stay_staged_across_a_snapshot::<H>),
        ("remove_group_is_durable_and_spares_other_groups", remove_group_is_durable_and_spares_other_groups::<H>),
        ("remove_group_discards_its_staged_calls_only", remove_group_discards_its_staged_calls_only::<H>),
        ("removed_group_can_be_created_again", removed_group_can_be_created_again::<H>),
        ("reset_group_leaves_its_superblock_alone", reset_group_leaves_its_superblock_alone::<H>),
        ("repeated_crashes_change_nothing", repeated_crashes_change_nothing::<H>),
        ("writes_after_recovery_continue_the_log", writes_after_recovery_continue_the_log::<H>),
        ("entry_contents_roundtrip", entry_contents_roundtrip::<H>),
        ("many_groups_interleaved_in_one_flush", many_groups_interleaved_in_one_flush::<H>),
        ("seeded_sequences_agree_with_the_model", seeded_sequences_agree_with_the_model::<H>),
    ]
}

/// Run every check against the harness, printing each name to stderr.
///
/// # Panics
/// On the first check that fails, naming it.
pub fn run_all<H: Harness>(harness: &mut H) {
    for (name, check) in all_checks::<H>() {
        eprintln!("storage conformance: {name}");
        check(harness);
    }
}

// ---------------------------------------------------------------------------
// Values.

/// A log entry whose contents are derived from `(op, view, tag)`, so that two
/// entries for the same op written at different times differ.
pub fn entry(op: u64, view: u32, tag: u64) -> LogEntry {
    LogEntry {
        op: Op(op),
        view: View(view),
        client: ClientId(u128::from(tag) << 64 | u128::from(op)),
        request: RequestNumber(tag.wrapping_mul(31).wrapping_add(op)),
        operation: payload(tag ^ op.rotate_left(17), (tag % 61) as usize),
    }
}

/// `len` deterministic bytes derived from `seed`.
pub fn payload(seed: u64, len: usize) -> Bytes {
    let mut state = seed;
    let bytes: Vec<u8> = (0..len).map(|_| (splitmix64(&mut state) >> 56) as u8).collect();
    Bytes::from(bytes)
}

/// A superblock whose fields are derived from `(view, commit)`.
pub fn superblock(view: u32, commit: u64) -> Superblock {
    let members = (0..(view % 7 + 1)).map(|index| NodeId(u64::from(index) * 1000 + commit)).collect();
    Superblock {
        view: View(view),
        log_view: View(view.saturating_sub(1)),
        commit: Op(commit),
        incarnation: Incarnation(u64::from(view) + 7),
        members,
        replication_quorum: (view % 5) as u8 + 1,
        recovering: view.is_multiple_of(3),
    }
}

/// A snapshot at `op` with data derived from `tag`.
pub fn snapshot(op: u64, view: u32, tag: u64) -> Snapshot {
    Snapshot { op: Op(op), view: View(view), data: payload(tag.wrapping_add(op), (tag % 200) as usize) }
}

/// The splitmix64 generator: small, seeded, good enough for test inputs.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------
// Driving and comparing.

/// `recover` on a freshly opened storage, panicking with `context` on error.
pub fn recover_or_panic<S: Storage>(storage: &mut S, context: &str) -> Recovered {
    match storage.recover() {
        Ok(recovered) => recovered,
        Err(error) => panic!("{context}: recover failed: {error}"),
    }
}

/// Panic with `context` if a storage call failed.
pub fn ok(result: Result<(), StorageError>, context: &str) {
    if let Err(error) = result {
        panic!("{context}: storage call failed: {error}");
    }
}

/// Crash, reopen and recover.
pub fn crash_and_recover<H: Harness>(harness: &mut H, storage: H::Storage, context: &str) -> (H::Storage, Recovered) {
    let mut storage = harness.crash_and_reopen(storage);
    let recovered = recover_or_panic(&mut storage, context);
    (storage, recovered)
}

/// Compare two recovered states group by group, panicking with the first
/// difference.
pub fn assert_same_recovered(got: &Recovered, want: &Recovered, context: &str) {
    let groups = got.groups.keys().chain(want.groups.keys());
    for group in groups {
        let got_group = got.groups.get(group);
        let want_group = want.groups.get(group);
        if got_group != want_group {
            panic!(
                "{context}: {group} differs\n  recovered: {:?}\n  expected:  {:?}",
                got_group.map(describe),
                want_group.map(describe)
            );
        }
    }
}

/// Check the prefix rule: `got` must be what `model` (with its staged calls)
/// would recover if some prefix of its staged log calls had become durable;
/// staged superblocks may be durable only if the whole log prefix was.
pub fn assert_recovered_a_prefix(got: &Recovered, model: &Model, context: &str) {
    let staged_count = model.staged_record_count();
    for count in 0..=staged_count {
        let learner = model.with_log_prefix(count).recovered();
        if prefix_matches(got, &learner, model, count == staged_count) {
            return;
        }
    }
    panic!(
        "{context}: what survived is not a prefix of the staged calls ({staged_count} staged)\n  recovered: {:?}\n  flushed:   {:?}",
        got.groups.iter().map(|(group, state)| (group, describe(state))).collect::<Vec<_>>(),
        model.recovered().groups.iter().map(|(group, state)| (group, describe(state))).collect::<Vec<_>>()
    );
}

fn prefix_matches(got: &Recovered, learner: &Recovered, model: &Model, whole_log: bool) -> bool {
    let empty = RecoveredGroup::default();
    got.groups.keys().chain(learner.groups.keys()).all(|group| {
        let got_group = got.groups.get(group).unwrap_or(&empty);
        let want_group = learner.groups.get(group).unwrap_or(&empty);
        let superblock_ok = got_group.superblock == want_group.superblock
            || (whole_log && got_group.superblock.as_ref() == model.staged_superblock(*group));
        superblock_ok && got_group.entries == want_group.entries && got_group.snapshot == want_group.snapshot
    })
}

/// A short description of a recovered group for failure messages.
fn describe(group: &RecoveredGroup) -> String {
    let entries: Vec<String> = group
        .entries
        .iter()
        .map(|entry| format!("{}@{}#{}", entry.op.get(), entry.view.get(), entry.request.get()))
        .collect();
    format!(
        "superblock {:?}, snapshot {:?}, entries [{}]",
        group.superblock.as_ref().map(|s| (s.view.get(), s.commit.get())),
        group.snapshot.as_ref().map(|s| (s.op.get(), s.data.len())),
        entries.join(" ")
    )
}

/// One step of a generated sequence; [`run_steps`] turns it into a call that
/// respects the contract's preconditions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StorageStep {
    /// Which call (taken modulo the number of kinds).
    pub action: u8,
    /// Which group (taken modulo [`STEP_GROUPS`]).
    pub group: u8,
    /// Everything else: op choice, view, contents.
    pub value: u64,
}

/// One storage call, applied to the implementation and then to the model.
type StorageCall = dyn Fn(&mut dyn Storage) -> Result<(), StorageError>;

/// How many groups [`run_steps`] spreads its calls over.
pub const STEP_GROUPS: u8 = 5;

/// Drive a fresh storage of `harness` and the [`Model`] through `steps`,
/// comparing what they recover at every crash step and at the end.
///
/// # Panics
/// On the first difference, naming the step.
pub fn run_steps<H: Harness>(harness: &mut H, steps: &[StorageStep]) {
    let mut storage = harness.open_empty();
    let mut model = Model::new();
    let recovered = recover_or_panic(&mut storage, "run_steps: initial recover");
    assert_same_recovered(&recovered, &model.recovered(), "run_steps: initial recover");
    for (index, step) in steps.iter().enumerate() {
        let context = format!("run_steps: step {index} {step:?}");
        let group = GroupId(u64::from(step.group % STEP_GROUPS) + 1);
        let cursor = model.cursor(group);
        let value = step.value;
        let call: Box<StorageCall> = match step.action % 13 {
            0..=4 => {
                let op_max = cursor.append_op_max().get();
                let op = if value % 5 == 0 { 1 + (value >> 8) % op_max } else { op_max };
                let entry = entry(op, (value >> 32) as u32 % 4, value);
                Box::new(move |storage| storage.append(group, &entry))
            }
            5 => {
                let op = Op((value >> 8) % (cursor.last_op.get() + 1));
                Box::new(move |storage| storage.truncate_after(group, op))
            }
            6 | 7 => {
                let block = superblock((value >> 8) as u32 % 100, value >> 40);
                Box::new(move |storage| storage.stage_superblock(group, &block))
            }
            8 => Box::new(|storage| storage.flush()),
            9 => {
                let low = cursor.snapshot_op.get();
                let high = cursor.last_op.get().max(low) + u64::from(value % 7 == 0) * 3;
                let op = low + (value >> 8) % (high - low + 1);
                let saved = snapshot(op, (value >> 32) as u32 % 4, value);
                if value & 0x10 == 0 {
                    Box::new(move |storage| storage.save_snapshot(group, &saved))
                } else {
                    Box::new(move |storage| storage.defer_snapshot(group, &saved))
                }
            }
            10 => Box::new(move |storage| storage.remove_group(group)),
            11 => {
                let snapshots_max = (value % 3) as usize;
                Box::new(move |storage| storage.write_deferred_snapshots(snapshots_max).map(|_| ()))
            }
            _ => {
                let (reopened, recovered) = crash_and_recover(harness, storage, &context);
                storage = reopened;
                model.crash();
                assert_same_recovered(&recovered, &model.recovered(), &context);
                continue;
            }
        };
        ok(call(&mut storage), &context);
        ok(call(&mut model), &format!("{context} (model)"));
    }
    ok(storage.flush(), "run_steps: final flush");
    ok(model.flush(), "run_steps: final flush (model)");
    let (_storage, recovered) = crash_and_recover(harness, storage, "run_steps: final crash");
    model.crash();
    assert_same_recovered(&recovered, &model.recovered(), "run_steps: after the final flush and crash");
}

/// `count` steps drawn from `seed`.
pub fn seeded_steps(seed: u64, count: usize) -> Vec<StorageStep> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            let bits = splitmix64(&mut state);
            StorageStep {
                action: (bits & 0xff) as u8,
                group: ((bits >> 8) & 0xff) as u8,
                value: splitmix64(&mut state),
            }
        })
        .collect()
}
