//! The writing side of one client connection: queued answers out to the
//! socket, each releasing its charge on the budgets (H4) once its bytes are
//! written.
//!
//! Small answers queued together leave in one write (K2), copied into one
//! buffer of at most [`WRITE_COALESCE_MAX_BYTES`]; a larger answer is
//! written alone from its own buffer, so the copy never doubles what the
//! budgets count.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use cohort_actors::Port;
use cohort_actors::Stream;
use tokio::io::{AsyncWriteExt, WriteHalf};
use tokio::sync::mpsc;

use super::ClientPort;
use super::budget::Charge;

/// The most bytes of small answers copied together into one write.
pub(super) const WRITE_COALESCE_MAX_BYTES: usize = 64 * 1024;

/// One encoded answer and its hold on the budgets.
#[derive(Debug)]
pub(super) struct Queued {
    /// The whole frame.
    pub(super) frame: Bytes,
    /// Released when this is dropped: after the write, or with the queue.
    pub(super) charge: Charge,
}

/// Write queued answers until the queue closes, a write fails, or one takes
/// longer than the write timeout (the connection then closes, and what is
/// still queued is dropped with its charges).
pub(super) async fn write_answers(
    mut writer: WriteHalf<Stream>,
    mut queued: mpsc::Receiver<Queued>,
    port: Arc<ClientPort>,
    remote: std::net::SocketAddr,
) {
    let mut batch: Vec<Queued> = Vec::new();
    let mut carried: Option<Queued> = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match queued.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut batch_bytes = first.frame.len();
        batch.push(first);
        while batch_bytes < WRITE_COALESCE_MAX_BYTES {
            match queued.try_recv() {
                Ok(next) if batch_bytes + next.frame.len() <= WRITE_COALESCE_MAX_BYTES => {
                    batch_bytes += next.frame.len();
                    batch.push(next);
                }
                Ok(next) => {
                    carried = Some(next);
                    break;
                }
                Err(_) => break,
            }
        }
        let bytes = match batch.as_slice() {
            [one] => one.frame.clone(),
            many => {
                let mut out = BytesMut::with_capacity(batch_bytes);
                for answer in many {
                    out.extend_from_slice(&answer.frame);
                }
                out.freeze()
            }
        };
        debug_assert_eq!(bytes.len(), batch.iter().map(|answer| answer.charge.size_bytes()).sum::<usize>());
        port.metrics.inc_socket_writes(Port::Client);
        let write = async {
            writer.write_all(&bytes).await?;
            writer.flush().await
        };
        match tokio::time::timeout(port.limits.write_timeout, write).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(_) => return port.refuse(remote, "write_timeout"),
        }
        // The bytes are the socket's now: release their charges.
        batch.clear();
    }
}
