//! D3 on three shards driven by hand: a member that fell behind the
//! primary's checkpoint gets the state streamed in chunks from a
//! point-in-time view, staged by its state machine and installed in one
//! step; it never holds more than the stream's header in memory, a lost
//! chunk costs one chunk, writes go on meanwhile (the primary keeps
//! checkpointing and serves what followed the streamed state from the
//! stream's tail), and a stream whose size passes the whole-snapshot cap
//! is not refused. The simulator covers the same under faults, crashes of
//! the receiver mid-transfer included (`--state disk`, docs/simulator.md).

mod common;
use common::plain_spec;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use cohort_core::driver::ApplyJob;
use cohort_core::{CoreConfig, Durability, Effect, Shard, StateExport, StateMachine, Work};
use cohort_messages::{
    ClientId, CommitEntry, CommitReplyEntry, GroupId, Message, NodeId, Op, Request, RequestKind, RequestNumber,
};

const G: GroupId = GroupId(9);
const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const CHUNK_BYTES: usize = 64;

/// What a test sees of a state machine's stream work.
#[derive(Clone, Copy, Default)]
struct Seen {
    /// Bytes handed to `import_write`.
    staged_bytes: u64,
    /// Streams installed.
    installed: u64,
    /// The state machine names its lineage (its state is append-only).
    lineage: bool,
    /// The state machine offers no export: it is sent whole.
    no_export: bool,
    /// D2: the state machine applies (and D3 stages) on the apply worker.
    off_shard: bool,
    /// D3: `import_write` fails at this staged chunk (counted from 1).
    fail_stage_at: Option<u64>,
    /// D3: chunks `import_write` was called with.
    stage_calls: u64,
}

/// A log of every operation applied (so the state grows with the writes),
/// kept "on disk" at each checkpoint: the checkpoint is what an export
/// reads and what staging replaces.
struct Appends {
    /// Appends since the state was last replaced: the lineage (D3).
    lineage: u64,
    applied: Vec<u8>,
    checkpoint: Option<(Bytes, Bytes)>,
    staging: Option<(Bytes, Vec<u8>)>,
    seen: Arc<Mutex<Seen>>,
}

impl Appends {
    fn new(seen: Arc<Mutex<Seen>>) -> Appends {
        Appends { lineage: 1, applied: Vec::new(), checkpoint: None, staging: None, seen }
    }
}

/// The checkpoint's bytes, `CHUNK_BYTES / 2` at most per chunk (a state
/// machine may cut its chunks shorter than cohort allows).
struct View {
    record: Bytes,
    state: Bytes,
    lineage: Option<u64>,
}

impl StateExport for View {
    fn record(&self) -> Bytes {
        self.record.clone()
    }
    fn size_bytes(&self) -> u64 {
        self.state.len() as u64
    }
    fn lineage(&self) -> Bytes {
        self.lineage.map_or_else(Bytes::new, |lineage| Bytes::copy_from_slice(&lineage.to_le_bytes()))
    }
    fn read(&mut self, offset_bytes: u64, size_max_bytes: usize) -> Result<Option<Bytes>, String> {
        let start = offset_bytes as usize;
        let end = (start + size_max_bytes.min(CHUNK_BYTES / 2)).min(self.state.len());
        Ok((start < end).then(|| self.state.slice(start..end)))
    }
}

impl StateMachine for Appends {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        self.applied.extend_from_slice(operation);
        Bytes::copy_from_slice(&(self.applied.len() as u64).to_le_bytes())
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.applied)
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.applied)
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.applied = snapshot.to_vec();
        self.lineage += 1;
        Ok(())
    }
    fn durability(&self) -> Durability {
        Durability::Persistent
    }
    fn apply_off_shard(&self) -> bool {
        self.seen.lock().expect("one thread").off_shard
    }
    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        self.checkpoint = Some((Bytes::copy_from_slice(record), Bytes::copy_from_slice(&self.applied)));
        Ok(())
    }
    fn checkpointed(&self) -> Option<Bytes> {
        self.checkpoint.as_ref().map(|(record, _)| record.clone())
    }
    fn export(&mut self) -> Result<Option<Box<dyn StateExport>>, String> {
        if self.seen.lock().expect("one thread").no_export {
            return Ok(None);
        }
        let (record, state) = self.checkpoint.clone().ok_or("no checkpoint")?;
        let lineage = self.seen.lock().expect("one thread").lineage.then_some(self.lineage);
        Ok(Some(Box::new(View { record, state, lineage })))
    }
    fn import_begin(&mut self, key: &[u8]) -> Result<(), String> {
        if self.staging.as_ref().is_none_or(|(staged, _)| staged[..] != *key) {
            self.staging = Some((Bytes::copy_from_slice(key), Vec::new()));
        }
        Ok(())
    }
    fn import_write(&mut self, offset_bytes: u64, chunk: &[u8]) -> Result<(), String> {
        {
            let mut seen = self.seen.lock().expect("one thread");
            seen.stage_calls += 1;
            if seen.fail_stage_at == Some(seen.stage_calls) {
                return Err("the disk refused the chunk".into());
            }
        }
        let (_, staged) = self.staging.as_mut().ok_or("nothing staged")?;
        assert_eq!(offset_bytes, staged.len() as u64, "chunks are staged in order");
        staged.extend_from_slice(chunk);
        self.seen.lock().expect("one thread").staged_bytes += chunk.len() as u64;
        Ok(())
    }
    fn import_staged(&self) -> Option<(Bytes, u64)> {
        self.staging.as_ref().map(|(key, staged)| (key.clone(), staged.len() as u64))
    }
    fn import_finish(&mut self, record: &[u8]) -> Result<(), String> {
        let (_, staged) = self.staging.take().ok_or("nothing staged")?;
        self.applied = staged.clone();
        self.lineage += 1;
        self.checkpoint = Some((Bytes::copy_from_slice(record), Bytes::from(staged)));
        self.seen.lock().expect("one thread").installed += 1;
        Ok(())
    }
}

#[derive(Debug)]
enum Frame {
    Message(Message),
    Commits(Vec<CommitEntry>),
    Replies(Vec<CommitReplyEntry>),
}

/// Three shards with flushes that complete at once and an in-order
/// network; frames to a node in `cut` are dropped.
struct Cluster {
    shards: Vec<Shard>,
    seen: Vec<Arc<Mutex<Seen>>>,
    now: u64,
    queue: VecDeque<(NodeId, NodeId, Frame)>,
    cut: Vec<NodeId>,
    next_request: u64,
    /// Chunks delivered to node 3, and how many of them to drop (by
    /// their number among all chunks sent to it).
    chunks_to_3: u64,
    drop_chunk_to_3: Option<u64>,
    /// Chunks to node 3 wait here and go one per tick (a slow link).
    slow: Option<VecDeque<(NodeId, Message)>>,
    /// The most operation bytes node 1 sent node 3 in Prepares in one turn.
    prepare_bytes_to_3_max: u64,
    /// The most chunk requests node 3 sent in one turn.
    chunk_requests_of_3_max: usize,
    /// D3: chunks node 3 lent to its apply worker to stage, done at the
    /// next tick (runs of ops are applied at once).
    staging: Vec<(NodeId, ApplyJob)>,
    /// D3: chunks delivered to node 3 while one of its chunks was away.
    chunks_to_3_while_staging: u64,
}

fn config() -> CoreConfig {
    config_with_tail(CoreConfig::default().state_transfer_log_bytes_max)
}

/// The tests' config, the stream's tail held to `tail_bytes_max`.
fn config_with_tail(tail_bytes_max: u64) -> CoreConfig {
    CoreConfig {
        snapshot_interval_bytes: 1024,
        state_transfer_log_bytes_max: tail_bytes_max,
        snapshot_interval_ops: 16,
        state_chunk_size_bytes: CHUNK_BYTES,
        // Smaller than the state streamed: the whole-snapshot cap does
        // not apply to streams.
        state_transfer_size_max_bytes: cohort_messages::STATE_CHUNK_SIZE_MAX_BYTES as u64,
        // These tests are of streams: the primary keeps no backlog, so a
        // member behind its checkpoint takes one (the backlog's own tests
        // set it).
        backlog_size_max_bytes: 0,
        ..CoreConfig::default()
    }
}

/// The tests' config with a backlog of `backlog_bytes_max` per shard.
fn config_with_backlog(backlog_bytes_max: u64) -> CoreConfig {
    CoreConfig { backlog_size_max_bytes: backlog_bytes_max, ..config() }
}

impl Cluster {
    /// Three shards of `config`; `lineage`: the state machines name theirs.
    fn with(config: CoreConfig, lineage: bool) -> Cluster {
        Cluster::with_seen(config, Seen { lineage, ..Seen::default() })
    }

    /// Three shards of `config`, their state machines as `seen` says.
    fn with_seen(config: CoreConfig, seen: Seen) -> Cluster {
        let mut cluster = Cluster {
            shards: Vec::new(),
            seen: Vec::new(),
            now: 0,
            queue: VecDeque::new(),
            cut: Vec::new(),
            next_request: 1,
            chunks_to_3: 0,
            drop_chunk_to_3: None,
            slow: None,
            prepare_bytes_to_3_max: 0,
            chunk_requests_of_3_max: 0,
            staging: Vec::new(),
            chunks_to_3_while_staging: 0,
        };
        for (me, node) in NODES.iter().enumerate() {
            let seen = Arc::new(Mutex::new(Seen { staged_bytes: 0, installed: 0, stage_calls: 0, ..seen }));
            let mut shard = Shard::new(*node, config.clone());
            shard
                .create_group(plain_spec(G, &NODES, me as u8), Box::new(Appends::new(Arc::clone(&seen))))
                .expect("created");
            cluster.shards.push(shard);
            cluster.seen.push(seen);
        }
        for node in NODES {
            cluster.drain(node);
        }
        cluster.deliver_all();
        cluster
    }

    fn shard(&mut self, node: NodeId) -> &mut Shard {
        &mut self.shards[node.0 as usize - 1]
    }

    fn drain(&mut self, node: NodeId) {
        loop {
            let effects = self.shard(node).drain_effects();
            if effects.is_empty() {
                break;
            }
            let prepare_bytes_to_3: u64 = effects
                .iter()
                .filter_map(|effect| match effect {
                    Effect::Send { to, message: Message::Prepare(prepare) } if *to == NODES[2] && node == NODES[0] => {
                        Some(prepare.entry.operation.len() as u64)
                    }
                    _ => None,
                })
                .sum();
            self.prepare_bytes_to_3_max = self.prepare_bytes_to_3_max.max(prepare_bytes_to_3);
            if node == NODES[2] {
                let requests = effects
                    .iter()
                    .filter(|effect| matches!(effect, Effect::Send { message: Message::RequestStateTransfer(_), .. }))
                    .count();
                self.chunk_requests_of_3_max = self.chunk_requests_of_3_max.max(requests);
            }
            for effect in effects {
                match effect {
                    Effect::Flush { id } => self.shard(node).on_flushed(id),
                    Effect::Send { to, message } => self.queue.push_back((node, to, Frame::Message(message))),
                    Effect::SendCommitBatch { to, entries } => {
                        self.queue.push_back((node, to, Frame::Commits(entries)))
                    }
                    Effect::SendCommitReplyBatch { to, entries } => {
                        self.queue.push_back((node, to, Frame::Replies(entries)))
                    }
                    Effect::Apply { group, id, work: work @ Work::Stage { .. }, state } => {
                        self.staging.push((node, ApplyJob { group, id, work, state }));
                    }
                    Effect::Apply { group, id, work, mut state } => {
                        let mut state = state.take().expect("a lent state machine");
                        let done = cohort_core::work_on(state.as_mut(), &work);
                        self.shard(node).on_applied(group, id, state, done);
                    }
                    _ => {}
                }
            }
        }
        self.shards[node.0 as usize - 1].invariants();
    }

    fn deliver_all(&mut self) {
        while let Some((from, to, frame)) = self.queue.pop_front() {
            if self.cut.contains(&to) {
                continue;
            }
            if let Frame::Message(Message::StateChunk(chunk)) = &frame
                && to == NODES[2]
            {
                let streamed = !self.seen[2].lock().expect("one thread").no_export;
                assert!(!streamed || chunk.chunk.len() <= CHUNK_BYTES, "D3: chunks of the configured size");
                self.chunks_to_3 += 1;
                self.chunks_to_3_while_staging += u64::from(self.staging.iter().any(|(node, _)| *node == NODES[2]));
                if self.drop_chunk_to_3 == Some(self.chunks_to_3) {
                    continue;
                }
                if let Some(slow) = &mut self.slow {
                    slow.push_back((from, Message::StateChunk(chunk.clone())));
                    continue;
                }
            }
            match frame {
                Frame::Message(message) => self.shard(to).on_message(from, message),
                Frame::Commits(entries) => self.shard(to).on_commit_entries(from, &entries),
                Frame::Replies(entries) => self.shard(to).on_commit_reply_entries(from, &entries),
            }
            self.drain(to);
            self.check_memory();
        }
    }

    /// D3: the receiver never buffers more than the stream's header (a
    /// whole snapshot is buffered, as it always was).
    fn check_memory(&self) {
        if self.seen[2].lock().expect("one thread").no_export {
            return;
        }
        let footprint = self.shards[2].footprint();
        assert!(footprint.state_transfer_bytes < 4096, "node 3 buffers {footprint:?}");
    }

    fn ticks(&mut self, n: u64) {
        for _ in 0..n {
            for (node, mut job) in std::mem::take(&mut self.staging) {
                let mut state = job.state.take().expect("a lent state machine");
                let done = cohort_core::work_on(state.as_mut(), &job.work);
                self.shard(node).on_applied(job.group, job.id, state, done);
                self.drain(node);
            }
            self.deliver_all();
            if let Some((from, chunk)) = self.slow.as_mut().and_then(VecDeque::pop_front) {
                self.shard(NODES[2]).on_message(from, chunk);
                self.drain(NODES[2]);
            }
            self.now += 1;
            for node in NODES {
                let now = self.now;
                self.shard(node).on_tick(now);
                self.drain(node);
            }
            self.deliver_all();
        }
    }

    /// A write of `size` bytes to node 1 (request 1 is the registration).
    fn write(&mut self, size: usize) {
        let request = RequestNumber(self.next_request);
        self.next_request += 1;
        let mut operation = BytesMut::new();
        if request.0 > 1 {
            operation.put_bytes(request.0 as u8, size);
        }
        let kind = RequestKind::Write;
        self.shard(NODES[0]).on_request(Request {
            client: ClientId(5),
            request,
            group: G,
            kind,
            operation: operation.freeze(),
        });
        self.drain(NODES[0]);
        self.deliver_all();
    }

    fn state(&self, node: NodeId) -> Bytes {
        self.shards[node.0 as usize - 1].replica(G).expect("hosted").state_machine().expect("applied inline").read(b"")
    }

    /// Node 3 cut off while the group writes past several checkpoints.
    fn behind() -> Cluster {
        Cluster::behind_with(config(), false)
    }

    fn behind_with(config: CoreConfig, lineage: bool) -> Cluster {
        Cluster::behind_seen(config, Seen { lineage, ..Seen::default() })
    }

    /// [`Cluster::behind`] with state machines as `seen` says.
    fn behind_seen(config: CoreConfig, seen: Seen) -> Cluster {
        let mut cluster = Cluster::with_seen(config, seen);
        cluster.write(0);
        cluster.cut.push(NODES[2]);
        for _ in 0..100 {
            cluster.write(40);
        }
        assert!(cluster.shards[0].replica(G).expect("hosted").log_base() > Op(64), "the primary checkpointed");
        cluster.cut.clear();
        cluster
    }
}

#[test]
fn d3_a_member_behind_the_checkpoint_gets_the_state_streamed_in_chunks() {
    let mut cluster = Cluster::behind();
    cluster.ticks(200);
    let state = cluster.state(NODES[0]);
    assert!(state.len() > 3000, "the state spans many chunks");
    assert_eq!(cluster.state(NODES[2]), state, "node 3 caught up");
    let seen = cluster.seen[2].lock().expect("one thread");
    assert_eq!(seen.installed, 1, "one stream installed");
    let metrics = cluster.shards[2].metrics();
    assert_eq!(metrics.state_streams_installed, 1);
    assert_eq!(cluster.shards[0].metrics().state_transfer_failures, 0);
    // What node 3 staged is the primary's checkpoint, sent once.
    assert!(seen.staged_bytes <= state.len() as u64);
}

#[test]
fn d3_a_lost_chunk_costs_one_chunk() {
    let mut whole = Cluster::behind();
    whole.ticks(200);
    let sent_whole = whole.shards[0].metrics().state_chunk_bytes_sent;
    let mut cut = Cluster::behind();
    cut.drop_chunk_to_3 = Some(30);
    cut.ticks(200);
    assert_eq!(cut.state(NODES[2]), cut.state(NODES[0]), "node 3 caught up");
    let sent_cut = cut.shards[0].metrics().state_chunk_bytes_sent;
    assert!(sent_cut > sent_whole, "the lost chunk was sent again");
    assert!(
        sent_cut - sent_whole <= CHUNK_BYTES as u64,
        "D3: {sent_cut} bytes against {sent_whole}: more than one chunk again"
    );
    assert_eq!(cut.seen[2].lock().expect("one thread").installed, 1, "installed once, not started over");
}

#[test]
fn d3_writes_go_on_while_a_stream_is_served_and_the_tail_joins_it() {
    let mut cluster = Cluster::behind();
    // A slow link: writes between the receiver's chunks, so the primary
    // checkpoints several times while it streams.
    cluster.slow = Some(VecDeque::new());
    let base_before = cluster.shards[0].replica(G).expect("hosted").log_base();
    for _ in 0..300 {
        cluster.ticks(1);
        cluster.write(40);
    }
    assert_eq!(
        cluster.seen[2].lock().expect("one thread").installed,
        1,
        "the stream was installed before the last writes"
    );
    assert!(
        cluster.shards[0].replica(G).expect("hosted").log_base() > base_before,
        "the primary checkpointed meanwhile"
    );
    cluster.ticks(300);
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up to the last write");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 1, "one stream, then the tail and the log");
}

#[test]
fn d3_a_stream_whose_tail_overflows_goes_on_in_a_later_view_of_its_lineage() {
    // A tail of about two checkpoints' writes: the stream is dropped while
    // the slow link carries it, and the receiver goes on in the next view
    // where it stopped.
    let mut cluster = Cluster::behind_with(config_with_tail(1024), true);
    cluster.slow = Some(VecDeque::new());
    for tick in 0..900 {
        cluster.ticks(1);
        if tick % 3 == 0 {
            cluster.write(40);
        }
    }
    cluster.ticks(300);
    let state = cluster.state(NODES[0]);
    assert_eq!(cluster.state(NODES[2]), state, "node 3 caught up");
    assert!(cluster.shards[0].metrics().state_streams_opened >= 2, "the stream was dropped and opened again");
    let seen = cluster.seen[2].lock().expect("one thread");
    assert_eq!(seen.installed, 1);
    assert!(
        seen.staged_bytes <= state.len() as u64,
        "D3: no byte staged twice: {} of {}",
        seen.staged_bytes,
        state.len()
    );
}

#[test]
fn d3_without_a_lineage_an_overflowing_tail_starts_the_stream_over() {
    // The same run without a lineage: every new view starts from its first
    // byte, and the transfer stages the state more than once.
    let mut cluster = Cluster::behind_with(config_with_tail(1024), false);
    cluster.slow = Some(VecDeque::new());
    for tick in 0..300 {
        cluster.ticks(1);
        if tick % 3 == 0 {
            cluster.write(40);
        }
    }
    let state = cluster.state(NODES[0]);
    assert!(cluster.shards[0].metrics().state_streams_opened > 2, "the stream was dropped and opened again");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 0, "it never caught up with the writes");
    assert!(
        cluster.seen[2].lock().expect("one thread").staged_bytes > state.len() as u64 / 2,
        "started over at least once"
    );
}

#[test]
fn d1_a_state_sent_whole_in_several_chunks_arrives_while_writes_go_on() {
    // A persistent state machine with no export is sent whole, encoded at
    // the applied point and kept while the log joins it: over 4 MiB, so it
    // takes two chunks, with writes between them.
    let config = CoreConfig { snapshot_interval_bytes: 1 << 20, state_transfer_size_max_bytes: 64 << 20, ..config() };
    let mut cluster = Cluster::with_seen(config, Seen { no_export: true, ..Seen::default() });
    cluster.write(0);
    cluster.cut.push(NODES[2]);
    for _ in 0..90 {
        cluster.write(64 << 10);
    }
    cluster.cut.clear();
    cluster.slow = Some(VecDeque::new());
    let behind = cluster.state(NODES[0]).len();
    assert!(behind > 5 << 20, "more than one chunk");
    for _ in 0..60 {
        cluster.ticks(1);
        cluster.write(1 << 10);
    }
    // Still writing: the transfer finished among the writes.
    assert!(cluster.state(NODES[2]).len() >= behind, "node 3 got the state while the writes went on");
    cluster.ticks(300);
    let (primary, node_3) = (cluster.state(NODES[0]), cluster.state(NODES[2]));
    assert!(node_3 == primary, "node 3 caught up: {} bytes of {}", node_3.len(), primary.len());
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 0, "sent whole, not streamed");
}

#[test]
fn d3_the_tail_lets_go_of_what_the_receiver_took_and_the_stream_goes_once_it_caught_up() {
    // Writes go on while node 3 installs the stream and catches up: the
    // primary drops the tail's front as node 3's repairs move on, so its
    // tail never holds all it dropped since the stream opened, and the
    // stream goes once node 3's repairs come from the log.
    let mut cluster = Cluster::behind();
    cluster.slow = Some(VecDeque::new());
    let mut held_max = 0;
    let mut held_while_installed = Vec::new();
    for _ in 0..400 {
        cluster.ticks(1);
        cluster.write(40);
        let held = cluster.shards[0].footprint().served_tail_bytes;
        held_max = held_max.max(held);
        if cluster.seen[2].lock().expect("one thread").installed == 1 {
            held_while_installed.push(held);
        }
    }
    cluster.ticks(300);
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up to the last write");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 1, "one stream, then the tail and the log");
    let dropped = 400 * 40;
    assert!(held_max > 0 && held_max < dropped, "the tail held {held_max} bytes at most of {dropped} written");
    let held_at_install = held_while_installed.first().copied().unwrap_or(0);
    assert!(
        held_while_installed.iter().all(|held| *held <= held_at_install),
        "the tail only shrank once node 3 installed the stream: {held_while_installed:?}"
    );
    assert_eq!(cluster.shards[0].footprint().served_tail_bytes, 0, "the stream went once node 3 caught up");
}

#[test]
fn d3_a_repair_answer_carries_at_most_its_size_of_operations() {
    // Big writes while node 3 fetches the stream: the tail holds more
    // than one repair answer may carry (8 MiB of operations), so node 3
    // takes it in several answers, none of them past the bound by more
    // than the entry that crosses it.
    let mut cluster = Cluster::behind();
    cluster.slow = Some(VecDeque::new());
    let size = 256 * 1024;
    for _ in 0..60 {
        cluster.write(size);
        cluster.ticks(1);
    }
    cluster.slow = None;
    let (mut installed_at, mut caught_up_at) = (None, None);
    for tick in 0..400 {
        cluster.ticks(1);
        if installed_at.is_none() && cluster.seen[2].lock().expect("one thread").installed == 1 {
            installed_at = Some(tick);
        }
        if caught_up_at.is_none() && cluster.state(NODES[2]) == cluster.state(NODES[0]) {
            caught_up_at = Some(tick);
        }
    }
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 1, "one stream, then the tail");
    // The first request after the install waits for its repair deadline
    // (5 ticks); a cut answer is followed by the next request at once, not
    // a deadline later (which took until 10 ticks after the install).
    let (installed_at, caught_up_at) = (installed_at.expect("installed"), caught_up_at.expect("caught up"));
    assert!(caught_up_at <= installed_at + 6, "installed at tick {installed_at}, caught up at {caught_up_at}");
    let bound = (8 << 20) + size as u64;
    assert!(
        cluster.prepare_bytes_to_3_max > 2 * size as u64 && cluster.prepare_bytes_to_3_max <= bound,
        "{} bytes of Prepares in one turn (bound {bound})",
        cluster.prepare_bytes_to_3_max
    );
}

#[test]
fn d1_a_member_back_from_a_short_stop_repairs_from_the_backlog_not_a_stream() {
    // Node 3 missed 100 writes of 40 bytes, past several of the primary's
    // checkpoints: the primary kept what they dropped for it (it had
    // acknowledged the first write), so the log's repair path brings it
    // back, and nothing of the state is streamed.
    let mut cluster = Cluster::behind_with(config_with_backlog(1 << 20), true);
    let held = cluster.shards[0].footprint().backlog_bytes;
    assert!(held >= 64 * 40, "the primary kept what its checkpoints dropped: {held} bytes");
    cluster.ticks(100);
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up");
    let seen = *cluster.seen[2].lock().expect("one thread");
    assert_eq!((seen.installed, seen.staged_bytes), (0, 0), "no state was streamed");
    assert_eq!(cluster.shards[0].metrics().state_chunks_sent, 0);
    assert!(cluster.shards[0].metrics().backlog_bytes_served >= 64 * 40);
    for _ in 0..40 {
        cluster.write(40);
    }
    assert_eq!(cluster.shards[0].footprint().backlog_bytes, 0, "the backlog went once node 3 caught up");
}

#[test]
fn d1_a_gap_past_the_backlog_budget_takes_a_stream_and_the_backlog_keeps_within_it() {
    // A budget of 1,000 bytes for 4,000 dropped: the backlog keeps the
    // newest entries, which no longer join node 3's log, so node 3 gets
    // the state streamed, as without a backlog.
    let mut cluster = Cluster::with(config_with_backlog(1000), true);
    cluster.write(0);
    cluster.cut.push(NODES[2]);
    let mut held_max = 0;
    for _ in 0..100 {
        cluster.write(40);
        held_max = held_max.max(cluster.shards[0].footprint().backlog_bytes);
    }
    cluster.cut.clear();
    assert!(held_max > 0 && held_max <= 1000, "the backlog held {held_max} bytes, budget 1000");
    cluster.ticks(200);
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 1, "its gap took a stream");
}

#[test]
fn d1_a_member_that_never_confirmed_the_view_is_kept_nothing() {
    // Node 3 was cut off before it acknowledged anything: the primary
    // knows nothing of its log, so it keeps no backlog for it.
    let mut cluster = Cluster::with(config_with_backlog(1 << 20), true);
    cluster.cut.push(NODES[2]);
    for _ in 0..100 {
        cluster.write(40);
    }
    assert_eq!(cluster.shards[0].footprint().backlog_bytes, 0);
}

#[test]
fn d3_a_receiver_asks_for_the_next_chunks_ahead_and_each_goes_once() {
    // Once the header is in, node 3 keeps two chunks asked for (the
    // sender reads and sends the next while node 3 stages this one), a
    // chunk apart by the size of the chunks it takes (this state machine
    // cuts them at half the configured size): no chunk is sent in vain.
    let mut cluster = Cluster::behind();
    cluster.ticks(200);
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 1);
    assert_eq!(cluster.chunk_requests_of_3_max, 2, "two chunks asked for at once, never more");
    let metrics = cluster.shards[0].metrics();
    assert_eq!(metrics.state_chunk_bytes_resent, 0, "no chunk sent twice");
    assert_eq!(
        metrics.state_chunk_bytes_sent,
        cluster.shards[2].metrics().state_chunk_bytes_taken,
        "every chunk sent was taken"
    );
}

#[test]
fn d3_a_state_machine_that_applies_off_the_shard_stages_there_while_the_next_chunks_arrive() {
    // Each chunk goes to the apply worker to be staged (it comes back at
    // the next tick); the chunks asked for ahead that arrive meanwhile are
    // held, not dropped, and taken once the state machine is back: every
    // chunk is sent once and the stream installs as inline.
    let mut cluster = Cluster::behind_seen(config(), Seen { off_shard: true, ..Seen::default() });
    cluster.ticks(300);
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 1);
    let metrics = cluster.shards[2].metrics();
    assert!(metrics.state_chunks_lent > 10, "the chunks were staged on the worker: {metrics:?}");
    assert!(cluster.chunks_to_3_while_staging > 10, "chunks arrived while one was staged");
    let sent = cluster.shards[0].metrics();
    assert_eq!(sent.state_chunk_bytes_resent, 0, "no chunk sent twice");
    assert_eq!(sent.state_chunk_bytes_sent, metrics.state_chunk_bytes_taken, "every chunk sent was taken");
    assert_eq!(cluster.chunk_requests_of_3_max, 2, "two chunks asked for at once, never more");
}

#[test]
fn d3_a_chunk_the_worker_failed_to_stage_drops_the_transfer_and_the_next_resumes() {
    let seen = Seen { off_shard: true, fail_stage_at: Some(5), ..Seen::default() };
    let mut cluster = Cluster::behind_seen(config(), seen);
    cluster.ticks(400);
    assert_eq!(cluster.state(NODES[2]), cluster.state(NODES[0]), "node 3 caught up");
    assert_eq!(cluster.seen[2].lock().expect("one thread").installed, 1);
    assert_eq!(cluster.shards[2].metrics().state_transfer_failures, 1, "the failure was counted");
}
