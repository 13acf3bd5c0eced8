//! The node driver's own rules, each pinned to the exact turn it produces:
//! tick catch-up after a stall, the turn-length limit, sends to a peer whose
//! link is down (R25), answers to a peer's request going back to that peer
//! (V5), congestion noticed at a turn's end (K4), where a peer's frame goes
//! (R16, R17, Z3, Z4), and the storage worker's schedule (K3). The node's
//! shard actor and the simulator both run exactly this code.

mod common;
use common::{Counter, plain_spec};

use bytes::Bytes;
use cohort_core::driver::{
    ClientAnswer, DriverConfig, FrameRefusal, LinkStatus, Links, LinksUp, Note, PeerInput, ShardDriver, StorageJob,
    TurnDue, route_peer_frame, run_jobs,
};
use cohort_core::storage::Storage;
use cohort_core::storage::memory::MemoryStorage;
use cohort_core::{CoreConfig, EffectKind, Role, Shard};
use cohort_messages::{
    ClientId, CommitBatch, CommitEntry, GroupId, HeartbeatState, Incarnation, MemberIndex, Message, NodeId, Op,
    Redirect, Request, RequestKind, RequestNumber, SessionKeepalive, Timestamp, TraceContext, View,
};

const G: GroupId = GroupId(5);
const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

/// Links given as a table; a peer not in it has no link.
struct Table(Vec<(NodeId, LinkStatus)>);

impl Links for Table {
    fn status(&self, peer: NodeId) -> Option<LinkStatus> {
        self.0.iter().find(|(node, _)| *node == peer).map(|(_, status)| *status)
    }
}

const UP: LinkStatus = LinkStatus { connected: true, congested: false };
const DOWN: LinkStatus = LinkStatus { connected: false, congested: false };
const CONGESTED: LinkStatus = LinkStatus { connected: true, congested: true };

/// Node `NODES[me]`'s driver, hosting member `me` of G, its first turn taken.
fn driver(me: u8) -> ShardDriver {
    let mut shard = Shard::new(NODES[me as usize], CoreConfig::default());
    shard.create_group(plain_spec(G, &NODES, me), Box::new(Counter(0))).expect("a fresh group");
    let mut driver = ShardDriver::new(shard, DriverConfig::for_tick(100_000), NODES);
    flush_all(&mut driver, &LinksUp);
    driver
}

/// End turns, completing each flush at once, until the driver asks nothing.
fn flush_all(driver: &mut ShardDriver, links: &impl Links) {
    loop {
        let turn = driver.end_turn(links);
        let flushes: Vec<u64> = turn
            .storage
            .iter()
            .filter_map(|effect| match effect {
                cohort_core::Effect::Flush { id } => Some(*id),
                _ => None,
            })
            .collect();
        if turn.is_empty() {
            return;
        }
        for id in flushes {
            driver.on_flushed(id);
        }
    }
}

/// Request `request` of `client`: request 1 is the client's registration
/// (H5), which goes through the log as a write does and applies nothing.
fn write(client: u128, request: u64) -> Request {
    Request {
        client: ClientId(client),
        request: RequestNumber(request),
        group: G,
        kind: RequestKind::Write,
        operation: if request == 1 { Bytes::new() } else { Bytes::from_static(b"add") },
    }
}

/// The flush a turn's storage job ends with.
fn flush_of(storage: &[cohort_core::Effect]) -> u64 {
    match storage.last() {
        Some(cohort_core::Effect::Flush { id }) => *id,
        other => panic!("the job ends with its flush, not {other:?}"),
    }
}

fn kinds(storage: &[cohort_core::Effect]) -> Vec<EffectKind> {
    storage.iter().map(cohort_core::Effect::kind).collect()
}

#[test]
fn v4_after_a_stall_the_missed_ticks_run_late_up_to_the_limit() {
    let mut driver = driver(0);
    assert_eq!(driver.on_clock(3), 2, "ticks 1 and 2 ran late, then 3");
    assert_eq!(driver.shard().now(), 3);
    // A stall of 500 ticks: only the last 100 run late, then the present.
    assert_eq!(driver.on_clock(503), 100);
    assert_eq!(driver.shard().now(), 503);
    assert_eq!(driver.counters().ticks_late, 102);
    // A clock behind the core (a restarted shell) reruns the core's tick.
    assert_eq!(driver.on_clock(7), 0);
    assert_eq!(driver.shard().now(), 503);
}

#[test]
fn z4_a_turn_open_for_its_limit_ends_at_the_next_input() {
    let mut driver = driver(0);
    let limit = driver.config().turn_open_max_micros;
    assert_eq!(driver.input_done(1_000), TurnDue::Opened);
    assert!(driver.turn_open());
    assert_eq!(driver.input_done(1_000 + limit - 1), TurnDue::Open);
    assert_eq!(driver.input_done(1_000 + limit), TurnDue::Now);
    driver.end_turn(&LinksUp);
    assert!(!driver.turn_open());
    assert_eq!(driver.input_done(1_000 + limit), TurnDue::Opened, "the next input opens the next turn");
}

#[test]
fn r25_sends_to_a_peer_whose_link_is_down_are_dropped_counted_and_recorded() {
    let mut driver = driver(0);
    let links = Table(vec![(NODES[1], DOWN), (NODES[2], UP)]);
    driver.on_submit(write(9, 1));
    let turn = driver.end_turn(&links);
    assert_eq!(kinds(&turn.storage), [EffectKind::Append, EffectKind::Flush]);
    // The Prepare to node 2 is dropped; node 3 gets its own.
    assert_eq!(turn.peers.len(), 1);
    assert_eq!(turn.peers[0].to, NODES[2]);
    assert!(matches!(turn.peers[0].messages.as_slice(), [Message::Prepare(prepare)] if prepare.entry.op == Op(1)));
    assert_eq!(turn.dropped_link_down, 1);
    assert_eq!(turn.notes, []);
    // R25: the next Commit batch to node 2 is recorded as sent on a link that was down.
    driver.on_flushed(flush_of(&turn.storage));
    for tick in 1..=5 {
        driver.on_clock(tick);
    }
    let turn = driver.end_turn(&links);
    assert!(turn.peers.iter().all(|batch| batch.to == NODES[2]));
    let replica = driver.shard().replica(G).expect("hosted");
    assert!(!replica.link_connected(MemberIndex(1)));
    assert!(replica.link_connected(MemberIndex(2)));
    assert_eq!(driver.counters().dropped_link_down, 1 + turn.dropped_link_down);
}

#[test]
fn v5_an_answer_goes_back_to_the_peer_that_asked_and_a_local_one_to_this_process() {
    // Node 2 is a backup of view 0: it redirects every write to node 1.
    let mut driver = driver(1);
    let message = Message::Request(write(9, 1));
    driver.on_peer(PeerInput::Message { from: NODES[2], message, trace: TraceContext::NONE });
    driver.on_submit(write(10, 1));
    let turn = driver.end_turn(&LinksUp);
    let redirect = |client: u128| Redirect {
        client: ClientId(client),
        request: RequestNumber(1),
        group: G,
        view: View(0),
        primary: Some(NODES[0]),
    };
    assert_eq!(turn.peers.len(), 1);
    assert_eq!(turn.peers[0].to, NODES[2]);
    assert_eq!(turn.peers[0].messages, [Message::Redirect(redirect(9))]);
    assert_eq!(turn.notes, [Note::Answer(ClientAnswer::Redirect(redirect(10)))]);
    assert_eq!(driver.remote_waiting(), 0, "the peer's request was answered and forgotten");
}

#[test]
fn v5_a_request_from_a_peer_is_dropped_and_counted_past_the_waiters_limit() {
    let mut shard = Shard::new(NODES[0], CoreConfig::default());
    shard.create_group(plain_spec(G, &NODES, 0), Box::new(Counter(0))).expect("a fresh group");
    let config = DriverConfig { remote_waiters_max: 1, ..DriverConfig::for_tick(100_000) };
    let mut driver = ShardDriver::new(shard, config, NODES);
    flush_all(&mut driver, &LinksUp);
    for client in [1, 2] {
        let message = Message::Request(write(client, 1));
        driver.on_peer(PeerInput::Message { from: NODES[2], message, trace: TraceContext::NONE });
    }
    assert_eq!(driver.remote_waiting(), 1);
    assert_eq!(driver.counters().remote_requests_dropped, 1);
    let turn = driver.end_turn(&LinksUp);
    assert_eq!(kinds(&turn.storage), [EffectKind::Append, EffectKind::Flush], "only the first entered the log");
}

#[test]
fn k4_a_congested_link_is_noticed_at_the_turns_end_and_its_prepares_go_once_it_drains() {
    let mut driver = driver(0);
    let congested = Table(vec![(NODES[1], CONGESTED), (NODES[2], UP)]);
    // The turn that notices the congestion; the core holds back from the next input on.
    assert!(driver.end_turn(&congested).is_empty());
    driver.on_submit(write(9, 1));
    let turn = driver.end_turn(&congested);
    let prepares_to = |turn: &cohort_core::driver::Turn| -> Vec<NodeId> {
        let has_prepare = |messages: &[Message]| messages.iter().any(|m| matches!(m, Message::Prepare(_)));
        turn.peers.iter().filter(|batch| has_prepare(&batch.messages)).map(|batch| batch.to).collect()
    };
    assert_eq!(prepares_to(&turn), [NODES[2]]);
    assert_eq!(turn.dropped_link_down, 0, "held back, not dropped");
    assert_eq!(driver.shard().metrics().prepares_held_back, 1);
    driver.on_flushed(flush_of(&turn.storage));
    let drained = Table(vec![(NODES[1], UP), (NODES[2], UP)]);
    let turn = driver.end_turn(&drained);
    let to_node_2: Vec<&Message> =
        turn.peers.iter().filter(|batch| batch.to == NODES[1]).flat_map(|batch| &batch.messages).collect();
    assert!(matches!(to_node_2.as_slice(), [Message::Prepare(prepare)] if prepare.entry.op == Op(1)), "{to_node_2:?}");
}

#[test]
fn v1_a_role_change_and_an_answer_reach_this_process_in_the_order_made() {
    // A single-member group: the write commits on its own flush.
    let mut shard = Shard::new(NODES[0], CoreConfig::default());
    let turn_of_creation = {
        shard.create_group(plain_spec(G, &NODES[..1], 0), Box::new(Counter(0))).expect("a fresh group");
        let mut driver = ShardDriver::new(shard, DriverConfig::for_tick(100_000), NODES);
        let turn = driver.end_turn(&LinksUp);
        driver.on_submit(write(9, 1));
        (driver, turn)
    };
    let (mut driver, first) = turn_of_creation;
    let roles: Vec<&Note> = first.notes.iter().filter(|note| matches!(note, Note::Role { .. })).collect();
    assert_eq!(
        roles.last(),
        Some(&&Note::Role { group: G, incarnation: Incarnation(1), view: View(0), role: Role::Primary })
    );
    flush_all(&mut driver, &LinksUp);
    assert_eq!(driver.counters().role_changes, roles.len() as u64);
}

#[test]
fn r16_r17_a_peer_frame_is_split_by_shard_and_a_bad_entry_rejected_alone() {
    let entry = |group: u64| CommitEntry {
        group: GroupId(group),
        partition_incarnation: Incarnation(1),
        view: View(0),
        commit: Op(0),
        timestamp_monotonic: Timestamp(1),
        heartbeat_state: HeartbeatState::Idle,
        replica: MemberIndex(0),
    };
    let good: Vec<CommitEntry> = (0..8).map(entry).collect();
    let mut bytes = CommitBatch::encode(&good).body().to_vec();
    // Break the third entry's heartbeat state byte (offset 36, R21).
    let entry_bytes = cohort_messages::COMMIT_ENTRY_SIZE_BYTES;
    bytes[2 * entry_bytes + 36] = 0xFF;
    let batch = CommitBatch::from_body(Bytes::from(bytes)).expect("a batch of whole entries");
    let routed = route_peer_frame(NODES[1], Message::Commit(batch), TraceContext::NONE, 2);
    assert_eq!(routed.rejected.len(), 1);
    assert_eq!(routed.refused, None);
    assert_eq!(routed.agent, None);
    let mut entries_routed = 0;
    for (shard, input) in &routed.inputs {
        let PeerInput::Commits { from, entries } = input else { panic!("a Commit frame gives Commits: {input:?}") };
        assert_eq!(*from, NODES[1]);
        assert!(entries.iter().all(|entry| cohort_core::routing::shard_of(entry.group, 2) == *shard));
        entries_routed += entries.len();
    }
    assert_eq!(entries_routed, 7);
}

#[test]
fn z3_s1_pair_messages_go_to_the_shard_they_name_and_session_frames_to_the_agent() {
    let heartbeat = cohort_messages::PairHeartbeat {
        shard: 5,
        epoch: 1,
        tick: 1,
        digest: Default::default(),
        proposals: Vec::new(),
        leaves: Vec::new(),
    };
    let routed = route_peer_frame(NODES[1], Message::PairHeartbeat(heartbeat), TraceContext::NONE, 2);
    assert_eq!(routed.refused, Some(FrameRefusal::ShardOutOfRange));
    assert!(routed.inputs.is_empty());
    let keepalive =
        Message::SessionKeepalive(SessionKeepalive { node: NODES[1], session: cohort_messages::SessionId(1) });
    let routed = route_peer_frame(NODES[1], keepalive.clone(), TraceContext::NONE, 2);
    assert_eq!(routed.agent, Some(keepalive));
    assert!(routed.inputs.is_empty());
}

#[test]
fn k3_a_worker_runs_every_queued_job_and_reports_only_the_last_flush() {
    let mut driver = driver(0);
    driver.on_submit(write(9, 1));
    let first = driver.end_turn(&LinksUp);
    driver.on_submit(write(9, 2));
    let second = driver.end_turn(&LinksUp);
    let mut storage = MemoryStorage::new();
    storage.recover().expect("fresh");
    let jobs = [StorageJob::Run(first.storage), StorageJob::Run(second.storage.clone())];
    let ran = run_jobs(&mut storage, jobs).expect("memory storage");
    assert_eq!(ran.flush, Some(flush_of(&second.storage)));
    assert_eq!(ran.failed_superblocks, []);
}

#[test]
fn s4_a_removed_group_s_writes_in_the_open_turn_never_reach_storage() {
    // The storage worker runs the removal behind the jobs already handed
    // over; what the group staged in the open turn must not follow it.
    let mut driver = driver(0);
    let mut storage = MemoryStorage::new();
    storage.recover().expect("fresh");
    let first = driver.end_turn(&LinksUp);
    run_jobs(&mut storage, [StorageJob::Run(first.storage)]).expect("the group's start");
    driver.on_submit(write(9, 1));
    assert!(driver.remove_group(G));
    let removal = StorageJob::RemoveGroup(G);
    // Hosted again under the same id in the same turn: it starts from op 1.
    driver.create_group(plain_spec(G, &NODES, 0), Box::new(Counter(0))).expect("hosted again");
    driver.on_submit(write(9, 1));
    let turn = driver.end_turn(&LinksUp);
    let appended: Vec<Op> = turn
        .storage
        .iter()
        .filter_map(|effect| match effect {
            cohort_core::Effect::Append { entry, .. } => Some(entry.op),
            _ => None,
        })
        .collect();
    assert_eq!(appended, [Op(1)], "only the new replica's write");
    run_jobs(&mut storage, [removal, StorageJob::Run(turn.storage)]).expect("no append after the removal");
}

#[test]
fn s4_a_removed_group_s_role_reports_in_the_open_turn_are_dropped() {
    // A backup that hears nothing starts a view change; removed in the same
    // turn, nothing of that reaches this process's listeners.
    let mut removed = driver(1);
    let mut kept = driver(1);
    for driver in [&mut removed, &mut kept] {
        for tick in 1..=200 {
            driver.on_clock(tick);
        }
    }
    assert!(removed.remove_group(G));
    let is_role = |note: &Note| matches!(note, Note::Role { group, .. } if *group == G);
    assert!(kept.end_turn(&LinksUp).notes.iter().any(is_role), "the view change is reported");
    assert!(!removed.end_turn(&LinksUp).notes.iter().any(is_role), "not once the group is gone");
}

#[test]
fn d1_a_rebuilt_member_still_recovers_after_a_crash_right_after_its_reset() {
    // Node 2's member of G was acknowledging writes; its state machine
    // came back behind its storage, so it is rebuilt from the others. The
    // reset is its first durable step: a crash right after it, before any
    // flush, must find the member recovering, not a member that never
    // acknowledged anything here (seed 6007052).
    let mut storage = MemoryStorage::new();
    storage.recover().expect("fresh");
    let mut before = driver(1);
    before.on_submit(write(9, 1));
    let turn = before.end_turn(&LinksUp);
    run_jobs(&mut storage, [StorageJob::Run(turn.storage)]).expect("its life before");
    let mut driver =
        ShardDriver::new(Shard::new(NODES[1], CoreConfig::default()), DriverConfig::for_tick(100_000), NODES);
    let reset = driver.rebuild_group(plain_spec(G, &NODES, 1), Box::new(Counter(0))).expect("rebuilt");
    let StorageJob::ResetGroup(group, superblock) = &reset else { panic!("a reset, not {reset:?}") };
    assert_eq!(*group, G);
    assert!(superblock.recovering, "H1: a rebuilt voter's superblock says it recovers");
    assert!(driver.replica(G).is_some_and(|replica| replica.is_recovering()));
    run_jobs(&mut storage, [reset]).expect("the reset");
    storage.crash();
    let recovered = storage.recover().expect("after the crash");
    let data = recovered.groups.get(&G).cloned().expect("H1: the reset leaves a trace of the group");
    assert!(data.entries.is_empty() && data.snapshot.is_none(), "its leftovers went: {data:?}");
    let mut restarted = Shard::new(NODES[1], CoreConfig::default());
    restarted.recover_group(plain_spec(G, &NODES, 1), Box::new(Counter(0)), data).expect("recovered");
    let replica = restarted.replica(G).expect("hosted");
    assert!(replica.is_recovering() && !replica.is_primary(), "H1: it recovers again, it does not vote");
}
