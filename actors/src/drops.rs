//! Dropped frames and messages: one total for the node handle, and the same
//! counts by reason in [`NodeMetrics`]. Every place that drops on a full or
//! closed mailbox, or for a disconnected peer, counts here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics::{DropReason, Mailbox, NodeMetrics};

/// Drop counter shared by a node's actors.
#[derive(Debug)]
pub struct Drops {
    total: AtomicU64,
    metrics: Arc<NodeMetrics>,
}

impl Drops {
    /// A counter that also reports to `metrics`.
    pub fn new(metrics: Arc<NodeMetrics>) -> Drops {
        Drops { total: AtomicU64::new(0), metrics }
    }

    /// Count `count` drops by `mailbox` for `reason`.
    pub fn add(&self, mailbox: Mailbox, reason: DropReason, count: u64) {
        self.total.fetch_add(count, Ordering::Relaxed);
        self.metrics.add_dropped(mailbox, reason, count);
    }

    /// The metrics these drops are counted in.
    pub fn metrics(&self) -> &Arc<NodeMetrics> {
        &self.metrics
    }

    /// Drops so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}
