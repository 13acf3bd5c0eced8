//! The node's operator client of the metadata group: how an operator's
//! command from the admin port (`POST /admin/operations`) reaches the
//! metadata group exactly once.
//!
//! Why not the host's `Client`: that client only knows the node handles of
//! its own process, and in a real deployment the metadata primary is usually
//! another process. The agent actor already reaches the metadata
//! primary over the peer links (local replica, or a `Request` frame to a
//! member, following redirects), so operator commands ride the same path,
//! under a client id of their own so they never disturb the agent's
//! numbering.
//!
//! The rules are the client table's, kept by [`cohort_core::client`]: one
//! client id registers with the metadata group before its first command
//! (request 1, which applies nothing: the command follows as soon as it is
//! answered, within the same deadline), then numbers its writes after the
//! op the registration committed at;
//! every re-send of a write carries the same id and number, so the group
//! applies it at most once and answers a re-send of an applied write from
//! its client table, and a re-send the group no longer knows the client of
//! is refused rather than applied again (H5). One operator command is in flight
//! per node; a second one is answered [`OperatorFailure::Busy`] at once.
//! When a command's deadline passes without an answer its outcome is
//! unknown, and the next command takes a fresh client id, so that it never
//! depends on whether the lost one arrived.
//!
//! Time comes in as an argument; the actor calls [`OperatorClient::on_tick`]
//! on every tick, and [`OperatorClient::on_reply`] /
//! [`OperatorClient::on_redirect`] for the metadata group's answers.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cohort_core::client::{self, Sequence, Verdict};
use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{ClientId, GroupId, NodeId, Redirect, Reply, ReplyError, Request};
use tokio::sync::oneshot;

/// An unanswered operator command is sent again after this long.
pub(crate) const OPERATOR_RETRY_INTERVAL: Duration = Duration::from_millis(500);

/// Why an operator command got no result from the metadata group.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OperatorFailure {
    /// No answer before the deadline; the command may still apply.
    #[error(
        "no answer from the metadata group within {waited:?}: {attempts} attempts at {tried} (last: {last}); it may still apply: check `cohort status` before trying again"
    )]
    Unreachable {
        /// How long it tried.
        waited: Duration,
        /// Sends, including re-sends.
        attempts: u32,
        /// Where it was sent, e.g. `node:1 (local), node:2`.
        tried: String,
        /// What the last attempt got.
        last: String,
    },
    /// Another operator command of this node is still in flight.
    #[error("another operator command is in flight on this node; try again when it is answered")]
    Busy,
    /// The metadata group refused the request itself (not the state machine).
    #[error("the metadata group refused the request ({code:?}): {detail}")]
    Rejected {
        /// The code.
        code: ReplyError,
        /// Why.
        detail: String,
    },
    /// The node is stopping (its agent is gone).
    #[error("the node is stopping")]
    Stopped,
}

/// Where an operator command's answer goes.
pub(crate) type OperatorAnswer = oneshot::Sender<Result<MetadataResult, OperatorFailure>>;

/// The command in flight.
struct InFlight {
    /// The command's write, or the registration that goes first.
    request: Request,
    /// The command, while `request` is the registration (H5).
    held: Option<bytes::Bytes>,
    started: Instant,
    deadline: Instant,
    sent: Instant,
    attempts: u32,
    tried: BTreeSet<String>,
    last: String,
    answer: OperatorAnswer,
}

/// See the module docs.
pub(crate) struct OperatorClient {
    requests: Sequence,
    in_flight: Option<InFlight>,
}

impl Default for OperatorClient {
    fn default() -> OperatorClient {
        OperatorClient::new()
    }
}

impl OperatorClient {
    /// A client with a fresh id and nothing in flight.
    pub(crate) fn new() -> OperatorClient {
        let requests = Sequence::new(crate::client_id::fresh_client_id(), GroupId::METADATA);
        OperatorClient { requests, in_flight: None }
    }

    /// Whether `client` is this client's id (its answers come here).
    pub(crate) fn owns(&self, client: ClientId) -> bool {
        client == self.requests.client()
    }

    /// Number `command` and take it in flight; the request to send, or the
    /// answer back with [`OperatorFailure::Busy`].
    pub(crate) fn start(
        &mut self,
        command: &MetadataCommand,
        deadline: Instant,
        answer: OperatorAnswer,
        now: Instant,
    ) -> Option<Request> {
        if self.in_flight.is_some() {
            let _ = answer.send(Err(OperatorFailure::Busy));
            return None;
        }
        let (request, held) = match self.requests.registration() {
            Some(registration) => (registration, Some(command.encode())),
            None => (self.requests.write(command.encode()), None),
        };
        self.in_flight = Some(InFlight {
            request: request.clone(),
            held,
            started: now,
            deadline,
            sent: now,
            attempts: 0,
            tried: BTreeSet::new(),
            last: "no answer yet".into(),
            answer,
        });
        Some(request)
    }

    /// The request in flight was sent (again) to `target`.
    pub(crate) fn sent(&mut self, target: NodeId, local: bool, now: Instant) {
        if let Some(in_flight) = &mut self.in_flight {
            in_flight.sent = now;
            in_flight.attempts += 1;
            in_flight.tried.insert(if local { format!("{target} (local)") } else { target.to_string() });
        }
    }

    /// Every tick: the request to send again, if one is due; a command past
    /// its deadline is answered [`OperatorFailure::Unreachable`].
    pub(crate) fn on_tick(&mut self, now: Instant) -> Option<Request> {
        let in_flight = self.in_flight.as_ref()?;
        if now >= in_flight.deadline {
            let in_flight = self.in_flight.take()?;
            let tried = in_flight.tried.iter().cloned().collect::<Vec<_>>().join(", ");
            let failure = OperatorFailure::Unreachable {
                waited: now.saturating_duration_since(in_flight.started),
                attempts: in_flight.attempts,
                tried: if tried.is_empty() { "no member (no link up)".into() } else { tried },
                last: in_flight.last,
            };
            let _ = in_flight.answer.send(Err(failure));
            // The outcome is unknown: the next command starts a new client.
            self.requests.restart(crate::client_id::fresh_client_id());
            return None;
        }
        (now >= in_flight.sent + OPERATOR_RETRY_INTERVAL).then(|| in_flight.request.clone())
    }

    /// An answer for this client: complete the command if it is the one in
    /// flight and the answer is definite. An answered registration returns
    /// the command's write, to send at once.
    pub(crate) fn on_reply(&mut self, reply: &Reply) -> Option<Request> {
        let in_flight = self.in_flight.as_mut().filter(|f| client::answers(&f.request, reply))?;
        if let (Verdict::Done { op, .. }, Some(command)) = (client::verdict(reply), &in_flight.held) {
            self.requests.registered(op);
            in_flight.request = self.requests.write(command.clone());
            in_flight.held = None;
            in_flight.last = "registered; the command sent".into();
            return Some(in_flight.request.clone());
        }
        let result = match client::verdict(reply) {
            Verdict::Done { result, .. } => match MetadataResult::decode(result) {
                Ok(result) => Ok(result),
                Err(error) => Err(OperatorFailure::Rejected {
                    code: ReplyError::Rejected,
                    detail: format!("the metadata result does not decode: {error}"),
                }),
            },
            Verdict::Refused { code, detail } => Err(OperatorFailure::Rejected { code, detail: detail.to_string() }),
            Verdict::Retry { code, detail } => {
                // Busy, a view change, an expired quorum window or an
                // unknown group here: the tick sends it again.
                in_flight.last = format!("{code:?}: {detail}");
                return None;
            }
        };
        if let Some(in_flight) = self.in_flight.take() {
            let _ = in_flight.answer.send(result);
        }
        None
    }

    /// A redirect for this client: the request in flight, if the redirect
    /// is about it (the agent's route says whether it goes again at once).
    pub(crate) fn on_redirect(&mut self, from: NodeId, redirect: &Redirect) -> Option<Request> {
        let in_flight = self.in_flight.as_mut().filter(|f| client::redirects(&f.request, redirect))?;
        in_flight.last = match redirect.primary {
            Some(primary) => format!("{from} redirected to {primary}"),
            None => format!("{from} knows no primary (view change?)"),
        };
        Some(in_flight.request.clone())
    }
}

#[cfg(test)]
mod tests {
    use cohort_messages::metadata::OperationSpec;
    use cohort_messages::{Epoch, Op, OperationId, Outcome, RequestNumber, View};

    use super::*;

    fn command() -> MetadataCommand {
        MetadataCommand::StartOperation { spec: OperationSpec::Decommission { node: NodeId(2) } }
    }

    #[test]
    fn resends_keep_the_number_and_a_second_command_is_busy() {
        let now = Instant::now();
        let mut client = OperatorClient::new();
        let (answer, mut answered) = oneshot::channel();
        let registration = client.start(&command(), now + Duration::from_secs(5), answer, now).expect("sent");
        assert_eq!((registration.request, registration.operation.len()), (RequestNumber(1), 0), "H5");
        client.sent(NodeId(1), true, now);
        let registered = Reply {
            client: registration.client,
            request: registration.request,
            group: GroupId::METADATA,
            view: View(1),
            op: Op(8),
            outcome: Outcome::Ok(bytes::Bytes::new()),
        };
        let first = client.on_reply(&registered).expect("the command follows the registration");
        assert_eq!(
            (first.client, first.request, first.operation.clone()),
            (registration.client, RequestNumber(9), command().encode()),
            "numbered after the registration's op, 8"
        );
        client.sent(NodeId(1), true, now);
        let (busy, mut busy_answer) = oneshot::channel();
        assert!(client.start(&command(), now + Duration::from_secs(5), busy, now).is_none());
        assert_eq!(busy_answer.try_recv(), Ok(Err(OperatorFailure::Busy)));
        assert!(client.on_tick(now).is_none(), "not due yet");
        let again = client.on_tick(now + OPERATOR_RETRY_INTERVAL).expect("re-sent");
        assert_eq!((again.client, again.request), (first.client, first.request));
        let result = MetadataResult::OperationStarted { operation: OperationId(1), epoch: Epoch(9) };
        let reply = Reply {
            client: first.client,
            request: first.request,
            group: GroupId::METADATA,
            view: View(1),
            op: Op(9),
            outcome: Outcome::Ok(result.encode()),
        };
        client.on_reply(&reply);
        assert_eq!(answered.try_recv(), Ok(Ok(result)));
    }

    #[test]
    fn a_deadline_answers_unreachable_and_moves_to_a_fresh_client() {
        let now = Instant::now();
        let mut client = OperatorClient::new();
        let (answer, mut answered) = oneshot::channel();
        let first = client.start(&command(), now + Duration::from_secs(1), answer, now).expect("sent");
        client.sent(NodeId(2), false, now);
        assert!(client.on_tick(now + Duration::from_secs(1)).is_none());
        match answered.try_recv() {
            Ok(Err(OperatorFailure::Unreachable { tried, attempts: 1, .. })) => assert_eq!(tried, "node:2"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(!client.owns(first.client), "a fresh client id after an unknown outcome");
    }
}
