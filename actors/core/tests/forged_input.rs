//! T5 at the level of one shard driven by hand: a peer's message that a
//! correct peer never sends (or sends only late) is refused and counted by
//! reason, and none of them panics the shard or makes it hold more than its
//! bounds. The simulator's forging-peer runs cover the same under faults
//! (`tests/tests/forger.rs`).

mod common;
use common::Counter;

use bytes::Bytes;
use cohort_core::quorum::Quorums;
use cohort_core::{CoreConfig, Effect, GroupSpec, Refusal, Shard, Status, WriteMode};
use cohort_messages::{
    ClientId, CommitEntry, CommitReplyEntry, GroupId, HeartbeatState, Incarnation, LogEntry, MemberIndex, Message,
    NodeId, Op, Prepare, PrepareOk, Redirect, Request, RequestKind, RequestNumber, RequestStateTransfer, StartView,
    StartViewChange, StateChunk, Timestamp, View,
};

const G: GroupId = GroupId(7);
const INCARNATION: Incarnation = Incarnation(1);
const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const LEARNER: NodeId = NodeId(4);

fn config() -> CoreConfig {
    CoreConfig { snapshot_interval_ops: 2, ..CoreConfig::default() }
}

/// One shard of member `me` of group `G` (voters nodes 1–3, learner node
/// 4), whose flushes complete at once.
struct Harness {
    shard: Shard,
    now: u64,
    log: Vec<Effect>,
}

impl Harness {
    fn new(me: u8) -> Harness {
        Harness::hosting(me, Box::new(Counter(0)))
    }

    fn hosting(me: u8, state: Box<dyn cohort_core::StateMachine>) -> Harness {
        let spec = GroupSpec {
            group: G,
            incarnation: INCARNATION,
            members: NODES.to_vec(),
            learners: vec![LEARNER],
            me: MemberIndex(me),
            quorums: Quorums::new(3, None).expect("valid"),
            write_mode: WriteMode::Sync,
            report_applied: false,
        };
        let node = if me < 3 { NODES[me as usize] } else { LEARNER };
        let mut harness = Harness { shard: Shard::new(node, config()), now: 0, log: Vec::new() };
        harness.shard.create_group(spec, state).expect("created");
        harness.drain();
        harness
    }

    fn drain(&mut self) {
        loop {
            let effects = self.shard.drain_effects();
            if effects.is_empty() {
                return;
            }
            for effect in &effects {
                if let Effect::Flush { id } = effect {
                    self.shard.on_flushed(*id);
                }
            }
            self.log.extend(effects);
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
        assert_eq!(message.validate(), Ok(()), "the wire would refuse {message:?}");
        self.shard.on_message(from, message);
        self.drain();
    }

    fn refused(&self, refusal: Refusal) -> u64 {
        self.shard.refused().get(refusal)
    }

    fn replica(&self) -> &cohort_core::Replica {
        self.shard.replica(G).expect("hosted")
    }

    fn sent(&self, pick: fn(&Message) -> bool) -> usize {
        self.log.iter().filter(|effect| matches!(effect, Effect::Send { message, .. } if pick(message))).count()
    }

    /// A Commit of view 0 from its primary (node 1), renewing the lease.
    fn commit_from_primary(&mut self, commit: u64) {
        let entry = CommitEntry {
            group: G,
            partition_incarnation: INCARNATION,
            view: View(0),
            commit: Op(commit),
            timestamp_monotonic: Timestamp(self.now * 16),
            heartbeat_state: HeartbeatState::Busy,
            replica: MemberIndex(0),
        };
        self.shard.on_commit_entries(NODES[0], &[entry]);
        self.drain();
    }
}

fn entry(op: u64, view: u32) -> LogEntry {
    LogEntry {
        op: Op(op),
        view: View(view),
        client: ClientId(9),
        request: RequestNumber(op),
        operation: Bytes::from_static(b"w"),
    }
}

fn prepare(op: u64, commit: u64) -> Message {
    Message::Prepare(Prepare {
        group: G,
        incarnation: INCARNATION,
        view: View(0),
        commit: Op(commit),
        replica: MemberIndex(0),
        entry: entry(op, 0),
    })
}

fn start_view(view: u32, log: Vec<LogEntry>, commit: u64) -> Message {
    let op = log.last().map_or(Op(0), |last| last.op);
    let replica = MemberIndex((view % 3) as u8);
    Message::StartView(StartView {
        group: G,
        incarnation: INCARNATION,
        view: View(view),
        op,
        commit: Op(commit),
        replica,
        log,
    })
}

fn start_view_change(view: u32, replica: u8) -> Message {
    Message::StartViewChange(StartViewChange {
        group: G,
        incarnation: INCARNATION,
        view: View(view),
        replica: MemberIndex(replica),
    })
}

/// A backup (node 2) that holds and applied ops 1 and 2 of view 0.
fn backup_with_applied_ops() -> Harness {
    let mut backup = Harness::new(1);
    backup.deliver(NODES[0], prepare(1, 0));
    backup.deliver(NODES[0], prepare(2, 2));
    assert_eq!(backup.replica().commit_min(), Op(2));
    backup
}

#[test]
fn t5_a_start_view_change_for_the_last_view_is_refused_and_no_timeout_overflows() {
    let mut backup = Harness::new(1);
    backup.deliver(NODES[0], start_view_change(u32::MAX, 0));
    assert_eq!(backup.refused(Refusal::ViewOutOfRange), 1);
    assert_eq!(backup.replica().view(), View(0));
    // Far, but inside the view space: refused while the lease from the
    // primary of view 0 runs, taken once it ran out.
    backup.deliver(NODES[0], start_view_change(u32::MAX / 2, 0));
    assert_eq!(backup.refused(Refusal::ViewJump), 1);
    assert_eq!(backup.replica().view(), View(0));
    backup.ticks(60);
    assert_eq!(backup.replica().status(), Status::ViewChange, "no primary heard: electing");
    backup.deliver(NODES[0], start_view_change(u32::MAX / 2, 0));
    assert_eq!(backup.replica().view(), View(u32::MAX / 2));
    backup.ticks(500);
    assert!(backup.replica().view().0 > u32::MAX / 2, "timeouts move on without overflow");
}

#[test]
fn t5_a_start_view_whose_log_rewrites_an_applied_op_is_refused() {
    // Op 1 applied and still in the log (no snapshot yet), op 2 not committed.
    let mut backup = Harness::new(1);
    backup.deliver(NODES[0], prepare(1, 0));
    backup.deliver(NODES[0], prepare(2, 1));
    assert_eq!((backup.replica().commit_min(), backup.replica().log_base()), (Op(1), Op(0)));
    // Before T5 this reached the assertion in `adopt_log`.
    let forged = start_view(3, vec![entry(1, 2), entry(2, 2), entry(3, 3)], 0);
    backup.deliver(NODES[0], forged);
    assert_eq!(backup.refused(Refusal::LogRewritesApplied), 1);
    assert_eq!((backup.replica().view(), backup.replica().op()), (View(0), Op(2)), "nothing changed");
}

#[test]
fn t5_a_start_view_whose_log_goes_back_in_views_where_it_joins_is_refused() {
    let mut backup = Harness::new(1);
    // View 2's primary (member 2, node 3) hands over op 1 of view 2, committed.
    backup.deliver(NODES[2], start_view(2, vec![entry(1, 2)], 1));
    assert_eq!((backup.replica().view(), backup.replica().commit_min()), (View(2), Op(1)));
    // View 3's "log" puts op 2 of view 1 after it: the views would go back.
    backup.deliver(NODES[0], start_view(3, vec![entry(2, 1)], 1));
    assert_eq!(backup.refused(Refusal::LogViewsGoBack), 1);
    assert_eq!(backup.replica().view(), View(2));
}

#[test]
fn t5_a_far_start_view_waits_until_the_lease_from_the_live_primary_ends() {
    let mut backup = backup_with_applied_ops();
    let far = 3 * 70_000;
    backup.ticks(5);
    backup.commit_from_primary(2);
    backup.deliver(NODES[0], start_view(far, vec![entry(1, 0), entry(2, 0)], 2));
    assert_eq!(backup.refused(Refusal::ViewJump), 1);
    assert_eq!(backup.replica().view(), View(0), "a backup that hears its primary stays with it");
    // The primary falls silent: once the lease is over, the far view is taken
    // (a member that was down through many view changes catches up so).
    backup.ticks(60);
    backup.deliver(NODES[0], start_view(far, vec![entry(1, 0), entry(2, 0)], 2));
    assert_eq!(backup.refused(Refusal::ViewJump), 1);
    assert_eq!((backup.replica().view(), backup.replica().status()), (View(far), Status::Normal));
}

#[test]
fn t5_only_the_primary_serves_state_transfer() {
    let ask = |replica: u8, view: u32| {
        Message::RequestStateTransfer(RequestStateTransfer {
            group: G,
            incarnation: INCARNATION,
            view: View(view),
            replica: MemberIndex(replica),
            snapshot_op: Op(0),
            offset_bytes: 0,
        })
    };
    let chunks = |harness: &Harness| harness.sent(|message| matches!(message, Message::StateChunk(_)));
    // A backup that has a snapshot (it applied two ops) refuses.
    let mut backup = backup_with_applied_ops();
    assert_eq!(backup.replica().log_base(), Op(2), "snapshot taken");
    backup.deliver(NODES[2], ask(2, 0));
    assert_eq!(backup.refused(Refusal::StateTransferNotPrimary), 1);
    assert_eq!(chunks(&backup), 0);
    // In a view change it serves the member that is to lead it, no other:
    // view 1's primary (member 1) may need the chosen log's snapshot.
    let mut member = Harness::new(2);
    member.deliver(NODES[0], prepare(1, 0));
    member.deliver(NODES[0], prepare(2, 2));
    member.ticks(60);
    assert_eq!((member.replica().status(), member.replica().view()), (Status::ViewChange, View(1)));
    member.deliver(NODES[0], ask(0, 1));
    assert_eq!((member.refused(Refusal::StateTransferNotPrimary), chunks(&member)), (1, 0));
    member.deliver(NODES[1], ask(1, 1));
    assert_eq!(chunks(&member), 1);
    // The primary serves.
    let mut primary = Harness::new(0);
    // Client 5's registration (H5), then a write.
    for request in 1..=2 {
        primary.shard.on_request(Request {
            client: ClientId(5),
            request: RequestNumber(request),
            group: G,
            kind: RequestKind::Write,
            operation: if request == 1 { Bytes::new() } else { Bytes::from_static(b"w") },
        });
        primary.drain();
        let ok =
            PrepareOk { group: G, incarnation: INCARNATION, view: View(0), op: Op(request), replica: MemberIndex(1) };
        primary.deliver(NODES[1], Message::PrepareOk(ok));
    }
    assert_eq!(primary.replica().log_base(), Op(2), "snapshot taken");
    primary.deliver(NODES[2], ask(2, 0));
    assert_eq!(chunks(&primary), 1);
}

#[test]
fn t5_a_state_chunk_must_come_from_the_primary_and_fit_the_cap() {
    let mut backup = Harness::new(1);
    let cap = config().state_transfer_size_max_bytes;
    let chunk = |replica: u8, total_size_bytes: u64| {
        Message::StateChunk(StateChunk {
            group: G,
            incarnation: INCARNATION,
            view: View(0),
            replica: MemberIndex(replica),
            snapshot_op: Op(5),
            snapshot_view: View(0),
            offset_bytes: 0,
            total_size_bytes,
            chunk: Bytes::from_static(b"first bytes"),
        })
    };
    backup.deliver(NODES[0], chunk(0, cap + 1));
    assert_eq!(backup.refused(Refusal::StateTransferTooLarge), 1);
    backup.deliver(NODES[2], chunk(2, 64));
    assert_eq!(backup.refused(Refusal::StateChunkNotFromSource), 1);
    assert_eq!(backup.shard.footprint().state_transfer_bytes, 0, "nothing of either was kept");
    backup.deliver(NODES[0], chunk(0, cap));
    assert_eq!(backup.shard.footprint().state_transfer_bytes, 11, "the primary's chunk within the cap is kept");
}

/// D1: a snapshot sent must carry its state. One whose state the sender's
/// state machine holds (only a replica's own saved snapshots hold none), or
/// one that does not decode, is dropped whole and counted; nothing of it is
/// installed.
#[test]
fn d1_a_transferred_snapshot_without_its_state_is_refused() {
    for state in [Box::new(Counter(0)) as Box<dyn cohort_core::StateMachine>, Box::new(PersistentCounter::default())] {
        a_transferred_snapshot_without_its_state_is_refused(Harness::hosting(1, state));
    }
}

fn a_transferred_snapshot_without_its_state_is_refused(mut backup: Harness) {
    let mut held = b"COHS".to_vec();
    held.extend([4, 1]); // format 4, state held by the state machine
    held.extend(0u32.to_le_bytes()); // no state bytes
    held.extend(0u32.to_le_bytes()); // no clients
    held.extend(INCARNATION.0.to_le_bytes());
    held.extend([2, 3]); // replication quorum, members
    for node in NODES {
        held.extend(node.0.to_le_bytes());
    }
    let chunk = |data: Vec<u8>| {
        Message::StateChunk(StateChunk {
            group: G,
            incarnation: INCARNATION,
            view: View(0),
            replica: MemberIndex(0),
            snapshot_op: Op(5),
            snapshot_view: View(0),
            offset_bytes: 0,
            total_size_bytes: data.len() as u64,
            chunk: Bytes::from(data),
        })
    };
    backup.deliver(NODES[0], chunk(held));
    assert_eq!(backup.refused(Refusal::SnapshotUnusable), 1);
    assert_eq!(backup.replica().commit_min(), Op(0), "nothing of it was installed");
    backup.deliver(NODES[0], chunk(b"not a snapshot".to_vec()));
    assert_eq!(backup.refused(Refusal::SnapshotUnusable), 2);
    assert_eq!(backup.replica().commit_min(), Op(0));
}

/// D3: stream headers that lie (a record or lineage past its limit, a
/// header longer than the stream, a record that does not decode, a header
/// naming another op than its chunks) are refused and counted, never
/// installed and never held past the header's limit; a stream sent to a
/// state machine in memory likewise.
#[test]
fn d3_a_forged_stream_header_is_refused() {
    let header = |record_size: u32, lineage_size: u16, body: &[u8]| {
        let mut data = b"COHX".to_vec();
        data.push(1);
        data.extend(record_size.to_le_bytes());
        data.extend(lineage_size.to_le_bytes());
        data.extend(body);
        data
    };
    let mut checkpoint = b"COHC".to_vec();
    checkpoint.push(1);
    checkpoint.extend(9u64.to_le_bytes()); // op 9, while the chunks say 5
    checkpoint.extend(0u32.to_le_bytes());
    let forged = [
        header(u32::MAX, 0, b""),
        header(0, u16::MAX, b""),
        header(4, 0, b"junk"),
        header(checkpoint.len() as u32, 0, &checkpoint),
    ];
    for state in [Box::new(PersistentCounter::default()) as Box<dyn cohort_core::StateMachine>, Box::new(Counter(0))] {
        let mut backup = Harness::hosting(1, state);
        for (index, data) in forged.iter().enumerate() {
            let chunk = StateChunk {
                group: G,
                incarnation: INCARNATION,
                view: View(0),
                replica: MemberIndex(0),
                snapshot_op: Op(5),
                snapshot_view: View(0),
                offset_bytes: 0,
                // Claims far more than the whole-snapshot cap: a stream has none.
                total_size_bytes: 1 << 40,
                chunk: Bytes::from(data.clone()),
            };
            backup.deliver(NODES[0], Message::StateChunk(chunk));
            assert_eq!(backup.refused(Refusal::SnapshotUnusable), index as u64 + 1, "forged header {index}");
            assert_eq!(backup.replica().commit_min(), Op(0), "nothing of it was installed");
            assert!(backup.shard.footprint().state_transfer_bytes < 1024, "nothing of it is held");
        }
    }
}

#[test]
fn t5_a_reply_echoing_a_timestamp_never_sent_does_not_confirm_the_primary() {
    let mut primary = Harness::new(0);
    primary.ticks(10);
    let forged = CommitReplyEntry {
        group: G,
        partition_incarnation: INCARNATION,
        view: View(0),
        timestamp_monotonic: Timestamp(u64::MAX / 2),
        replica: MemberIndex(1),
    };
    primary.shard.on_commit_reply_entries(NODES[1], &[forged]);
    primary.drain();
    assert_eq!(primary.refused(Refusal::ReplyTimestampUnsent), 1);
    assert!(!primary.shard.is_confirmed_primary(G, primary.now), "V7: no quorum window from a forged reply");
}

#[test]
fn t5_the_door_counts_each_refusal_by_reason() {
    let mut backup = Harness::new(1);
    let mut other = prepare(1, 0);
    if let Message::Prepare(prepare) = &mut other {
        prepare.incarnation = Incarnation(2);
    }
    backup.deliver(NODES[0], other);
    backup.deliver(NODES[2], prepare(1, 0));
    backup.deliver(LEARNER, start_view_change(1, 3));
    let redirect = Redirect { group: G, client: ClientId(3), request: RequestNumber(1), view: View(0), primary: None };
    backup.deliver(NODES[0], Message::Redirect(redirect));
    let counts = (
        backup.refused(Refusal::OtherIncarnation),
        backup.refused(Refusal::NotTheMember),
        backup.refused(Refusal::ElectionFromLearner),
        backup.refused(Refusal::UnexpectedCommand),
    );
    assert_eq!(counts, (1, 1, 1, 1));
    assert_eq!(backup.replica().op(), Op(0), "none of them was acted on");
    assert_eq!(backup.shard.refused().forged(), 1, "only the learner's election is never a correct peer's");
}

/// D1: a [`Counter`] that says it keeps its state on disk; its
/// checkpoints are kept in memory (the tests never restart it).
#[derive(Default)]
struct PersistentCounter {
    /// The count.
    count: Counter,
    /// The record of the last checkpoint.
    record: Option<Bytes>,
}

impl cohort_core::StateMachine for PersistentCounter {
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes {
        self.count.apply(op, operation)
    }
    fn read(&self, query: &[u8]) -> Bytes {
        self.count.read(query)
    }
    fn snapshot(&self) -> Bytes {
        self.count.snapshot()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.count.restore(snapshot)
    }
    fn durability(&self) -> cohort_core::Durability {
        cohort_core::Durability::Persistent
    }
    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.record = Some(Bytes::copy_from_slice(record));
        Ok(())
    }
    fn checkpointed(&self) -> Option<Bytes> {
        self.record.clone()
    }
}
