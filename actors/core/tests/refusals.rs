//! T5 regressions found by the `shard_inputs` fuzz target (fuzz/README.md):
//! peer messages that pass the wire's validation but would have reached a
//! panic in the core are refused and counted, and correct messages around
//! them still work. One shard is driven by hand; its flushes complete at once.

mod common;
use common::Counter;

use bytes::Bytes;
use cohort_core::quorum::Quorums;
use cohort_core::refusal::{OP_ACCEPTED_MAX, VIEW_ACCEPTED_MAX};
use cohort_core::{CoreConfig, Effect, GroupSpec, Role, Shard, WriteMode};
use cohort_messages::{
    ClientId, CommitEntry, CommitReplyBatch, CommitReplyEntry, DoViewChange, GroupId, HeartbeatState, Incarnation,
    LogEntry, MemberIndex, Message, NodeId, Op, Prepare, RequestNumber, StartView, StartViewChange, StateChunk,
    Timestamp, View,
};

const G: GroupId = GroupId(7);
const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const INCARNATION: Incarnation = Incarnation(1);

struct Harness {
    shard: Shard,
    now: u64,
    /// The newest Commit entry sent to each node.
    last_commit_to: Vec<(NodeId, CommitEntry)>,
}

impl Harness {
    /// Node `NODES[me]` hosting member `me` of G.
    fn new(me: u8) -> Harness {
        let spec = GroupSpec {
            group: G,
            incarnation: INCARNATION,
            members: NODES.to_vec(),
            learners: Vec::new(),
            me: MemberIndex(me),
            quorums: Quorums::new(3, None).expect("valid"),
            write_mode: WriteMode::Sync,
            report_applied: false,
        };
        let shard = Shard::new(NODES[me as usize], CoreConfig::default());
        let mut harness = Harness { shard, now: 0, last_commit_to: Vec::new() };
        harness.shard.create_group(spec, Box::new(Counter(0))).expect("created");
        harness.drain();
        harness
    }

    fn drain(&mut self) {
        loop {
            let effects = self.shard.drain_effects();
            if effects.is_empty() {
                return;
            }
            for effect in effects {
                match effect {
                    Effect::Flush { id } => self.shard.on_flushed(id),
                    Effect::SendCommitBatch { to, entries } => {
                        self.last_commit_to.retain(|(node, _)| *node != to);
                        self.last_commit_to.extend(entries.last().map(|entry| (to, *entry)));
                    }
                    _ => {}
                }
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

    fn deliver(&mut self, from: NodeId, message: Message) {
        assert_eq!(message.validate(), Ok(()), "the wire accepts {message:?}");
        self.shard.on_message(from, message);
        self.drain();
    }

    /// A backup applies ops `1..=count` of view 0 from the primary, node 1.
    fn follow_view_zero(&mut self, count: u64) {
        for op in 1..=count {
            let prepare = Prepare {
                group: G,
                incarnation: INCARNATION,
                view: View(0),
                commit: Op(op - 1),
                replica: MemberIndex(0),
                entry: entry(op, 0),
            };
            self.deliver(NODES[0], Message::Prepare(prepare));
        }
        let commit = CommitEntry {
            group: G,
            partition_incarnation: INCARNATION,
            view: View(0),
            commit: Op(count),
            timestamp_monotonic: Timestamp(self.now * 16 + 1),
            heartbeat_state: HeartbeatState::Busy,
            replica: MemberIndex(0),
        };
        self.shard.on_commit_entry(NODES[0], commit);
        self.drain();
        assert_eq!(self.replica().commit_min(), Op(count), "the backup applied what view 0 committed");
    }

    fn replica(&self) -> &cohort_core::Replica {
        self.shard.replica(G).expect("hosted")
    }
}

fn entry(op: u64, view: u32) -> LogEntry {
    LogEntry {
        op: Op(op),
        view: View(view),
        client: ClientId(1),
        request: RequestNumber(op),
        operation: Bytes::from_static(b"w"),
    }
}

#[test]
fn t5_start_view_log_differing_below_commit_is_refused() {
    // Node 2 applied ops 1 and 2 of view 0. A StartView of view 2 from its
    // primary (node 3) whose log has other entries at those ops: adopting
    // it would rewrite applied state (an assert in adopt_log did fire).
    let mut h = Harness::new(1);
    h.follow_view_zero(2);
    let forged = StartView {
        group: G,
        incarnation: INCARNATION,
        view: View(2),
        op: Op(2),
        commit: Op(2),
        replica: MemberIndex(2),
        log: vec![entry(1, 1), entry(2, 1)],
    };
    h.deliver(NODES[2], Message::StartView(forged));
    assert_eq!(h.shard.refused().log_rewrites_applied, 1);
    assert_eq!((h.replica().view(), h.replica().role()), (View(0), Role::Backup), "the StartView changed nothing");
    // A correct StartView of the same view, which holds the applied ops, is taken.
    let correct = StartView {
        group: G,
        incarnation: INCARNATION,
        view: View(2),
        op: Op(3),
        commit: Op(2),
        replica: MemberIndex(2),
        log: vec![entry(1, 0), entry(2, 0), entry(3, 2)],
    };
    h.deliver(NODES[2], Message::StartView(correct));
    assert_eq!((h.replica().view(), h.replica().op()), (View(2), Op(3)));
    assert_eq!(h.shard.refused().total(), 1);
}

#[test]
fn t5_do_view_change_log_differing_below_commit_is_not_adopted() {
    // Node 3 applied ops 1 and 2 of view 0, then leads view 2. A DoViewChange
    // whose log wins the choice (a later log_view) but differs at the
    // applied ops is dropped; a correct one then completes the view.
    let mut h = Harness::new(2);
    h.follow_view_zero(2);
    h.ticks(200); // No Commits: the lease ends and the heartbeat times out.
    let svc = StartViewChange { group: G, incarnation: INCARNATION, view: View(2), replica: MemberIndex(1) };
    h.deliver(NODES[1], Message::StartViewChange(svc));
    assert_eq!((h.replica().view(), h.replica().role()), (View(2), Role::ViewChange));
    let forged = DoViewChange {
        group: G,
        incarnation: INCARNATION,
        view: View(2),
        log_view: View(1),
        op: Op(2),
        commit: Op(2),
        replica: MemberIndex(1),
        log: vec![entry(1, 1), entry(2, 1)],
    };
    h.deliver(NODES[1], Message::DoViewChange(forged));
    assert_eq!(h.shard.refused().log_rewrites_applied, 1);
    assert_eq!(h.replica().role(), Role::ViewChange, "the forged log did not complete the view");
    let correct = DoViewChange {
        group: G,
        incarnation: INCARNATION,
        view: View(2),
        log_view: View(0),
        op: Op(2),
        commit: Op(2),
        replica: MemberIndex(0),
        log: vec![entry(1, 0), entry(2, 0)],
    };
    h.deliver(NODES[0], Message::DoViewChange(correct));
    assert_eq!((h.replica().view(), h.replica().role()), (View(2), Role::Primary));
    assert_eq!(h.replica().commit_min(), Op(2));
}

#[test]
fn t5_start_view_change_at_the_top_of_the_view_space_is_refused() {
    // A StartViewChange for view u32::MAX, joined, made the next timeout's
    // `View::next` overflow. Views above VIEW_ACCEPTED_MAX are refused.
    let mut h = Harness::new(1);
    h.ticks(200); // Lease over: a backup joins a later view at once.
    for view in [View(u32::MAX), View(VIEW_ACCEPTED_MAX.0 + 1)] {
        let svc = StartViewChange { group: G, incarnation: INCARNATION, view, replica: MemberIndex(2) };
        h.deliver(NODES[2], Message::StartViewChange(svc));
        assert!(h.replica().view() <= VIEW_ACCEPTED_MAX);
    }
    assert_eq!(h.shard.refused().view_out_of_range, 2);
    h.ticks(200); // Timeouts count on without overflow.
    // The largest accepted view is joined, and there is room above it.
    let svc = StartViewChange { group: G, incarnation: INCARNATION, view: VIEW_ACCEPTED_MAX, replica: MemberIndex(2) };
    h.deliver(NODES[2], Message::StartViewChange(svc));
    assert!(h.replica().view() >= VIEW_ACCEPTED_MAX);
    h.ticks(200);
    assert_eq!(h.shard.refused().view_out_of_range, 2);
}

#[test]
fn t5_commit_reply_from_the_top_of_the_view_space_is_refused() {
    // A voter "stranded" in view u32::MAX, answering a primary that node 3
    // keeps confirmed, would move the group up to that view after a few
    // heartbeat timeouts, and the next timeout overflowed.
    let mut h = Harness::new(0);
    h.ticks(10);
    for _ in 0..300 {
        for (node, member, view) in [(NODES[2], 2, View(0)), (NODES[1], 1, View(u32::MAX))] {
            let Some((_, commit)) = h.last_commit_to.iter().find(|(to, _)| *to == node).copied() else { continue };
            let reply = CommitReplyEntry {
                group: G,
                partition_incarnation: INCARNATION,
                view,
                timestamp_monotonic: commit.timestamp_monotonic,
                replica: MemberIndex(member),
            };
            h.shard.on_commit_reply_batch(node, &CommitReplyBatch::encode(&[reply]));
        }
        h.ticks(1);
    }
    assert!(h.shard.refused().view_out_of_range >= 290, "{:?}", h.shard.refused());
    assert_eq!((h.replica().view(), h.replica().role()), (View(0), Role::Primary), "node 3 kept it primary");
}

#[test]
fn t5_state_chunk_of_the_last_op_is_refused() {
    // A snapshot "at" op u64::MAX made installing it overflow `Op::next`.
    let mut h = Harness::new(1);
    h.follow_view_zero(1);
    for snapshot_op in [Op(u64::MAX), Op(OP_ACCEPTED_MAX.0 + 1)] {
        let chunk = StateChunk {
            group: G,
            incarnation: INCARNATION,
            view: View(0),
            replica: MemberIndex(0),
            snapshot_op,
            snapshot_view: View(0),
            offset_bytes: 0,
            total_size_bytes: 8,
            chunk: Bytes::from_static(&[0; 8]),
        };
        h.deliver(NODES[0], Message::StateChunk(chunk));
    }
    assert_eq!(h.shard.refused().op_out_of_range, 2);
    assert_eq!(h.replica().commit_min(), Op(1), "nothing was installed");
}

#[test]
fn t5_prepare_whose_entry_view_goes_back_is_refused() {
    // In view 3 a backup holds op 1 of view 3; a Prepare of op 2 carrying an
    // entry of view 0 would make the log's views go back (an invariant).
    let mut h = Harness::new(1);
    h.ticks(200);
    let start = StartView {
        group: G,
        incarnation: INCARNATION,
        view: View(3),
        op: Op(1),
        commit: Op(0),
        replica: MemberIndex(0),
        log: vec![entry(1, 3)],
    };
    h.deliver(NODES[0], Message::StartView(start));
    assert_eq!((h.replica().view(), h.replica().op()), (View(3), Op(1)));
    let prepare = |view| Prepare {
        group: G,
        incarnation: INCARNATION,
        view: View(3),
        commit: Op(1),
        replica: MemberIndex(0),
        entry: entry(2, view),
    };
    h.deliver(NODES[0], Message::Prepare(prepare(0)));
    assert_eq!(h.shard.refused().log_views_go_back, 1);
    assert_eq!(h.replica().op(), Op(1), "the entry was not appended");
    h.deliver(NODES[0], Message::Prepare(prepare(3)));
    assert_eq!(h.replica().op(), Op(2), "the primary's entry of its view is");
}
