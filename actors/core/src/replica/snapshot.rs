//! Snapshots and log truncation (V6).
//!
//! After `snapshot_interval_ops` applied ops (or `snapshot_interval_bytes` of
//! log), a member snapshots its state machine and client table at its
//! applied point, saves it, and drops the log up to it. The snapshot is also
//! what state transfer sends to a member that lags behind it.
//!
//! Encoding of `Snapshot::data` (little-endian): magic `b"COHS"`, format u8
//! (4), where the state is u8 (0: here, 1: held by a state machine that
//! keeps its state on disk, D1), state size u32, state bytes (none when
//! held), client count u32, then per client: id u128, registration op u64,
//! request u64, op u64, result size u32, result bytes; then the group's
//! membership when the snapshot was taken: incarnation u64, replication
//! quorum u8, member count u8, member node ids u64 each. Formats 1 to 3
//! were never released and are refused. It comes from the network in state
//! transfer, so decoding checks every length, and a transfer of a snapshot
//! whose state is held elsewhere is refused.
//!
//! D1: a persistent state machine's snapshot point is a *checkpoint*: cohort
//! asks the state machine to make its state durable together with a record
//! (magic `b"COHC"`, version u8 (1), op u64, view u32, then the snapshot
//! data above with its state held), and only then saves the same snapshot,
//! state held, in its own storage and drops its log up to the op. After a
//! restart the state machine's record, if it is at or past cohort's own
//! snapshot, is the snapshot the replica recovers from; one behind it means
//! the state machine lost what cohort's log no longer holds
//! ([`crate::ShardError::StateMachineBehind`]).
//!
//! The membership makes a snapshot self-describing: the snapshot a member
//! change saves at the seal is the first durable record of the new
//! incarnation, and a restart that finds it newer than the superblock (a
//! crash between the two) recovers into that incarnation.

use bytes::{BufMut, Bytes, BytesMut};
use cohort_messages::{ClientId, Incarnation, NodeId, Op, RequestNumber, View};

use super::Replica;
use super::stream::Served;
use crate::client_table::ClientEntry;
use crate::effect::Effect;
use crate::effects::Effects;
use crate::log::Log;
use crate::state_machine::{Durability, StateMachine};
use crate::storage::RecoveredGroup;
use crate::storage::Snapshot;

const MAGIC: &[u8; 4] = b"COHS";
const FORMAT: u8 = 4;
const STATE_HERE: u8 = 0;
const STATE_HELD: u8 = 1;
const CHECKPOINT_MAGIC: &[u8; 4] = b"COHC";
const CHECKPOINT_VERSION: u8 = 1;

/// Where a snapshot's state is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SnapshotState {
    /// In the snapshot: the encoded state machine.
    Here(Bytes),
    /// D1: held by a state machine that keeps its state on disk.
    Held,
}

/// The group's membership as a snapshot records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SnapshotMembership {
    /// The incarnation.
    pub incarnation: Incarnation,
    /// Its replication quorum.
    pub replication_quorum: u8,
    /// Its voting members.
    pub members: Vec<NodeId>,
}

/// Encode a state machine snapshot (`None`: held by the state machine,
/// D1), client table and membership.
pub(crate) fn encode(
    state: Option<&[u8]>,
    clients: &[(ClientId, ClientEntry)],
    membership: &SnapshotMembership,
) -> Bytes {
    let state_len = state.map_or(0, <[u8]>::len);
    let mut out = BytesMut::with_capacity(14 + state_len + clients.len() * 48);
    out.put_slice(MAGIC);
    out.put_u8(FORMAT);
    out.put_u8(if state.is_some() { STATE_HERE } else { STATE_HELD });
    out.put_u32_le(u32::try_from(state_len).expect("state snapshot over 4 GiB"));
    out.put_slice(state.unwrap_or_default());
    out.put_u32_le(clients.len() as u32);
    for (id, entry) in clients {
        out.put_u128_le(id.0);
        out.put_u64_le(entry.registered.0);
        out.put_u64_le(entry.request.0);
        out.put_u64_le(entry.op.0);
        out.put_u32_le(entry.result.len() as u32);
        out.put_slice(&entry.result);
    }
    out.put_u64_le(membership.incarnation.0);
    out.put_u8(membership.replication_quorum);
    out.put_u8(u8::try_from(membership.members.len()).expect("at most 64 members"));
    for member in &membership.members {
        out.put_u64_le(member.0);
    }
    out.freeze()
}

/// The membership a snapshot records (`None` for bad data).
pub(crate) fn snapshot_membership(data: &[u8]) -> Option<SnapshotMembership> {
    decode(data).ok()?.2
}

struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < len {
            return Err(format!("snapshot truncated: need {len} bytes, {} left", self.bytes.len()));
        }
        let (head, tail) = self.bytes.split_at(len);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// What a snapshot holds: state, clients, and membership (always there
/// since format 2).
type Decoded = (SnapshotState, Vec<(ClientId, ClientEntry)>, Option<SnapshotMembership>);

/// Decode; every length is checked against what is left.
pub(crate) fn decode(data: &[u8]) -> Result<Decoded, String> {
    let mut cursor = Cursor { bytes: data };
    if cursor.take(4)? != MAGIC {
        return Err("snapshot has a bad magic".into());
    }
    let format = cursor.take(1)?[0];
    if format != FORMAT {
        return Err(format!("snapshot format {format} is not {FORMAT}"));
    }
    let state_kind = cursor.take(1)?[0];
    let state_len = cursor.u32()? as usize;
    let state = match state_kind {
        STATE_HERE => SnapshotState::Here(Bytes::copy_from_slice(cursor.take(state_len)?)),
        STATE_HELD if state_len == 0 => SnapshotState::Held,
        STATE_HELD => return Err(format!("snapshot holds {state_len} state bytes of a state held elsewhere")),
        other => return Err(format!("snapshot state kind {other} is not {STATE_HERE} or {STATE_HELD}")),
    };
    let count = cursor.u32()? as usize;
    // Each client takes at least 44 bytes: refuse counts the data cannot hold.
    if count > cursor.bytes.len() / 44 {
        return Err(format!("snapshot claims {count} clients in {} bytes", cursor.bytes.len()));
    }
    let mut clients = Vec::with_capacity(count);
    for _ in 0..count {
        let id = ClientId(u128::from_le_bytes(cursor.array()?));
        let registered = Op(cursor.u64()?);
        let request = RequestNumber(cursor.u64()?);
        let op = Op(cursor.u64()?);
        let result_len = cursor.u32()? as usize;
        let result = Bytes::copy_from_slice(cursor.take(result_len)?);
        clients.push((id, ClientEntry { registered, request, op, result }));
    }
    let incarnation = Incarnation(cursor.u64()?);
    let replication_quorum = cursor.take(1)?[0];
    let member_count = usize::from(cursor.take(1)?[0]);
    if member_count == 0 || member_count > cohort_messages::GROUP_MEMBERS_MAX {
        return Err(format!("snapshot membership of {member_count} members"));
    }
    let mut members = Vec::with_capacity(member_count);
    for _ in 0..member_count {
        members.push(NodeId(cursor.u64()?));
    }
    let membership = Some(SnapshotMembership { incarnation, replication_quorum, members });
    if !cursor.bytes.is_empty() {
        return Err(format!("snapshot has {} trailing bytes", cursor.bytes.len()));
    }
    Ok((state, clients, membership))
}

/// D1: true if `data`'s header says its state is held by a persistent
/// state machine (none is in it). Only the header is read: a transferred
/// snapshot may carry a large state, and whether the rest decodes is
/// [`decode`]'s to say.
pub(crate) fn state_is_held(data: &[u8]) -> bool {
    data.get(..MAGIC.len() + 2)
        .is_some_and(|head| head[..MAGIC.len()] == MAGIC[..] && head[MAGIC.len()..] == [FORMAT, STATE_HELD])
}

/// D1: the record a persistent state machine keeps with a checkpoint: the
/// snapshot (its state held) cohort saves at the same op.
pub(crate) fn encode_checkpoint(snapshot: &Snapshot) -> Bytes {
    let mut out = BytesMut::with_capacity(17 + snapshot.data.len());
    out.put_slice(CHECKPOINT_MAGIC);
    out.put_u8(CHECKPOINT_VERSION);
    out.put_u64_le(snapshot.op.0);
    out.put_u32_le(snapshot.view.0);
    out.put_slice(&snapshot.data);
    out.freeze()
}

/// D1: the snapshot a checkpoint record names; `Err` for a record that is
/// not one, or whose state is not held by the state machine.
pub(crate) fn decode_checkpoint(record: &[u8]) -> Result<Snapshot, String> {
    let mut cursor = Cursor { bytes: record };
    if cursor.take(4)? != CHECKPOINT_MAGIC {
        return Err("checkpoint record has a bad magic".into());
    }
    let version = cursor.take(1)?[0];
    if version != CHECKPOINT_VERSION {
        return Err(format!("checkpoint record version {version} is not {CHECKPOINT_VERSION}"));
    }
    let op = Op(cursor.u64()?);
    let view = View(cursor.u32()?);
    let data = Bytes::copy_from_slice(cursor.bytes);
    match decode(&data)?.0 {
        SnapshotState::Held => Ok(Snapshot { op, view, data }),
        SnapshotState::Here(_) => Err("checkpoint record holds the state itself".into()),
    }
}

/// D1: what a replica of a persistent state machine recovers from: its
/// storage's, with the state machine's newest checkpoint put in as the
/// snapshot if that is at or past the storage's (a crash after the checkpoint, before
/// cohort saved its own copy, leaves it ahead). `Err` (with the two ops,
/// `recovered` untouched) if the storage's snapshot needs state the state machine no longer has:
/// a checkpoint behind it, none at all, or a record that does not decode.
pub(crate) fn with_checkpoint(
    state: &dyn StateMachine,
    recovered: &mut RecoveredGroup,
) -> Result<(), (Option<Op>, Op)> {
    if state.durability() != Durability::Persistent {
        return Ok(());
    }
    let checkpoint = state.checkpointed().and_then(|record| decode_checkpoint(&record).ok());
    let needs = match &recovered.snapshot {
        Some(saved) if !matches!(decode(&saved.data), Ok((SnapshotState::Here(_), ..))) => Some(saved.op),
        _ => None,
    };
    if let Some(op) = needs
        && checkpoint.as_ref().is_none_or(|checkpoint| checkpoint.op < op)
    {
        return Err((checkpoint.map(|checkpoint| checkpoint.op), op));
    }
    if let Some(checkpoint) = checkpoint
        && recovered.snapshot.as_ref().is_none_or(|saved| checkpoint.op >= saved.op)
    {
        recovered.snapshot = Some(checkpoint);
    }
    Ok(())
}

impl Replica {
    /// Take a snapshot if the log since the last one is long enough.
    pub(crate) fn maybe_snapshot(&mut self, out: &mut Effects) {
        debug_assert!(self.commit_min >= self.log.base(), "the snapshot holds only applied ops");
        let since = self.commit_min.0 - self.log.base().0;
        if since == 0
            || (since < self.config.snapshot_interval_ops
                && self.log.size_bytes() < self.config.snapshot_interval_bytes)
        {
            return;
        }
        self.take_snapshot(out);
    }

    /// A group that turns idle snapshots what it applied since its last
    /// snapshot: otherwise its few entries would keep the oldest log segments
    /// of the shard alive (segments are removed only once every group with
    /// records in them has snapshotted past them), and a shard full of quiet
    /// groups would run out of segments.
    pub(crate) fn snapshot_on_idle(&mut self, out: &mut Effects) {
        if self.commit_min > self.log.base() && self.commit_min == self.log.op() {
            self.take_snapshot(out);
        }
    }

    /// D1: whether the state machine keeps its state on disk itself.
    pub(crate) fn persistent(&self) -> bool {
        self.durability == Durability::Persistent
    }

    fn take_snapshot(&mut self, out: &mut Effects) {
        if self.sealed.is_some() {
            return; // The seal stays in the log: a restart must apply it again.
        }
        if self.lent.is_some() {
            return; // D2: at the next snapshot point after the run is back.
        }
        debug_assert!(self.commit_min > self.log.base(), "a snapshot covers something new");
        let op = self.commit_min;
        let view = self.log.view_at(op).expect("applied ops are in the log");
        let snapshot = if self.persistent() {
            if op < self.checkpoint_retry_op {
                return;
            }
            match self.checkpoint(op, view) {
                Ok(snapshot) => snapshot,
                // D1: the state machine keeps its previous checkpoint, and
                // cohort its log: it asks again after another interval, and
                // once the log is twice as long as it should be, snapshots
                // the state here instead (correct, at the cost D1 avoids).
                Err(_) if op.0 - self.log.base().0 >= 2 * self.config.snapshot_interval_ops => {
                    self.checkpoint_failed(out);
                    self.encode_whole(op, view)
                }
                Err(_) => {
                    self.checkpoint_failed(out);
                    self.checkpoint_retry_op = Op(op.0 + self.config.snapshot_interval_ops);
                    return;
                }
            }
        } else {
            self.encode_whole(op, view)
        };
        // Of what this replica applied from its own log, which holds every
        // op it covers: the storage may write it later.
        let save = Effect::SaveSnapshot { group: self.spec.group, snapshot: snapshot.clone(), deferrable: true };
        let flush = out.stage(self.spec.group, save);
        self.pending_durable.push_back((flush, self.log.op()));
        // D1: what a lagging member needs of what the log drops.
        self.keep_backlog(op, out);
        match &self.served {
            // D3: a stream being served keeps what the log drops.
            Some(Served::Stream(_)) => {
                let dropped: Vec<_> =
                    self.log.entries_from(self.log.base().next()).take_while(|entry| entry.op <= op).cloned().collect();
                self.keep_tail(dropped.into_iter());
            }
            // A whole state served is kept while the log still joins it.
            Some(Served::Whole(whole)) if whole.op < op => self.served = None,
            _ => {}
        }
        self.log.discard_through(op, view);
        self.snapshot = Some(snapshot);
        assert_eq!(self.log.base(), op, "V6: the log starts after the snapshot");
    }

    /// D1: count a checkpoint the state machine failed to take (the
    /// shard's `checkpoints_failed`).
    pub(crate) fn checkpoint_failed(&self, out: &mut Effects) {
        out.count_checkpoint_failure();
    }

    /// The state, client table and membership at `op` (the applied point),
    /// encoded here: every snapshot of a state machine in memory, and what
    /// a persistent one serves a state transfer.
    pub(crate) fn encode_whole(&self, op: Op, view: View) -> Snapshot {
        debug_assert!(op == self.commit_min || self.sealed.is_some(), "the state is the applied point's");
        let data = encode(Some(&self.state.snapshot()), &self.clients.encode(), &self.membership());
        Snapshot { op, view, data }
    }

    /// D1: ask the persistent state machine for a checkpoint at the applied
    /// point `op`; the snapshot cohort then saves itself, its state held.
    pub(crate) fn checkpoint(&mut self, op: Op, view: View) -> Result<Snapshot, String> {
        debug_assert!(self.persistent(), "only a persistent state machine takes checkpoints");
        let data = encode(None, &self.clients.encode(), &self.membership());
        let snapshot = Snapshot { op, view, data };
        self.state.checkpoint(&encode_checkpoint(&snapshot))?;
        Ok(snapshot)
    }

    /// Replace the state machine, client table and log with a snapshot;
    /// returns the snapshot to keep (D1: for a persistent state machine,
    /// the checkpoint it took of the restored state, its state held).
    pub(crate) fn install_snapshot_state(
        &mut self,
        snapshot: &Snapshot,
        out: &mut Effects,
    ) -> Result<Snapshot, String> {
        let (state, clients, _) = decode(&snapshot.data)?;
        let held = state == SnapshotState::Held;
        let restored = match state {
            SnapshotState::Here(state) => {
                self.state.restore(&state)?;
                state
            }
            // Recovery of a persistent state machine: its checkpoint is at
            // this op (`Shard::recover_group` checked it).
            SnapshotState::Held if self.persistent() => Bytes::new(),
            SnapshotState::Held => {
                return Err(format!(
                    "{}: a snapshot whose state a persistent state machine holds, for one in memory",
                    self.spec.group
                ));
            }
        };
        self.clients.restore(clients);
        self.log = Log::new(snapshot.op, snapshot.view);
        self.commit_min = snapshot.op;
        self.commit_max = self.commit_max.max(snapshot.op);
        if self.spec.report_applied {
            out.push(Effect::Restored { group: self.spec.group, op: snapshot.op, state: restored.clone() });
        }
        assert!(self.commit_min == snapshot.op && self.log.op() == snapshot.op, "V6: the state is the snapshot's");
        if !self.persistent() || held {
            return Ok(snapshot.clone());
        }
        // D1: a restored state is durable only with its checkpoint; if that
        // fails, cohort keeps the whole snapshot itself.
        Ok(self.checkpoint(snapshot.op, snapshot.view).unwrap_or_else(|_| {
            self.checkpoint_failed(out);
            snapshot.clone()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn v6_snapshot_data_round_trips() {
        let clients = vec![(
            ClientId(9),
            ClientEntry { registered: Op(2), request: RequestNumber(3), op: Op(12), result: Bytes::from_static(b"ok") },
        )];
        let membership = SnapshotMembership {
            incarnation: Incarnation(3),
            replication_quorum: 2,
            members: vec![NodeId(4), NodeId(1)],
        };
        let data = encode(Some(b"state"), &clients, &membership);
        let (state, back, recorded) = decode(&data).unwrap();
        assert_eq!(state, SnapshotState::Here(Bytes::from_static(b"state")));
        assert_eq!(back, clients);
        assert_eq!(recorded, Some(membership));
    }

    proptest! {
        #[test]
        fn v6_snapshot_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
        }
    }
}
