//! The checkers of a run's history: per key, linearizability against a
//! register whose write returns the value it replaced (porcupine-rs, with
//! the simulator's [`RegisterModel`], plus the re-creation that empties it:
//! [`LivesModel`]), the final-read check for lost acknowledged writes, and
//! H3's check that no read of a re-created group returns a value of an
//! earlier life. Pure functions of the history, so the test can feed them
//! synthetic histories without root.
//!
//! # Unknown (`info`) writes
//! A write whose outcome is unknown may take effect at any time after its
//! invocation, or never. Left open-ended (return time `i64::MAX`) such writes
//! make the search blow up, so two sound reductions come first. Values are
//! unique, and every write returns the value it replaced, so a write's value
//! is seen by whoever reads it or overwrites it with an `ok` answer:
//! - an `info` write whose value no `ok` operation ever returned is dropped:
//!   had it taken effect, the next operation that saw the register would
//!   have returned its value, so any linearization with it becomes one
//!   without it, and the other way round (place it last);
//! - an `info` write whose value was returned gets the earliest return time
//!   among those observers as its own: it must precede each of them.
//!
//! `fail` operations did not take effect and are left out, as are reads
//! without an answer (a read changes nothing).
//!
//! # Lost acknowledged writes (the final read)
//! After the heal and the end of the workload every key is read once more.
//! Let `R` be the write whose value that final read returned. The read is
//! correct iff no acknowledged write was *invoked after `R` completed*:
//! such a write took effect after `R` (real-time order), so the register can
//! only hold `R`'s value again if that write was lost. Every acknowledged
//! write invoked after `R` completed is counted as lost. If `R` is an `info`
//! write, its completion is unbounded and nothing is lost; if the value is
//! 0 (the initial one) every acknowledged write is lost; a value nobody
//! wrote counts every acknowledged write as lost and is named as corrupt.
//! Concurrent writes are therefore all allowed to be last: of writes that
//! overlap, any one may win.
//!
//! # Deleted and created again (H3)
//! A group deleted and created again under its id starts empty: each
//! [`Recreation`] is one more operation of its key, from the first delete
//! sent to the creation recorded, that sets the register to 0 (the empty
//! value) at one point in between. A replica of the old life may answer
//! until its node applied the delete (docs/metadata.md, "A group id's
//! lives"), and a write in flight across the pair may apply to the new
//! life; both fit inside that interval. A re-creation the operator gave up
//! on may take effect at any time after it began, or never.
//!
//! The final-read check of such a key counts only writes acknowledged
//! after the last re-creation was recorded (earlier ones were deleted with
//! their life), and none if the last re-creation's outcome is unknown.
//! Apart from the search, every read invoked after a re-creation was
//! recorded that returns a value whose write was acknowledged before that
//! re-creation began is listed as an *earlier-life read*: the new life
//! started with the old one's data.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use porcupine_rs::{CheckResult, Model, Operation};
use serde::Serialize;

use crate::jepsen::history::{OpKind, OpRecord, Recreation, seconds};
use crate::linearizability::{RegisterModel, RegisterOp};

/// The register of [`RegisterModel`], whose group may be deleted and
/// created again: a re-creation empties it (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct LivesModel;

/// An operation of [`LivesModel`].
#[derive(Clone, Debug)]
pub enum LivesOp {
    /// A read or write, as [`RegisterModel`] has it.
    Register(RegisterOp),
    /// The group deleted and created again: the register is empty.
    Recreate,
}

impl Model for LivesModel {
    type State = u64;
    type Op = LivesOp;
    /// Index of the op in the key's history (a re-creation has none).
    type Metadata = usize;

    fn init() -> u64 {
        RegisterModel::init()
    }

    fn step(state: &u64, op: &LivesOp) -> (bool, u64) {
        match op {
            LivesOp::Register(op) => RegisterModel::step(state, op),
            LivesOp::Recreate => (true, RegisterModel::init()),
        }
    }
}

/// A three-valued answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Checked and holds.
    Yes,
    /// Checked and broken.
    No,
    /// Not decided (search timed out, or nothing to check against).
    Unknown,
}

impl Verdict {
    /// The word for reports.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Yes => "yes",
            Verdict::No => "no",
            Verdict::Unknown => "unknown",
        }
    }

    /// No if any is no, else unknown if any is unknown, else yes.
    pub fn all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        verdicts.into_iter().fold(Verdict::Yes, |acc, v| match (acc, v) {
            (Verdict::No, _) | (_, Verdict::No) => Verdict::No,
            (Verdict::Unknown, _) | (_, Verdict::Unknown) => Verdict::Unknown,
            _ => Verdict::Yes,
        })
    }
}

/// One key's result.
#[derive(Clone, Debug, Serialize)]
pub struct KeyCheck {
    /// The key (= group id).
    pub key: u64,
    /// Operations given to the linearizability search.
    pub ops_checked: usize,
    /// `info` writes kept (their value was seen), with a bounded return time.
    pub info_writes_kept: usize,
    /// `info` writes dropped (their value was never seen).
    pub info_writes_dropped: usize,
    /// Linearizable?
    pub linearizable: Verdict,
    /// Why not, or why unknown.
    pub detail: Option<String>,
    /// The value of the final read, if one was answered.
    pub final_read: Option<u64>,
    /// The last acknowledged write (latest completion), as (value, completed s).
    pub last_acked_write: Option<(u64, f64)>,
    /// Acknowledged writes the final read shows as lost (their values).
    pub lost_acked_writes: Vec<u64>,
    /// The final read returned a value nobody wrote.
    pub corrupt: bool,
    /// Re-creations of the group (H3) recorded, and given up on.
    pub recreations: (usize, usize),
    /// H3: reads after a re-creation that returned a value acknowledged
    /// before it began, as (value, read invoked s).
    pub earlier_life_reads: Vec<(u64, f64)>,
}

/// The checkers' result over every key.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// Per key, in key order.
    pub keys: Vec<KeyCheck>,
    /// Over all keys.
    pub linearizable: Verdict,
    /// Lost acknowledged writes over all keys.
    pub lost_acked_writes: usize,
    /// Keys whose final read got no answer (the lost-write check could not run).
    pub keys_without_final_read: Vec<u64>,
    /// H3: earlier-life reads over all keys.
    pub earlier_life_reads: usize,
}

impl CheckReport {
    /// Linearizable on every key, no acknowledged write lost, no read of a
    /// re-created group that saw an earlier life, with a final read on
    /// every key.
    pub fn passed(&self) -> bool {
        self.linearizable == Verdict::Yes
            && self.lost_acked_writes == 0
            && self.earlier_life_reads == 0
            && self.keys_without_final_read.is_empty()
    }
}

/// Check `ops` and `recreations` on each of `keys`. Reads invoked at or
/// after `final_after_ns` are the final reads. `timeout` bounds the search
/// per key.
pub fn check(
    ops: &[OpRecord],
    recreations: &[Recreation],
    keys: &[u64],
    final_after_ns: u64,
    timeout: Duration,
) -> CheckReport {
    let mut by_key: BTreeMap<u64, (Vec<&OpRecord>, Vec<&Recreation>)> =
        keys.iter().map(|key| (*key, (Vec::new(), Vec::new()))).collect();
    for op in ops {
        by_key.entry(op.key).or_default().0.push(op);
    }
    for recreation in recreations {
        by_key.entry(recreation.key).or_default().1.push(recreation);
    }
    let keys: Vec<KeyCheck> = by_key
        .into_iter()
        .map(|(key, (ops, recreations))| check_key(key, &ops, &recreations, final_after_ns, timeout))
        .collect();
    CheckReport {
        linearizable: Verdict::all(keys.iter().map(|key| key.linearizable)),
        lost_acked_writes: keys.iter().map(|key| key.lost_acked_writes.len()).sum(),
        keys_without_final_read: keys.iter().filter(|key| key.final_read.is_none()).map(|key| key.key).collect(),
        earlier_life_reads: keys.iter().map(|key| key.earlier_life_reads.len()).sum(),
        keys,
    }
}

fn check_key(
    key: u64,
    ops: &[&OpRecord],
    recreations: &[&Recreation],
    final_after_ns: u64,
    timeout: Duration,
) -> KeyCheck {
    let (mut operations, kept, dropped) = operations(ops);
    operations.extend(recreations.iter().map(|recreation| recreate_operation(recreation)));
    let (linearizable, detail) = linearizable(&operations, ops, timeout);
    let final_read =
        ops.iter().filter(|op| op.kind == OpKind::Read && op.invoke_ns >= final_after_ns).find_map(|op| op.ok_value());
    let last_acked_write = ops
        .iter()
        .filter(|op| op.is_ok())
        .filter_map(|op| Some((op.written()?, op.complete_ns)))
        .max_by_key(|(_, complete)| *complete)
        .map(|(value, complete)| (value, seconds(complete)));
    // Only writes acknowledged in the last life count (see the module docs).
    let acked_since_ns = match recreations.iter().max_by_key(|recreation| recreation.invoke_ns) {
        None => Some(0),
        Some(last) if last.is_done() => Some(last.complete_ns),
        Some(_) => None,
    };
    let (lost_acked_writes, corrupt) = match (final_read, acked_since_ns) {
        (Some(value), Some(since_ns)) => lost_writes(ops, value, since_ns),
        _ => (Vec::new(), false),
    };
    KeyCheck {
        key,
        ops_checked: operations.len(),
        info_writes_kept: kept,
        info_writes_dropped: dropped,
        linearizable,
        detail,
        final_read,
        last_acked_write,
        lost_acked_writes,
        corrupt,
        recreations: (
            recreations.iter().filter(|recreation| recreation.is_done()).count(),
            recreations.iter().filter(|recreation| !recreation.is_done()).count(),
        ),
        earlier_life_reads: earlier_life_reads(ops, recreations),
    }
}

/// A re-creation as an operation of the search: it empties the register
/// once, between its first delete and its recorded creation (unbounded if
/// its outcome is unknown).
fn recreate_operation(recreation: &Recreation) -> Operation<LivesModel> {
    Operation {
        client_id: None,
        call_time: time(recreation.invoke_ns),
        return_time: if recreation.is_done() { time(recreation.complete_ns) } else { i64::MAX },
        op: LivesOp::Recreate,
        metadata: None,
    }
}

/// H3: reads invoked after a re-creation was recorded that returned a
/// value whose write was acknowledged before the re-creation began.
fn earlier_life_reads(ops: &[&OpRecord], recreations: &[&Recreation]) -> Vec<(u64, f64)> {
    let acked_at: HashMap<u64, u64> =
        ops.iter().filter(|op| op.is_ok()).filter_map(|op| Some((op.written()?, op.complete_ns))).collect();
    let mut found = Vec::new();
    for read in ops.iter().filter(|op| op.kind == OpKind::Read) {
        let Some(value) = read.ok_value().filter(|value| *value != 0) else { continue };
        let Some(acked_ns) = acked_at.get(&value) else { continue };
        let earlier = recreations.iter().any(|recreation| {
            recreation.is_done() && recreation.complete_ns < read.invoke_ns && *acked_ns < recreation.invoke_ns
        });
        if earlier {
            found.push((value, seconds(read.invoke_ns)));
        }
    }
    found
}

/// The search's operations (see the module docs), and how many `info`
/// writes were kept and dropped.
fn operations(ops: &[&OpRecord]) -> (Vec<Operation<LivesModel>>, usize, usize) {
    // The earliest completion of an `ok` op that returned each value.
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for op in ops {
        if let Some(value) = op.ok_value() {
            debug_assert!(matches!(op.kind, OpKind::Read | OpKind::Write { .. }), "a client's op");
            let at = seen.entry(value).or_insert(op.complete_ns);
            *at = (*at).min(op.complete_ns);
        }
    }
    let (mut kept, mut dropped) = (0, 0);
    let mut operations = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        let (register_op, return_ns) = match (op.kind, op.ok_value()) {
            (OpKind::Read, Some(value)) => (RegisterOp::Get { value }, op.complete_ns),
            (OpKind::Write { value }, Some(old)) => (RegisterOp::Put { value, old: Some(old) }, op.complete_ns),
            (OpKind::Write { value }, None) if op.is_info() => match seen.get(&value) {
                Some(observed) => {
                    kept += 1;
                    (RegisterOp::Put { value, old: None }, (*observed).max(op.invoke_ns + 1))
                }
                None => {
                    dropped += 1;
                    continue;
                }
            },
            _ => continue,
        };
        operations.push(Operation {
            client_id: u32::try_from(op.process).ok(),
            call_time: time(op.invoke_ns),
            return_time: time(return_ns),
            op: LivesOp::Register(register_op),
            metadata: Some(index),
        });
    }
    (operations, kept, dropped)
}

fn time(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX - 1)
}

fn linearizable(
    operations: &[Operation<LivesModel>],
    ops: &[&OpRecord],
    timeout: Duration,
) -> (Verdict, Option<String>) {
    // The timeout variant that answers Unknown: the `_info_timeout` one
    // answers Illegal when it runs out of time (docs/faults.md).
    match porcupine_rs::check_operations_timeout::<LivesModel>(operations, timeout) {
        CheckResult::Ok => (Verdict::Yes, None),
        CheckResult::Unknown => {
            (Verdict::Unknown, Some(format!("the search did not finish within {} s", timeout.as_secs_f64())))
        }
        CheckResult::Illegal => (Verdict::No, Some(explain(operations, ops))),
    }
}

/// Re-run a failing search with diagnostics: how far it got, and the first
/// operation it could not place.
fn explain(operations: &[Operation<LivesModel>], ops: &[&OpRecord]) -> String {
    let (_, info) = porcupine_rs::check_operations_info::<LivesModel>(operations);
    let longest = info.partial_linearizations.iter().flatten().max_by_key(|order| order.len()).cloned();
    let placed: BTreeSet<usize> = longest.unwrap_or_default().into_iter().collect();
    let first = (0..operations.len())
        .filter(|index| !placed.contains(index))
        .min_by_key(|index| operations[*index].call_time)
        .and_then(|index| operations[index].metadata)
        .and_then(|at| ops.get(at));
    let mut text =
        format!("{} ops admit no linearization; the search placed at most {}", operations.len(), placed.len());
    if let Some(op) = first {
        text.push_str(&format!(
            "; first op it could not place: process {} {:?} invoked {:.3} s, completed {:.3} s: {:?}",
            op.process,
            op.kind,
            seconds(op.invoke_ns),
            seconds(op.complete_ns),
            op.completion
        ));
    }
    text
}

/// The acknowledged writes a final read of `value` shows as lost, and
/// whether `value` was never written (see the module docs). Only writes
/// invoked at or after `since_ns` count (the last life's).
fn lost_writes(ops: &[&OpRecord], value: u64, since_ns: u64) -> (Vec<u64>, bool) {
    let acked = || {
        ops.iter()
            .filter(|op| op.is_ok() && op.invoke_ns >= since_ns)
            .filter_map(|op| Some((op.written()?, op.invoke_ns)))
    };
    if value == 0 {
        return (acked().map(|(written, _)| written).collect(), false);
    }
    let Some(writer) = ops.iter().find(|op| op.written() == Some(value)) else {
        return (acked().map(|(written, _)| written).collect(), true);
    };
    if writer.is_info() {
        return (Vec::new(), false);
    }
    let lost = acked().filter(|(_, invoked)| *invoked > writer.complete_ns).map(|(written, _)| written).collect();
    (lost, false)
}
