//! The client's side of exactly-once, shared by every client cohort has: the
//! host's `Client`, the node's operator client, the metadata agent and the
//! simulator's clients.
//!
//! The group's client table (see [`crate::client_table`]) applies a request
//! at most once per (client id, request number) and answers a retry of an
//! applied request from its table. For that to hold, a client must keep
//! four rules, and this module is the one place that keeps them:
//! - **Registration.** A fresh client id first registers with each group it
//!   writes to: request 1 is a write with an empty operation
//!   ([`Sequence::registration`]), which the group puts through its log and
//!   records in its client table without applying anything to the state
//!   machine. A registration's answer is an empty result at the op it
//!   committed at; its retries, even after an eviction, are harmless. The group refuses a request 1 that
//!   carries an operation (`Rejected`), so a client that skips this step
//!   fails at once instead of writing unprotected.
//! - **Numbering.** A registration's answer carries the op it committed at,
//!   R; the client id numbers its writes to the group after it: R + 1, then
//!   one more per write ([`Sequence`]). A retry reuses the id and the
//!   number. The table admits a client it does not know only at request 1,
//!   so a retry of a write from a client it evicted is refused (`Superseded`,
//!   "is not known") rather than applied twice (H5): every write, the first
//!   included, is past the registration. And it refuses a write numbered at
//!   or below its client's registration op, so a late copy of a registration
//!   that registers an evicted client again (at a later op) does not reopen
//!   the writes made before.
//! - **Matching.** An answer belongs to the request in flight only if its
//!   client, group and number match ([`answers`]); a late answer to an
//!   earlier request is ignored.
//! - **Judging.** An answer is either definite (applied, or refused for
//!   good) or says to send the very same request again ([`verdict`]).
//!   After a write whose outcome stays unknown the client moves to a fresh id
//!   ([`Sequence::restart`]), so its next write never depends on whether the
//!   lost one arrived; the fresh id registers again. A registration whose
//!   outcome is unknown is simply sent again (it changes nothing but the
//!   table), under the same id.
//!
//! The cost of the registration is one round trip through the log per client
//! id per group, paid before the first write and again after each restart.
//!
//! Client ids come from the caller: the core draws no randomness, so the
//! simulator gives seeded ids and a node gives random ones.

use bytes::Bytes;
use cohort_messages::{
    ClientId, GroupId, Op, Outcome, Redirect, Reply, ReplyError, Request, RequestKind, RequestNumber,
};

use crate::client_table::{REGISTRATION, is_registration};

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

/// One client id's writes to one group: its registration (request 1), then
/// its writes, numbered after the op the registration committed at.
///
/// ```
/// use bytes::Bytes;
/// use cohort_core::client::Sequence;
/// use cohort_messages::{ClientId, GroupId, Op, RequestNumber};
/// let mut writes = Sequence::new(ClientId(9), GroupId(2));
/// let registration = writes.registration().expect("a fresh id registers first");
/// assert_eq!((registration.request, registration.operation.len()), (RequestNumber(1), 0));
/// // ... sent until the group answers it (an empty Ok at op 41), then:
/// writes.registered(Op(41));
/// assert_eq!(writes.registration(), None);
/// assert_eq!(writes.write(Bytes::from_static(b"a")).request, RequestNumber(42));
/// assert_eq!(writes.write(Bytes::from_static(b"b")).request, RequestNumber(43));
/// writes.restart(ClientId(10));
/// assert_eq!(writes.registration().map(|request| (request.client, request.request)), Some((ClientId(10), RequestNumber(1))));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequence {
    client: ClientId,
    group: GroupId,
    /// True once the group answered the registration.
    registered: bool,
    next: RequestNumber,
}

impl Sequence {
    /// The writes of `client` to `group`: first its registration, then
    /// writes numbered after the registration's op.
    pub fn new(client: ClientId, group: GroupId) -> Sequence {
        Sequence { client, group, registered: false, next: RequestNumber(REGISTRATION.0 + 1) }
    }

    /// The client id.
    pub fn client(&self) -> ClientId {
        self.client
    }

    /// The registration to send (and, while unanswered, to send again) before
    /// the first write; `None` once [`Sequence::registered`] was called.
    pub fn registration(&self) -> Option<Request> {
        (!self.registered).then(|| Request {
            client: self.client,
            request: REGISTRATION,
            group: self.group,
            kind: RequestKind::Write,
            operation: Bytes::new(),
        })
    }

    /// The group answered the registration (a [`Verdict::Done`]) at `op`:
    /// writes follow, numbered from `op` + 1, since the group refuses a
    /// write of this client numbered at or below the op of its registration.
    pub fn registered(&mut self, op: Op) {
        debug_assert!(!self.registered, "registered once, before any write");
        assert!(op > Op(0), "{:?}: a registration commits at an op of the log", self.client);
        self.registered = true;
        self.next = RequestNumber(op.0 + 1);
        debug_assert!(!is_registration(self.next), "writes follow the registration");
    }

    /// True once the registration was answered.
    pub fn is_registered(&self) -> bool {
        self.registered
    }

    /// The next write, numbered. Every retry of it must send this very
    /// request. Only after the registration was answered.
    pub fn write(&mut self, operation: Bytes) -> Request {
        assert!(self.registered, "{:?}: a write before the registration would not be protected (H5)", self.client);
        let request =
            Request { client: self.client, request: self.next, group: self.group, kind: RequestKind::Write, operation };
        self.next = RequestNumber(self.next.0 + 1);
        debug_assert!(
            self.next.0 > request.request.0 && !is_registration(request.request),
            "writes follow the registration"
        );
        request
    }

    /// Go on under a fresh client id, registering it first: after a write
    /// whose outcome is unknown, or a refusal that says this id is done.
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
        let first = writes.registration().expect("unregistered");
        writes.registered(Op(1));
        let second = writes.write(Bytes::new());
        let third = writes.write(Bytes::new());
        let late = reply(Outcome::Ok(Bytes::new()));
        assert!(answers(&third, &late));
        assert!(!answers(&first, &late) && !answers(&second, &late));
        let other_group = Reply { group: GroupId(5), ..late };
        assert!(!answers(&third, &other_group));
    }

    #[test]
    fn h5_a_fresh_id_registers_before_its_first_write_and_again_after_a_restart() {
        let mut writes = Sequence::new(ClientId(4), GroupId(1));
        let registration = writes.registration().expect("unregistered");
        assert_eq!(
            registration,
            Request {
                client: ClientId(4),
                request: RequestNumber(1),
                group: GroupId(1),
                kind: RequestKind::Write,
                operation: Bytes::new()
            }
        );
        assert_eq!(writes.registration(), Some(registration), "sent again until answered");
        writes.registered(Op(6));
        assert_eq!(writes.write(Bytes::from_static(b"w")).request, RequestNumber(7));
        writes.restart(ClientId(5));
        assert!(!writes.is_registered());
        assert_eq!(writes.registration().map(|request| request.client), Some(ClientId(5)));
        writes.registered(Op(9));
        assert_eq!(writes.write(Bytes::from_static(b"w")).request, RequestNumber(10));
    }

    #[test]
    #[should_panic(expected = "before the registration")]
    fn h5_a_write_before_the_registration_is_a_bug() {
        let mut writes = Sequence::new(ClientId(4), GroupId(1));
        drop(writes.write(Bytes::from_static(b"w")));
    }
}
