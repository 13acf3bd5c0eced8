//! When a node's agent looks at its shards (Z2, Z3), and when it trusts
//! what it saw: the timing rules a shell of [`MetadataAgent`] follows, as a
//! sans-IO piece that the runtime's actor and the simulator both run, so no
//! timing decision of the node's agent is one the simulator skips.
//!
//! Time comes in as a [`Duration`] since the shell started (the node reads
//! its monotonic clock; the simulator passes its ticks times the tick
//! length). A scan's cost is a duration the shell measures and passes in
//! ([`ScanSchedule::scan_took`]); the simulator passes a modelled one.
//!
//! The rules:
//! - **Spacing (Z2).** A scan of the hosted groups costs O(groups). The
//!   next one starts no sooner than [`SCAN_SPACING_FACTOR`] times the last
//!   one's duration after it began, and never more than
//!   [`SCAN_SPACING_MAX`] after: a scan takes at most about 1/20 of the
//!   time whatever the group count. A tick between scans is an idle tick.
//! - **Stable inputs (Z3).** Once two full scans in a row saw the same
//!   inputs ([`ScanInputs`]: a sum of the records' digests, the metadata's
//!   epoch, whether a request was in flight), a due scan first asks the
//!   shards what is cheap to read ([`HostedChanges`]). If that, the epoch
//!   and the request in flight are as before, the agent ticks idle. The
//!   shards' fingerprint sum, an O(groups) pass, is asked only when the
//!   cheap answer moved or its own spacing is up; the spacing doubles each
//!   time it matches, up to [`FINGERPRINT_SPACING_MAX`], or up to
//!   [`FINGERPRINT_SPACING_MAX_QUIET`] while the agent has no timed work
//!   ([`MetadataAgent::timed_work`]). A full scan still runs every
//!   [`FULL_SCAN_INTERVAL`], or every [`FULL_SCAN_INTERVAL_QUIET`] without
//!   timed work. While things change, a due scan runs at once.
//! - **After a reply.** An applied command lets the agent send its next
//!   one at once: a scan if one is due, else the burst between scans
//!   ([`MetadataAgent::between_scans`]), so bursts move at the metadata
//!   group's commit rate. After a refusal it waits for the tick: its copy
//!   of the metadata may be behind the one that refused.
//! - **Keepalive gate.** After a stall of more than [`STALL_TICKS_MAX`]
//!   ticks of the timer, or a view of the shards older than that plus
//!   [`SCAN_SPACING_MAX`], the agent judges no keepalive: its applied state
//!   and its metadata primary flag may be stale, and it could expire a live
//!   session. One fresh tick lifts it.
//! - **Reads past the replicas (Z5).** A node that hosts no metadata
//!   replica reads the whole state every [`FETCH_INTERVAL_TICKS`] ticks.
//!
//! # Driving contract
//!
//! On every timer tick: [`ScanSchedule::on_timer`], then
//! [`ScanSchedule::poll`]; after every reply to the agent's own requests:
//! [`ScanSchedule::after_reply`]. Each answers a [`Poll`]; the shell does
//! what it says and feeds the shards' answer back
//! ([`ScanSchedule::on_changes`], [`ScanSchedule::on_fingerprint`],
//! [`ScanSchedule::on_scanned`]), until the answer is to tick the agent or
//! to wait. The agent's primary flag for every call is
//! [`ScanSchedule::metadata_primary`], as the last full scan saw it.

use core::time::Duration;

use cohort_messages::metadata::MetadataResult;
use cohort_messages::{Epoch, GroupId, Outcome, Reply};

use super::{HostedReplica, MetadataAgent};

/// Z2: the next scan starts no sooner than this many times the last one's
/// duration after it began (about 17 ms at 10,000 groups on the machine
/// these were set on, so a scan every tick up to a few thousand groups).
pub const SCAN_SPACING_FACTOR: u32 = 20;

/// The longest wait between two scans, however slow the last one was. The
/// session's keepalives leave from the idle ticks between scans, so this
/// only bounds how stale what the agent acts on may get: at 100,000 groups
/// a node a scan takes a few hundred milliseconds, and scans every 500 ms
/// there took a third of the machine in the middle of a failover.
pub const SCAN_SPACING_MAX: Duration = Duration::from_secs(2);

/// Z3: a full scan runs at least this often even if nothing it looks at
/// changed (the balancer's budget and the agent's retries are timed).
pub const FULL_SCAN_INTERVAL: Duration = Duration::from_secs(5);

/// Z3: a full scan runs at least this often while the agent has no timed
/// work and nothing it looks at changed: the next scan would do nothing.
pub const FULL_SCAN_INTERVAL_QUIET: Duration = Duration::from_secs(60);

/// Z3: the longest wait between two fingerprints while nothing changed. The
/// cheap answer is read at every due scan between them; what it does not
/// show (a primary's quorum window running out, a learner catching up) the
/// next fingerprint does.
pub const FINGERPRINT_SPACING_MAX: Duration = Duration::from_secs(5);

/// Z3: the longest wait between two fingerprints while nothing changed and
/// the agent has no timed work. What only a fingerprint shows then (a
/// learner caught up after its request's retries ended, a primary's quorum
/// window lapsing on a stalled shard) waits at most this much; a
/// fingerprint at 100,000 groups a node is about a fifth of an idle node's
/// CPU at the 5 s spacing.
pub const FINGERPRINT_SPACING_MAX_QUIET: Duration = Duration::from_secs(20);

/// Keepalives are not judged after a gap of more than this many ticks in
/// the timer (see the module docs).
pub const STALL_TICKS_MAX: u32 = 3;

/// Z5: a node that hosts no metadata replica reads the whole metadata state
/// this often, in ticks.
pub const FETCH_INTERVAL_TICKS: u64 = 5;

const _: () = assert!(SCAN_SPACING_MAX.as_nanos() <= FINGERPRINT_SPACING_MAX_QUIET.as_nanos());
const _: () = assert!(FINGERPRINT_SPACING_MAX.as_nanos() <= FINGERPRINT_SPACING_MAX_QUIET.as_nanos());
const _: () = assert!(FULL_SCAN_INTERVAL.as_nanos() <= FULL_SCAN_INTERVAL_QUIET.as_nanos());

/// Z3: what the shards can say cheaply, without a pass over their groups.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HostedChanges {
    /// Role and hosting changes so far, summed over the shards (wrapping).
    pub events: u64,
    /// The metadata replica's confirmed-primary flag, if hosted.
    pub metadata_primary: Option<bool>,
}

/// What a scan's outcome depends on besides the time (Z3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ScanInputs {
    /// The sum of the hosted records' digests ([`HostedReplica::digest`]).
    pub hosted: u64,
    /// The metadata's epoch.
    pub epoch: Epoch,
    /// Whether a request was in flight.
    pub in_flight: bool,
}

/// What the shell does next.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Nothing: the agent stopped, a question to the shards is unanswered,
    /// or (after a reply) nothing was applied.
    Wait,
    /// Tick the agent without a scan ([`MetadataAgent::on_idle_tick`]).
    Idle,
    /// Ask every shard for its [`HostedChanges`], then
    /// [`ScanSchedule::on_changes`].
    AskChanges,
    /// Ask every shard for its fingerprint sum, then
    /// [`ScanSchedule::on_fingerprint`].
    AskFingerprint,
    /// Ask every shard for its hosted replicas, then
    /// [`ScanSchedule::on_scanned`], [`MetadataAgent::on_tick`] and
    /// [`ScanSchedule::scan_took`].
    Scan,
    /// Let the agent go on with its burst ([`MetadataAgent::between_scans`]).
    BetweenScans,
}

/// A question to the shards not answered yet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Asked {
    Changes { fingerprint_due: bool },
    Fingerprint { changes: Option<HostedChanges> },
    Scan,
}

/// The schedule of one agent. See the module docs.
#[derive(Clone, Debug)]
pub struct ScanSchedule {
    /// The tick length of the node's core.
    tick: Duration,
    /// A question to the shards not answered yet (a scan takes a round
    /// trip to every shard on a node; no second one starts meanwhile).
    asked: Option<Asked>,
    /// When the last due scan began (a full one or a cheap check), and how
    /// long the last full one took (Z2).
    scanned_at: Option<Duration>,
    scan_duration: Duration,
    /// Z3: the inputs of the last full scan, when it ran, and whether they
    /// were those of the scan before it.
    inputs: Option<ScanInputs>,
    full_scan_at: Option<Duration>,
    stable: bool,
    /// Z3, while stable: when the fingerprint last matched, how long until
    /// the next one, and what the cheap answer said then.
    fingerprinted_at: Option<Duration>,
    fingerprint_spacing: Duration,
    changes: Option<HostedChanges>,
    /// The metadata replica's confirmed-primary flag as the last full scan saw it.
    metadata_primary: bool,
    /// When the timer last fired, and when the agent last saw the shards
    /// (a full scan, or a cheap answer or fingerprint that matched).
    timer_at: Duration,
    verified_at: Duration,
    /// Z5: the tick of the last whole-state read.
    fetched_tick: u64,
}

impl ScanSchedule {
    /// The schedule of an agent started at `now`, on a core whose tick lasts `tick`.
    pub fn new(now: Duration, tick: Duration) -> ScanSchedule {
        assert!(!tick.is_zero(), "a tick of zero length");
        ScanSchedule {
            tick,
            asked: None,
            scanned_at: None,
            scan_duration: Duration::ZERO,
            inputs: None,
            full_scan_at: None,
            stable: false,
            fingerprinted_at: None,
            fingerprint_spacing: Duration::ZERO,
            changes: None,
            metadata_primary: false,
            timer_at: now,
            verified_at: now,
            fetched_tick: 0,
        }
    }

    /// The core tick `now` falls in.
    pub fn tick_of(&self, now: Duration) -> u64 {
        u64::try_from(now.as_nanos() / self.tick.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The metadata replica's confirmed-primary flag as the last full scan
    /// saw it: what the agent is told on every call, and what routes its
    /// requests.
    pub fn metadata_primary(&self) -> bool {
        self.metadata_primary
    }

    /// True while a question to the shards is unanswered.
    pub fn asking(&self) -> bool {
        self.asked.is_some()
    }

    /// The timer fired at `now`.
    pub fn on_timer(&mut self, now: Duration) {
        self.timer_at = now;
    }

    /// Whether the last scan is far enough behind for the next (Z2), and no
    /// question to the shards is open.
    pub fn scan_due(&self, now: Duration) -> bool {
        let spacing = self.scan_spacing();
        self.asked.is_none() && self.scanned_at.is_none_or(|at| now.saturating_sub(at) >= spacing)
    }

    /// What a timer tick at `now` does.
    pub fn poll(&mut self, now: Duration, agent: &MetadataAgent) -> Poll {
        if agent.stopped() || self.asked.is_some() {
            return Poll::Wait;
        }
        if !self.scan_due(now) {
            return Poll::Idle;
        }
        self.scanned_at = Some(now);
        if !self.stable {
            return self.start_scan(now);
        }
        let spacing_max =
            if agent.timed_work(self.tick_of(now)) { FINGERPRINT_SPACING_MAX } else { FINGERPRINT_SPACING_MAX_QUIET };
        let spacing = self.fingerprint_spacing.min(spacing_max);
        let fingerprint_due = self.fingerprinted_at.is_none_or(|at| now.saturating_sub(at) >= spacing);
        self.asked = Some(Asked::Changes { fingerprint_due });
        Poll::AskChanges
    }

    /// The shards' cheap answer (`None` if one did not answer), with the
    /// metadata's `epoch` now.
    pub fn on_changes(
        &mut self,
        now: Duration,
        changes: Option<HostedChanges>,
        agent: &MetadataAgent,
        epoch: Epoch,
    ) -> Poll {
        let Some(Asked::Changes { fingerprint_due }) = self.asked.take() else {
            panic!("a cheap answer nobody asked for: {:?}", self.asked);
        };
        let unchanged = changes.is_some() && changes == self.changes && self.inputs_hold(now, agent, epoch);
        if unchanged && !fingerprint_due {
            self.verified_at = now;
            return Poll::Idle;
        }
        self.asked = Some(Asked::Fingerprint { changes });
        Poll::AskFingerprint
    }

    /// The shards' fingerprint sum (`None` if one did not answer), with the
    /// metadata's `epoch` now.
    pub fn on_fingerprint(&mut self, now: Duration, hosted: Option<u64>, agent: &MetadataAgent, epoch: Epoch) -> Poll {
        let Some(Asked::Fingerprint { changes }) = self.asked.take() else {
            panic!("a fingerprint nobody asked for: {:?}", self.asked);
        };
        let same = hosted.is_some_and(|hosted| self.inputs.is_some_and(|inputs| inputs.hosted == hosted));
        if same && self.inputs_hold(now, agent, epoch) {
            self.changes = changes;
            self.fingerprinted_at = Some(now);
            let base = self.scan_spacing();
            self.fingerprint_spacing = (self.fingerprint_spacing * 2).clamp(base, FINGERPRINT_SPACING_MAX_QUIET);
            self.verified_at = now;
            return Poll::Idle;
        }
        self.start_scan(now)
    }

    /// The full scan's answer, before the agent's [`MetadataAgent::on_tick`]
    /// with it: the metadata's `epoch` and whether a request is in flight
    /// now. It sets [`ScanSchedule::metadata_primary`].
    pub fn on_scanned(&mut self, now: Duration, hosted: &[HostedReplica], epoch: Epoch, in_flight: bool) {
        assert_eq!(self.asked.take(), Some(Asked::Scan), "a scan nobody asked for");
        self.verified_at = now;
        let inputs = ScanInputs {
            hosted: hosted.iter().fold(0u64, |sum, record| sum.wrapping_add(record.digest())),
            epoch,
            in_flight,
        };
        self.stable = self.inputs == Some(inputs);
        self.inputs = Some(inputs);
        self.metadata_primary = hosted.iter().any(|hosted| hosted.group == GroupId::METADATA && hosted.primary);
    }

    /// How long the last full scan took, from the question to the shards
    /// to the end of the agent's passes (Z2).
    pub fn scan_took(&mut self, duration: Duration) {
        self.scan_duration = duration;
    }

    /// What follows the agent's [`MetadataAgent::on_reply`] with `reply`.
    pub fn after_reply(&mut self, now: Duration, reply: &Reply, agent: &MetadataAgent) -> Poll {
        if !applied(reply) {
            return Poll::Wait;
        }
        if self.scan_due(now) {
            let poll = self.poll(now, agent);
            debug_assert_ne!(poll, Poll::Idle, "a due scan is no idle tick");
            return poll;
        }
        Poll::BetweenScans
    }

    /// Whether the agent may judge a keepalive at `now` (see the module docs).
    pub fn judges_keepalives(&self, now: Duration) -> bool {
        let stall = self.tick * STALL_TICKS_MAX;
        now.saturating_sub(self.timer_at) <= stall && now.saturating_sub(self.verified_at) <= stall + SCAN_SPACING_MAX
    }

    /// Z5: whether a node that hosts no metadata replica (`follows` false)
    /// reads the whole state now; records the read if so.
    pub fn fetch_due(&mut self, now_tick: u64, follows: bool) -> bool {
        let due = !follows && now_tick >= self.fetched_tick.saturating_add(FETCH_INTERVAL_TICKS);
        if due {
            self.fetched_tick = now_tick;
        }
        due
    }

    /// The spacing of scans the last one's duration asks for (Z2).
    fn scan_spacing(&self) -> Duration {
        (self.scan_duration * SCAN_SPACING_FACTOR).min(SCAN_SPACING_MAX)
    }

    fn start_scan(&mut self, now: Duration) -> Poll {
        self.full_scan_at = Some(now);
        self.fingerprint_spacing = Duration::ZERO;
        self.asked = Some(Asked::Scan);
        Poll::Scan
    }

    /// Whether what a scan depends on besides the hosted groups is as the
    /// last full scan saw it, and that scan is recent enough (Z3).
    fn inputs_hold(&self, now: Duration, agent: &MetadataAgent, epoch: Epoch) -> bool {
        let interval = if agent.timed_work(self.tick_of(now)) { FULL_SCAN_INTERVAL } else { FULL_SCAN_INTERVAL_QUIET };
        let recent = self.full_scan_at.is_some_and(|at| now.saturating_sub(at) < interval);
        let inputs = self.inputs.is_some_and(|inputs| inputs.epoch == epoch && inputs.in_flight == agent.in_flight());
        recent && inputs && !agent.wants_scan()
    }
}

/// True if `reply` says its command applied (not refused, and readable).
fn applied(reply: &Reply) -> bool {
    match &reply.outcome {
        Outcome::Ok(result) => !matches!(MetadataResult::decode(result), Ok(MetadataResult::Refused { .. }) | Err(_)),
        Outcome::Error { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use cohort_messages::metadata::MetadataCommand;
    use cohort_messages::{Op, RequestNumber, View};

    use super::super::{AgentConfig, AgentOutput, fixture};
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// A schedule whose scans of `hosted` each took `took`; every poll's
    /// question is answered with `changes` and with the fingerprint of
    /// `hosted`, and the sequence of answers is returned, one per timer
    /// tick at `at`.
    fn run(
        schedule: &mut ScanSchedule,
        agent: &MetadataAgent,
        at: &[Duration],
        hosted: &[HostedReplica],
        changes: HostedChanges,
        took: Duration,
    ) -> Vec<Vec<Poll>> {
        let sum = hosted.iter().fold(0u64, |sum, record| sum.wrapping_add(record.digest()));
        at.iter()
            .map(|now| {
                schedule.on_timer(*now);
                let mut polls = vec![schedule.poll(*now, agent)];
                loop {
                    let next = match polls.last().copied() {
                        Some(Poll::AskChanges) => schedule.on_changes(*now, Some(changes), agent, Epoch(0)),
                        Some(Poll::AskFingerprint) => schedule.on_fingerprint(*now, Some(sum), agent, Epoch(0)),
                        Some(Poll::Scan) => {
                            schedule.on_scanned(*now, hosted, Epoch(0), false);
                            schedule.scan_took(took);
                            break;
                        }
                        _ => break,
                    };
                    polls.push(next);
                }
                polls
            })
            .collect()
    }

    #[test]
    fn z2_scans_are_spaced_by_twenty_times_the_last_ones_duration_at_most_two_seconds() {
        let agent = MetadataAgent::new(fixture::config());
        let mut schedule = ScanSchedule::new(Duration::ZERO, TICK);
        let hosted = [fixture::hosted(0, true, 1)];
        let ticks: Vec<Duration> = (0..5).map(|tick| TICK * tick).collect();
        // 10 ms a scan: one every 200 ms. The inputs change every scan here,
        // so the cheap answer is never asked.
        let mut polls = Vec::new();
        for (number, now) in ticks.iter().enumerate() {
            let moved = [fixture::hosted(0, true, number as u32)];
            polls.extend(run(&mut schedule, &agent, &[*now], &moved, HostedChanges::default(), ms(10)));
        }
        let expected = vec![vec![Poll::Scan], vec![Poll::Idle], vec![Poll::Scan], vec![Poll::Idle], vec![Poll::Scan]];
        assert_eq!(polls, expected);
        // A scan of a second: the next waits 2 s, not 20.
        let mut slow = ScanSchedule::new(Duration::ZERO, TICK);
        let at = [ms(0), ms(1_900), ms(2_000)];
        let polls = run(&mut slow, &agent, &at, &hosted, HostedChanges::default(), ms(1_000));
        assert_eq!(polls, vec![vec![Poll::Scan], vec![Poll::Idle], vec![Poll::Scan]]);
    }

    #[test]
    fn z3_stable_inputs_ask_the_cheap_answer_and_space_the_fingerprints_out() {
        let agent = MetadataAgent::new(fixture::config());
        assert!(!agent.timed_work(0), "no timed work: the quiet spacings");
        let mut schedule = ScanSchedule::new(Duration::ZERO, TICK);
        let hosted = [fixture::hosted(0, true, 1), fixture::metadata_replica(true, &[1], &[])];
        let changes = HostedChanges { events: 7, metadata_primary: Some(true) };
        // 50 ms a scan: a due scan every second; the fingerprint's spacing
        // starts at that second and doubles while it matches.
        let at: Vec<Duration> = (0..=8).map(|second| ms(1_000 * second)).collect();
        let polls = run(&mut schedule, &agent, &at, &hosted, changes, ms(50));
        let (changes_only, fingerprint) =
            (vec![Poll::AskChanges, Poll::Idle], vec![Poll::AskChanges, Poll::AskFingerprint, Poll::Idle]);
        let expected = vec![
            vec![Poll::Scan],
            vec![Poll::Scan],     // the same inputs twice: stable
            fingerprint.clone(),  // the first cheap answer is news: spacing 1 s
            fingerprint.clone(),  // 1 s later: spacing 2 s
            changes_only.clone(), // 1 s of 2
            fingerprint.clone(),  // spacing 4 s
            changes_only.clone(),
            changes_only.clone(),
            changes_only,
        ];
        assert_eq!(polls, expected);
        assert!(schedule.metadata_primary(), "the scans saw the metadata primary flag");
        // The cheap answer moved: the fingerprint first, and a scan if it moved too.
        let moved = HostedChanges { events: 8, ..changes };
        let led_elsewhere = [fixture::hosted(0, true, 1), fixture::metadata_replica(false, &[1], &[])];
        let polls = run(&mut schedule, &agent, &[ms(9_000)], &led_elsewhere, moved, ms(50));
        assert_eq!(polls, vec![vec![Poll::AskChanges, Poll::AskFingerprint, Poll::Scan]]);
        assert!(!schedule.metadata_primary());
    }

    #[test]
    fn z3_a_full_scan_runs_every_interval_even_when_nothing_changed() {
        let agent = MetadataAgent::new(fixture::config());
        let mut schedule = ScanSchedule::new(Duration::ZERO, TICK);
        let hosted = [fixture::hosted(0, true, 1)];
        let changes = HostedChanges::default();
        let at = [ms(0), ms(100), ms(200), ms(60_099), ms(60_100)];
        let polls = run(&mut schedule, &agent, &at, &hosted, changes, Duration::ZERO);
        let expected = vec![
            vec![Poll::Scan],
            vec![Poll::Scan],
            vec![Poll::AskChanges, Poll::AskFingerprint, Poll::Idle],
            vec![Poll::AskChanges, Poll::AskFingerprint, Poll::Idle],
            // 60 s after the last full scan (at 100 ms): a full one again.
            vec![Poll::AskChanges, Poll::AskFingerprint, Poll::Scan],
        ];
        assert_eq!(polls, expected);
    }

    #[test]
    fn z3_a_question_open_or_a_stopped_agent_waits() {
        let mut agent = MetadataAgent::new(fixture::config());
        let mut schedule = ScanSchedule::new(Duration::ZERO, TICK);
        assert_eq!(schedule.poll(Duration::ZERO, &agent), Poll::Scan);
        assert!(schedule.asking());
        assert_eq!(schedule.poll(TICK, &agent), Poll::Wait, "the shards have not answered");
        schedule.on_scanned(TICK, &[], Epoch(0), false);
        let notice = cohort_messages::SessionExpired {
            node: fixture::NODE,
            session: cohort_messages::SessionId(1),
            epoch: Epoch(1),
        };
        let config = AgentConfig { policy: super::super::super::ExpiredPolicy::Shutdown, ..fixture::config() };
        agent = MetadataAgent::new(config);
        let mut metadata = fixture::metadata(&[1], &[]);
        let out = agent.on_tick(1, &metadata, false, &[]);
        let out = fixture::past_registration(&mut agent, 1, out);
        let session_open = MetadataCommand::OpenSession { node: fixture::NODE };
        let result = fixture::apply(&mut metadata, session_open);
        let AgentOutput::Submit(request) = &out[0] else { panic!("{out:?}") };
        agent.on_reply(1, &fixture::reply(request, &result));
        let notice = cohort_messages::SessionExpired { session: fixture::session(&metadata, 1), ..notice };
        assert_eq!(agent.on_session_expired(fixture::NODE, &[fixture::NODE], &notice).len(), 1);
        assert_eq!(schedule.poll(TICK * 2, &agent), Poll::Wait, "a stopped agent");
    }

    #[test]
    fn z2_an_applied_reply_scans_if_due_else_goes_on_between_scans_and_a_refusal_waits() {
        let agent = MetadataAgent::new(fixture::config());
        let mut schedule = ScanSchedule::new(Duration::ZERO, TICK);
        assert_eq!(schedule.poll(Duration::ZERO, &agent), Poll::Scan);
        schedule.on_scanned(Duration::ZERO, &[], Epoch(0), false);
        schedule.scan_took(ms(10));
        let reply = |result: MetadataResult| cohort_messages::Reply {
            client: cohort_messages::ClientId(77),
            request: RequestNumber(1),
            group: GroupId::METADATA,
            view: View(0),
            op: Op(1),
            outcome: Outcome::Ok(result.encode()),
        };
        let done = reply(MetadataResult::Done { epoch: Epoch(1) });
        let refused = reply(MetadataResult::Refused { reason: "no".into() });
        let answers = [
            schedule.after_reply(ms(150), &refused, &agent),
            schedule.after_reply(ms(150), &done, &agent),
            schedule.after_reply(ms(200), &done, &agent),
        ];
        assert_eq!(answers, [Poll::Wait, Poll::BetweenScans, Poll::Scan]);
    }

    #[test]
    fn keepalives_are_not_judged_after_a_stall_until_a_fresh_tick() {
        let agent = MetadataAgent::new(fixture::config());
        let mut schedule = ScanSchedule::new(Duration::ZERO, TICK);
        schedule.on_timer(Duration::ZERO);
        let judged: Vec<bool> = [ms(300), ms(301)].iter().map(|now| schedule.judges_keepalives(*now)).collect();
        assert_eq!(judged, vec![true, false], "three ticks of the timer, then none");
        // The timer fires again, but the last view of the shards is 2.4 s old.
        schedule.on_timer(ms(2_400));
        assert!(!schedule.judges_keepalives(ms(2_400)));
        assert_eq!(schedule.poll(ms(2_400), &agent), Poll::Scan);
        schedule.on_scanned(ms(2_450), &[], Epoch(0), false);
        assert!(schedule.judges_keepalives(ms(2_450)));
    }

    #[test]
    fn z5_a_node_that_hosts_no_metadata_replica_reads_the_state_every_five_ticks() {
        let mut schedule = ScanSchedule::new(Duration::ZERO, TICK);
        let due: Vec<u64> = (0..=11).filter(|tick| schedule.fetch_due(*tick, false)).collect();
        assert_eq!(due, vec![5, 10]);
        assert!((12..100).all(|tick| !schedule.fetch_due(tick, true)), "a follower never does");
    }
}
