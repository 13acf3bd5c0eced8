//! Checker: the client history is linearizable, one register per
//! (group, key).
//!
//! The search itself is porcupine-rs (Wing & Gong's algorithm with Lowe's
//! cache); this file only states the sequential specification and turns the
//! simulator's [`HistoryOp`]s into timed operations.
//!
//! # The specification
//! Every (group, key) is an independent register that starts at 0.
//! - `Get` returns the value.
//! - `Put(v)` returns the old value and writes `v`.
//! - `Cas(expected, new)` returns the old value and writes `new` iff the old
//!   value equals `expected`.
//!
//! # Time
//! Within one simulator tick, replies reach clients (network delivery) before
//! clients send new requests, so an op invoked at tick `t` gets time `2t + 1`
//! and an op that returned at tick `t` gets `2t`: an op that returned in the
//! same tick another was invoked precedes it, as it did in the run.
//!
//! # Unknown outcomes
//! An op without a reply may or may not have taken effect. A write of that
//! kind gets the return time `i64::MAX`, so the search may place it anywhere
//! after its invocation, including after everything else (which is the same
//! as never). A read without a reply constrains nothing and is left out.

use std::collections::BTreeMap;
use std::fmt;

use cohort_messages::GroupId;
use porcupine_rs::{CheckResult, Model, Operation};

use crate::client::HistoryOp;
use crate::kv::KvOp;

/// One register operation as the checker sees it. `old`/`value` is what the
/// client was told; `None` means the outcome is unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOp {
    /// A read that returned `value`.
    Get {
        /// The value read.
        value: u64,
    },
    /// A write of `value` that returned `old` (None: unknown).
    Put {
        /// The value written.
        value: u64,
        /// The value it replaced, as returned.
        old: Option<u64>,
    },
    /// A compare-and-set that returned `old` (None: unknown).
    Cas {
        /// The value it expected.
        expected: u64,
        /// The value it writes on a match.
        new: u64,
        /// The value it found, as returned.
        old: Option<u64>,
    },
}

/// The sequential specification of one register. See the module docs.
#[derive(Clone, Debug)]
pub struct RegisterModel;

impl Model for RegisterModel {
    type State = u64;
    type Op = RegisterOp;
    /// Index of the op in the simulator's history.
    type Metadata = usize;

    fn init() -> u64 {
        0
    }

    fn step(state: &u64, op: &RegisterOp) -> (bool, u64) {
        let current = *state;
        match *op {
            RegisterOp::Get { value } => (value == current, current),
            RegisterOp::Put { value, old } => (old.is_none_or(|old| old == current), value),
            RegisterOp::Cas { expected, new, old } => {
                let written = if current == expected { new } else { current };
                (old.is_none_or(|old| old == current), written)
            }
        }
    }
}

/// A (group, key) whose history admits no linearization.
#[derive(Clone, Debug)]
pub struct LinearizabilityViolation {
    /// The seed of the run.
    pub seed: u64,
    /// The group.
    pub group: GroupId,
    /// The key.
    pub key: u64,
    /// Operations checked on this key.
    pub ops: usize,
    /// Of those, writes with an unknown outcome.
    pub unknown: usize,
    /// The longest order the search could build before it got stuck.
    pub longest_linearized: usize,
    /// The earliest-invoked op missing from that order, as the client saw it.
    pub first_unplaced: Option<HistoryOp>,
}

impl fmt::Display for LinearizabilityViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "linearizability broken (seed {}): {} key {}: {} ops ({} writes with unknown outcome) admit no \
             linearization; the search placed at most {}",
            self.seed, self.group, self.key, self.ops, self.unknown, self.longest_linearized
        )?;
        if let Some(op) = &self.first_unplaced {
            let returned = op.returned_tick.map_or_else(|| "never".to_string(), |tick| format!("tick {tick}"));
            let output = op.output.map_or_else(|| "nothing".to_string(), |value| value.to_string());
            write!(
                f,
                "; first op it could not place: client {} {:?} invoked tick {}, returned {returned} with {output}",
                op.client, op.op, op.invoked_tick
            )?;
        }
        Ok(())
    }
}

/// The operations of the history, per (group, key), in history order.
pub fn partition(history: &[HistoryOp]) -> BTreeMap<(GroupId, u64), Vec<Operation<RegisterModel>>> {
    let mut keys: BTreeMap<(GroupId, u64), Vec<Operation<RegisterModel>>> = BTreeMap::new();
    for (index, entry) in history.iter().enumerate() {
        if let Some(operation) = operation(index, entry) {
            keys.entry((entry.group, entry.op.key())).or_default().push(operation);
        }
    }
    keys
}

fn operation(index: usize, entry: &HistoryOp) -> Option<Operation<RegisterModel>> {
    if entry.refused {
        return None; // Never applied (see `SimClient::evicted`).
    }
    // A reply without a decodable value is an unknown output, not a wrong one.
    let old = entry.returned_tick.and(entry.output);
    let op = match entry.op {
        KvOp::Get { .. } => RegisterOp::Get { value: old? },
        KvOp::Put { value, .. } => RegisterOp::Put { value, old },
        KvOp::Cas { expected, new, .. } => RegisterOp::Cas { expected, new, old },
        // K5: the puts of one batch apply together, so to a register they
        // are one put of the last value that found the first's old value
        // (the client checks the results in between, `client::batch_output`).
        KvOp::Puts { first, count, .. } => RegisterOp::Put { value: first + count - 1, old },
    };
    let return_time = match entry.returned_tick {
        Some(tick) => time(tick, 0),
        None => i64::MAX,
    };
    Some(Operation {
        client_id: u32::try_from(entry.client).ok(),
        call_time: time(entry.invoked_tick, 1),
        return_time,
        op,
        metadata: Some(index),
    })
}

fn time(tick: u64, offset: u64) -> i64 {
    i64::try_from(tick.saturating_mul(2).saturating_add(offset)).unwrap_or(i64::MAX - 1)
}

/// Check every (group, key) of `history`; one violation per key that is not
/// linearizable, in (group, key) order.
pub fn check(seed: u64, history: &[HistoryOp]) -> Vec<LinearizabilityViolation> {
    partition(history)
        .into_iter()
        .filter(|(_, ops)| !porcupine_rs::check_operations::<RegisterModel>(ops))
        .map(|((group, key), ops)| explain(seed, group, key, &ops, history))
        .collect()
}

/// Re-run the search on a failing key to say how far it got.
fn explain(
    seed: u64,
    group: GroupId,
    key: u64,
    ops: &[Operation<RegisterModel>],
    history: &[HistoryOp],
) -> LinearizabilityViolation {
    let (result, info) = porcupine_rs::check_operations_info::<RegisterModel>(ops);
    debug_assert_eq!(result, CheckResult::Illegal);
    let longest = info.partial_linearizations.iter().flatten().max_by_key(|order| order.len());
    let placed: Vec<usize> = longest.cloned().unwrap_or_default();
    let first_unplaced = (0..ops.len())
        .filter(|index| !placed.contains(index))
        .min_by_key(|index| ops[*index].call_time)
        .and_then(|index| ops[index].metadata)
        .and_then(|at| history.get(at).cloned());
    LinearizabilityViolation {
        seed,
        group,
        key,
        ops: ops.len(),
        unknown: ops.iter().filter(|op| op.return_time == i64::MAX).count(),
        longest_linearized: placed.len(),
        first_unplaced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: usize, op: KvOp, invoked: u64, returned: Option<u64>, output: Option<u64>) -> HistoryOp {
        HistoryOp {
            client,
            group: GroupId(1),
            op,
            invoked_tick: invoked,
            returned_tick: returned,
            output,
            committed_op: None,
            refused: false,
            torn: false,
        }
    }

    fn assert_linearizable(history: &[HistoryOp]) {
        let violations: Vec<String> = check(1, history).iter().map(ToString::to_string).collect();
        assert!(violations.is_empty(), "{violations:#?}");
    }

    #[test]
    fn sequential_and_concurrent_history_passes() {
        let history = vec![
            op(0, KvOp::Put { key: 7, value: 5 }, 1, Some(4), Some(0)),
            op(1, KvOp::Get { key: 7 }, 5, Some(6), Some(5)),
            // Two overlapping writes: either order explains the reads that follow.
            op(0, KvOp::Put { key: 7, value: 6 }, 10, Some(20), Some(5)),
            op(1, KvOp::Cas { key: 7, expected: 6, new: 9 }, 11, Some(15), Some(6)),
            op(2, KvOp::Get { key: 7 }, 21, Some(22), Some(9)),
            // A failed Cas returns the value it found and writes nothing.
            op(2, KvOp::Cas { key: 7, expected: 1, new: 2 }, 23, Some(24), Some(9)),
            // Another key is independent.
            op(3, KvOp::Get { key: 8 }, 23, Some(24), Some(0)),
        ];
        assert_linearizable(&history);
    }

    #[test]
    fn unknown_write_may_or_may_not_take_effect() {
        let took_effect = vec![
            op(0, KvOp::Put { key: 1, value: 3 }, 1, None, None),
            op(1, KvOp::Get { key: 1 }, 10, Some(11), Some(3)),
        ];
        assert_linearizable(&took_effect);
        let did_not = vec![
            op(0, KvOp::Put { key: 1, value: 3 }, 1, None, None),
            op(1, KvOp::Get { key: 1 }, 10, Some(11), Some(0)),
        ];
        assert_linearizable(&did_not);
        // An unanswered read constrains nothing.
        let read = vec![op(1, KvOp::Get { key: 1 }, 10, None, None)];
        assert_linearizable(&read);
    }

    #[test]
    fn lost_acknowledged_write_fails() {
        let history = vec![
            op(0, KvOp::Put { key: 2, value: 11 }, 1, Some(3), Some(0)),
            // Invoked after the Put completed, yet it misses it.
            op(1, KvOp::Get { key: 2 }, 3, Some(5), Some(0)),
        ];
        let violations = check(42, &history);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let violation = &violations[0];
        assert_eq!((violation.seed, violation.group, violation.key), (42, GroupId(1), 2));
        let text = violation.to_string();
        assert!(text.contains("seed 42") && text.contains("key 2"), "{text}");
    }

    #[test]
    fn same_tick_return_precedes_invoke() {
        // The Put returned at tick 3, the Get was invoked at tick 3: the Get
        // came later and must see the write.
        let history = vec![
            op(0, KvOp::Put { key: 2, value: 11 }, 1, Some(3), Some(0)),
            op(1, KvOp::Get { key: 2 }, 3, Some(4), Some(0)),
        ];
        assert_eq!(check(1, &history).len(), 1);
        // Overlapping: a Get invoked before the Put returned may miss it.
        let history = vec![
            op(0, KvOp::Put { key: 2, value: 11 }, 1, Some(3), Some(0)),
            op(1, KvOp::Get { key: 2 }, 2, Some(4), Some(0)),
        ];
        assert_linearizable(&history);
    }

    #[test]
    fn wrong_cas_result_fails() {
        let history = vec![
            op(0, KvOp::Put { key: 0, value: 4 }, 1, Some(2), Some(0)),
            // A Cas that reports success against a value nobody wrote.
            op(0, KvOp::Cas { key: 0, expected: 9, new: 1 }, 3, Some(4), Some(9)),
        ];
        assert_eq!(check(1, &history).len(), 1);
    }
}
