//! Replies in order per client: a client's completed requests to a group
//! finish in the order it numbered them. A reply for an older request after a
//! newer one completed would mean a stale answer was taken as fresh.

use std::collections::HashMap;

use cohort_messages::{GroupId, RequestNumber};

/// The last completed request per (client, group, reads or writes): the
/// simulator's clients number writes per group from 1 and reads in a space
/// of their own (top bit set), each increasing.
#[derive(Debug, Default)]
pub struct ReplyOrder {
    last: HashMap<(usize, GroupId, bool), RequestNumber>,
}

impl ReplyOrder {
    /// `client` completed `request` on `group`.
    pub fn record(&mut self, client: usize, group: GroupId, request: RequestNumber) -> Result<(), String> {
        let read = request.0 >> 63 == 1;
        match self.last.insert((client, group, read), request) {
            Some(previous) if previous >= request => {
                Err(format!("reply out of order: client {client} completed {request} on {group} after {previous}"))
            }
            _ => Ok(()),
        }
    }

    /// `client` goes on under a fresh id (its table entry was evicted):
    /// its writes are numbered from 1 again.
    pub fn restarted(&mut self, client: usize) {
        self.last.retain(|(owner, _, read), _| *owner != client || *read);
    }
}
