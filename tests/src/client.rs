//! Simulated clients: one outstanding request each, retries that reuse the
//! request number, redirects followed, and a history for the checkers. The
//! exactly-once rules (registration, numbering, matching answers, judging
//! them) are the core's own (`cohort_core::client`), as in every client of
//! a node. A client's first write to a group (and its first after a fresh
//! id) is preceded by the id's registration (H5): the history op is invoked
//! when the registration is sent, as a host's `Client::write` call is, and
//! the registration itself is no kv operation, so it enters no history and
//! no checker's list of writes.

use std::collections::HashMap;

use cohort_core::client::{self, Sequence, Verdict};
use cohort_messages::{ClientId, GroupId, Op, Redirect, Reply, Request, RequestKind, RequestNumber};

use crate::kv::{KvOp, result_value};
use crate::node::node_index;
use crate::rng::Rng;

/// One operation as the client saw it.
#[derive(Clone, Debug)]
pub struct HistoryOp {
    /// Client index.
    pub client: usize,
    /// Group.
    pub group: GroupId,
    /// The operation.
    pub op: KvOp,
    /// Tick of the first send.
    pub invoked_tick: u64,
    /// Tick of the successful reply; `None` if the outcome is unknown.
    pub returned_tick: Option<u64>,
    /// The returned value (old value for writes, value for reads).
    pub output: Option<u64>,
    /// The op a write committed at.
    pub committed_op: Option<Op>,
    /// A write refused on its first send because the group's client table
    /// no longer knew the client (evicted): it was never applied, and the
    /// checkers leave it out.
    pub refused: bool,
    /// K5: an op batch answered with results that are not its ops' one
    /// after another (a checker's violation).
    pub torn: bool,
}

/// A request waiting for its reply.
#[derive(Clone, Debug)]
pub struct Outstanding {
    /// The request (resent as is on retry): the write, or the registration
    /// that goes before it.
    pub request: Request,
    /// While `request` is the registration: the write's kind and
    /// operation, sent once the registration is answered.
    pub held: Option<(RequestKind, bytes::Bytes)>,
    /// Index in the history.
    pub history: usize,
    /// Tick of the last send.
    pub sent_tick: u64,
    /// Where it went last.
    pub target: usize,
    /// How many times it was sent (retries and redirects included).
    pub sends: u32,
}

/// One client.
#[derive(Clone, Debug)]
pub struct SimClient {
    /// Its index.
    pub index: usize,
    /// Its id.
    pub id: ClientId,
    /// Its writes per group (each group's client table takes a client's
    /// registration as request 1, then its writes from 2).
    pub writes: HashMap<GroupId, Sequence>,
    /// The request in flight.
    pub outstanding: Option<Outstanding>,
    /// Primary guesses per group.
    pub guess: HashMap<GroupId, usize>,
    /// Not before this tick (backoff after an error).
    pub wait_until: u64,
    /// The run's salt of its ids.
    salt: u64,
    /// Fresh ids taken after an eviction ([`SimClient::evicted`]).
    pub restarts: u64,
    /// K5: every write is an op batch.
    op_batches: bool,
}

/// What a client wants sent.
pub struct Send {
    /// Node index.
    pub to: usize,
    /// The request.
    pub request: Request,
}

impl SimClient {
    /// A fresh client; `op_batches`: it sends every write as an op batch (K5).
    pub fn new(index: usize, seed_salt: u64, op_batches: bool) -> SimClient {
        SimClient {
            index,
            id: Self::id_of(seed_salt, index, 0),
            writes: HashMap::new(),
            outstanding: None,
            guess: HashMap::new(),
            wait_until: 0,
            salt: seed_salt,
            restarts: 0,
            op_batches,
        }
    }

    /// The id of client `index` after `restarts` fresh starts.
    fn id_of(salt: u64, index: usize, restarts: u64) -> ClientId {
        ClientId((u128::from(salt) << 64) | (u128::from(restarts) << 32) | (index as u128 + 1))
    }

    /// The group's client table no longer knows this client (it was
    /// evicted: more clients wrote to the group than it holds) and refused
    /// the write in flight. The client goes on under a fresh id, which
    /// registers anew with every group, as `cohort_core::client` says. A write
    /// refused on its first send was never applied (the table refuses
    /// before the log); one sent before may have been, so its outcome
    /// stays unknown.
    pub fn evicted(&mut self, now: u64, history: &mut [HistoryOp]) {
        if let Some(outstanding) = self.outstanding.take() {
            history[outstanding.history].refused = outstanding.sends == 1;
        }
        self.restarts += 1;
        self.id = Self::id_of(self.salt, self.index, self.restarts);
        self.writes.clear();
        self.wait_until = now + 3;
    }

    /// Maybe start a new operation.
    pub fn start(
        &mut self,
        now: u64,
        group: GroupId,
        op: KvOp,
        nodes: usize,
        history: &mut Vec<HistoryOp>,
        rng: &mut Rng,
    ) -> Option<Send> {
        if self.outstanding.is_some() || now < self.wait_until {
            return None;
        }
        // Writes are numbered per group from 2, after the registration;
        // reads never enter the client table, so they consume nothing there.
        // Each read still gets a number of its own (top bit set, then its
        // history index): a late or duplicated reply to an earlier read must
        // not answer this one.
        let (request, held) = if matches!(op, KvOp::Get { .. }) {
            (client::read(self.id, RequestNumber((1 << 63) | history.len() as u64), group, op.encode()), None)
        } else {
            let id = self.id;
            let writes = self.writes.entry(group).or_insert_with(|| Sequence::new(id, group));
            let kind = if self.op_batches { RequestKind::WriteBatch } else { RequestKind::Write };
            let operation = op.operation(self.op_batches);
            match writes.registration() {
                Some(registration) => (registration, Some((kind, operation))),
                None => (Request { kind, ..writes.write(operation) }, None),
            }
        };
        history.push(HistoryOp {
            client: self.index,
            group,
            op,
            invoked_tick: now,
            returned_tick: None,
            output: None,
            committed_op: None,
            refused: false,
            torn: false,
        });
        let target = self.guess.get(&group).copied().unwrap_or_else(|| rng.below(nodes as u64) as usize);
        self.outstanding = Some(Outstanding {
            request: request.clone(),
            held,
            history: history.len() - 1,
            sent_tick: now,
            target,
            sends: 1,
        });
        Some(Send { to: target, request })
    }

    /// Resend after `retry_ticks` without an answer, to another node.
    pub fn retry(&mut self, now: u64, retry_ticks: u64, nodes: usize, rng: &mut Rng) -> Option<Send> {
        let outstanding = self.outstanding.as_mut()?;
        if now < outstanding.sent_tick + retry_ticks || now < self.wait_until {
            return None;
        }
        outstanding.sent_tick = now;
        outstanding.sends += 1;
        // A write that follows its registration goes where the registration
        // was answered; a resend tries another node.
        if outstanding.sends > 1 {
            outstanding.target = rng.below(nodes as u64) as usize;
        }
        Some(Send { to: outstanding.target, request: outstanding.request.clone() })
    }

    /// A reply arrived. Returns the history index it completed, if any.
    pub fn on_reply(&mut self, now: u64, reply: &Reply, history: &mut [HistoryOp]) -> Option<usize> {
        let outstanding = self.outstanding.as_ref()?;
        if !client::answers(&outstanding.request, reply) {
            return None; // A late duplicate of an older answer.
        }
        match client::verdict(reply) {
            // The registration was answered: the write goes at the next
            // retry pass (its first send), to the same node.
            Verdict::Done { op, .. } if outstanding.held.is_some() => {
                let group = outstanding.request.group;
                let writes = self.writes.get_mut(&group)?;
                writes.registered(op);
                let outstanding = self.outstanding.as_mut()?;
                let (kind, operation) = outstanding.held.take()?;
                outstanding.request = Request { kind, ..writes.write(operation) };
                outstanding.sent_tick = 0;
                outstanding.sends = 0;
                None
            }
            Verdict::Done { op, result } => {
                let index = outstanding.history;
                let entry = &mut history[index];
                entry.returned_tick = Some(now);
                entry.output = if outstanding.request.kind == RequestKind::WriteBatch {
                    let (output, torn) = batch_output(&entry.op, result);
                    entry.torn = torn;
                    output
                } else {
                    result_value(result)
                };
                if outstanding.request.kind.is_write() {
                    entry.committed_op = Some(op);
                }
                self.outstanding = None;
                Some(index)
            }
            // Retry the same request number soon (exactly-once makes it
            // safe). A refusal is never right for a simulated client (none
            // is ever evicted; the checker flags it): it keeps retrying too,
            // so a broken rule under test cannot grow the history of ops
            // whose outcome is unknown past what the checkers can search.
            Verdict::Retry { .. } | Verdict::Refused { .. } => {
                self.wait_until = now + 3;
                if let Some(outstanding) = self.outstanding.as_mut() {
                    outstanding.sent_tick = 0;
                }
                None
            }
        }
    }

    /// A redirect arrived: remember the primary and resend there now.
    pub fn on_redirect(&mut self, redirect: &Redirect, nodes: usize, rng: &mut Rng) -> Option<Send> {
        let outstanding = self.outstanding.as_mut()?;
        if !client::redirects(&outstanding.request, redirect) {
            return None;
        }
        let target = match redirect.primary {
            Some(node) if node_index(node) < nodes => node_index(node),
            _ => rng.below(nodes as u64) as usize,
        };
        self.guess.insert(redirect.group, target);
        if target == outstanding.target && redirect.primary.is_none() {
            return None;
        }
        outstanding.target = target;
        outstanding.sends += 1;
        Some(Send { to: target, request: outstanding.request.clone() })
    }
}

/// K5: what a batch's answer says: the value its first op found, and
/// whether the results are torn (not one per op, or a put's result not the
/// value the put before it wrote: ops of the batch applied apart).
fn batch_output(op: &KvOp, result: &[u8]) -> (Option<u64>, bool) {
    let ops = match *op {
        KvOp::Puts { count, .. } => count as usize,
        _ => 1,
    };
    let Ok(results) = cohort_messages::op_batch::results(&bytes::Bytes::copy_from_slice(result), ops) else {
        return (None, true);
    };
    let values: Vec<Option<u64>> = results.iter().map(|result| result_value(result)).collect();
    let torn = match *op {
        KvOp::Puts { first, .. } => values.iter().skip(1).zip(first..).any(|(value, before)| *value != Some(before)),
        _ => false,
    };
    (values.first().copied().flatten(), torn || values.len() != ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(values: &[u64]) -> bytes::Bytes {
        let results: Vec<[u8; 8]> = values.iter().map(|value| value.to_le_bytes()).collect();
        cohort_messages::op_batch::encode(&results).expect("a batch")
    }

    #[test]
    fn k5_a_batch_of_puts_answered_one_after_another_is_whole_and_any_other_answer_is_torn() {
        let puts = KvOp::Puts { key: 1, first: 10, count: 3 };
        assert_eq!(batch_output(&puts, &answer(&[7, 10, 11])), (Some(7), false), "old value, then each put's value");
        assert!(batch_output(&puts, &answer(&[7, 11, 10])).1, "applied out of order");
        assert!(batch_output(&puts, &answer(&[7, 10, 99])).1, "another write between two of its puts");
        assert!(batch_output(&puts, &answer(&[7, 10])).1, "a result missing");
        assert!(batch_output(&puts, b"not a batch").1);
        let single = KvOp::Put { key: 1, value: 5 };
        assert_eq!(batch_output(&single, &answer(&[4])), (Some(4), false));
    }
}
