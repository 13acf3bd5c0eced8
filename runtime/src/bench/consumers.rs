//! K7: the message log's producers and consumers (`--state message-log`).
//!
//! A producer is a writer whose every request is a batch of `--batch-ops`
//! messages of `--op-size-bytes`, each starting with when it was made: the
//! microseconds since the bench began, 8 bytes little-endian ([`stamped`]).
//! A consumer follows one partition (consumer `i` reads group `i mod
//! groups`) from offset 0 with linearizable reads, each a fetch of up to
//! [`FETCH_MESSAGES_MAX`] messages and [`crate::log_store::FETCH_SIZE_MAX_BYTES`]
//! from the partition's primary, while the producers write. For every
//! message it reads inside the window it records the end-to-end latency
//! (read minus made: the producer's request, replication, the sync, the
//! apply, the consumer's poll and its read) and counts its bytes.
//!
//! Whether the consumers keep up is read from the report: the bytes they
//! read against the bytes produced in the same window, and the lag at the
//! window's end (the messages a partition acknowledged to its producers
//! that its furthest-behind consumer had not read yet).
//!
//! A consumer that finds nothing new waits [`POLL_WAIT`] before it asks
//! again (the store has no long poll), which bounds what polling costs at
//! light load and adds at most that to a message's latency.

use std::time::Duration;

use bytes::Bytes;
use cohort_messages::{GroupId, RequestNumber};

use super::latency::LatencyHistogram;
use super::{Attempt, Bench};
use crate::log_store::{Answer, FETCH_MESSAGES_MAX, decode_answer, fetch};

/// Bytes of the stamp a message starts with.
pub(crate) const STAMP_BYTES: usize = 8;

/// How long a consumer that read nothing new waits before it reads again.
const POLL_WAIT: Duration = Duration::from_millis(1);

/// How long a consumer waits after a read that failed (a refusal, an
/// answer that does not decode) before it tries again.
const FAILED_READ_WAIT: Duration = Duration::from_millis(10);

/// What the consumers measured.
#[derive(Clone, Debug, Default)]
pub(super) struct Consumption {
    /// End-to-end latencies of the messages read inside the window.
    pub end_to_end: LatencyHistogram,
    /// Bytes of the messages read inside the window.
    pub bytes: u64,
    /// Messages retention dropped before a consumer read them (since start).
    pub skipped_messages: u64,
    /// Reads refused for good or answered with a failure or bytes that do
    /// not decode (since start; a healthy run has none).
    pub failed_reads: u64,
}

/// `ops` messages of `size_bytes` each (at least [`STAMP_BYTES`]), made
/// `made_us` after the bench began, as one op batch.
pub(super) fn stamped(made_us: u64, size_bytes: usize, ops: usize) -> Bytes {
    debug_assert!(size_bytes >= STAMP_BYTES, "checked with the options");
    let mut message = vec![0x5A; size_bytes];
    message[..STAMP_BYTES].copy_from_slice(&made_us.to_le_bytes());
    // The options were checked to fit one request.
    cohort_messages::op_batch::encode(&vec![&message[..]; ops]).unwrap_or_default()
}

/// When a message read back was made, if it is one of the bench's.
fn made_us(message: &[u8]) -> Option<u64> {
    message.first_chunk::<STAMP_BYTES>().map(|stamp| u64::from_le_bytes(*stamp))
}

impl Bench {
    /// One consumer: partition `consumer mod groups`, from offset 0, until
    /// the bench stops.
    pub(super) async fn consume_loop(&self, consumer: usize) {
        let group = GroupId((consumer % self.options.groups) as u64);
        let Ok(client) = cohort_client::fresh_client_id() else {
            self.consumption.borrow_mut().failed_reads += 1;
            return;
        };
        let mut offset = 0u64;
        while !self.stopping.get() {
            let request = cohort_core::client::read(client, RequestNumber(1), group, fetch(offset, FETCH_MESSAGES_MAX));
            let answer = match self.attempt_answer(&request).await {
                Attempt::Answered(committed) => committed.result,
                Attempt::Again => continue,
                Attempt::Refused => {
                    self.consumption.borrow_mut().failed_reads += 1;
                    tokio::time::sleep(FAILED_READ_WAIT).await;
                    continue;
                }
            };
            match decode_answer(&answer) {
                Ok(Answer::Messages(messages)) if messages.is_empty() => tokio::time::sleep(POLL_WAIT).await,
                Ok(Answer::Messages(messages)) => {
                    offset += messages.len() as u64;
                    if self.measuring.get() {
                        self.count_read(&messages);
                    }
                }
                Ok(Answer::Trimmed { earliest }) if earliest > offset => {
                    self.consumption.borrow_mut().skipped_messages += earliest - offset;
                    offset = earliest;
                }
                Ok(Answer::Trimmed { .. } | Answer::Failed(_)) | Err(_) => {
                    self.consumption.borrow_mut().failed_reads += 1;
                    tokio::time::sleep(FAILED_READ_WAIT).await;
                }
            }
            self.consumed_offsets.borrow_mut()[consumer] = offset;
        }
    }

    /// Count messages read inside the window, with their latencies.
    fn count_read(&self, messages: &[Bytes]) {
        let read_us = self.epoch.elapsed().as_micros() as u64;
        let mut consumption = self.consumption.borrow_mut();
        for message in messages {
            consumption.bytes += message.len() as u64;
            if let Some(made_us) = made_us(message) {
                consumption.end_to_end.record(read_us.saturating_sub(made_us));
            }
        }
    }

    /// The messages acknowledged to producers that the furthest-behind
    /// consumer of their partition had not read yet, the largest over the
    /// partitions (0 without consumers).
    pub(super) fn consumer_lag_messages(&self) -> u64 {
        let produced = self.produced.borrow();
        let consumed = self.consumed_offsets.borrow();
        consumed
            .iter()
            .enumerate()
            .map(|(consumer, offset)| produced[consumer % produced.len()].saturating_sub(*offset))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k7_a_produced_batch_carries_when_each_message_was_made() {
        let batch = stamped(123_456, 64, 3);
        let messages = cohort_messages::op_batch::decode(&batch).expect("an op batch");
        assert_eq!(messages.len(), 3);
        for message in &messages {
            assert_eq!(message.len(), 64);
            assert_eq!(made_us(message), Some(123_456));
        }
        assert_eq!(made_us(b"short"), None, "a message too short for a stamp has none");
    }
}
