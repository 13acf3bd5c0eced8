//! V2, the durable view, at the level of one backup's shard driven by hand:
//! a PrepareOk says "I hold these ops durably in this view", so it may leave
//! only once the superblock that names the view is durable. The simulator
//! found the case this guards (a backup confirming a view whose superblock a
//! power loss then took back, and a committed op lost in the next view
//! change); here the flushes are held so the order is explicit.

mod common;
use common::Counter;

use bytes::Bytes;
use cohort_core::quorum::Quorums;
use cohort_core::{CoreConfig, Effect, GroupSpec, Shard, WriteMode};
use cohort_messages::{
    ClientId, GroupId, Incarnation, LogEntry, MemberIndex, Message, NodeId, Op, Prepare, RequestNumber, StartView, View,
};

const G: GroupId = GroupId(7);
/// Members: node 1 leads view 0, node 2 (this shard) is member 1, node 3
/// leads view 2.
const MEMBERS: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const ME: NodeId = NodeId(2);

/// One backup whose flushes complete only when the test says so.
struct Backup {
    shard: Shard,
    flushes: Vec<u64>,
    sent: Vec<(NodeId, Message)>,
}

impl Backup {
    fn new() -> Backup {
        let spec = GroupSpec {
            group: G,
            incarnation: Incarnation(1),
            members: MEMBERS.to_vec(),
            learners: Vec::new(),
            me: MemberIndex(1),
            quorums: Quorums::new(3, None).expect("a majority"),
            write_mode: WriteMode::Sync,
            report_applied: false,
        };
        let mut shard = Shard::new(ME, CoreConfig::default());
        shard.on_tick(1);
        shard.create_group(spec, Box::new(Counter(0))).expect("created");
        let mut backup = Backup { shard, flushes: Vec::new(), sent: Vec::new() };
        backup.drain();
        backup.complete_flushes();
        backup
    }

    fn drain(&mut self) {
        for effect in self.shard.drain_effects() {
            match effect {
                Effect::Flush { id } => self.flushes.push(id),
                Effect::Send { to, message } => self.sent.push((to, message)),
                _ => {}
            }
        }
    }

    fn complete_flushes(&mut self) {
        while !self.flushes.is_empty() {
            for id in std::mem::take(&mut self.flushes) {
                self.shard.on_flushed(id);
            }
            self.drain();
        }
    }

    fn deliver(&mut self, from: NodeId, message: Message) {
        self.shard.on_message(from, message);
        self.drain();
    }

    /// PrepareOks sent since the last call, as (view, op).
    fn take_prepare_oks(&mut self) -> Vec<(View, Op)> {
        std::mem::take(&mut self.sent)
            .into_iter()
            .filter_map(|(_, message)| match message {
                Message::PrepareOk(ok) => Some((ok.view, ok.op)),
                _ => None,
            })
            .collect()
    }
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

fn start_view(view: u32) -> StartView {
    StartView {
        group: G,
        incarnation: Incarnation(1),
        view: View(view),
        op: Op(1),
        commit: Op(0),
        replica: MemberIndex(2),
        log: vec![entry(1)],
    }
}

#[test]
fn v2_a_backup_confirms_a_new_view_only_once_its_superblock_is_durable() {
    let mut backup = Backup::new();
    let prepare = Prepare {
        group: G,
        incarnation: Incarnation(1),
        view: View(0),
        commit: Op(0),
        replica: MemberIndex(0),
        entry: entry(1),
    };
    backup.deliver(MEMBERS[0], Message::Prepare(prepare));
    backup.complete_flushes();
    assert_eq!(backup.take_prepare_oks(), vec![(View(0), Op(1))], "op 1 durable in view 0");

    // View 2's StartView carries the same log: nothing to append, only the
    // superblock naming view 2 to make durable.
    backup.deliver(MEMBERS[2], Message::StartView(start_view(2)));
    assert!(!backup.flushes.is_empty(), "the view's superblock is staged");
    // The new primary re-sends its StartView before that flush completes.
    backup.deliver(MEMBERS[2], Message::StartView(start_view(2)));
    assert_eq!(backup.take_prepare_oks(), vec![], "no confirmation of view 2 before it is durable");

    backup.complete_flushes();
    assert_eq!(backup.take_prepare_oks(), vec![(View(2), Op(1))], "confirmed once view 2 is durable");
}

#[test]
fn v2_a_duplicate_prepare_in_a_view_not_yet_durable_is_not_acknowledged() {
    let mut backup = Backup::new();
    let prepare = |view: u32| Prepare {
        group: G,
        incarnation: Incarnation(1),
        view: View(view),
        commit: Op(0),
        replica: MemberIndex(if view == 0 { 0 } else { 2 }),
        entry: entry(1),
    };
    backup.deliver(MEMBERS[0], Message::Prepare(prepare(0)));
    backup.complete_flushes();
    backup.take_prepare_oks();
    backup.deliver(MEMBERS[2], Message::StartView(start_view(2)));
    // A repair of op 1 in view 2 arrives while view 2 is not durable.
    backup.deliver(MEMBERS[2], Message::Prepare(prepare(2)));
    assert_eq!(backup.take_prepare_oks(), vec![], "op 1 is durable, view 2 is not yet");
    backup.complete_flushes();
    assert_eq!(backup.take_prepare_oks(), vec![(View(2), Op(1))]);
}
