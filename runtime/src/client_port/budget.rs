//! H4: the bytes of answers the client port holds for clients that have not
//! read them, bounded per connection and per node.
//!
//! Counting requests in flight does not bound memory: 256 reads of a 1 MiB
//! value are 256 MiB of answers, and a client that never reads would have
//! the node hold them all until the write timeout. So every answer is
//! charged its encoded size ([`cohort_messages::Message::frame_size_bytes`])
//! *before* it is encoded, against two budgets, and keeps the charge until
//! its bytes have been handed to the socket (or dropped with the
//! connection):
//!
//! - the connection's, `[client] answer_bytes_max`;
//! - the node's, `[client] answer_bytes_node_max`, shared by every
//!   connection, so that many connections cannot add up past it. A
//!   connection may hold up to [`ANSWER_RESERVE_BYTES`] of small answers
//!   outside it, so that clients that fill the node's budget and do not
//!   read still let every other client's greetings, refusals, redirects and
//!   small answers through.
//!
//! An answer waits for its budget (holding the state machine's result,
//! which the register shares rather than copies, and nothing encoded), and
//! while one does, or a budget is full, the connection reads no more
//! requests: they wait in the socket and the client's writes block
//! (backpressure), counted in `cohort_client_reads_paused_total`.
//!
//! An answer larger than a whole budget is charged the whole budget
//! (`min(size, budget)`): it waits until the budget is empty, then goes out
//! alone. So one connection holds at most `max(answer_bytes_max, its
//! largest answer)`, and the node at most `max(answer_bytes_node_max, its
//! largest answer)` plus [`ANSWER_RESERVE_BYTES`] per connection. Answers are
//! charged the connection's budget first, then the node's, always in that
//! order, and a charge is only ever released by a write or a close, which
//! wait on nothing here: no cycle, so no deadlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cohort_actors::{AnswerBudget, NodeMetrics};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The largest either budget may be: tokio's semaphores count permits in
/// a `u32` per acquire (4 GiB less a byte).
pub const ANSWER_BUDGET_MAX_BYTES: usize = u32::MAX as usize;

/// The smallest `answer_bytes_max` the config takes: below it, a
/// connection would pause after every few small answers.
pub const ANSWER_BUDGET_MIN_BYTES: usize = 64 * 1024;

/// What each connection may queue of answers no larger than this outside
/// the node's budget (it still counts against the connection's).
pub const ANSWER_RESERVE_BYTES: usize = 64 * 1024;

const _: () = {
    assert!(ANSWER_RESERVE_BYTES <= ANSWER_BUDGET_MIN_BYTES);
    assert!(ANSWER_BUDGET_MIN_BYTES <= ANSWER_BUDGET_MAX_BYTES);
};

/// Permits for `bytes`, which the constructors keep within a `u32`.
fn permits(bytes: usize) -> u32 {
    debug_assert!(bytes <= ANSWER_BUDGET_MAX_BYTES);
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// The node's budget, shared by every connection of the client port.
#[derive(Debug)]
pub(super) struct NodeBudget {
    bytes: Arc<Semaphore>,
    max_bytes: usize,
    /// Signalled whenever bytes of this budget are released.
    released: Notify,
    metrics: Arc<NodeMetrics>,
}

impl NodeBudget {
    /// A budget of `max_bytes`, clamped to what a semaphore can count.
    pub(super) fn new(max_bytes: usize, metrics: Arc<NodeMetrics>) -> Arc<NodeBudget> {
        let max_bytes = max_bytes.clamp(1, ANSWER_BUDGET_MAX_BYTES);
        Arc::new(NodeBudget { bytes: Arc::new(Semaphore::new(max_bytes)), max_bytes, released: Notify::new(), metrics })
    }
}

/// One connection's budget, and its share of the node's.
#[derive(Debug)]
pub(super) struct ConnectionBudget {
    node: Arc<NodeBudget>,
    bytes: Arc<Semaphore>,
    max_bytes: usize,
    /// Small answers' room outside the node's budget.
    reserve: Arc<Semaphore>,
    /// Bytes of answers queued now (their sizes, not their charges).
    queued_bytes: AtomicUsize,
    /// Answers waiting for the connection's budget.
    waiting_connection: AtomicUsize,
    /// Answers waiting for the node's budget.
    waiting_node: AtomicUsize,
    /// Signalled whenever this connection's bytes are released or an
    /// answer stops waiting.
    released: Notify,
}

impl ConnectionBudget {
    /// A budget of `max_bytes` (clamped as the node's) under `node`.
    pub(super) fn new(node: &Arc<NodeBudget>, max_bytes: usize) -> Arc<ConnectionBudget> {
        let max_bytes = max_bytes.clamp(1, ANSWER_BUDGET_MAX_BYTES);
        Arc::new(ConnectionBudget {
            node: Arc::clone(node),
            bytes: Arc::new(Semaphore::new(max_bytes)),
            max_bytes,
            reserve: Arc::new(Semaphore::new(ANSWER_RESERVE_BYTES)),
            queued_bytes: AtomicUsize::new(0),
            waiting_connection: AtomicUsize::new(0),
            waiting_node: AtomicUsize::new(0),
            released: Notify::new(),
        })
    }

    /// Charge an answer of `size_bytes` to both budgets, waiting for room;
    /// `None` only if a semaphore was closed, which nothing does. Dropping
    /// the future gives back what it had taken.
    pub(super) async fn charge(self: &Arc<Self>, size_bytes: usize) -> Option<Charge> {
        let connection = {
            let _waiting = Waiting::new(self, &self.waiting_connection);
            let bytes = size_bytes.min(self.max_bytes);
            Arc::clone(&self.bytes).acquire_many_owned(permits(bytes)).await.ok()?
        };
        let reserve = if size_bytes <= ANSWER_RESERVE_BYTES {
            Arc::clone(&self.reserve).try_acquire_many_owned(permits(size_bytes)).ok()
        } else {
            None
        };
        let pool = match reserve {
            Some(reserve) => reserve,
            None => {
                let _waiting = Waiting::new(self, &self.waiting_node);
                let bytes = size_bytes.min(self.node.max_bytes);
                Arc::clone(&self.node.bytes).acquire_many_owned(permits(bytes)).await.ok()?
            }
        };
        let queued_bytes = self.queued_bytes.fetch_add(size_bytes, Ordering::AcqRel) + size_bytes;
        self.node.metrics.add_client_answer_bytes(size_bytes, queued_bytes);
        debug_assert!(
            queued_bytes <= self.max_bytes.max(size_bytes),
            "H4: {queued_bytes} answer bytes queued on a connection whose budget is {}",
            self.max_bytes
        );
        Some(Charge { budget: Arc::clone(self), size_bytes, permits: Some((connection, pool)) })
    }

    /// Wait until this connection may read another request: none of its
    /// answers waits for a budget, and each budget has room (the node's,
    /// or this connection's reserve). A pause is counted once, by the
    /// budget that caused it.
    pub(super) async fn room(&self) {
        let mut paused = None;
        loop {
            // Made before the check, so a release between the two is not missed.
            let connection_released = self.released.notified();
            let node_released = self.node.released.notified();
            let Some(budget) = self.full() else { return };
            if paused.is_none() {
                self.node.metrics.inc_client_reads_paused(budget);
                paused = Some(budget);
            }
            match budget {
                AnswerBudget::Connection => connection_released.await,
                AnswerBudget::Node => {
                    tokio::select! {
                        () = connection_released => {}
                        () = node_released => {}
                    }
                }
            }
        }
    }

    /// Which budget, if any, should stop this connection reading now: the
    /// node's when an answer of this connection waits for it (what the
    /// connection holds then is stuck behind the node), else the
    /// connection's when it is spent or an answer waits for it, else the
    /// node's when neither it nor this connection's reserve has room.
    fn full(&self) -> Option<AnswerBudget> {
        if self.waiting_node.load(Ordering::Acquire) > 0 {
            return Some(AnswerBudget::Node);
        }
        if self.waiting_connection.load(Ordering::Acquire) > 0 || self.bytes.available_permits() == 0 {
            return Some(AnswerBudget::Connection);
        }
        let node_full = self.node.bytes.available_permits() == 0 && self.reserve.available_permits() == 0;
        node_full.then_some(AnswerBudget::Node)
    }

    /// Bytes of answers queued on this connection now.
    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Acquire)
    }
}

/// Counts one answer waiting for a budget while it lives.
struct Waiting<'a> {
    budget: &'a ConnectionBudget,
    count: &'a AtomicUsize,
}

impl<'a> Waiting<'a> {
    fn new(budget: &'a ConnectionBudget, count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Waiting { budget, count }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let before = self.count.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a waiting answer was counted");
        self.budget.released.notify_waiters();
    }
}

/// An answer's hold on its budgets, released when dropped (after its
/// bytes were written, or with its connection).
#[derive(Debug)]
pub(super) struct Charge {
    budget: Arc<ConnectionBudget>,
    size_bytes: usize,
    /// The connection's permits, and the node's or the reserve's.
    permits: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

impl Charge {
    /// The size of the answer charged.
    pub(super) fn size_bytes(&self) -> usize {
        self.size_bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let before = self.budget.queued_bytes.fetch_sub(self.size_bytes, Ordering::AcqRel);
        debug_assert!(before >= self.size_bytes, "H4: released {} of {before} queued", self.size_bytes);
        let node = &self.budget.node;
        node.metrics.sub_client_answer_bytes(self.size_bytes);
        // The permits go back before anyone is told, so a woken reader sees the room.
        drop(self.permits.take());
        self.budget.released.notify_waiters();
        node.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn node_budget(max_bytes: usize) -> (Arc<NodeMetrics>, Arc<NodeBudget>) {
        let metrics = Arc::new(NodeMetrics::new());
        let node = NodeBudget::new(max_bytes, Arc::clone(&metrics));
        (metrics, node)
    }

    /// Whether `future` finishes within a short wait (it is pending if not).
    async fn ready<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(50), future).await.ok()
    }

    #[tokio::test]
    async fn h4_answers_past_the_connection_budget_wait_and_pause_reading_until_bytes_are_written() {
        let (metrics, node) = node_budget(1 << 20);
        let connection = ConnectionBudget::new(&node, 100_000);
        let first = connection.charge(70_000).await.expect("fits");
        assert!(ready(connection.room()).await.is_some(), "30,000 bytes of room left: reading goes on");
        let waiting = tokio::spawn({
            let connection = Arc::clone(&connection);
            async move { connection.charge(70_000).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(ready(connection.room()).await.is_none(), "an answer waits: reading pauses");
        assert_eq!(metrics.client_reads_paused(AnswerBudget::Connection), 1);
        assert_eq!(connection.queued_bytes(), 70_000);
        drop(first);
        let second = waiting.await.expect("joined").expect("charged once the first is written");
        assert_eq!(connection.queued_bytes(), 70_000);
        assert_eq!(metrics.client_answer_bytes().connection_peak_bytes, 70_000, "never both at once");
        drop(second);
        assert_eq!(metrics.client_answer_bytes().queued_bytes, 0);
    }

    #[tokio::test]
    async fn h4_an_answer_larger_than_either_budget_takes_the_whole_budget_and_goes_alone() {
        let (metrics, node) = node_budget(100_000);
        let connection = ConnectionBudget::new(&node, 80_000);
        let small = connection.charge(1_000).await.expect("fits");
        let large = tokio::spawn({
            let connection = Arc::clone(&connection);
            async move { connection.charge(500_000).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!large.is_finished(), "it waits for the whole budget");
        drop(small);
        let large = large.await.expect("joined").expect("charged min(size, budget)");
        assert_eq!(connection.queued_bytes(), 500_000);
        assert!(ready(connection.charge(1)).await.is_none(), "nothing joins it");
        drop(large);
        assert!(ready(connection.charge(1)).await.is_some(), "the budget is whole again");
        assert_eq!(metrics.client_answer_bytes().connection_peak_bytes, 500_000);
    }

    #[tokio::test]
    async fn h4_the_node_budget_caps_every_connection_together_and_small_answers_use_the_reserve() {
        let (metrics, node) = node_budget(300_000);
        let (a, b) = (ConnectionBudget::new(&node, 250_000), ConnectionBudget::new(&node, 250_000));
        let held_a = a.charge(150_000).await.expect("fits both");
        let held_b = b.charge(150_000).await.expect("the node's last 150,000");
        let blocked = tokio::spawn({
            let b = Arc::clone(&b);
            async move { b.charge(70_000).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!blocked.is_finished(), "b has room, the node does not");
        assert!(ready(b.room()).await.is_none(), "b stops reading for the node");
        assert_eq!(metrics.client_reads_paused(AnswerBudget::Node), 1);
        // A third connection's small answers still go, out of its reserve.
        let c = ConnectionBudget::new(&node, 250_000);
        assert!(ready(c.room()).await.is_some(), "c may read: its reserve has room");
        let small = ready(c.charge(ANSWER_RESERVE_BYTES)).await.expect("not waiting").expect("charged");
        assert_eq!(metrics.client_answer_bytes().queued_bytes, 300_000 + ANSWER_RESERVE_BYTES as u64);
        assert!(ready(c.room()).await.is_none(), "reserve and node both full: c pauses too");
        assert_eq!(metrics.client_reads_paused(AnswerBudget::Node), 2);
        drop(held_a);
        let charged = blocked.await.expect("joined").expect("charged once a's bytes are written");
        drop((held_b, charged, small));
        assert_eq!(metrics.client_answer_bytes().queued_bytes, 0);
        assert_eq!(metrics.client_answer_bytes().queued_peak_bytes, 300_000 + ANSWER_RESERVE_BYTES as u64);
    }

    #[tokio::test]
    async fn h4_a_charge_given_up_while_waiting_leaves_nothing_behind() {
        let (metrics, node) = node_budget(100_000);
        let connection = ConnectionBudget::new(&node, 100_000);
        let held = connection.charge(100_000).await.expect("fits");
        assert!(ready(connection.charge(10)).await.is_none(), "dropped while waiting");
        drop(held);
        assert!(ready(connection.room()).await.is_some(), "nothing counts as waiting any more");
        assert_eq!(metrics.client_answer_bytes().queued_bytes, 0);
    }
}
