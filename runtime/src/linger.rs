//! K5: independent writes to one group gathered into op batches, as a
//! Kafka producer's `linger.ms` and `batch.size` do.
//!
//! A [`Linger`] holds each write for at most [`LingerConfig::linger`], or
//! until [`LingerConfig::batch_ops_max`] writes or
//! [`LingerConfig::batch_size_bytes_max`] bytes are waiting, then sends them
//! as one op batch with [`Client::write_batch`]; each caller gets its own
//! op's result. The group's state machine must take op batches.
//!
//! **Off by default**, and why: [`Client::write`] sends at once. A linger
//! adds up to its time to every write when the load is light, and writes
//! gathered into one batch share one fate: they commit together, a refusal
//! of one op by the state machine's `admit` (T3) refuses the batch, and a
//! timeout leaves all of them unknown. Only the host knows whether its
//! writes are independent enough for that, so it asks for a linger where
//! it wants one (a producer of many small messages, say).
//!
//! Batches of one `Linger` go one at a time (they share the client's id
//! for the group, whose writes are in order); writes that arrive while one
//! is in flight gather into the next, so a busy producer sends larger
//! batches by itself.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use cohort_messages::op_batch::{OP_BATCH_OPS_MAX, encoded_size_bytes};
use cohort_messages::{GroupId, OPERATION_SIZE_MAX_BYTES, Op};
use tokio::sync::oneshot;

use crate::client::{Client, ClientError};

/// How long and how much a [`Linger`] gathers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LingerConfig {
    /// The longest a write waits for others before its batch goes
    /// (default 1 ms).
    pub linger: Duration,
    /// A batch goes once this many writes wait (default 64, at most
    /// `OP_BATCH_OPS_MAX`).
    pub batch_ops_max: usize,
    /// A batch goes once its encoding would reach this many bytes (default
    /// 64 KiB, at most `OPERATION_SIZE_MAX_BYTES`).
    pub batch_size_bytes_max: usize,
}

impl Default for LingerConfig {
    fn default() -> Self {
        LingerConfig { linger: Duration::from_millis(1), batch_ops_max: 64, batch_size_bytes_max: 64 * 1024 }
    }
}

/// One write's answer from a [`Linger`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lingered {
    /// The op its batch committed at.
    pub op: Op,
    /// Its place in the batch: the write is `(op, index)`.
    pub index: usize,
    /// Its result (empty for an `Async` group, Q4).
    pub result: Bytes,
}

type Answer = oneshot::Sender<Result<Lingered, ClientError>>;

/// The writes waiting for their batch.
#[derive(Debug, Default)]
struct Gathering {
    writes: Vec<(Bytes, Answer)>,
    /// Their batch's encoded size.
    size_bytes: usize,
    /// A timer will send what is gathered.
    timer_armed: bool,
}

impl Gathering {
    /// The batch's encoded size with one more op of `size_bytes`.
    fn size_with(&self, size_bytes: usize) -> usize {
        self.size_bytes.max(encoded_size_bytes([])) + encoded_size_bytes([size_bytes]) - encoded_size_bytes([])
    }
}

/// Gathers one group's writes into op batches (see the module docs).
/// Cheap to clone; clones gather into the same batches.
#[derive(Clone)]
pub struct Linger {
    client: Client,
    group: GroupId,
    config: LingerConfig,
    gathering: Arc<Mutex<Gathering>>,
    /// One batch in flight at a time.
    sending: Arc<tokio::sync::Mutex<()>>,
}

impl Client {
    /// K5: a [`Linger`] that gathers writes to `group` into op batches.
    /// Call it, and its writes, inside the node's runtime (as every
    /// `Client` call): a batch is sent from a task of its own.
    pub fn linger(&self, group: GroupId, config: LingerConfig) -> Result<Linger, ClientError> {
        let limits = (1..=OP_BATCH_OPS_MAX).contains(&config.batch_ops_max)
            && (1..=OPERATION_SIZE_MAX_BYTES).contains(&config.batch_size_bytes_max);
        if !limits {
            let detail = format!(
                "a linger of {} ops and {} bytes per batch: 1 to {OP_BATCH_OPS_MAX} ops and 1 to {OPERATION_SIZE_MAX_BYTES} bytes",
                config.batch_ops_max, config.batch_size_bytes_max
            );
            return Err(ClientError::OpBatch { group, detail });
        }
        Ok(Linger { client: self.clone(), group, config, gathering: Arc::default(), sending: Arc::default() })
    }
}

impl Linger {
    /// Write `operation` in the next batch and wait for its result. An
    /// error is its batch's (every write of the batch gets it): a
    /// `ClientError::Timeout` leaves the batch's outcome unknown.
    pub async fn write(&self, operation: impl Into<Bytes>) -> Result<Lingered, ClientError> {
        let operation = operation.into();
        if encoded_size_bytes([operation.len()]) > OPERATION_SIZE_MAX_BYTES {
            return Err(ClientError::TooLarge { size: operation.len(), max: OPERATION_SIZE_MAX_BYTES });
        }
        let (answer, answered) = oneshot::channel();
        self.gather(operation, answer);
        match answered.await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Stopped { group: self.group }),
        }
    }

    /// Put a write in the gathering batch; send the batch if it is full, or
    /// arm the timer that sends it.
    fn gather(&self, operation: Bytes, answer: Answer) {
        let mut gathering = self.gathering.lock().unwrap_or_else(PoisonError::into_inner);
        if !gathering.writes.is_empty() && gathering.size_with(operation.len()) > self.config.batch_size_bytes_max {
            // It would not fit: the batch so far goes, this one starts the next.
            let full = std::mem::take(&mut gathering.writes);
            gathering.size_bytes = 0;
            self.send(full);
        }
        gathering.size_bytes = gathering.size_with(operation.len());
        gathering.writes.push((operation, answer));
        if gathering.writes.len() >= self.config.batch_ops_max
            || gathering.size_bytes >= self.config.batch_size_bytes_max
        {
            let full = std::mem::take(&mut gathering.writes);
            gathering.size_bytes = 0;
            self.send(full);
        } else if !gathering.timer_armed {
            gathering.timer_armed = true;
            let linger = self.clone();
            actix_rt::spawn(async move {
                tokio::time::sleep(linger.config.linger).await;
                let due = {
                    let mut gathering = linger.gathering.lock().unwrap_or_else(PoisonError::into_inner);
                    gathering.timer_armed = false;
                    gathering.size_bytes = 0;
                    std::mem::take(&mut gathering.writes)
                };
                linger.send(due);
            });
        }
    }

    /// Send `writes` as one batch from a task of its own, after the batch
    /// before it, and answer each.
    fn send(&self, writes: Vec<(Bytes, Answer)>) {
        if writes.is_empty() {
            return;
        }
        let linger = self.clone();
        actix_rt::spawn(async move {
            let _in_order = linger.sending.lock().await;
            let (operations, answers): (Vec<Bytes>, Vec<Answer>) = writes.into_iter().unzip();
            match linger.client.write_batch(linger.group, operations).await {
                Ok(written) => {
                    for (index, answer) in answers.into_iter().enumerate() {
                        let result = written.results.get(index).cloned().unwrap_or_default();
                        let _ = answer.send(Ok(Lingered { op: written.op, index, result }));
                    }
                }
                Err(error) => {
                    for answer in answers {
                        let _ = answer.send(Err(error.clone()));
                    }
                }
            }
        });
    }
}
