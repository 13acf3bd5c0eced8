//! The application's state machine, one per group.
//!
//! cohort calls [`StateMachine::apply`] once per committed op, in op order, on
//! every member; a retried client request is answered from the client table
//! and never applied twice. The state machine must be deterministic: the same
//! ops in the same order give the same state and results on every member.
//!
//! D1: a state machine either lives in memory ([`Durability::InMemory`],
//! the default: cohort encodes it whole with [`StateMachine::snapshot`] at
//! every snapshot point and rebuilds it with [`StateMachine::restore`] plus
//! a replay of the log after a restart) or keeps its state on disk itself
//! ([`Durability::Persistent`]: a storage engine, segment files). A
//! persistent one is asked, at each snapshot point, to make what it applied
//! durable together with a small record of cohort's
//! ([`StateMachine::checkpoint`]); cohort then drops its log up to that
//! op and, after a restart, replays only what lies above the record the
//! state machine reports ([`StateMachine::checkpointed`]). Its state is
//! never encoded whole except to serve a state transfer. The contract, with
//! what is durable when, is in docs/embedding.md ("State on disk").
//!
//! D2: a state machine whose apply does I/O or takes long (a storage
//! engine's transaction) says so with [`StateMachine::apply_off_shard`];
//! the node then applies its committed runs on the shard's apply worker
//! thread, so that the other groups of the shard go on meanwhile. That is
//! why a state machine is `Send`: it is lent to that thread for the length
//! of one run and comes back before cohort calls it again.

use bytes::Bytes;
use cohort_messages::op_batch::{OpBatch, OpResults};
use cohort_messages::{NodeId, Op};

/// D2: a state machine lent to the shard's apply worker for one run
/// ([`crate::effect::Effect::Apply`]): the shell takes it, applies the run
/// and hands it back with the results. A clone or a recording of the job
/// carries no state machine (a clone is a record of the job, not a second
/// copy of the state).
#[derive(Default)]
pub struct LentState(Option<Box<dyn StateMachine>>);

impl LentState {
    /// Lend `state`.
    pub fn new(state: Box<dyn StateMachine>) -> LentState {
        LentState(Some(state))
    }

    /// The state machine, once: `None` for a clone or a second take.
    pub fn take(&mut self) -> Option<Box<dyn StateMachine>> {
        self.0.take()
    }

    /// True while it holds the state machine.
    pub fn holds(&self) -> bool {
        self.0.is_some()
    }
}

impl Clone for LentState {
    fn clone(&self) -> LentState {
        LentState(None)
    }
}

impl PartialEq for LentState {
    /// Jobs compare by what they apply; who holds the state does not count.
    fn eq(&self, _other: &LentState) -> bool {
        true
    }
}

impl Eq for LentState {}

impl std::fmt::Debug for LentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.holds() { "LentState(held)" } else { "LentState(record)" })
    }
}

/// D2: apply one run the way an inline apply does (a run of one through
/// [`StateMachine::apply`], a longer one through
/// [`StateMachine::apply_batch`]); the apply worker of every shell calls
/// this. Panics if `apply_batch` returns a wrong number of results (a
/// broken state machine: its replica cannot go on).
pub fn apply_run(state: &mut dyn StateMachine, ops: &[(Op, Bytes)]) -> Vec<Bytes> {
    let results = match ops {
        // K5: each write is a batch of ops, applied as one.
        _ if state.takes_op_batches() => {
            ops.iter().map(|(op, operation)| apply_op_batch(state, *op, operation)).collect()
        }
        // Not a batch group (above): the op alone.
        [(op, operation)] => vec![state.apply(*op, operation)],
        _ => state.apply_batch(ops),
    };
    assert_eq!(results.len(), ops.len(), "StateMachine::apply_batch returns one result per op");
    results
}

/// Apply one committed write the way [`apply_run`] applies a run of one.
pub(crate) fn apply_one(state: &mut dyn StateMachine, op: Op, operation: &Bytes) -> Bytes {
    if state.takes_op_batches() { apply_op_batch(state, op, operation) } else { state.apply(op, operation) }
}

/// K5: apply one committed write of a state machine that takes op batches:
/// its ops through [`StateMachine::apply_op_batch`], their results encoded
/// as one op batch (the entry's result, kept in the client table and sent
/// in the Reply). An operation that is no op batch (the primary refuses
/// those at admission and backups refuse Prepares of them, so only a
/// forged log holds one) applies nothing on any member, and its result is
/// empty. Panics if `apply_op_batch` pushes a wrong number of results (a
/// broken state machine).
pub fn apply_op_batch(state: &mut dyn StateMachine, op: Op, operation: &Bytes) -> Bytes {
    let Ok(batch) = OpBatch::parse(operation) else { return Bytes::new() };
    let mut results = OpResults::with_count(batch.len());
    state.apply_op_batch(op, batch, &mut results);
    assert_eq!(results.len(), batch.len(), "StateMachine::apply_op_batch pushes one result per op");
    // Results together larger than a Reply carries break the state
    // machine's contract; every member answers the same empty result.
    results.finish().unwrap_or_default()
}

/// D2, D3: what the apply worker does with a state machine lent to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Apply a run of committed ops, in op order ([`apply_run`]).
    Apply(Vec<(Op, Bytes)>),
    /// D3: stage one chunk of a streamed state transfer at `offset_bytes`
    /// ([`StateMachine::import_write`]): its write and sync run off the
    /// shard's thread, which reads the next chunk from its link meanwhile.
    Stage {
        /// Where the chunk starts in the staged stream.
        offset_bytes: u64,
        /// The chunk.
        chunk: Bytes,
    },
}

/// D2, D3: what the apply worker hands back with the state machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// One result per op of a [`Work::Apply`] run.
    Applied(Vec<Bytes>),
    /// What [`StateMachine::import_write`] returned for a [`Work::Stage`].
    Staged(Result<(), String>),
}

/// D2, D3: do `work` on a lent state machine, exactly as the shard's own
/// thread would have; the apply worker of every shell calls this.
pub fn work_on(state: &mut dyn StateMachine, work: &Work) -> Done {
    match work {
        Work::Apply(ops) => Done::Applied(apply_run(state, ops)),
        Work::Stage { offset_bytes, chunk } => Done::Staged(state.import_write(*offset_bytes, chunk)),
    }
}

/// D1: where a state machine keeps its state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Durability {
    /// In memory: cohort snapshots it whole and replays its log after a
    /// restart (the default).
    InMemory,
    /// On disk, the state machine's own: cohort asks it for checkpoints and
    /// replays only what lies above its newest durable one.
    Persistent,
}

/// A group's replicated state.
pub trait StateMachine: Send {
    /// Apply a committed operation and return its result.
    fn apply(&mut self, op: Op, operation: &[u8]) -> Bytes;

    /// D1: apply a run of committed operations, in op order, and return
    /// one result per op, in the same order. cohort hands over runs of
    /// ordinary writes (at most 64, no client twice); a state machine on a
    /// storage engine can write a run in one transaction. Default: `apply`
    /// for each.
    fn apply_batch(&mut self, ops: &[(Op, Bytes)]) -> Vec<Bytes> {
        ops.iter().map(|(op, operation)| self.apply(*op, operation)).collect()
    }

    /// K5: whether every write's operation is an op batch
    /// ([`cohort_messages::op_batch`]): many ops a client sent in one
    /// request, which enter the log as one entry at one op and are applied
    /// with [`StateMachine::apply_op_batch`]; the result is their results as
    /// an op batch. The primary refuses a write that is no op batch
    /// (`Rejected`), and admits each of its ops with
    /// [`StateMachine::admit`]. Fixed for a kind of state machine: its log
    /// is read by it. Default: false (each operation is one op).
    fn takes_op_batches(&self) -> bool {
        false
    }

    /// K5: apply the ops of one batch committed at `op`, in order, and push
    /// one result per op into `results`, in the same order (together at
    /// most `OPERATION_SIZE_MAX_BYTES`, what one Reply carries). Called
    /// only if [`StateMachine::takes_op_batches`]. The ops share the op
    /// number (an op of a batch is named by `(op, index)`); a state machine
    /// that skips ops at or below its applied point counts a batch once.
    /// `batch.iter()` borrows each op, `batch.iter_bytes()` slices it (no
    /// copy, for a state machine that keeps ops). Default: `apply` for
    /// each, with that op.
    fn apply_op_batch(&mut self, op: Op, batch: OpBatch<'_>, results: &mut OpResults) {
        for operation in batch.iter() {
            results.push(&self.apply(op, operation));
        }
    }

    /// Answer a read from the current state (V7); never changes state.
    fn read(&self, query: &[u8]) -> Bytes;

    /// Encode the whole state. In memory: at every snapshot point.
    /// Persistent: only to serve a state transfer to a lagging member.
    fn snapshot(&self) -> Bytes;

    /// Replace the whole state with a decoded snapshot (a state transfer,
    /// or in memory a restart). Persistent: the new state need not be
    /// durable before the [`StateMachine::checkpoint`] cohort asks for
    /// right after.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;

    /// D1: where this state machine keeps its state. Default: in memory.
    fn durability(&self) -> Durability {
        Durability::InMemory
    }

    /// D2: true if committed runs are to be applied off the shard's
    /// thread, on its apply worker: for a state machine whose apply does
    /// I/O or can take long, which would otherwise hold up every other
    /// group of the shard. Asked once, when the replica is hosted. While a
    /// run is away, the group's reads and writes wait for it (a read is
    /// answered once every op before it is applied), and so do its
    /// snapshots and state transfers; op order and exactly-once answers
    /// are as inline. It costs a hand-over between threads per run, so
    /// small in-memory states are better applied inline. D3: such a state
    /// machine also stages the chunks of a streamed transfer
    /// ([`StateMachine::import_write`]) on the worker, one at a time,
    /// while the shard receives the next. Default: false.
    fn apply_off_shard(&self) -> bool {
        false
    }

    /// D1 (persistent only): make durable, in one atomic step, the state as
    /// applied so far together with `record` (cohort's, a few hundred bytes
    /// per client of the group), and return once both are. A crash at any
    /// point leaves either the previous checkpoint or this one. `Err`
    /// leaves the previous one: cohort keeps its log and asks again at the
    /// next snapshot point.
    fn checkpoint(&mut self, record: &[u8]) -> Result<(), String> {
        let _ = record;
        Err("this state machine keeps its state in memory: it takes no checkpoint".into())
    }

    /// D1 (persistent only): the `record` of the newest durable checkpoint,
    /// `None` if there is none. After a restart the state must be exactly
    /// that checkpoint's: what was applied after it must be gone (cohort
    /// applies it again from its log). Called once, when the replica is
    /// hosted, on a state machine just made by the host's factory.
    fn checkpointed(&self) -> Option<Bytes> {
        None
    }

    /// D1 (persistent only): drop the whole state and any checkpoint,
    /// durably, before returning. Called when the replica starts empty: a
    /// new group, a re-created one (H3), or one whose state machine lost
    /// what cohort's log no longer holds (it is then rebuilt from the other
    /// members).
    fn clear(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// D3 (persistent only): a point-in-time view of the state at the
    /// newest checkpoint, to stream to a member that lags behind it.
    /// `Ok(None)` (the default): cohort sends [`StateMachine::snapshot`]
    /// whole instead, capped by `state_transfer_size_max_bytes`. The view
    /// must not change while it lives, whatever is applied or checkpointed
    /// after it (a read transaction of a storage engine, immutable files).
    fn export(&mut self) -> Result<Option<Box<dyn StateExport>>, String> {
        Ok(None)
    }

    /// D3 (persistent only): start staging a streamed state named `key`
    /// (cohort's, opaque, a few hundred bytes at most). If the staging
    /// holds a stream of this very key, keep it: the transfer resumes at
    /// its staged length ([`StateMachine::import_staged`]). Otherwise drop
    /// whatever is staged. Staging never touches the current state.
    fn import_begin(&mut self, key: &[u8]) -> Result<(), String> {
        let _ = key;
        Err("this state machine takes no streamed state (it exports none)".into())
    }

    /// D3: append `chunk`, which starts at `offset_bytes` of the stream
    /// (always the staged length so far), and make it durable before
    /// returning: a transfer cut here resumes after it. (Only the chunk
    /// must be: a record of the staged length written after it may wait
    /// for a later sync, so that [`StateMachine::import_staged`] after a
    /// power loss names fewer bytes, never more.)
    fn import_write(&mut self, offset_bytes: u64, chunk: &[u8]) -> Result<(), String> {
        let _ = (offset_bytes, chunk);
        Err("this state machine takes no streamed state".into())
    }

    /// D3: the key of the staged stream and its durable length, if any:
    /// after a restart, a transfer resumes from there.
    fn import_staged(&self) -> Option<(Bytes, u64)> {
        None
    }

    /// D3: replace the state with the whole staged stream, together with
    /// the checkpoint `record`, in one atomic, durable step (as
    /// [`StateMachine::checkpoint`]), and drop the staging. `Err` leaves
    /// the previous state and checkpoint.
    fn import_finish(&mut self, record: &[u8]) -> Result<(), String> {
        let _ = record;
        Err("this state machine takes no streamed state".into())
    }

    /// T3: whether the primary may propose the write `operation` that node
    /// `sender` sent (the authenticated peer it came from, or this node for
    /// a local submit). `members` are the group's voters. `Err` answers the
    /// request `Forbidden` with the reason, and nothing is proposed. The
    /// check runs on the primary before the op enters the log, so it may
    /// read the current state; it is not part of replication. Default:
    /// every write is admitted (a partition group's clients are checked at
    /// the client port).
    fn admit(&self, sender: NodeId, members: &[NodeId], operation: &[u8]) -> Result<(), String> {
        let _ = (sender, members, operation);
        Ok(())
    }
}

/// D3: a point-in-time view of a persistent state machine's state at its
/// newest checkpoint, read in chunks by a state transfer. The state
/// machine chooses the encoding; only its own `import_*` reads it.
pub trait StateExport {
    /// The checkpoint record of the state this view holds (what
    /// [`StateMachine::checkpoint`] was given).
    fn record(&self) -> Bytes;

    /// The encoded state's whole size.
    fn size_bytes(&self) -> u64;

    /// Views of one *lineage* share their bytes up to the shorter one's
    /// length: an append-only state (a log, a queue) whose later
    /// checkpoints only add bytes at the end, until something replaces it
    /// (a restore, an install), which starts a new lineage. A receiver
    /// that staged part of one view then goes on with a later view of the
    /// same lineage where it stopped, instead of starting over, so a
    /// transfer converges while writes go on. Name it so that no other
    /// state of this state machine ever had it (a random number drawn when
    /// the lineage starts). Default: empty, no lineage: only the same view
    /// resumes.
    fn lineage(&self) -> Bytes {
        Bytes::new()
    }

    /// The chunk that starts at `offset_bytes`, at most `size_max_bytes`
    /// long and at least one byte before the end. The same offset always
    /// gives the same chunk. `Ok(None)`: this view cannot start at that
    /// offset (only offsets of chunks it returned are sure to work), and
    /// the transfer starts again from the beginning.
    fn read(&mut self, offset_bytes: u64, size_max_bytes: usize) -> Result<Option<Bytes>, String>;
}
