//! The state machine the bench's groups run (`--state`, D5), and how big
//! its state is.
//!
//! `register` (the default) is what the bench always ran: every write
//! replaces one value, so the state never grows and a run measures the
//! write path alone. `log` appends every write to the state, as a host's
//! naive log does ([`log::AppendLog`]), so the state grows for the whole
//! run and a run measures what a growing state costs: snapshots that
//! encode all of it, memory, and the write path beside them. `disk-log`
//! appends the same way to a file of the state machine's own, which
//! cohort checkpoints instead of snapshotting (D1, [`disk_log::DiskLog`]):
//! the same growth, without the whole-state snapshots. `message-log` (K7)
//! makes each group a partition of the message log the `log` example runs
//! ([`message_log`]), which consumers read by offset as it grows.
//!
//! Each replica's state machine publishes its size through a
//! [`StateBytes`] handle, one relaxed atomic store per apply; the bench
//! reads the largest of them ([`StateSizes::largest_bytes`]) once per
//! timeline sample.

mod disk_log;
mod log;
pub(crate) mod message_log;
mod register;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use std::path::Path;

use cohort_core::StateMachine;
use cohort_messages::GroupId;

use self::disk_log::DiskLog;
use self::log::AppendLog;
use self::message_log::SizedLogStore;
use self::register::SizedRegister;

/// What the bench's groups keep.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StateShape {
    /// One value per group, replaced by every write.
    #[default]
    Register,
    /// Every write appended; the state grows by each write's bytes.
    Log,
    /// As `log`, on a file of the state machine's own, checkpointed (D1).
    DiskLog,
    /// K7: each group a partition of the message log (the `log` example's
    /// store): messages in segment files, read by offset by `--consumers`.
    MessageLog,
}

impl StateShape {
    /// The name of `--state` and of the JSON report's `state`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StateShape::Register => "register",
            StateShape::Log => "log",
            StateShape::DiskLog => "disk-log",
            StateShape::MessageLog => "message-log",
        }
    }

    /// A new replica's state machine of `group`, sized through `sizes`;
    /// `dir` is where its node keeps state machines' files. `apply_inline`:
    /// a `disk-log` applies on the shard's thread instead of its apply
    /// worker (D2, for the comparison). `op_batches`: every write is an op
    /// batch (K5, `--batch-ops` above 1).
    ///
    /// # Panics
    /// If a `disk-log` cannot open its file (the bench's disk failed).
    pub(crate) fn state_machine(
        self,
        sizes: &StateSizes,
        group: GroupId,
        dir: &Path,
        apply_inline: bool,
        op_batches: bool,
    ) -> Box<dyn StateMachine> {
        match self {
            StateShape::Register => Box::new(SizedRegister::new(sizes.handle(), op_batches)),
            StateShape::Log => Box::new(AppendLog::new(sizes.handle(), op_batches)),
            StateShape::DiskLog => match DiskLog::open(dir, group, sizes.handle()) {
                Ok(log) if apply_inline => Box::new(log.inline().op_batches(op_batches)),
                Ok(log) => Box::new(log.op_batches(op_batches)),
                Err(error) => panic!("bench: the disk-log state machine of {group}: {error}"),
            },
            // Its writes are always op batches (a producer's messages).
            StateShape::MessageLog => Box::new(SizedLogStore::open(dir, group, sizes.handle())),
        }
    }
}

/// One live replica's state size, with the index of its node.
type ReplicaSize = (usize, Arc<AtomicU64>);

/// The sizes of every live replica's state, on every node and shard.
#[derive(Clone, Debug, Default)]
pub(crate) struct StateSizes {
    all: Arc<Mutex<Vec<ReplicaSize>>>,
    /// The node the handles made by this value belong to.
    node: usize,
}

impl StateSizes {
    /// The same registry, for the replicas of node `node`.
    pub(crate) fn of_node(&self, node: usize) -> StateSizes {
        StateSizes { all: Arc::clone(&self.all), node }
    }

    /// A handle for a new replica. Handles of replicas that ended are
    /// dropped from the registry here, so it holds one per live replica
    /// (and a shard's restarts do not grow it).
    pub(crate) fn handle(&self) -> StateBytes {
        let bytes = Arc::new(AtomicU64::new(0));
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(_, bytes)| Arc::strong_count(bytes) > 1);
        all.push((self.node, Arc::clone(&bytes)));
        StateBytes(bytes)
    }

    /// The largest state of any live replica.
    pub(crate) fn largest_bytes(&self) -> u64 {
        let all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().map(|(_, bytes)| bytes.load(Ordering::Relaxed)).max().unwrap_or(0)
    }

    /// The state of every live replica of node `node`, summed.
    pub(crate) fn node_bytes(&self, node: usize) -> u64 {
        let all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().filter(|(of, _)| *of == node).map(|(_, bytes)| bytes.load(Ordering::Relaxed)).sum()
    }
}

/// One replica's state size, which its state machine keeps up to date. A
/// replica that ends (its state machine dropped) counts as 0.
#[derive(Debug)]
pub(crate) struct StateBytes(Arc<AtomicU64>);

impl StateBytes {
    pub(crate) fn set(&self, bytes: u64) {
        self.0.store(bytes, Ordering::Relaxed);
    }
}

impl Drop for StateBytes {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d5_the_largest_live_replica_is_reported_and_ended_ones_leave() {
        let sizes = StateSizes::default();
        assert_eq!(sizes.largest_bytes(), 0);
        let (small, large) = (sizes.handle(), sizes.handle());
        small.set(10);
        large.set(1_000);
        assert_eq!(sizes.largest_bytes(), 1_000);
        drop(large);
        assert_eq!(sizes.largest_bytes(), 10, "an ended replica counts as 0");
        let _restarted = sizes.handle();
        assert_eq!(sizes.all.lock().expect("not poisoned").len(), 2, "the ended replica's handle is gone");
    }

    #[test]
    fn d1_a_node_s_replicas_are_summed_apart_from_the_others() {
        let sizes = StateSizes::default();
        let (first, second) = (sizes.of_node(0), sizes.of_node(1));
        let (a, b, c) = (first.handle(), first.handle(), second.handle());
        a.set(10);
        b.set(5);
        c.set(7);
        assert_eq!((sizes.node_bytes(0), sizes.node_bytes(1), sizes.node_bytes(2)), (15, 7, 0));
        assert_eq!(sizes.largest_bytes(), 10, "one registry for every node");
    }

    #[test]
    fn d5_each_shape_builds_its_state_machine_and_sizes_it() {
        use cohort_messages::Op;

        let dir = tempfile::tempdir().expect("temporary directory");
        let sizes = StateSizes::default();
        let mut register = StateShape::Register.state_machine(&sizes, GroupId(0), dir.path(), false, false);
        register.apply(Op(1), &[1; 100]);
        register.apply(Op(2), &[2; 100]);
        assert_eq!(sizes.largest_bytes(), 100, "a register holds the last value");
        let mut log = StateShape::Log.state_machine(&sizes, GroupId(0), dir.path(), false, false);
        log.apply(Op(1), &[1; 100]);
        log.apply(Op(2), &[2; 100]);
        assert_eq!(sizes.largest_bytes(), log.snapshot().len() as u64, "a log holds every write");
        assert_eq!(sizes.largest_bytes(), 208);
        drop((register, log));
        let mut on_disk = StateShape::DiskLog.state_machine(&sizes, GroupId(0), dir.path(), false, false);
        for op in 1..=3 {
            on_disk.apply(Op(op), &[3; 100]);
        }
        assert_eq!(sizes.largest_bytes(), 312, "a disk log holds every write, as the log does");
        assert_eq!(on_disk.durability(), cohort_core::Durability::Persistent);
        assert_eq!(
            (StateShape::default().as_str(), StateShape::Log.as_str(), StateShape::DiskLog.as_str()),
            ("register", "log", "disk-log")
        );
    }
}
