//! P4 at the level of one shard driven by hand: learners (P4) get the
//! log but are counted in no quorum, never take part in a view change, and
//! their list can change on a running group. The simulator covers the same
//! under faults (`tests/tests/learners.rs`).

mod common;
use common::Counter;

use bytes::Bytes;
use cohort_core::quorum::Quorums;
use cohort_core::replica::SpecError;
use cohort_core::{CoreConfig, Effect, GroupSpec, Role, Shard, ShardError, TimingConfig, WriteMode};
use cohort_messages::{
    ClientId, CommitReplyEntry, GroupId, Incarnation, MemberIndex, Message, NodeId, Op, PrepareOk, Request,
    RequestKind, RequestNumber, StartViewChange, View,
};

const G: GroupId = GroupId(7);
const VOTERS: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const LEARNER_A: NodeId = NodeId(4);
const LEARNER_B: NodeId = NodeId(5);

fn spec(me: u8, learners: Vec<NodeId>) -> GroupSpec {
    GroupSpec {
        group: G,
        incarnation: Incarnation(1),
        members: VOTERS.to_vec(),
        learners,
        me: MemberIndex(me),
        quorums: Quorums::new(3, None).expect("valid"),
        write_mode: WriteMode::Sync,
        report_applied: false,
    }
}

/// One shard whose flushes complete at once.
struct Harness {
    shard: Shard,
    now: u64,
    log: Vec<Effect>,
}

impl Harness {
    fn new(node: NodeId, spec: GroupSpec) -> Harness {
        let mut harness = Harness { shard: Shard::new(node, CoreConfig::default()), now: 0, log: Vec::new() };
        harness.shard.create_group(spec, Box::new(Counter(0))).expect("created");
        harness.drain();
        harness
    }

    fn drain(&mut self) {
        loop {
            let commands = self.shard.drain_effects();
            if commands.is_empty() {
                return;
            }
            let flushes: Vec<u64> =
                commands.iter().filter_map(|c| if let Effect::Flush { id } = c { Some(*id) } else { None }).collect();
            self.log.extend(commands);
            for id in flushes {
                self.shard.on_flushed(id);
            }
            self.shard.invariants();
        }
    }

    fn ticks(&mut self, n: u64) {
        for _ in 0..n {
            self.now += 1;
            self.shard.on_tick(self.now);
            self.drain();
        }
    }

    /// Request `request` of client 1: request 1 is its registration (H5),
    /// which goes through the log as a write does.
    fn write(&mut self, request: u64) {
        self.shard.on_request(Request {
            client: ClientId(1),
            request: RequestNumber(request),
            group: G,
            kind: RequestKind::Write,
            operation: if request == 1 { Bytes::new() } else { Bytes::from_static(b"w") },
        });
        self.drain();
    }

    fn ack(&mut self, from: NodeId, member: u8, op: u64) {
        let ok = PrepareOk {
            group: G,
            incarnation: Incarnation(1),
            view: View(0),
            op: Op(op),
            replica: MemberIndex(member),
        };
        self.shard.on_message(from, Message::PrepareOk(ok));
        self.drain();
    }

    fn sent_to(&self, to: NodeId, pick: fn(&Message) -> bool) -> usize {
        self.log.iter().filter(|c| matches!(c, Effect::Send { to: t, message } if *t == to && pick(message))).count()
    }

    fn replica(&self) -> &cohort_core::Replica {
        self.shard.replica(G).expect("hosted")
    }
}

#[test]
fn p4_spec_validation_says_why() {
    assert_eq!(spec(0, vec![LEARNER_A]).validate(), Ok(()));
    assert_eq!(spec(3, vec![LEARNER_A]).validate(), Ok(()), "me may be a learner index");
    assert!(matches!(spec(0, vec![NodeId(2)]).validate(), Err(SpecError::Duplicate { node: NodeId(2), .. })));
    assert!(matches!(
        spec(0, vec![LEARNER_A, LEARNER_A]).validate(),
        Err(SpecError::Duplicate { node: LEARNER_A, .. })
    ));
    assert!(matches!(spec(4, vec![LEARNER_A]).validate(), Err(SpecError::MeOutOfRange { total: 4, .. })));
    // Z5: learners may take indexes past the 64 voters' quorum masks, up to
    // REPLICAS_MAX replicas in all.
    let most = (10..262).map(NodeId).collect();
    assert_eq!(spec(254, most).validate(), Ok(()), "3 voters and 252 learners");
    let many = (10..263).map(NodeId).collect();
    assert!(matches!(spec(0, many).validate(), Err(SpecError::TooMany { total: 256, .. })));
    let mut wrong_quorum = spec(0, vec![LEARNER_A]);
    wrong_quorum.quorums = Quorums::new(4, None).expect("valid");
    assert!(matches!(wrong_quorum.validate(), Err(SpecError::QuorumSize { quorum_members: 4, voters: 3, .. })));
    // The shard refuses an invalid spec with the reason.
    let mut shard = Shard::new(NodeId(1), CoreConfig::default());
    let error = shard.create_group(spec(0, vec![NodeId(3)]), Box::new(Counter(0))).unwrap_err();
    assert!(error.to_string().contains("listed twice"), "{error}");
}

#[test]
fn z3_a_hosted_record_digests_to_its_replicas_fingerprint() {
    let mut h = Harness::new(VOTERS[0], spec(0, vec![LEARNER_A, LEARNER_B]));
    h.ticks(1);
    h.write(1);
    h.ack(LEARNER_A, 3, 1);
    h.ack(VOTERS[1], 1, 1);
    let replica = h.replica();
    assert!(replica.learner_caught_up(LEARNER_A) && !replica.learner_caught_up(LEARNER_B));
    let record = h.shard.hosted_replica(G, h.now).expect("hosted");
    assert_eq!(record.digest(), h.shard.hosted_fingerprint(h.now), "the agent's two views of a scan agree");
    let mut moved = record.clone();
    moved.view = cohort_messages::View(1);
    assert_ne!(moved.digest(), record.digest(), "and a change shows");
}

#[test]
fn p4_learner_acks_are_never_counted() {
    let mut h = Harness::new(VOTERS[0], spec(0, vec![LEARNER_A, LEARNER_B]));
    h.ticks(1);
    h.write(1);
    assert_eq!(h.sent_to(LEARNER_A, |m| matches!(m, Message::Prepare(_))), 1, "learners get Prepares");
    assert_eq!(h.sent_to(LEARNER_B, |m| matches!(m, Message::Prepare(_))), 1);
    // Both learners hold op 1 durably: with the primary that is three
    // copies, but only one voter, so nothing commits.
    h.ack(LEARNER_A, 3, 1);
    h.ack(LEARNER_B, 4, 1);
    assert_eq!(h.replica().commit_max(), Op(0), "learner acks are not a quorum");
    assert_eq!(h.replica().learner_progress(), vec![(LEARNER_A, Op(1)), (LEARNER_B, Op(1))]);
    assert!(!h.shard.is_confirmed_primary(G, h.now), "learners do not open the quorum window");
    h.ack(VOTERS[1], 1, 1);
    assert_eq!(h.replica().commit_max(), Op(1), "one voter's ack commits");
    assert!(h.replica().learner_caught_up(LEARNER_A));
    assert!(!h.replica().learner_caught_up(VOTERS[1]), "a voter is no learner");
    // An index past the group is refused at the door, without a panic.
    h.ack(NodeId(9), 9, 1);
    h.ack(LEARNER_A, 9, 1);
}

#[test]
fn p4_learner_never_starts_or_joins_a_view_change() {
    let mut h = Harness::new(LEARNER_A, spec(3, vec![LEARNER_A]));
    assert_eq!(h.replica().role(), Role::Learner);
    // Far past every heartbeat timeout without a primary.
    h.ticks(2000);
    let svc = StartViewChange { group: G, incarnation: Incarnation(1), view: View(5), replica: MemberIndex(1) };
    h.shard.on_message(VOTERS[1], Message::StartViewChange(svc));
    h.drain();
    assert_eq!(h.replica().role(), Role::Learner);
    assert_eq!(h.replica().view(), View(0));
    let election = |m: &Message| matches!(m, Message::StartViewChange(_) | Message::DoViewChange(_));
    for node in VOTERS {
        assert_eq!(h.sent_to(node, election), 0, "a learner sends no election message");
    }
    // And a voter refuses election messages claiming a learner's index.
    let mut voter = Harness::new(VOTERS[1], spec(1, vec![LEARNER_A]));
    voter.ticks(2000); // lease over: a voter's SVC would be joined now
    let before = voter.replica().view();
    let svc = StartViewChange { group: G, incarnation: Incarnation(1), view: View(90), replica: MemberIndex(3) };
    voter.shard.on_message(LEARNER_A, Message::StartViewChange(svc));
    voter.drain();
    assert!(voter.replica().view() < View(90), "from {before}: a learner's StartViewChange is refused");
}

#[test]
fn p4_set_learners_adds_and_removes() {
    let mut h = Harness::new(VOTERS[0], spec(0, vec![]));
    h.ticks(1);
    assert!(matches!(h.shard.set_learners(GroupId(99), vec![]), Err(ShardError::UnknownGroup(GroupId(99)))));
    assert!(matches!(h.shard.set_learners(G, vec![NodeId(2)]), Err(ShardError::Spec(SpecError::Duplicate { .. }))));
    h.shard.set_learners(G, vec![LEARNER_A]).expect("added");
    h.drain();
    assert_eq!(h.sent_to(LEARNER_A, |m| matches!(m, Message::StartView(_))), 1, "an added learner hears the view");
    h.write(1);
    assert_eq!(h.sent_to(LEARNER_A, |m| matches!(m, Message::Prepare(_))), 1);
    h.shard.set_learners(G, vec![LEARNER_B]).expect("replaced");
    h.drain();
    h.write(2);
    assert_eq!(h.sent_to(LEARNER_A, |m| matches!(m, Message::Prepare(_))), 1, "a removed learner gets nothing");
    assert_eq!(h.sent_to(LEARNER_B, |m| matches!(m, Message::Prepare(_))), 1);
    assert_eq!(h.replica().learner_progress(), vec![(LEARNER_B, Op(0))]);
    // A removed learner's acks are refused at the door.
    h.ack(LEARNER_A, 3, 2);
    assert_eq!(h.replica().learner_progress(), vec![(LEARNER_B, Op(0))]);

    // A learner follows its own index, and may not drop itself.
    let mut c = Harness::new(LEARNER_B, spec(4, vec![LEARNER_A, LEARNER_B]));
    c.shard.set_learners(G, vec![LEARNER_B]).expect("kept");
    assert!(c.replica().is_learner());
    assert!(matches!(c.shard.set_learners(G, vec![LEARNER_A]), Err(ShardError::Spec(SpecError::RemovesSelf { .. }))));
    c.drain();
}

/// Z5: a learner's index may pass the 64 voters' quorum masks (the metadata
/// group has up to 250 learners). Its Prepares, acks and election messages
/// go as any learner's: the acks are tracked and never counted, and an
/// election message claiming that index is refused, without a panic.
#[test]
fn z5_a_learner_index_past_sixty_three_follows_like_any_learner() {
    let learners: Vec<NodeId> = (10..210).map(NodeId).collect();
    let last = *learners.last().expect("learners");
    let last_index = (VOTERS.len() + learners.len() - 1) as u8;
    let mut h = Harness::new(VOTERS[0], spec(0, learners.clone()));
    h.ticks(1);
    h.write(1);
    assert_eq!(h.sent_to(last, |m| matches!(m, Message::Prepare(_))), 1, "the last learner gets Prepares");
    h.ack(last, last_index, 1);
    assert_eq!(h.replica().commit_max(), Op(0), "a learner's ack is no quorum");
    h.ack(VOTERS[1], 1, 1);
    assert_eq!(h.replica().commit_max(), Op(1));
    assert!(h.replica().learner_caught_up(last), "index {last_index}'s ack was tracked");
    let svc =
        StartViewChange { group: G, incarnation: Incarnation(1), view: View(9), replica: MemberIndex(last_index) };
    h.shard.on_message(last, Message::StartViewChange(svc));
    h.drain();
    assert_eq!(h.replica().view(), View(0), "a learner's StartViewChange is refused at the door");
    // The learner's own replica, at that index, applies what it is sent.
    let mut learner = Harness::new(last, spec(last_index, learners));
    learner.ticks(50);
    assert_eq!(learner.replica().role(), Role::Learner);
}

/// P4 (seed 5004109 of the simulator's metadata shape): an idle group sends
/// no Prepare a learner could acknowledge, so a learner whose PrepareOk was
/// lost would be counted behind for good and never promoted. On each idle
/// heartbeat the primary asks a member of its view whose acknowledgement
/// is missing for it again, and stops once it has it.
#[test]
fn p4_an_idle_primary_asks_a_learner_whose_ack_was_lost_again() {
    let mut h = Harness::new(VOTERS[0], spec(0, vec![LEARNER_A]));
    h.ticks(1);
    h.write(1);
    h.ack(VOTERS[1], 1, 1);
    assert_eq!(h.replica().commit_max(), Op(1));
    // The learner's PrepareOk is lost; its CommitReplies say it is in the
    // view (and a voter's keep the primary's quorum window open).
    let replies = |h: &mut Harness| {
        // Each echoes the newest Commit it was sent (R24).
        for (node, member) in [(VOTERS[1], 1), (LEARNER_A, 3)] {
            let newest = h.log.iter().rev().find_map(|c| match c {
                Effect::SendCommitBatch { to, entries } if *to == node => entries.last().copied(),
                _ => None,
            });
            if let Some(commit) = newest {
                let reply = CommitReplyEntry {
                    group: G,
                    partition_incarnation: Incarnation(1),
                    view: View(0),
                    timestamp_monotonic: commit.timestamp_monotonic,
                    replica: MemberIndex(member),
                };
                h.shard.on_commit_reply_entry(node, reply);
            }
        }
        h.ticks(1);
    };
    let asks = |h: &Harness| {
        h.sent_to(LEARNER_A, |m| {
            matches!(m, Message::Prepare(p) if p.entry.op == Op(1)) || matches!(m, Message::StartView(_))
        })
    };
    let idle_ticks = 3 * TimingConfig::default().commit_idle_heartbeat_interval_ticks
        + TimingConfig::default().commit_heartbeat_timeout_ticks;
    let before = asks(&h);
    for _ in 0..idle_ticks {
        replies(&mut h);
    }
    assert!(!h.replica().learner_caught_up(LEARNER_A));
    let asked = asks(&h) - before;
    assert!(asked >= 2, "asked again on each idle heartbeat: {asked}");
    h.ack(LEARNER_A, 3, 1);
    assert!(h.replica().learner_caught_up(LEARNER_A), "the repeated acknowledgement counts");
    let settled = asks(&h);
    for _ in 0..idle_ticks {
        replies(&mut h);
    }
    assert_eq!(asks(&h), settled, "nothing asked once acknowledged");
}
