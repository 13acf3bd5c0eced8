//! The client's side of exactly-once, shared by every client cohort has: the
//! host's `Client`, the node's operator client, the metadata agent and the
//! simulator's clients.
//!
//! The group's client table (see [`crate::client_table`]) applies a request
//! at most once per (client id, request number) and answers a retry of an
//! applied request from its table. For that to hold, a client must keep
//! three rules, and this module is the one place that keeps them:
//! - **Numbering.** A client id numbers its writes to one group from 1, one
//!   more per write ([`Sequence`]). A retry reuses the id and the number.
//! - **Matching.** An answer belongs to the request in flight only if its
//!   client, group and number match ([`answers`]); a late answer to an
//!   earlier request is ignored.
//! - **Judging.** An answer is either definite (applied, or refused for
//!   good) or says to send the very same request again ([`verdict`]).
//!   After a write whose outcome stays unknown the client moves to a fresh id
//!   ([`Sequence::restart`]), so its next write never depends on whether the
//!   lost one arrived.
//!
//! Client ids come from the caller: the core draws no randomness, so the
//! simulator gives seeded ids and a node gives random ones.

use bytes::Bytes;
use cohort_messages::{
    ClientId, GroupId, Op, Outcome, Redirect, Reply, ReplyError, Request, RequestKind, RequestNumber,
};

/// What an answer means for the request it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Applied (or, for a read, answered) at `op`, with the state machine's result.
    Done {
        /// The op it committed at, or the applied point a read saw.
        op: Op,
        /// The state machine's result.
        result: &'a Bytes,
    },
    /// Refused for good: sending the same request again gets the same answer.
    /// `Superseded` (a newer request of this client was applied, or the
    /// client was evicted: start a new client) or `Rejected`.
    Refused {
        /// The code.
        code: ReplyError,
        /// Why, from the group.
        detail: &'a str,
    },
    /// Not applied now: send the same request (same id and number) again,
    /// later or to another node. A view change, a full pipeline, an expired
    /// quorum window, or a node that does not host the group.
    Retry {
        /// The code.
        code: ReplyError,
        /// Why, from the group.
        detail: &'a str,
    },
}

/// Judge `reply`.
///
/// ```
/// use bytes::Bytes;
/// use cohort_core::client::{Verdict, verdict};
/// use cohort_messages::{ClientId, GroupId, Op, Outcome, Reply, ReplyError, RequestNumber, View};
/// let busy = Reply {
///     client: ClientId(7),
///     request: RequestNumber(1),
///     group: GroupId(0),
///     view: View(1),
///     op: Op(0),
///     outcome: Outcome::Error { code: ReplyError::Busy, detail: "pipeline full".into() },
/// };
/// assert!(matches!(verdict(&busy), Verdict::Retry { code: ReplyError::Busy, .. }));
/// ```
pub fn verdict(reply: &Reply) -> Verdict<'_> {
    match &reply.outcome {
        Outcome::Ok(result) => Verdict::Done { op: reply.op, result },
        Outcome::Error { code, detail } if retryable(*code) => Verdict::Retry { code: *code, detail },
        Outcome::Error { code, detail } => Verdict::Refused { code: *code, detail },
    }
}

/// True if a request refused with `code` may be sent again as it is: the
/// refusal says nothing about the request itself, only about the node or
/// the moment (view change, full pipeline, quorum window, group not hosted
/// there; `NoSuchGroup` too, as one node's copy of the metadata may lag
/// behind a create).
pub fn retryable(code: ReplyError) -> bool {
    match code {
        ReplyError::QuorumWindowExpired
        | ReplyError::Busy
        | ReplyError::ViewChange
        | ReplyError::UnknownGroup
        | ReplyError::NoSuchGroup => true,
        ReplyError::Superseded | ReplyError::Rejected | ReplyError::Forbidden => false,
    }
}

/// True if `reply` answers `request` (same client, group and number).
pub fn answers(request: &Request, reply: &Reply) -> bool {
    reply.client == request.client && reply.group == request.group && reply.request == request.request
}

/// True if `redirect` is about `request` (same client, group and number).
pub fn redirects(request: &Request, redirect: &Redirect) -> bool {
    redirect.client == request.client && redirect.group == request.group && redirect.request == request.request
}

/// One client id's writes to one group, numbered from 1.
///
/// ```
/// use bytes::Bytes;
/// use cohort_core::client::Sequence;
/// use cohort_messages::{ClientId, GroupId, RequestNumber};
/// let mut writes = Sequence::new(ClientId(9), GroupId(2));
/// assert_eq!(writes.write(Bytes::from_static(b"a")).request, RequestNumber(1));
/// assert_eq!(writes.write(Bytes::from_static(b"b")).request, RequestNumber(2));
/// writes.restart(ClientId(10));
/// let after = writes.write(Bytes::from_static(b"c"));
/// assert_eq!((after.client, after.request), (ClientId(10), RequestNumber(1)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequence {
    client: ClientId,
    group: GroupId,
    next: RequestNumber,
}

impl Sequence {
    /// The writes of `client` to `group`; the first is request 1.
    pub fn new(client: ClientId, group: GroupId) -> Sequence {
        Sequence { client, group, next: RequestNumber(1) }
    }

    /// The client id.
    pub fn client(&self) -> ClientId {
        self.client
    }

    /// The next write, numbered. Every retry of it must send this very request.
    pub fn write(&mut self, operation: Bytes) -> Request {
        let request =
            Request { client: self.client, request: self.next, group: self.group, kind: RequestKind::Write, operation };
        self.next = RequestNumber(self.next.0 + 1);
        debug_assert!(self.next.0 > request.request.0, "request numbers only grow");
        request
    }

    /// Go on under a fresh client id, from request 1: after a write whose
    /// outcome is unknown, or a refusal that says this id is done.
    pub fn restart(&mut self, client: ClientId) {
        debug_assert_ne!(client, self.client, "a restart needs a fresh id");
        *self = Sequence::new(client, self.group);
    }
}

/// A read of `group`: reads never enter the client table, so they take no
/// number of a [`Sequence`]; `request` only tells their answers apart.
pub fn read(client: ClientId, request: RequestNumber, group: GroupId, query: Bytes) -> Request {
    Request { client, request, group, kind: RequestKind::Read, operation: query }
}

#[cfg(test)]
mod tests {
    use cohort_messages::View;

    use super::*;

    fn reply(outcome: Outcome) -> Reply {
        Reply { client: ClientId(1), request: RequestNumber(3), group: GroupId(2), view: View(1), op: Op(9), outcome }
    }

    fn error(code: ReplyError) -> Outcome {
        Outcome::Error { code, detail: "why".into() }
    }

    #[test]
    fn v1_definite_answers_and_retryable_ones_are_told_apart() {
        let ok = reply(Outcome::Ok(Bytes::from_static(b"r")));
        assert!(matches!(verdict(&ok), Verdict::Done { op: Op(9), .. }));
        for code in [ReplyError::Superseded, ReplyError::Rejected, ReplyError::Forbidden] {
            assert!(matches!(verdict(&reply(error(code))), Verdict::Refused { .. }), "{code:?}");
        }
        for code in [
            ReplyError::QuorumWindowExpired,
            ReplyError::Busy,
            ReplyError::ViewChange,
            ReplyError::UnknownGroup,
            ReplyError::NoSuchGroup,
        ] {
            assert!(matches!(verdict(&reply(error(code))), Verdict::Retry { .. }), "{code:?}");
        }
    }

    #[test]
    fn v1_only_the_request_in_flight_is_answered() {
        let mut writes = Sequence::new(ClientId(1), GroupId(2));
        let first = writes.write(Bytes::new());
        let second = writes.write(Bytes::new());
        let third = writes.write(Bytes::new());
        let late = reply(Outcome::Ok(Bytes::new()));
        assert!(answers(&third, &late));
        assert!(!answers(&first, &late) && !answers(&second, &late));
        let other_group = Reply { group: GroupId(5), ..late };
        assert!(!answers(&third, &other_group));
    }
}
