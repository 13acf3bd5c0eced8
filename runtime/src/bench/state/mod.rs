//! The state machine the bench's groups run (`--state`, D5), and how big
//! its state is.
//!
//! `register` (the default) is what the bench always ran: every write
//! replaces one value, so the state never grows and a run measures the
//! write path alone. `log` appends every write to the state, as a host's
//! naive log does ([`log::AppendLog`]), so the state grows for the whole
//! run and a run measures what a growing state costs: snapshots that
//! encode all of it, memory, and the write path beside them. Today's
//! state machines live in memory; the persistent state machine of D1 is
//! what this setting is meant to measure next.
//!
//! Each replica's state machine publishes its size through a
//! [`StateBytes`] handle, one relaxed atomic store per apply; the bench
//! reads the largest of them ([`StateSizes::largest_bytes`]) once per
//! timeline sample.

mod log;
mod register;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cohort_core::StateMachine;

use self::log::AppendLog;
use self::register::SizedRegister;

/// What the bench's groups keep.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StateShape {
    /// One value per group, replaced by every write.
    #[default]
    Register,
    /// Every write appended; the state grows by each write's bytes.
    Log,
}

impl StateShape {
    /// The name of `--state` and of the JSON report's `state`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StateShape::Register => "register",
            StateShape::Log => "log",
        }
    }

    /// A new replica's state machine, sized through `sizes`.
    pub(crate) fn state_machine(self, sizes: &StateSizes) -> Box<dyn StateMachine> {
        match self {
            StateShape::Register => Box::new(SizedRegister::new(sizes.handle())),
            StateShape::Log => Box::new(AppendLog::new(sizes.handle())),
        }
    }
}

/// The sizes of every live replica's state, on every node and shard.
#[derive(Clone, Debug, Default)]
pub(crate) struct StateSizes(Arc<Mutex<Vec<Arc<AtomicU64>>>>);

impl StateSizes {
    /// A handle for a new replica. Handles of replicas that ended are
    /// dropped from the registry here, so it holds one per live replica
    /// (and a shard's restarts do not grow it).
    pub(crate) fn handle(&self) -> StateBytes {
        let bytes = Arc::new(AtomicU64::new(0));
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|bytes| Arc::strong_count(bytes) > 1);
        all.push(Arc::clone(&bytes));
        StateBytes(bytes)
    }

    /// The largest state of any live replica.
    pub(crate) fn largest_bytes(&self) -> u64 {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().map(|bytes| bytes.load(Ordering::Relaxed)).max().unwrap_or(0)
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
        assert_eq!(sizes.0.lock().expect("not poisoned").len(), 2, "the ended replica's handle is gone");
    }

    #[test]
    fn d5_each_shape_builds_its_state_machine_and_sizes_it() {
        use cohort_messages::Op;

        let sizes = StateSizes::default();
        let mut register = StateShape::Register.state_machine(&sizes);
        register.apply(Op(1), &[1; 100]);
        register.apply(Op(2), &[2; 100]);
        assert_eq!(sizes.largest_bytes(), 100, "a register holds the last value");
        let mut log = StateShape::Log.state_machine(&sizes);
        log.apply(Op(1), &[1; 100]);
        log.apply(Op(2), &[2; 100]);
        assert_eq!(sizes.largest_bytes(), log.snapshot().len() as u64, "a log holds every write");
        assert_eq!(sizes.largest_bytes(), 208);
        assert_eq!((StateShape::default().as_str(), StateShape::Log.as_str()), ("register", "log"));
    }
}
