//! H1 at the level of one recovering member's shard, driven by hand: the
//! answers it gets, and what it does with them.
//!
//! A real three-node run (runtime/tests/driver_trace.rs, about one run in
//! forty under load) met the case below: a member joining a new group
//! heard both others answer its first round, the primary of view 0 among
//! them, but that primary had sent its StartView just before (withheld
//! within a repair timeout, Z4) and then died before the next round. The
//! group then waits, with two of its three members up, until the primary
//! is back. That is H1's rule and not a stall to fix: the member cannot
//! tell a new group from one whose writes its earlier life acknowledged
//! together with the dead primary alone; an election of the one holder
//! left with the member's empty vote would lose such a write. (A build
//! that lent the vote here was caught by the simulator: seed 6104137 of
//! `--profile durability`, a committed op applied differently on two
//! nodes.)

mod common;
use common::Counter;

use bytes::Bytes;
use cohort_core::storage::{RecoveredGroup, Superblock};
use cohort_core::{CoreConfig, Effect, Shard};
use cohort_messages::{
    ClientId, GroupId, Incarnation, LogEntry, MemberIndex, Message, NodeId, Op, RecoveryAnswer, RequestNumber,
    StartView, View,
};

const G: GroupId = GroupId(2);
/// As in the run: node 3 is member 0 and leads view 0; node 1 (this shard)
/// is member 1 and would lead view 1; node 2 is member 2 and leads view 2.
const MEMBERS: [NodeId; 3] = [NodeId(3), NodeId(1), NodeId(2)];
const ME: NodeId = NodeId(1);

/// The recovering member; every flush completes at once.
struct Member {
    shard: Shard,
    now: u64,
    sent: Vec<(NodeId, Message)>,
}

impl Member {
    /// Member 1 of a group it joins without data (it recovers).
    fn joined() -> Member {
        let spec = common::plain_spec(G, &MEMBERS, 1);
        let mut shard = Shard::new(ME, CoreConfig::default());
        shard.on_tick(1);
        shard.join_group(spec, Box::new(Counter(0))).expect("joined");
        let mut member = Member { shard, now: 1, sent: Vec::new() };
        member.settle();
        assert!(member.recovering(), "a member joined without data recovers");
        member
    }

    /// Member 1, back from a crash still recovering, its durable view
    /// `view` (an election of its earlier life: past the group's).
    fn recovering_in(view: u32) -> Member {
        let spec = common::plain_spec(G, &MEMBERS, 1);
        let mut shard = Shard::new(ME, CoreConfig::default());
        shard.on_tick(1);
        let superblock = Superblock {
            view: View(view),
            log_view: View(0),
            commit: Op(0),
            incarnation: Incarnation(1),
            members: MEMBERS.to_vec(),
            replication_quorum: 2,
            recovering: true,
        };
        let recovered = RecoveredGroup { superblock: Some(superblock), snapshot: None, entries: Vec::new() };
        shard.recover_group(spec, Box::new(Counter(0)), recovered).expect("recovered");
        let mut member = Member { shard, now: 1, sent: Vec::new() };
        member.settle();
        assert!(member.recovering(), "back recovering");
        member
    }

    /// The StartViewChanges sent since the last call, as (to, view).
    fn take_view_changes(&mut self) -> Vec<(NodeId, View)> {
        std::mem::take(&mut self.sent)
            .into_iter()
            .filter_map(|(to, message)| match message {
                Message::StartViewChange(svc) => Some((to, svc.view)),
                _ => None,
            })
            .collect()
    }

    fn settle(&mut self) {
        loop {
            let effects = self.shard.drain_effects();
            if effects.is_empty() {
                return;
            }
            for effect in effects {
                match effect {
                    Effect::Flush { id } => self.shard.on_flushed(id),
                    Effect::Send { to, message } => self.sent.push((to, message)),
                    _ => {}
                }
            }
        }
    }

    fn tick(&mut self, ticks: u64) {
        for _ in 0..ticks {
            self.now += 1;
            self.shard.on_tick(self.now);
            self.settle();
        }
    }

    fn deliver(&mut self, from: NodeId, message: Message) {
        self.shard.on_message(from, message);
        self.settle();
    }

    fn recovering(&self) -> bool {
        self.shard.replica(G).is_some_and(|replica| replica.is_recovering())
    }

    /// Ticks until a new round of questions goes out; its nonce.
    fn next_round(&mut self) -> u64 {
        for _ in 0..100 {
            self.tick(1);
            let nonce = self.sent.iter().rev().find_map(|(_, message)| match message {
                Message::RecoveryQuery(query) => Some(query.nonce),
                _ => None,
            });
            self.sent.clear();
            if let Some(nonce) = nonce {
                return nonce;
            }
        }
        panic!("no round of questions within 100 ticks");
    }

    /// Ticks until a new round of questions goes out, keeping what was sent.
    fn next_round_keeping_sent(&mut self) {
        let before = self.sent.len();
        for _ in 0..100 {
            self.tick(1);
            if self.sent[before..].iter().any(|(_, message)| matches!(message, Message::RecoveryQuery(_))) {
                return;
            }
        }
        panic!("no round of questions within 100 ticks");
    }

    /// The DoViewChanges sent since the last call, as (to, view, op).
    fn take_votes(&mut self) -> Vec<(NodeId, View, Op)> {
        std::mem::take(&mut self.sent)
            .into_iter()
            .filter_map(|(to, message)| match message {
                Message::DoViewChange(dvc) => Some((to, dvc.view, dvc.op)),
                _ => None,
            })
            .collect()
    }
}

fn answer(replica: u8, nonce: u64, view: u32, op: u64, primary: bool) -> Message {
    Message::RecoveryAnswer(RecoveryAnswer {
        group: G,
        incarnation: Incarnation(1),
        replica: MemberIndex(replica),
        nonce,
        view: View(view),
        log_view: View(0),
        op: Op(op),
        commit: Op(op.saturating_sub(1)),
        recovering: false,
        primary,
    })
}

fn entry(op: u64) -> LogEntry {
    LogEntry {
        op: Op(op),
        view: View(0),
        client: ClientId(99),
        request: RequestNumber(op),
        operation: Bytes::from_static(b"w"),
    }
}

#[test]
fn h1_a_member_whose_answering_primary_died_waits_for_it_with_one_holder_up() {
    let mut member = Member::joined();
    let nonce = member.next_round();
    // Both others answer; the primary's StartView does not come (it was
    // withheld: one had just gone out, before the member decided).
    member.deliver(MEMBERS[2], answer(2, nonce, 0, 2, false));
    member.deliver(MEMBERS[0], answer(0, nonce, 0, 2, true));
    assert!(member.recovering(), "it waits for the primary's StartView");
    assert_eq!(member.take_votes(), vec![], "a primary is known: no vote lent");

    // The primary dies. The other holder times out and starts an election
    // of view 1, whose primary is this member; round after round it alone
    // answers.
    for _ in 0..5 {
        let nonce = member.next_round();
        member.deliver(MEMBERS[2], answer(2, nonce, 1, 6, false));
        assert_eq!(
            member.take_votes(),
            vec![],
            "an op its earlier life acknowledged with the dead primary alone may be missing from the holder \
             left: no vote is lent, the group waits for the primary"
        );
        assert!(member.recovering());
    }

    // The primary comes back and is elected in view 3 (it leads view 3);
    // its StartView of a view past the member's target recovers it.
    let nonce = member.next_round();
    member.deliver(MEMBERS[0], answer(0, nonce, 3, 6, true));
    let start_view = StartView {
        group: G,
        incarnation: Incarnation(1),
        view: View(3),
        op: Op(6),
        commit: Op(6),
        replica: MemberIndex(0),
        log: (1..=6).map(entry).collect(),
    };
    member.deliver(MEMBERS[0], Message::StartView(start_view));
    let replica = member.shard.replica(G).expect("hosted");
    assert!(!replica.is_recovering(), "it recovered from view 3's log");
    assert_eq!(replica.view(), View(3));
}

/// A member back recovering in view 5 (its earlier life started that
/// election) while the group went on in view 4 cannot take view 4's log: it
/// promised not to act before view 5. Every round it tells the others where
/// it stands, with no vote, so that the primary it asks counts it as
/// stranded in view 5 and moves the group up
/// (`h1_a_primary_moves_up_to_the_view_a_recovering_member_voted_in`,
/// actors/core/tests/heartbeats.rs). The simulator found a member left
/// recovering so: seed 6103286 of five nodes (tests/tests/recovery.rs).
#[test]
fn h1_a_member_recovering_past_the_groups_view_says_where_it_stands() {
    let mut member = Member::recovering_in(5);
    let nonce = member.next_round();
    member.deliver(MEMBERS[0], answer(0, nonce, 4, 3, false));
    member.deliver(MEMBERS[2], answer(2, nonce, 4, 3, false));
    let _ = member.take_view_changes();
    member.next_round_keeping_sent();
    let said = member.take_view_changes();
    assert_eq!(said, vec![(MEMBERS[0], View(5)), (MEMBERS[2], View(5))], "a StartViewChange of its view to each");
    assert_eq!(member.take_votes(), vec![], "and no vote");
    assert!(member.recovering());
}

/// H1: a member decided on view 7 because a holder answered it; in a
/// later round every holder answers view 6 (the one in view 7 lost it with
/// its disk). No StartView of view 7 will come, and it may not take view
/// 6's log: it says where it stands each round, a StartViewChange of view
/// 7 to every other voter and no vote, so that the primary moves the group
/// up to it. While a holder still answers view 7 it only waits. The
/// simulator found a member left recovering so: seeds 6100212 and 6106411
/// with `--state disk` (tests/tests/recovery.rs).
#[test]
fn h1_a_member_whose_target_no_holder_answers_any_more_says_where_it_stands() {
    let mut member = Member::joined();
    let nonce = member.next_round();
    member.deliver(MEMBERS[0], answer(0, nonce, 7, 3, false));
    member.deliver(MEMBERS[2], answer(2, nonce, 6, 3, true));
    member.next_round_keeping_sent();
    let nonce = member
        .sent
        .iter()
        .rev()
        .find_map(|(_, message)| match message {
            Message::RecoveryQuery(query) => Some(query.nonce),
            _ => None,
        })
        .expect("a round of questions");
    assert_eq!(member.take_view_changes(), vec![], "a holder still answers view 7: it waits for its StartView");
    member.deliver(MEMBERS[0], answer(0, nonce, 6, 3, false));
    member.deliver(MEMBERS[2], answer(2, nonce, 6, 3, true));
    let _ = member.take_view_changes();
    member.next_round_keeping_sent();
    let votes = member.sent.iter().filter(|(_, message)| matches!(message, Message::DoViewChange(_))).count();
    let said = member.take_view_changes();
    assert_eq!(said, vec![(MEMBERS[0], View(7)), (MEMBERS[2], View(7))], "a StartViewChange of its target to each");
    assert_eq!(votes, 0, "and no vote");
    assert!(member.recovering());
}
