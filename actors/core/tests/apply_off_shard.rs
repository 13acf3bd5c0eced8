//! D2: a state machine that asks to be applied off the shard's thread
//! (`StateMachine::apply_off_shard`) gets its committed runs lent to the
//! shell's apply worker (`Turn::applies`), and the shard goes on meanwhile:
//! other groups commit and answer, the group's own reads and writes wait
//! for the run to come back, a retried write is answered once, and a
//! replica removed with its run away is cleared when the run comes back,
//! never hosted again before.
//!
//! The shell here is the test: it completes every flush at once and holds
//! the runs it is lent until the test hands them back.

mod common;
use common::plain_spec;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use cohort_core::driver::{ApplyJob, ClientAnswer, DriverConfig, LinksUp, Note, ShardDriver, replay};
use cohort_core::{CoreConfig, Effect, GroupSpec, Shard, ShardError, StateMachine};
use cohort_messages::{ClientId, GroupId, NodeId, Op, Outcome, Reply, Request, RequestKind, RequestNumber};

const ME: NodeId = NodeId(1);
/// Applied off the shard's thread.
const AWAY: GroupId = GroupId(7);
/// Applied inline.
const INLINE: GroupId = GroupId(8);

/// Adds each write's byte to a total; a read answers the total. Counts
/// its applies and clears.
struct Total {
    total: u64,
    off_shard: bool,
    applies: Arc<AtomicU64>,
    cleared: Arc<AtomicU64>,
}

impl StateMachine for Total {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        self.applies.fetch_add(1, Ordering::Relaxed);
        self.total += operation.first().copied().unwrap_or(0) as u64;
        Bytes::copy_from_slice(&self.total.to_le_bytes())
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.total.to_le_bytes())
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.total.to_le_bytes())
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let bytes: [u8; 8] = snapshot.try_into().map_err(|_| "eight bytes".to_string())?;
        self.total = u64::from_le_bytes(bytes);
        Ok(())
    }
    fn clear(&mut self) -> Result<(), String> {
        self.cleared.fetch_add(1, Ordering::Relaxed);
        self.total = 0;
        Ok(())
    }
    fn apply_off_shard(&self) -> bool {
        self.off_shard
    }
}

/// The test's shell: a driver, the runs it holds, the answers it got.
struct Shell {
    driver: ShardDriver,
    held: Vec<ApplyJob>,
    answers: Vec<Reply>,
    applies: Arc<AtomicU64>,
    cleared: Arc<AtomicU64>,
    now: u64,
}

impl Shell {
    fn new() -> Shell {
        let shard = Shard::new(ME, CoreConfig::default());
        let mut shell = Shell {
            driver: ShardDriver::new(shard, DriverConfig::for_tick(100_000), [ME]),
            held: Vec::new(),
            answers: Vec::new(),
            applies: Arc::new(AtomicU64::new(0)),
            cleared: Arc::new(AtomicU64::new(0)),
            now: 0,
        };
        shell.driver.start_recording();
        shell.host(AWAY, true).expect("hosted");
        shell.host(INLINE, false).expect("hosted");
        // Member 0 of a one-member group leads view 0 after a few ticks.
        for _ in 0..20 {
            shell.tick();
        }
        shell
    }

    fn state(&self, off_shard: bool) -> Box<dyn StateMachine> {
        Box::new(Total { total: 0, off_shard, applies: Arc::clone(&self.applies), cleared: Arc::clone(&self.cleared) })
    }

    fn host(&mut self, group: GroupId, off_shard: bool) -> Result<(), ShardError> {
        let state = self.state(off_shard);
        let hosted = self.driver.create_group(plain_spec(group, &[ME], 0), state);
        self.turns();
        hosted
    }

    fn tick(&mut self) {
        self.now += 1;
        self.driver.on_clock(self.now);
        self.turns();
    }

    /// End turns until the driver asks nothing more; flushes complete at
    /// once, runs are held.
    fn turns(&mut self) {
        loop {
            let turn = self.driver.end_turn(&LinksUp);
            if turn.is_empty() {
                return;
            }
            for effect in &turn.storage {
                if let Effect::Flush { id } = effect {
                    self.driver.on_flushed(*id);
                }
            }
            for note in turn.notes {
                if let Note::Answer(ClientAnswer::Reply(reply)) = note {
                    self.answers.push(reply);
                }
            }
            self.held.extend(turn.applies);
        }
    }

    fn submit(&mut self, request: Request) {
        self.driver.on_submit(request);
        self.driver.input_done(self.now * 100_000);
        self.turns();
    }

    /// Apply and hand back every run held, oldest first.
    fn release(&mut self) {
        while !self.held.is_empty() {
            let mut job = self.held.remove(0);
            let mut state = job.state.take().expect("a run from the driver holds its state machine");
            let done = cohort_core::work_on(state.as_mut(), &job.work);
            self.driver.on_applied(job.group, job.id, state, done);
            self.turns();
        }
    }

    fn answers_of(&self, group: GroupId) -> Vec<&Reply> {
        self.answers.iter().filter(|reply| reply.group == group).collect()
    }
}

fn request(group: GroupId, client: u128, number: u64, kind: RequestKind, operation: &[u8]) -> Request {
    Request {
        client: ClientId(client),
        request: RequestNumber(number),
        group,
        kind,
        operation: Bytes::copy_from_slice(operation),
    }
}

/// Register `client` with `group` (its request 1) and write `value` as its
/// request 2.
fn register_and_write(shell: &mut Shell, group: GroupId, client: u128, value: u8) {
    shell.submit(request(group, client, 1, RequestKind::Write, b""));
    shell.submit(request(group, client, 2, RequestKind::Write, &[value]));
}

fn total(reply: &Reply) -> u64 {
    match &reply.outcome {
        Outcome::Ok(result) => u64::from_le_bytes(result[..8].try_into().expect("eight bytes")),
        other => panic!("{reply:?}: {other:?}"),
    }
}

#[test]
fn d2_a_run_away_holds_up_no_other_group() {
    let mut shell = Shell::new();
    register_and_write(&mut shell, AWAY, 1, 5);
    assert_eq!(shell.held.len(), 1, "the committed write went to the apply worker");
    assert_eq!(shell.answers_of(AWAY).len(), 1, "only the registration is answered while the write is away");
    // The other group of the shard commits, applies and answers meanwhile.
    register_and_write(&mut shell, INLINE, 2, 3);
    assert_eq!(shell.answers_of(INLINE).len(), 2, "the inline group went on");
    assert_eq!(total(shell.answers_of(INLINE)[1]), 3);
    assert_eq!(shell.held.len(), 1, "the run is still away");
    shell.release();
    let away = shell.answers_of(AWAY);
    assert_eq!(away.len(), 2, "the write is answered once its run is back");
    assert_eq!(total(away[1]), 5, "with its own result");
    assert_eq!(shell.driver.replica(AWAY).expect("hosted").commit_min(), away[1].op, "applied up to it");
}

#[test]
fn d2_a_read_waits_for_the_run_away_and_sees_it() {
    let mut shell = Shell::new();
    register_and_write(&mut shell, AWAY, 1, 9);
    assert_eq!(shell.held.len(), 1);
    shell.submit(request(AWAY, 3, 1, RequestKind::Read, b""));
    assert_eq!(shell.answers_of(AWAY).len(), 1, "the read waits for the state machine");
    assert_eq!(shell.driver.replica(AWAY).expect("hosted").waiting_for_state(), 1);
    assert_eq!(shell.driver.shard().metrics().requests_waited_for_state, 1, "counted");
    shell.release();
    let away = shell.answers_of(AWAY);
    assert_eq!(away.len(), 3, "registration, write and read answered");
    let write = away.iter().find(|reply| reply.client == ClientId(1) && reply.request == RequestNumber(2));
    let read = away.iter().find(|reply| reply.client == ClientId(3)).expect("the read is answered");
    let write = write.expect("the write is answered");
    assert!(read.op >= write.op, "V7: the read's applied point covers the write before it");
    assert_eq!(total(read), 9, "the read sees the write");
}

#[test]
fn d2_a_write_retried_while_its_run_is_away_is_applied_once() {
    let mut shell = Shell::new();
    register_and_write(&mut shell, AWAY, 1, 4);
    let applies_before = shell.applies.load(Ordering::Relaxed);
    shell.submit(request(AWAY, 1, 2, RequestKind::Write, &[4]));
    shell.release();
    let writes: Vec<_> =
        shell.answers_of(AWAY).into_iter().filter(|reply| reply.request == RequestNumber(2)).cloned().collect();
    assert_eq!(writes.len(), 2, "the write and its retry are both answered: {writes:?}");
    assert_eq!(writes[0], writes[1], "with the same answer");
    assert_eq!(total(&writes[0]), 4);
    assert_eq!(shell.applies.load(Ordering::Relaxed), applies_before + 1, "applied once");
}

#[test]
fn d2_a_replica_removed_with_its_run_away_is_cleared_when_it_comes_back() {
    let mut shell = Shell::new();
    register_and_write(&mut shell, AWAY, 1, 6);
    assert_eq!(shell.held.len(), 1);
    let cleared = shell.cleared.load(Ordering::Relaxed);
    assert!(shell.driver.remove_group(AWAY));
    shell.turns();
    assert!(shell.driver.state_away(AWAY));
    assert_eq!(shell.cleared.load(Ordering::Relaxed), cleared, "not cleared while away");
    // H3: no new replica of the group while the removed one's state
    // machine is on the worker.
    assert_eq!(shell.host(AWAY, true), Err(ShardError::StateAway(AWAY)));
    shell.release();
    assert!(!shell.driver.state_away(AWAY));
    assert_eq!(shell.cleared.load(Ordering::Relaxed), cleared + 1, "cleared once back");
    shell.host(AWAY, true).expect("hosted again once the state machine is back");
    assert_eq!(shell.driver.shard().metrics().apply_runs_unknown, 0, "every run found its replica or its removal");
}

#[test]
fn d2_a_removal_in_the_turn_that_lent_the_run_takes_it_back() {
    let mut shell = Shell::new();
    shell.submit(request(AWAY, 1, 1, RequestKind::Write, b""));
    // The write commits and its run is lent within this turn; the removal
    // comes before the turn ends.
    shell.driver.on_submit(request(AWAY, 1, 2, RequestKind::Write, &[1]));
    let cleared = shell.cleared.load(Ordering::Relaxed);
    let turn = shell.driver.end_turn(&LinksUp);
    for effect in &turn.storage {
        if let Effect::Flush { id } = effect {
            shell.driver.on_flushed(*id);
        }
    }
    assert!(shell.driver.remove_group(AWAY));
    shell.turns();
    assert!(shell.held.is_empty(), "the run never left");
    assert!(!shell.driver.state_away(AWAY), "nothing away");
    assert_eq!(shell.cleared.load(Ordering::Relaxed), cleared + 1, "cleared with the removal");
}

#[test]
fn d2_a_recording_with_runs_away_replays_to_the_same_turns() {
    let mut shell = Shell::new();
    register_and_write(&mut shell, AWAY, 1, 2);
    register_and_write(&mut shell, INLINE, 2, 2);
    shell.submit(request(AWAY, 3, 1, RequestKind::Read, b""));
    shell.release();
    shell.tick();
    let recording = shell.driver.take_recording();
    let expected: Vec<_> = recording
        .iter()
        .filter_map(|entry| match entry {
            cohort_core::driver::Recorded::Turn(turn) => Some(turn.clone()),
            _ => None,
        })
        .collect();
    assert!(expected.iter().any(|turn| !turn.applies.is_empty()), "some turn lent a run");
    let mut fresh = ShardDriver::new(Shard::new(ME, CoreConfig::default()), DriverConfig::for_tick(100_000), [ME]);
    let (applies, cleared) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut state_machine = |spec: &GroupSpec| -> Box<dyn StateMachine> {
        Box::new(Total {
            total: 0,
            off_shard: spec.group == AWAY,
            applies: Arc::clone(&applies),
            cleared: Arc::clone(&cleared),
        })
    };
    let turns = replay(&mut fresh, &recording, &mut state_machine);
    assert_eq!(turns, expected, "the replay's turns are the recording's");
}
