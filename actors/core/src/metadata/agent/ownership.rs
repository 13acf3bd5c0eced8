//! The agent's ownership job (S4): report the groups this node leads under
//! its session, in batches (Z2: after a start or a failover a node reports
//! thousands), remember the reports the metadata refused so that a stale
//! view is not sent again, and unload a hosted group once the metadata has
//! placed it elsewhere for `unload_grace_ticks` in a row, or at once when
//! the replica's life is over (H3): the group was deleted, or deleted and
//! created again under the same id, so the replica holds the data of an
//! incarnation no client may see again.
//!
//! Both halves read the same thing, the metadata's placement against what
//! this node hosts, from opposite sides: a group placed here and led here is
//! reported; a group hosted here and placed elsewhere is unloaded.

use std::collections::{BTreeMap, VecDeque};

use cohort_messages::metadata::{METADATA_BATCH_ENTRIES_MAX, MetadataCommand, MetadataResult, OwnedGroup};
use cohort_messages::{Epoch, GroupId, SessionId, View};

use super::super::{GroupRecord, Metadata, Ownership as OwnerRecord};
use super::asked::Asked;
use super::{AgentConfig, AgentCounters, AgentOutput, HostedReplica};

/// Reports refused, and hosted groups placed elsewhere.
#[derive(Debug, Default)]
pub(super) struct Ownership {
    /// Reports refused, by (group, view, session): not sent again.
    refused: BTreeMap<GroupId, (View, SessionId)>,
    /// Hosted groups placed elsewhere, since when.
    misplaced_since: BTreeMap<GroupId, u64>,
    /// H3: replicas whose life is over, unloaded at once: asked again only
    /// after a retry period while a scan still shows them.
    ended: Asked,
    /// H3: the metadata's epoch when a scan first found a hosted group
    /// ended or misplaced. Its removal waits until a restart of this node
    /// would replay the metadata at least that far ([`replayed_through`]).
    seen_at: BTreeMap<GroupId, Epoch>,
}

impl Ownership {
    /// A new session: every report may be sent again under it.
    pub(super) fn on_session_opened(&mut self) {
        self.refused.clear();
    }

    /// True while a misplaced group waits out its grace, or an ended one
    /// may be asked for again (timed work).
    pub(super) fn unload_waiting(&self) -> bool {
        !self.misplaced_since.is_empty() || !self.ended.is_empty() || !self.seen_at.is_empty()
    }

    /// The groups this node leads whose ownership record is not this node
    /// in this view under `session`, up to a batch of them in one command;
    /// with what that batch left out, for the batches after it.
    pub(super) fn report_command(
        &self,
        config: &AgentConfig,
        metadata: &Metadata,
        session: SessionId,
        hosted: &[HostedReplica],
    ) -> Option<(MetadataCommand, VecDeque<OwnedGroup>)> {
        let mut backlog: VecDeque<OwnedGroup> = hosted
            .iter()
            .filter(|hosted| hosted.primary)
            .map(|hosted| OwnedGroup { group: hosted.group, incarnation: hosted.incarnation, view: hosted.view })
            .filter(|report| to_report(config, metadata, &self.refused, session, report))
            .collect();
        if backlog.is_empty() {
            return None;
        }
        let reports: Vec<OwnedGroup> = backlog.drain(..backlog.len().min(METADATA_BATCH_ENTRIES_MAX)).collect();
        assert!(!reports.is_empty() && reports.len() <= METADATA_BATCH_ENTRIES_MAX);
        Some((MetadataCommand::ReportOwnerships { node: config.node, session, reports }, backlog))
    }

    /// The next batch from `backlog` (what a scan found, at tick
    /// `scanned_tick`), if the session is still the node's live one and
    /// the scan recent enough; each report checked again against the
    /// metadata as it stands now.
    pub(super) fn backlog_command(
        &self,
        config: &AgentConfig,
        metadata: &Metadata,
        current: Option<SessionId>,
        now: u64,
        scanned_tick: u64,
        backlog: &mut VecDeque<OwnedGroup>,
    ) -> Option<MetadataCommand> {
        // Two retry periods outlive the spacing of scans while reports go
        // on; past that the views scanned are too old.
        let fresh = now <= scanned_tick.saturating_add(2 * config.request_retry_ticks);
        let node = config.node;
        let held = |session: &SessionId| {
            fresh && metadata.nodes.get(&node).is_some_and(|record| record.session == Some(*session))
        };
        let refused = &self.refused;
        current.filter(held).and_then(|session| {
            let reports: Vec<OwnedGroup> = std::iter::from_fn(|| backlog.pop_front())
                .filter(|report| to_report(config, metadata, refused, session, report))
                .take(METADATA_BATCH_ENTRIES_MAX)
                .collect();
            (!reports.is_empty()).then_some(MetadataCommand::ReportOwnerships { node, session, reports })
        })
    }

    /// The metadata's answer to a report this agent sent: count it, and
    /// remember the refused ones.
    pub(super) fn on_reported(
        &mut self,
        command: &MetadataCommand,
        result: &MetadataResult,
        counters: &mut AgentCounters,
    ) {
        match (command, result) {
            (MetadataCommand::ReportOwnership { group, view, session, .. }, MetadataResult::Refused { .. }) => {
                counters.reports_refused += 1;
                self.refused.insert(*group, (*view, *session));
            }
            (MetadataCommand::ReportOwnership { .. }, MetadataResult::Done { .. }) => {
                counters.reports_accepted += 1;
            }
            (
                MetadataCommand::ReportOwnerships { session, reports, .. },
                MetadataResult::OwnershipsReported { refused, .. },
            ) => {
                for report in reports {
                    if refused.contains(&report.group) {
                        counters.reports_refused += 1;
                        self.refused.insert(report.group, (report.view, *session));
                    } else {
                        counters.reports_accepted += 1;
                    }
                }
            }
            _ => {}
        }
    }

    /// Unload the hosted groups the metadata has placed elsewhere, once
    /// that has held for the grace period, and those whose life is over
    /// at once (H3, [`life_over`]); either only once a restart of this
    /// node would replay the metadata that showed it ([`replayed_through`]).
    pub(super) fn unload_misplaced(
        &mut self,
        now: u64,
        config: &AgentConfig,
        metadata: &Metadata,
        hosted: &[HostedReplica],
        counters: &mut AgentCounters,
        out: &mut Vec<AgentOutput>,
    ) {
        let node = config.node;
        let replayed = replayed_through(config, hosted)
            .filter(|_| !crate::mutants::Mutant::UnloadBeforeReplayable.metadata_mutated());
        let mut misplaced: Vec<GroupId> = Vec::new();
        let mut ended: Vec<GroupId> = Vec::new();
        for hosted in hosted.iter().filter(|hosted| hosted.group != config.metadata_group) {
            let Some(record) = metadata.groups.get(&hosted.group) else { continue };
            if life_over(record, hosted) {
                // Nothing to wait for but this node's own copy: the delete
                // committed, and whatever this replica holds must not be
                // served again.
                ended.push(hosted.group);
                if !self.replayable(hosted.group, metadata, replayed) {
                    continue;
                }
                if self.ended.again(hosted.group, now, config.request_retry_ticks) {
                    counters.groups_unloaded += 1;
                    out.push(AgentOutput::Unload(hosted.group));
                }
                continue;
            }
            // Metadata older than the replica (a restarted node replays
            // its metadata log from a snapshot) says nothing about it.
            let current = record.incarnation >= hosted.incarnation;
            let next = record.pending.as_ref().is_some_and(|pending| pending.seal.members.contains(&node));
            let placed = record.members.contains(&node) || record.learners.contains(&node) || next;
            if current && !placed {
                misplaced.push(hosted.group);
            }
        }
        self.ended.retain(|group| ended.contains(&group));
        self.misplaced_since.retain(|group, _| misplaced.contains(group));
        self.seen_at.retain(|group, _| ended.contains(group) || misplaced.contains(group));
        for group in misplaced {
            let since = *self.misplaced_since.entry(group).or_insert(now);
            if !self.replayable(group, metadata, replayed) {
                continue;
            }
            if now >= since.saturating_add(config.unload_grace_ticks) {
                self.misplaced_since.remove(&group);
                self.seen_at.remove(&group);
                counters.groups_unloaded += 1;
                out.push(AgentOutput::Unload(group));
            }
        }
        debug_assert!(self.misplaced_since.values().all(|since| *since <= now), "a grace starts in the past");
    }

    /// H3: whether a restart of this node, replaying its metadata through
    /// `replayed`, would see what `metadata` showed of `group` when a scan
    /// first found it ended or misplaced (remembered from now on).
    fn replayable(&mut self, group: GroupId, metadata: &Metadata, replayed: Option<Epoch>) -> bool {
        let seen = *self.seen_at.entry(group).or_insert(metadata.epoch);
        replayed.is_none_or(|replayed| replayed >= seen)
    }
}

/// H3: how far a restart of this node would replay the metadata, if this
/// node hosts a replica of it: through its durable commit point (epochs are
/// the metadata's ops). A replica removed on metadata past that point could
/// be hosted again, empty, by a restart whose copy never saw why it went.
/// `None` without a replica here: the copy is read whole from the metadata
/// group, after a restart too, not replayed from this node's disk.
fn replayed_through(config: &AgentConfig, hosted: &[HostedReplica]) -> Option<Epoch> {
    let metadata = hosted.iter().find(|hosted| hosted.group == config.metadata_group)?;
    Some(Epoch(metadata.durable_commit.0))
}

/// H3: whether `hosted` belongs to a life of its group id that the metadata
/// ended: the group was deleted at the replica's incarnation or later, or
/// it was created again since (the record's `created` is past the
/// replica's incarnation). Metadata older than the replica (a restart
/// replays it from a snapshot) ends nothing: a replica of an incarnation
/// past the record's is kept.
fn life_over(record: &GroupRecord, hosted: &HostedReplica) -> bool {
    let deleted = !record.live && hosted.incarnation <= record.incarnation;
    let created_again = hosted.incarnation < record.created;
    debug_assert!(record.created <= record.incarnation, "a life starts at or before its current incarnation");
    deleted || created_again
}

/// Whether `report`, of a group this node leads, is still to be reported
/// under `session`: the metadata places the group here in that
/// incarnation, does not record this node as its owner in that view under
/// that session yet, and did not refuse that report before.
fn to_report(
    config: &AgentConfig,
    metadata: &Metadata,
    refused: &BTreeMap<GroupId, (View, SessionId)>,
    session: SessionId,
    report: &OwnedGroup,
) -> bool {
    let node = config.node;
    if report.group == config.metadata_group {
        return false;
    }
    let Some(record) = metadata.groups.get(&report.group).filter(|record| record.live) else {
        return false;
    };
    let placed_here = record.incarnation == report.incarnation && record.members.contains(&node);
    let current = record.owner == Some(OwnerRecord { node, view: report.view, session });
    let refused = refused.get(&report.group) == Some(&(report.view, session));
    placed_here && !current && !refused
}

#[cfg(test)]
mod tests {
    use cohort_messages::{Epoch, Incarnation, NodeId, Op};

    use super::super::fixture::{self, NODE, hosted};
    use super::*;

    fn owned(group: u64, view: u32) -> OwnedGroup {
        OwnedGroup { group: GroupId(group), incarnation: Incarnation(1), view: View(view) }
    }

    #[test]
    fn s4_the_groups_led_and_placed_here_are_reported_under_the_session() {
        let config = fixture::config();
        let metadata = fixture::metadata(&[1, 2], &[(0, &[1, 2]), (1, &[1, 2]), (2, &[2])]);
        let session = fixture::session(&metadata, 1);
        // Group 1 is led elsewhere, group 2 is not placed here, group 3 is
        // unknown, and the metadata group is never reported.
        let hosted = [
            hosted(0, true, 2),
            hosted(1, false, 0),
            hosted(2, true, 1),
            hosted(3, true, 1),
            fixture::metadata_replica(true, &[1, 2], &[]),
        ];
        let reports = Ownership::default().report_command(&config, &metadata, session, &hosted);
        let command = MetadataCommand::ReportOwnerships { node: NODE, session, reports: vec![owned(0, 2)] };
        assert_eq!(reports, Some((command, VecDeque::new())));
    }

    #[test]
    fn s4_a_report_refused_in_a_view_is_not_sent_again_in_it_until_a_new_session() {
        let config = fixture::config();
        let metadata = fixture::metadata(&[1, 2], &[(0, &[1, 2]), (1, &[1, 2])]);
        let session = fixture::session(&metadata, 1);
        let mut ownership = Ownership::default();
        let mut counters = AgentCounters::default();
        let command =
            MetadataCommand::ReportOwnerships { node: NODE, session, reports: vec![owned(0, 2), owned(1, 4)] };
        let result = MetadataResult::OwnershipsReported { refused: vec![GroupId(0)], epoch: Epoch(9) };
        ownership.on_reported(&command, &result, &mut counters);
        assert_eq!(counters, AgentCounters { reports_accepted: 1, reports_refused: 1, ..AgentCounters::default() });
        let led = [hosted(0, true, 2), hosted(1, true, 4)];
        let again = MetadataCommand::ReportOwnerships { node: NODE, session, reports: vec![owned(1, 4)] };
        assert_eq!(ownership.report_command(&config, &metadata, session, &led), Some((again, VecDeque::new())));
        let later = [hosted(0, true, 3)];
        let next_view = MetadataCommand::ReportOwnerships { node: NODE, session, reports: vec![owned(0, 3)] };
        assert_eq!(ownership.report_command(&config, &metadata, session, &later), Some((next_view, VecDeque::new())));
        ownership.on_session_opened();
        let all = MetadataCommand::ReportOwnerships { node: NODE, session, reports: vec![owned(0, 2), owned(1, 4)] };
        assert_eq!(ownership.report_command(&config, &metadata, session, &led), Some((all, VecDeque::new())));
    }

    #[test]
    fn s4_a_group_recorded_as_owned_here_in_that_view_is_not_reported() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1], &[(0, &[1])]);
        let session = fixture::session(&metadata, 1);
        let command = MetadataCommand::ReportOwnerships { node: NODE, session, reports: vec![owned(0, 2)] };
        fixture::apply(&mut metadata, command);
        assert_eq!(Ownership::default().report_command(&config, &metadata, session, &[hosted(0, true, 2)]), None);
    }

    #[test]
    fn z2_reports_leave_in_batches_and_the_backlog_is_checked_again_when_it_goes_on() {
        let config = fixture::config();
        let groups: Vec<(u64, &[u64])> = (0..300).map(|group| (group, &[1u64][..])).collect();
        let metadata = fixture::metadata(&[1], &groups);
        let session = fixture::session(&metadata, 1);
        let led: Vec<HostedReplica> = (0..300).map(|group| hosted(group, true, 1)).collect();
        let ownership = Ownership::default();
        let (command, mut backlog) = ownership.report_command(&config, &metadata, session, &led).expect("reports");
        let first: Vec<OwnedGroup> = (0..256).map(|group| owned(group, 1)).collect();
        assert_eq!(command, MetadataCommand::ReportOwnerships { node: NODE, session, reports: first });
        assert_eq!(backlog, (256..300).map(|group| owned(group, 1)).collect::<VecDeque<_>>());
        // Past two retry periods (4 ticks each) the views scanned are too old.
        let mut stale = backlog.clone();
        assert_eq!(ownership.backlog_command(&config, &metadata, Some(session), 19, 10, &mut stale), None);
        // A session the metadata does not hold any more sends nothing either.
        let mut other = backlog.clone();
        let ended = Some(cohort_messages::SessionId(session.0 + 1));
        assert_eq!(ownership.backlog_command(&config, &metadata, ended, 12, 10, &mut other), None);
        let rest: Vec<OwnedGroup> = (256..300).map(|group| owned(group, 1)).collect();
        let next = ownership.backlog_command(&config, &metadata, Some(session), 18, 10, &mut backlog);
        assert_eq!(next, Some(MetadataCommand::ReportOwnerships { node: NODE, session, reports: rest }));
        assert!(backlog.is_empty());
    }

    #[test]
    fn s4_a_group_placed_elsewhere_is_unloaded_once_after_the_grace_and_a_deleted_one_at_once() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2], &[(0, &[2]), (1, &[1, 2]), (2, &[1, 2]), (4, &[2])]);
        fixture::apply(&mut metadata, MetadataCommand::DeleteGroup { group: GroupId(1) });
        // Group 4's pending switch names this node: it stays.
        metadata.groups.get_mut(&GroupId(4)).expect("group 4").pending = Some(super::super::super::PendingSwitch {
            seal: fixture::seal(2, &[1, 2]),
            learners: Vec::new(),
            sealed_by: Default::default(),
        });
        // Group 3 is unknown to this copy, and the metadata group never unloads.
        let mut hosted = vec![
            hosted(0, false, 0),
            hosted(1, false, 0),
            hosted(2, false, 0),
            hosted(3, false, 0),
            hosted(4, false, 0),
            // A restart of this node would replay all of it.
            HostedReplica { durable_commit: Op(metadata.epoch.0), ..fixture::metadata_replica(false, &[2], &[]) },
        ];
        let mut ownership = Ownership::default();
        let mut counters = AgentCounters::default();
        let mut unloads = Vec::new();
        for now in 100..=110 {
            let mut out = Vec::new();
            ownership.unload_misplaced(now, &config, &metadata, &hosted, &mut counters, &mut out);
            // The shell unloads them before the next scan.
            hosted.retain(|hosted| !out.contains(&AgentOutput::Unload(hosted.group)));
            unloads.push((now, out));
        }
        let expected: Vec<(u64, Vec<AgentOutput>)> = (100..=110)
            .map(|now| match now {
                // H3: the deleted group goes at the first scan that sees the delete.
                100 => (now, vec![AgentOutput::Unload(GroupId(1))]),
                110 => (now, vec![AgentOutput::Unload(GroupId(0))]),
                _ => (now, Vec::new()),
            })
            .collect();
        assert_eq!(unloads, expected);
        assert_eq!(counters.groups_unloaded, 2);
        assert!(!ownership.unload_waiting());
    }

    #[test]
    fn s4_a_group_placed_back_within_the_grace_starts_it_afresh() {
        let config = fixture::config();
        let mut metadata = fixture::metadata(&[1, 2], &[(0, &[2])]);
        let hosted = [hosted(0, false, 0)];
        let mut ownership = Ownership::default();
        let mut counters = AgentCounters::default();
        let mut out = Vec::new();
        ownership.unload_misplaced(100, &config, &metadata, &hosted, &mut counters, &mut out);
        assert!(ownership.unload_waiting());
        metadata.groups.get_mut(&GroupId(0)).expect("group 0").members.push(NodeId(1));
        ownership.unload_misplaced(105, &config, &metadata, &hosted, &mut counters, &mut out);
        assert!(!ownership.unload_waiting());
        metadata.groups.get_mut(&GroupId(0)).expect("group 0").members.pop();
        for now in 106..=115 {
            ownership.unload_misplaced(now, &config, &metadata, &hosted, &mut counters, &mut out);
        }
        assert_eq!(out, Vec::new(), "ten ticks from 106 end at 116");
        ownership.unload_misplaced(116, &config, &metadata, &hosted, &mut counters, &mut out);
        assert_eq!(out, vec![AgentOutput::Unload(GroupId(0))]);
    }
    #[test]
    fn h3_a_replica_of_a_group_deleted_and_created_again_is_unloaded_at_once() {
        let config = fixture::config();
        // Group 5 was created (incarnation 1), deleted, and created again
        // (incarnation 2) on the same members; group 6 likewise on node 2
        // alone. This node still hosts both at incarnation 1.
        let mut metadata = fixture::metadata(&[1, 2], &[(5, &[1, 2]), (6, &[1, 2])]);
        fixture::recreate(&mut metadata, 5, &[1, 2]);
        fixture::recreate(&mut metadata, 6, &[2]);
        assert_eq!(metadata.groups[&GroupId(5)].created, Incarnation(2));
        let mut ownership = Ownership::default();
        let mut counters = AgentCounters::default();
        let mut out = Vec::new();
        ownership.unload_misplaced(
            100,
            &config,
            &metadata,
            &[hosted(5, true, 3), hosted(6, false, 0)],
            &mut counters,
            &mut out,
        );
        assert_eq!(out, vec![AgentOutput::Unload(GroupId(5)), AgentOutput::Unload(GroupId(6))]);
        // A scan that still shows them (the shell's unload was lost) asks
        // again only after a retry period.
        let stale = [hosted(5, true, 3), hosted(6, false, 0)];
        let mut later: Vec<Vec<AgentOutput>> = Vec::new();
        for now in 101..=104 {
            let mut out = Vec::new();
            ownership.unload_misplaced(now, &config, &metadata, &stale, &mut counters, &mut out);
            later.push(out);
        }
        let both = vec![AgentOutput::Unload(GroupId(5)), AgentOutput::Unload(GroupId(6))];
        assert_eq!(later, vec![vec![], vec![], vec![], both]);
        assert!(ownership.unload_waiting(), "asked again while scans show them");
        // The replica of the new incarnation stays.
        let mut again = Vec::new();
        let current = HostedReplica { incarnation: Incarnation(2), ..hosted(5, true, 0) };
        ownership.unload_misplaced(105, &config, &metadata, &[current], &mut counters, &mut again);
        assert_eq!(again, Vec::new());
        assert!(!ownership.unload_waiting());
        assert_eq!(counters.groups_unloaded, 4);
    }

    #[test]
    fn h3_a_removal_waits_until_a_restart_would_replay_the_metadata_that_showed_it() {
        let config = fixture::config();
        // Group 5 was deleted and group 6 placed on node 2 alone; this
        // node's metadata replica applied both, but its durable commit point
        // is still before them: a restart now would replay a copy that
        // places both here, and would host them again, empty.
        let mut metadata = fixture::metadata(&[1, 2], &[(5, &[1, 2]), (6, &[2])]);
        fixture::apply(&mut metadata, MetadataCommand::DeleteGroup { group: GroupId(5) });
        let shown = metadata.epoch;
        let behind =
            HostedReplica { durable_commit: Op(shown.0 - 1), ..fixture::metadata_replica(false, &[1, 2], &[]) };
        let mut ownership = Ownership::default();
        let mut counters = AgentCounters::default();
        let mut out = Vec::new();
        for now in 100..=120 {
            let hosted = [hosted(5, false, 0), hosted(6, false, 0), behind.clone()];
            ownership.unload_misplaced(now, &config, &metadata, &hosted, &mut counters, &mut out);
        }
        assert_eq!(out, Vec::new(), "nothing removed on metadata a restart would not replay");
        assert!(ownership.unload_waiting(), "timed work: the durable point moves on its own");
        // The metadata moves on (commits keep coming); once the point that
        // showed both is durable, both go, the misplaced one past its grace.
        fixture::apply(&mut metadata, MetadataCommand::DeleteGroup { group: GroupId(9) });
        let durable = HostedReplica { durable_commit: Op(shown.0), ..behind };
        let hosted = [hosted(5, false, 0), hosted(6, false, 0), durable];
        ownership.unload_misplaced(121, &config, &metadata, &hosted, &mut counters, &mut out);
        assert_eq!(out, vec![AgentOutput::Unload(GroupId(5)), AgentOutput::Unload(GroupId(6))]);
        assert_eq!(counters.groups_unloaded, 2);
    }

    #[test]
    fn h3_metadata_older_than_the_replica_unloads_nothing() {
        let config = fixture::config();
        // A restarted node's copy still shows group 5 deleted at
        // incarnation 1, while its replica runs the re-created incarnation 2.
        let mut metadata = fixture::metadata(&[1, 2], &[(5, &[1, 2])]);
        fixture::apply(&mut metadata, MetadataCommand::DeleteGroup { group: GroupId(5) });
        let replica = HostedReplica { incarnation: Incarnation(2), ..hosted(5, true, 0) };
        let mut ownership = Ownership::default();
        let mut counters = AgentCounters::default();
        let mut out = Vec::new();
        for now in 100..=130 {
            ownership.unload_misplaced(
                now,
                &config,
                &metadata,
                std::slice::from_ref(&replica),
                &mut counters,
                &mut out,
            );
        }
        assert_eq!(out, Vec::new());
        assert_eq!(counters.groups_unloaded, 0);
    }
}
