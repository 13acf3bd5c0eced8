//! State the simulator shares between a state machine and its checkers.
//!
//! The simulator runs on one thread, but a state machine must be `Send`
//! (D2: a node applies a persistent one on its shard's apply worker), so
//! what a simulated state machine shares with the simulator sits behind a
//! lock instead of a `RefCell`. `borrow` and `borrow_mut` read as they did;
//! the lock is never contended.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A value shared by handles (clones share it).
#[derive(Debug, Default)]
pub struct Shared<T>(Arc<Mutex<T>>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(Arc::clone(&self.0))
    }
}

impl<T> Shared<T> {
    /// Share `value`.
    pub fn new(value: T) -> Shared<T> {
        Shared(Arc::new(Mutex::new(value)))
    }

    /// The value, to read.
    pub fn borrow(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value, to change.
    pub fn borrow_mut(&self) -> MutexGuard<'_, T> {
        self.borrow()
    }

    /// True if both handles share one value.
    pub fn ptr_eq(&self, other: &Shared<T>) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
