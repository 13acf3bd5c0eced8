//! One request, from first attempt to a definite answer or the timeout.
//!
//! Every attempt sends the very same request (client id, group, request
//! number), so however many reach the group, it applies at most once
//! (V1). Where an attempt goes:
//! 1. the cached primary, if its address is known and it has not failed in
//!    this call;
//! 2. else the answer of one route query per round, asked of any node
//!    (its copy of the metadata);
//! 3. else the next node of the list in turn: a backup redirects to the
//!    primary it knows, a new primary that the metadata does not show yet
//!    serves.
//!
//! What an attempt's outcome does: a Reply that applied or refused for good
//! ends the call; a Redirect updates the cache and goes to the named node
//! at once (up to `redirects_in_a_row_max` times, then pauses); a retryable
//! refusal, a lost connection or a timeout marks that node failed for this
//! round, forgets the route if it named it, and tries elsewhere, pausing
//! (doubling from `retry_pause_min` to `retry_pause_max`) once every node
//! has failed in the round.

use std::fmt;

use bytes::Bytes;
use cohort_core::client::{Verdict, verdict};
use cohort_messages::{GroupId, NodeId, Op, ReplyError, Request};
use tokio::time::Instant;

use crate::client::Inner;
use crate::connection::{Answer, CallError};
use crate::error::ClientError;

/// A write's result, or a read's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The op the write committed at, or the applied point the read saw.
    pub op: Op,
    /// The state machine's result.
    pub result: Bytes,
}

/// K5: the answer to a batch of writes (`write_batch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedBatch {
    /// The op the whole batch committed at; its ops are `(op, index)`.
    pub op: Op,
    /// Each op's result, in the batch's order (none for an `Async` group:
    /// Q4 answers before the ops are applied).
    pub results: Vec<Bytes>,
}

impl CommittedBatch {
    /// The operation of a batch of `ops` (an op batch), and how many ops it
    /// holds; the error says what is wrong and what to do.
    pub fn operation<T: Into<Bytes>>(ops: impl IntoIterator<Item = T>) -> Result<(Bytes, usize), String> {
        let ops: Vec<Bytes> = ops.into_iter().map(Into::into).collect();
        match cohort_messages::op_batch::encode(&ops) {
            Ok(operation) => Ok((operation, ops.len())),
            Err(error) => Err(format!("{error}: send fewer or smaller ops per batch")),
        }
    }

    /// Read the answer to a batch of `ops` ops that committed at `op` with
    /// `result`; the error says what is wrong.
    pub fn read(op: Op, result: &Bytes, ops: usize) -> Result<CommittedBatch, String> {
        match cohort_messages::op_batch::results(result, ops) {
            Ok(results) => Ok(CommittedBatch { op, results }),
            Err(error) => Err(format!(
                "the batch committed at {op}, but its answer is not one result per op ({error}): its state machine's apply_op_batch broke the rule"
            )),
        }
    }
}

/// What the last attempt got, for the error at the timeout.
#[derive(Clone, Debug)]
enum Last {
    Nothing,
    NoRoute,
    Io { address: String, kind: std::io::ErrorKind, detail: String },
    Refusal { node: NodeId, code: ReplyError, detail: String },
    Redirect { node: NodeId, primary: Option<NodeId> },
    AttemptTimeout { node: NodeId },
}

impl fmt::Display for Last {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Last::Nothing => f.write_str("no attempt"),
            Last::NoRoute => f.write_str("no node named a primary"),
            Last::Io { address, detail, .. } => write!(f, "{address}: {detail}"),
            Last::Refusal { node, code, detail } => write!(f, "{node} answered {code:?}: {detail}"),
            Last::Redirect { node, primary: Some(primary) } => write!(f, "{node} redirected to {primary}"),
            Last::Redirect { node, primary: None } => write!(f, "{node} knows no primary (view change)"),
            Last::AttemptTimeout { node } => write!(f, "{node} did not answer in time"),
        }
    }
}

/// The state of one call across its attempts.
struct Call<'a> {
    inner: &'a Inner,
    request: Request,
    started: Instant,
    deadline: Instant,
    /// Endpoints that failed in this round.
    failed: Vec<bool>,
    /// Endpoints that said in this round that the metadata knows no such
    /// group (O5), and what the last one said.
    no_such_group: Vec<bool>,
    no_such_group_detail: String,
    /// The next endpoint of the rotation.
    next: usize,
    /// Whether this round already asked for routes.
    queried: bool,
    pause: std::time::Duration,
    attempts: u32,
    route_queries: u32,
    redirects_in_a_row: u32,
    /// Some node named a primary, or served: the group exists somewhere.
    routed: bool,
    /// An attempt may have reached the group without a definite answer.
    maybe_applied: bool,
    last: Last,
}

/// Run `request` until a definite answer or `timeout`.
pub(crate) async fn run(
    inner: &Inner,
    request: Request,
    timeout: std::time::Duration,
) -> Result<Committed, ClientError> {
    let started = Instant::now();
    let endpoints = inner.pool.len();
    let mut call = Call {
        inner,
        started,
        deadline: started + timeout,
        failed: vec![false; endpoints],
        no_such_group: vec![false; endpoints],
        no_such_group_detail: String::new(),
        next: (request.group.0 % endpoints as u64) as usize,
        queried: false,
        pause: inner.limits.retry_pause_min,
        attempts: 0,
        route_queries: 0,
        redirects_in_a_row: 0,
        routed: false,
        maybe_applied: false,
        last: Last::Nothing,
        request,
    };
    call.run().await
}

/// What to do after one attempt.
enum Next {
    Done(Result<Committed, ClientError>),
    /// Try again at once (the route changed).
    Now,
    /// This endpoint failed for this round: try another.
    Elsewhere,
}

impl Call<'_> {
    async fn run(&mut self) -> Result<Committed, ClientError> {
        while Instant::now() < self.deadline {
            let Some(target) = self.target().await? else {
                if let Some(error) = self.no_such_group() {
                    return Err(error);
                }
                self.pause().await;
                continue;
            };
            match self.attempt(target).await {
                Next::Done(result) => return result,
                Next::Now => {}
                Next::Elsewhere => self.failed[target] = true,
            }
        }
        Err(self.give_up())
    }

    /// Where the next attempt goes; `Ok(None)` when every endpoint failed
    /// in this round (pause, then a new round).
    async fn target(&mut self) -> Result<Option<usize>, ClientError> {
        let group = self.request.group;
        if let Some(index) = self.routed_target(group).await {
            return Ok(Some(index));
        }
        if !self.queried {
            self.queried = true;
            self.query_routes().await?;
            if let Some(index) = self.routed_target(group).await {
                return Ok(Some(index));
            }
        }
        let endpoints = self.failed.len();
        for step in 0..endpoints {
            let index = (self.next + step) % endpoints;
            if !self.failed[index] && !self.inner.pool.backing_off(index) {
                self.next = (index + 1) % endpoints;
                return Ok(Some(index));
            }
        }
        Ok(None)
    }

    /// The cached primary's endpoint, if usable in this round.
    async fn routed_target(&self, group: GroupId) -> Option<usize> {
        let route = self.inner.route(group)?;
        let index = self.inner.pool.find(route.node).await?;
        (!self.failed[index] && !self.inner.pool.backing_off(index)).then_some(index)
    }

    /// Ask one node where the group's primary is; only a TLS failure
    /// (which no retry fixes) is an error.
    async fn query_routes(&mut self) -> Result<(), ClientError> {
        let group = self.request.group;
        let left = self.deadline.saturating_duration_since(Instant::now());
        let timeout = left.min(self.inner.limits.attempt_timeout);
        let endpoints = self.failed.len();
        for step in 0..endpoints {
            let index = (self.next + step) % endpoints;
            if self.failed[index] || self.inner.pool.backing_off(index) {
                continue;
            }
            let address = self.inner.pool.address(index);
            let connection = match self.inner.pool.connection(index).await.map_err(|e| e.final_error(address)) {
                Ok(connection) => connection,
                Err(Ok(final_error)) => return Err(final_error),
                Err(Err((kind, detail))) => {
                    self.failed[index] = true;
                    self.last = Last::Io { address: address.to_string(), kind, detail };
                    continue;
                }
            };
            if let Ok(routes) = connection.routes(vec![group], timeout).await {
                self.route_queries += 1;
                for route in &routes.routes {
                    self.routed |= route.primary.is_some();
                    self.inner.learn(route.group, route.view, route.primary);
                }
                if self.inner.route(group).is_none() && !self.routed {
                    self.last = Last::NoRoute;
                }
                return Ok(());
            }
        }
        Ok(())
    }

    async fn attempt(&mut self, target: usize) -> Next {
        let group = self.request.group;
        self.attempts += 1;
        let pool = &self.inner.pool;
        let address = pool.address(target);
        let connection = match pool.connection(target).await.map_err(|e| e.final_error(address)) {
            Ok(connection) => connection,
            Err(Ok(final_error)) => return Next::Done(Err(final_error)),
            Err(Err((kind, detail))) => {
                self.last = Last::Io { address: address.to_string(), kind, detail };
                return Next::Elsewhere;
            }
        };
        let node = connection.node();
        let left = self.deadline.saturating_duration_since(Instant::now());
        let timeout = left.min(self.inner.limits.attempt_timeout);
        match connection.call(&self.request, timeout).await {
            Ok(Answer::Reply(reply)) => match verdict(&reply) {
                Verdict::Done { op, result } => {
                    self.inner.served(group, node, reply.view);
                    Next::Done(Ok(Committed { op, result: result.clone() }))
                }
                Verdict::Refused { code: ReplyError::Forbidden, detail } => {
                    Next::Done(Err(ClientError::Forbidden { group, reason: detail.to_string() }))
                }
                Verdict::Refused { code, detail } => {
                    Next::Done(Err(ClientError::Refused { group, code, reason: detail.to_string() }))
                }
                Verdict::Retry { code, detail } => {
                    self.redirects_in_a_row = 0;
                    // A Busy may be the node's own answer timeout: the write may be in the log.
                    self.maybe_applied |= code == ReplyError::Busy;
                    self.routed |= !matches!(code, ReplyError::UnknownGroup | ReplyError::NoSuchGroup);
                    self.last = Last::Refusal { node, code, detail: detail.to_string() };
                    if code == ReplyError::NoSuchGroup {
                        self.no_such_group[target] = true;
                        self.no_such_group_detail = detail.to_string();
                    }
                    if matches!(
                        code,
                        ReplyError::UnknownGroup | ReplyError::QuorumWindowExpired | ReplyError::NoSuchGroup
                    ) {
                        // Not (or no longer) the primary here.
                        self.inner.forget(group, node);
                    }
                    Next::Elsewhere
                }
            },
            Ok(Answer::Redirect(redirect)) => {
                self.inner.learn(group, redirect.view, redirect.primary);
                self.last = Last::Redirect { node, primary: redirect.primary };
                self.routed |= redirect.primary.is_some();
                match redirect.primary {
                    Some(primary)
                        if primary != node && self.redirects_in_a_row < self.inner.limits.redirects_in_a_row_max =>
                    {
                        self.redirects_in_a_row += 1;
                        Next::Now
                    }
                    _ => {
                        self.redirects_in_a_row = 0;
                        self.inner.forget(group, node);
                        Next::Elsewhere
                    }
                }
            }
            Err(CallError::Closed { detail, sent }) => {
                self.maybe_applied |= sent;
                self.inner.forget(group, node);
                self.last = Last::Io {
                    address: pool.address(target).to_string(),
                    kind: std::io::ErrorKind::ConnectionAborted,
                    detail,
                };
                Next::Elsewhere
            }
            Err(CallError::Timeout { silent, sent }) => {
                self.maybe_applied |= sent;
                self.inner.forget(group, node);
                self.last = Last::AttemptTimeout { node };
                if silent {
                    pool.discard(target, &connection).await;
                }
                Next::Elsewhere
            }
        }
    }

    /// O5: at the end of a round, the error if a majority of the list said
    /// the metadata knows no such group and no node named a primary or
    /// served it in this call. A majority, not one node: one node's copy of
    /// the metadata may lag behind a create for a moment, and the metadata
    /// primary, whose copy does not, is among most majorities. Should a
    /// majority lag at once, nothing was applied and the call can be made
    /// again.
    fn no_such_group(&self) -> Option<ClientError> {
        let said = self.no_such_group.iter().filter(|said| **said).count();
        let majority = self.no_such_group.len() / 2 + 1;
        (said >= majority && !self.routed && !self.maybe_applied)
            .then(|| ClientError::NoSuchGroup { group: self.request.group, reason: self.no_such_group_detail.clone() })
    }

    /// Every endpoint failed in this round: wait, then start a new one.
    async fn pause(&mut self) {
        let left = self.deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(self.pause.min(left)).await;
        self.pause = (self.pause * 2).min(self.inner.limits.retry_pause_max);
        self.failed.iter_mut().for_each(|failed| *failed = false);
        self.no_such_group.iter_mut().for_each(|said| *said = false);
        self.queried = false;
        self.redirects_in_a_row = 0;
    }

    /// The error at the timeout (see [`ClientError`] for what each means).
    fn give_up(&mut self) -> ClientError {
        let group = self.request.group;
        let waited = self.started.elapsed();
        let request = self.request.kind.is_write().then(|| Box::new(self.request.clone()));
        match &self.last {
            Last::Refusal { code: ReplyError::NoSuchGroup, detail, .. } if !self.routed && !self.maybe_applied => {
                ClientError::NoSuchGroup { group, reason: detail.clone() }
            }
            Last::Nothing | Last::NoRoute | Last::Refusal { code: ReplyError::UnknownGroup, .. }
                if !self.routed && !self.maybe_applied =>
            {
                ClientError::NoRoute { group, waited, asked: self.route_queries }
            }
            Last::Io { address, kind, detail } if !self.maybe_applied => {
                ClientError::Io { address: address.clone(), kind: *kind, detail: detail.clone() }
            }
            Last::Refusal { code: ReplyError::Busy, detail, .. } => {
                ClientError::Busy { group, waited, reason: detail.clone(), request }
            }
            last => ClientError::Timeout { group, waited, attempts: self.attempts, last: last.to_string(), request },
        }
    }
}
