//! The agent as one client of the metadata group: at most one request in
//! flight, sent again with the same request number until it is answered,
//! so every command applies at most once (the exactly-once rules of
//! [`crate::client`]). What to ask next is never queued here: the agent
//! decides it afresh from the applied metadata once this is idle, so a lost
//! answer or a refusal is simply tried again from the current state.
//!
//! The agent's client id registers with the metadata group before its first
//! command (H5): the first [`Requests::submit`] sends the registration, and
//! the command goes out as soon as the registration is answered.

use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{ClientId, GroupId, Reply, Request, RequestNumber};

use super::super::GroupRecord;
use super::AgentOutput;
use crate::client::{self, Sequence, Verdict};

/// The request in flight and what it is for.
#[derive(Clone, Debug)]
struct InFlight {
    request: Request,
    asking: Asking,
    sent_tick: u64,
}

/// What a request in flight asks.
#[derive(Clone, Debug)]
enum Asking {
    /// The client id's registration (H5), and the command to send once it is
    /// answered.
    Registration(MetadataCommand),
    /// A command.
    Command(MetadataCommand),
    /// The read of the metadata group's record (Z6).
    RecordRead,
}

/// The one stream of requests (see the module docs).
#[derive(Debug)]
pub(super) struct Requests {
    client: ClientId,
    metadata_group: GroupId,
    retry_ticks: u64,
    sequence: Sequence,
    in_flight: Option<InFlight>,
}

/// What an answer to the request in flight settled.
#[derive(Debug)]
pub(super) enum Answered {
    /// The read of the metadata group's record came back (Z6): the record,
    /// or why its bytes do not decode.
    RecordRead(Result<Option<GroupRecord>, String>),
    /// A command was committed (or refused by the state machine) with this result.
    Command(MetadataCommand, Result<MetadataResult, cohort_messages::BodyError>),
}

impl Requests {
    /// Requests of `client` to `metadata_group`, resent after `retry_ticks`.
    pub(super) fn new(client: ClientId, metadata_group: GroupId, retry_ticks: u64) -> Requests {
        assert!(retry_ticks > 0, "a retry of 0 ticks resends every tick");
        Requests {
            client,
            metadata_group,
            retry_ticks,
            sequence: Sequence::new(client, metadata_group),
            in_flight: None,
        }
    }

    /// True while a request is unanswered.
    pub(super) fn busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Forget the request in flight (the node stops).
    pub(super) fn abandon(&mut self) {
        self.in_flight = None;
    }

    /// Send `command` as the next write (after the registration, if the
    /// client id has not registered yet).
    pub(super) fn submit(&mut self, command: MetadataCommand, now: u64, out: &mut Vec<AgentOutput>) {
        assert!(self.in_flight.is_none(), "one request in flight at a time");
        let (request, asking) = match self.sequence.registration() {
            Some(registration) => (registration, Asking::Registration(command)),
            None => (self.sequence.write(command.encode()), Asking::Command(command)),
        };
        out.push(AgentOutput::Submit(request.clone()));
        self.in_flight = Some(InFlight { request, asking, sent_tick: now });
    }

    /// Z6: ask the metadata primary for the metadata group's record (a
    /// read: request 0, which no write uses, so its answer is never
    /// mistaken for a write's).
    pub(super) fn read_metadata_record(&mut self, now: u64, out: &mut Vec<AgentOutput>) {
        assert!(self.in_flight.is_none(), "one request in flight at a time");
        let query = super::super::record_query(self.metadata_group);
        let request = client::read(self.client, RequestNumber(0), self.metadata_group, query);
        out.push(AgentOutput::Submit(request.clone()));
        self.in_flight = Some(InFlight { request, asking: Asking::RecordRead, sent_tick: now });
    }

    /// Send the request in flight again if it had no answer for a retry
    /// period. True if one is in flight (resent or not).
    pub(super) fn retry(&mut self, now: u64, out: &mut Vec<AgentOutput>) -> bool {
        let Some(in_flight) = &mut self.in_flight else { return false };
        if now >= in_flight.sent_tick.saturating_add(self.retry_ticks) {
            in_flight.sent_tick = now;
            out.push(AgentOutput::Submit(in_flight.request.clone()));
        }
        true
    }

    /// `reply`, if it answers the request in flight. A busy answer (view
    /// change, quorum window) keeps the request and sends it again soon; a
    /// refusal for good drops it, and so does an answer, which is returned.
    /// An answered registration sends its command into `out`.
    pub(super) fn on_reply(&mut self, now: u64, reply: &Reply, out: &mut Vec<AgentOutput>) -> Option<Answered> {
        let in_flight = self.in_flight.as_mut()?;
        if !client::answers(&in_flight.request, reply) {
            return None;
        }
        match client::verdict(reply) {
            // View change, busy, quorum window: send the same request again soon.
            Verdict::Retry { .. } => {
                in_flight.sent_tick = now.saturating_sub(self.retry_ticks / 2);
                None
            }
            // Refused for good: what to ask is decided again from the applied state.
            Verdict::Refused { .. } => {
                self.in_flight = None;
                None
            }
            Verdict::Done { op, result } => {
                let asking = self.in_flight.take().map(|in_flight| in_flight.asking)?;
                match asking {
                    Asking::RecordRead => Some(Answered::RecordRead(super::super::decode_record_read(result))),
                    Asking::Command(command) => Some(Answered::Command(command, MetadataResult::decode(result))),
                    Asking::Registration(command) => {
                        self.sequence.registered(op);
                        self.submit(command, now, out);
                        None
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_messages::{Op, Outcome, ReplyError, View};

    fn reply(request: &Request, outcome: Outcome) -> Reply {
        Reply {
            client: request.client,
            request: request.request,
            group: request.group,
            view: View(0),
            op: Op(1),
            outcome,
        }
    }

    fn submitted(out: &[AgentOutput]) -> Request {
        match out {
            [AgentOutput::Submit(request)] => request.clone(),
            other => panic!("one submit expected: {other:?}"),
        }
    }

    /// Requests whose registration was sent and answered at tick 10: the
    /// command, sent then, is returned.
    fn registered(command: MetadataCommand) -> (Requests, Request) {
        let mut requests = Requests::new(ClientId(5), GroupId::METADATA, 4);
        let mut out = Vec::new();
        requests.submit(command.clone(), 10, &mut out);
        let registration = submitted(&out);
        assert_eq!((registration.request, registration.operation.len()), (RequestNumber(1), 0));
        let mut sent = Vec::new();
        assert!(requests.on_reply(10, &reply(&registration, Outcome::Ok(bytes::Bytes::new())), &mut sent).is_none());
        let request = submitted(&sent);
        assert_eq!(request.operation, command.encode());
        (requests, request)
    }

    #[test]
    fn h5_the_first_command_follows_the_registration() {
        let command = MetadataCommand::OpenSession { node: cohort_messages::NodeId(1) };
        let (_, first) = registered(command);
        assert_eq!(first.request, RequestNumber(2), "numbered after the registration's op, 1");
    }

    #[test]
    fn a_request_is_resent_with_its_number_after_each_retry_period() {
        let (mut requests, first) = registered(MetadataCommand::OpenSession { node: cohort_messages::NodeId(1) });
        assert_eq!(first.request, RequestNumber(2));
        let mut resent = Vec::new();
        for now in 11..=18 {
            assert!(requests.retry(now, &mut resent));
        }
        assert_eq!(resent, vec![AgentOutput::Submit(first.clone()), AgentOutput::Submit(first)]);
    }

    #[test]
    fn a_busy_answer_brings_the_resend_forward_and_a_refusal_drops_the_request() {
        let (mut requests, request) = registered(MetadataCommand::OpenSession { node: cohort_messages::NodeId(1) });
        let mut out = Vec::new();
        let busy = reply(&request, Outcome::Error { code: ReplyError::Busy, detail: String::new() });
        assert!(requests.on_reply(11, &busy, &mut out).is_none());
        let mut resent = Vec::new();
        requests.retry(12, &mut resent);
        assert_eq!(resent, Vec::new(), "half a retry period back from tick 11 is tick 9: due at 13");
        requests.retry(13, &mut resent);
        assert_eq!(resent, vec![AgentOutput::Submit(request.clone())]);
        let refused = reply(&request, Outcome::Error { code: ReplyError::Rejected, detail: String::new() });
        assert!(requests.on_reply(14, &refused, &mut out).is_none());
        assert_eq!(out, Vec::new());
        assert!(!requests.busy());
    }

    #[test]
    fn an_answer_returns_the_command_and_frees_the_stream() {
        let command = MetadataCommand::OpenSession { node: cohort_messages::NodeId(1) };
        let (mut requests, request) = registered(command.clone());
        let mut out = Vec::new();
        let other = Reply { request: RequestNumber(9), ..reply(&request, Outcome::Ok(bytes::Bytes::new())) };
        assert!(requests.on_reply(11, &other, &mut out).is_none(), "not the request in flight");
        let result = MetadataResult::Done { epoch: cohort_messages::Epoch(3) };
        let answered = requests.on_reply(11, &reply(&request, Outcome::Ok(result.encode())), &mut out);
        assert!(
            matches!(&answered, Some(Answered::Command(c, Ok(r))) if *c == command && *r == result),
            "{answered:?}"
        );
        assert!(!requests.busy());
    }
}
