//! The agent's session job (S1–S3): register, open a session through the
//! [`SessionClient`] and keep it alive, learn that it ended (from a notice,
//! or from the applied log when the notice is lost), and apply the expiry
//! policy. On the metadata primary it also judges other nodes' keepalives
//! through the [`MetadataDriver`] and queues the expiries it decides.
//!
//! Kept apart from the rest of the agent because it is the one job that
//! runs on every tick, scan or no scan ([`super::MetadataAgent::on_idle_tick`]):
//! it needs no hosted groups, only the clock and the applied metadata.

use std::collections::VecDeque;

use cohort_messages::metadata::MetadataCommand;
use cohort_messages::{NodeId, SessionExpired, SessionId, SessionKeepalive};

use super::super::{KeepaliveOutcome, Metadata, MetadataDriver, SessionAction, SessionClient};
use super::{AgentConfig, AgentCounters, AgentOutput};

/// The session this node holds, and the expiries it owes as metadata primary.
#[derive(Debug)]
pub(super) struct SessionUpkeep {
    client: SessionClient,
    driver: MetadataDriver,
    /// The session this node holds, once opened.
    current: Option<SessionId>,
    /// An open attempt the session client asked for, not yet submitted.
    open_wanted: bool,
    /// Expiries the driver asked for, not yet submitted.
    expiries: VecDeque<MetadataCommand>,
}

impl SessionUpkeep {
    pub(super) fn new(config: &AgentConfig) -> SessionUpkeep {
        SessionUpkeep {
            client: SessionClient::new(config.policy, config.keepalive_interval_ticks, config.reconnect_backoff_ticks),
            driver: MetadataDriver::new(config.session_timeout_ticks),
            current: None,
            open_wanted: false,
            expiries: VecDeque::new(),
        }
    }

    /// The session this node holds.
    pub(super) fn current(&self) -> Option<SessionId> {
        self.current
    }

    /// True while a session open or an expiry waits to be submitted.
    pub(super) fn wants_scan(&self) -> bool {
        self.open_wanted || !self.expiries.is_empty()
    }

    /// A held session wants no open attempt.
    pub(super) fn invariants(&self) {
        assert!(!(self.current.is_some() && self.open_wanted), "an open attempt while a session is held");
    }

    /// The session this node holds, if the applied log says it ended (the
    /// notice can be lost): a later session was handed out and the node's
    /// record no longer names this one.
    pub(super) fn ended_in_log(&self, node: NodeId, metadata: &Metadata) -> Option<SessionId> {
        let session = self.current?;
        let named = metadata.nodes.get(&node).and_then(|record| record.session);
        (metadata.last_session >= session && named != Some(session)).then_some(session)
    }

    /// `session` is over. If it is the one held, it is dropped and counted,
    /// and the policy may say the node stops (the reason is returned).
    pub(super) fn expired(&mut self, session: SessionId, counters: &mut AgentCounters) -> Option<&'static str> {
        if self.current != Some(session) {
            return None; // A notice about an older session.
        }
        self.current = None;
        counters.sessions_expired += 1;
        match self.client.on_expired(session) {
            Some(SessionAction::Stop(reason)) => Some(reason),
            _ => None,
        }
    }

    /// The session's part of a tick: an open attempt due, a keepalive due,
    /// and, on the metadata primary, the expiries due. `Err` with the reason
    /// if the node must stop now (its reconnect attempts are used up).
    pub(super) fn on_tick(
        &mut self,
        now: u64,
        node: NodeId,
        metadata: &Metadata,
        metadata_primary: bool,
        counters: &mut AgentCounters,
        out: &mut Vec<AgentOutput>,
    ) -> Result<(), &'static str> {
        match self.client.on_tick(now) {
            Some(SessionAction::Open { .. }) => self.open_wanted = true,
            Some(SessionAction::Keepalive(session)) => {
                debug_assert_eq!(self.current, Some(session), "a keepalive for the session held");
                out.push(AgentOutput::Keepalive(SessionKeepalive { node, session }))
            }
            Some(SessionAction::Stop(reason)) => return Err(reason),
            Some(SessionAction::Reown(_)) | None => {}
        }
        for command in self.driver.on_tick(now, metadata_primary, metadata) {
            debug_assert!(matches!(command, MetadataCommand::ExpireSession { .. }), "the driver only expires");
            counters.expiries_proposed += 1;
            self.expiries.push_back(command);
        }
        Ok(())
    }

    /// The command the session needs next, most urgent first: an open
    /// attempt, then the oldest expiry owed.
    pub(super) fn next_command(&mut self, node: NodeId) -> Option<MetadataCommand> {
        if std::mem::take(&mut self.open_wanted) {
            return Some(MetadataCommand::OpenSession { node });
        }
        self.expiries.pop_front()
    }

    /// `OpenSession` committed with `session`: the session this node holds
    /// now, if the client was opening one.
    pub(super) fn on_opened(
        &mut self,
        session: SessionId,
        now: u64,
        counters: &mut AgentCounters,
        out: &mut Vec<AgentOutput>,
    ) -> bool {
        let Some(SessionAction::Reown(session)) = self.client.on_opened(session, now) else { return false };
        self.current = Some(session);
        self.open_wanted = false;
        counters.sessions_opened += 1;
        out.push(AgentOutput::SessionOpened(session));
        true
    }

    /// On a metadata member: a keepalive, already checked to come from the
    /// node it names. On the primary it renews the session, or answers that
    /// it is over.
    pub(super) fn on_keepalive(
        &mut self,
        now: u64,
        keepalive: &SessionKeepalive,
        metadata: &Metadata,
    ) -> Option<AgentOutput> {
        match self.driver.on_keepalive(keepalive.node, keepalive.session, now, metadata) {
            KeepaliveOutcome::Expired => Some(AgentOutput::NotifyExpired {
                to: keepalive.node,
                notice: SessionExpired { node: keepalive.node, session: keepalive.session, epoch: metadata.epoch },
            }),
            KeepaliveOutcome::Renewed | KeepaliveOutcome::NotPrimary => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use cohort_messages::Epoch;

    use super::super::super::ExpiredPolicy;
    use super::super::MetadataAgent;
    use super::super::fixture::{self, NODE};
    use super::*;

    fn request(output: &AgentOutput) -> &cohort_messages::Request {
        match output {
            AgentOutput::Submit(request) => request,
            other => panic!("a submit expected: {other:?}"),
        }
    }

    /// Tick `agent` on `metadata` (not its primary, no groups hosted).
    fn tick(agent: &mut MetadataAgent, now: u64, metadata: &Metadata) -> Vec<AgentOutput> {
        agent.on_tick(now, metadata, false, &[])
    }

    #[test]
    fn s1_the_agent_registers_opens_a_session_and_sends_a_keepalive_every_interval() {
        let mut config = fixture::config();
        config.bootstrap_groups.clear();
        let mut agent = MetadataAgent::new(config);
        let mut metadata = Metadata::default();
        let register = MetadataCommand::RegisterNode { node: NODE, address: "n1".into() };
        let out = tick(&mut agent, 1, &metadata);
        assert_eq!(out, vec![fixture::registration()]);
        let out = fixture::past_registration(&mut agent, 1, out);
        assert_eq!(out, vec![fixture::write(1, &register)]);
        let result = fixture::apply(&mut metadata, register);
        assert_eq!(agent.on_reply(1, &fixture::reply(request(&out[0]), &result)), Vec::new());
        let out = tick(&mut agent, 2, &metadata);
        let open = MetadataCommand::OpenSession { node: NODE };
        assert_eq!(out, vec![fixture::write(2, &open)]);
        let result = fixture::apply(&mut metadata, open);
        let session = fixture::session(&metadata, 1);
        assert_eq!(
            agent.on_reply(2, &fixture::reply(request(&out[0]), &result)),
            vec![AgentOutput::SessionOpened(session)]
        );
        // The new session moved the configuration epoch: the node acks it.
        let out = tick(&mut agent, 3, &metadata);
        let ack = MetadataCommand::AckEpoch { node: NODE, epoch: metadata.config_epoch };
        assert_eq!(out, vec![fixture::write(3, &ack)]);
        let result = fixture::apply(&mut metadata, ack);
        assert_eq!(agent.on_reply(3, &fixture::reply(request(&out[0]), &result)), Vec::new());
        let ticks: Vec<Vec<AgentOutput>> = (4..=12).map(|now| tick(&mut agent, now, &metadata)).collect();
        let keepalive = AgentOutput::Keepalive(SessionKeepalive { node: NODE, session });
        let expected: Vec<Vec<AgentOutput>> =
            (4..=12).map(|now| if now % 5 == 2 { vec![keepalive.clone()] } else { Vec::new() }).collect();
        assert_eq!(ticks, expected);
        assert_eq!(agent.counters(), AgentCounters { sessions_opened: 1, ..AgentCounters::default() });
    }

    #[test]
    fn s3_an_expiry_notice_reopens_under_reconnect_and_the_log_stops_a_shutdown_node() {
        let mut config = fixture::config();
        config.bootstrap_groups.clear();
        let metadata = fixture::metadata(&[1], &[]);
        let session = fixture::session(&metadata, 1);
        let mut upkeep = SessionUpkeep::new(&config);
        let mut counters = AgentCounters::default();
        let mut out = Vec::new();
        upkeep.on_tick(1, NODE, &metadata, false, &mut counters, &mut out).expect("runs");
        assert_eq!(upkeep.next_command(NODE), Some(MetadataCommand::OpenSession { node: NODE }));
        assert!(upkeep.on_opened(session, 1, &mut counters, &mut out));
        assert_eq!(upkeep.ended_in_log(NODE, &metadata), None);
        assert_eq!(upkeep.expired(session, &mut counters), None, "reconnect: no stop");
        assert_eq!(upkeep.current(), None);
        upkeep.on_tick(2, NODE, &metadata, false, &mut counters, &mut out).expect("runs");
        assert!(upkeep.wants_scan());
        assert_eq!(out, vec![AgentOutput::SessionOpened(session)]);

        // Under shutdown, an expiry read in the log stops the node, and the
        // tick ends there: the configured groups it would create next wait
        // for a node that runs.
        let config = AgentConfig { policy: ExpiredPolicy::Shutdown, ..fixture::config() };
        let mut agent = MetadataAgent::new(config);
        let mut metadata = fixture::metadata(&[1], &[]);
        let out = tick(&mut agent, 1, &metadata);
        let out = fixture::past_registration(&mut agent, 1, out);
        let open = MetadataCommand::OpenSession { node: NODE };
        let result = fixture::apply(&mut metadata, open.clone());
        assert_eq!(out, vec![fixture::write(1, &open)]);
        let session = fixture::session(&metadata, 1);
        agent.on_reply(1, &fixture::reply(request(&out[0]), &result));
        fixture::apply(&mut metadata, MetadataCommand::ExpireSession { node: NODE, session });
        let stop = AgentOutput::Stop("session expired and session_expired_policy is shutdown");
        assert_eq!(tick(&mut agent, 2, &metadata), vec![stop]);
        assert!(agent.stopped());
        assert_eq!(tick(&mut agent, 3, &metadata), Vec::new(), "a stopped agent does nothing");
        let counted = AgentCounters { sessions_opened: 1, sessions_expired: 1, ..AgentCounters::default() };
        assert_eq!(agent.counters(), counted);
    }

    #[test]
    fn s1_the_metadata_primary_expires_a_silent_session_through_the_log() {
        let config = fixture::config();
        let metadata = fixture::metadata(&[1, 2], &[]);
        let (own, other) = (fixture::session(&metadata, 1), fixture::session(&metadata, 2));
        let mut upkeep = SessionUpkeep::new(&config);
        let mut counters = AgentCounters::default();
        let mut out = Vec::new();
        // The first tick as primary starts every live session's clock (30 ticks).
        upkeep.on_tick(10, NODE, &metadata, true, &mut counters, &mut out).expect("runs");
        assert_eq!(upkeep.next_command(NODE), Some(MetadataCommand::OpenSession { node: NODE }));
        assert!(upkeep.on_opened(own, 10, &mut counters, &mut out));
        let keepalive = SessionKeepalive { node: NODE, session: own };
        for now in 11..=39 {
            assert_eq!(upkeep.on_keepalive(now, &keepalive, &metadata), None, "renewed");
            upkeep.on_tick(now, NODE, &metadata, true, &mut counters, &mut out).expect("runs");
        }
        assert!(!upkeep.wants_scan());
        upkeep.on_tick(40, NODE, &metadata, true, &mut counters, &mut out).expect("runs");
        assert_eq!(upkeep.next_command(NODE), Some(MetadataCommand::ExpireSession { node: NodeId(2), session: other }));
        assert_eq!(counters.expiries_proposed, 1);
        // A keepalive of a session the metadata does not hold is answered.
        let stale = SessionKeepalive { node: NodeId(2), session: SessionId(other.0 + 7) };
        let notice = SessionExpired { node: NodeId(2), session: stale.session, epoch: Epoch(4) };
        assert_eq!(
            upkeep.on_keepalive(41, &stale, &metadata),
            Some(AgentOutput::NotifyExpired { to: NodeId(2), notice })
        );
        let own_keepalive = AgentOutput::Keepalive(keepalive);
        let mut expected = vec![AgentOutput::SessionOpened(own)];
        expected.extend((15..=40).step_by(5).map(|_| own_keepalive.clone()));
        assert_eq!(out, expected);
    }

    #[test]
    fn t3_session_frames_that_do_not_come_from_whom_they_speak_for_are_refused_and_counted() {
        let mut agent = MetadataAgent::new(fixture::config());
        let metadata = fixture::metadata(&[1, 2], &[]);
        let session = fixture::session(&metadata, 1);
        let keepalive = SessionKeepalive { node: NodeId(2), session };
        assert_eq!(agent.on_keepalive(5, NODE, &keepalive, &metadata), Vec::new());
        let notice = SessionExpired { node: NODE, session, epoch: Epoch(1) };
        assert_eq!(agent.on_session_expired(NodeId(9), &[NODE, NodeId(2)], &notice), Vec::new());
        assert_eq!(agent.counters(), AgentCounters { frames_refused: 2, ..AgentCounters::default() });
    }
}
