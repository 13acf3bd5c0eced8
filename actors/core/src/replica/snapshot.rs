//! Snapshots and log truncation (V6).
//!
//! After `snapshot_interval_ops` applied ops (or `snapshot_interval_bytes` of
//! log), a member snapshots its state machine and client table at its
//! applied point, saves it, and drops the log up to it. The snapshot is also
//! what state transfer sends to a member that lags behind it.
//!
//! Encoding of `Snapshot::data` (little-endian): magic `b"COHS"`, format u8
//! (3), state size u32, state bytes, client count u32, then per client: id
//! u128, registration op u64, request u64, op u64, result size u32, result
//! bytes; then the group's membership when the snapshot was taken:
//! incarnation u64, replication quorum u8, member count u8, member node ids
//! u64 each. Formats 1 and 2 (no registration op; 1 without membership) were
//! never released and are refused. It comes from the network in state
//! transfer, so decoding checks every length.
//!
//! The membership makes a snapshot self-describing: the snapshot a member
//! change saves at the seal is the first durable record of the new
//! incarnation, and a restart that finds it newer than the superblock (a
//! crash between the two) recovers into that incarnation.

use bytes::{BufMut, Bytes, BytesMut};
use cohort_messages::{ClientId, Incarnation, NodeId, Op, RequestNumber};

use super::Replica;
use crate::client_table::ClientEntry;
use crate::effect::Effect;
use crate::effects::Effects;
use crate::log::Log;
use crate::storage::Snapshot;

const MAGIC: &[u8; 4] = b"COHS";
const FORMAT: u8 = 3;

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

/// Encode a state machine snapshot, client table and membership.
pub(crate) fn encode(state: &[u8], clients: &[(ClientId, ClientEntry)], membership: &SnapshotMembership) -> Bytes {
    let mut out = BytesMut::with_capacity(13 + state.len() + clients.len() * 48);
    out.put_slice(MAGIC);
    out.put_u8(FORMAT);
    out.put_u32_le(u32::try_from(state.len()).expect("state snapshot over 4 GiB"));
    out.put_slice(state);
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
type Decoded = (Bytes, Vec<(ClientId, ClientEntry)>, Option<SnapshotMembership>);

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
    let state_len = cursor.u32()? as usize;
    let state = Bytes::copy_from_slice(cursor.take(state_len)?);
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

    fn take_snapshot(&mut self, out: &mut Effects) {
        if self.sealed.is_some() {
            return; // The seal stays in the log: a restart must apply it again.
        }
        debug_assert!(self.commit_min > self.log.base(), "a snapshot covers something new");
        let op = self.commit_min;
        let view = self.log.view_at(op).expect("applied ops are in the log");
        let data = encode(&self.state.snapshot(), &self.clients.encode(), &self.membership());
        let snapshot = Snapshot { op, view, data };
        // Of what this replica applied from its own log, which holds every
        // op it covers: the storage may write it later.
        let save = Effect::SaveSnapshot { group: self.spec.group, snapshot: snapshot.clone(), deferrable: true };
        let flush = out.stage(self.spec.group, save);
        self.pending_durable.push_back((flush, self.log.op()));
        self.log.discard_through(op, view);
        self.snapshot = Some(snapshot);
        assert_eq!(self.log.base(), op, "V6: the log starts after the snapshot");
    }

    /// Replace the state machine, client table and log with a snapshot.
    pub(crate) fn install_snapshot_state(&mut self, snapshot: &Snapshot, out: &mut Effects) -> Result<(), String> {
        let (state, clients, _) = decode(&snapshot.data)?;
        self.state.restore(&state)?;
        self.clients.restore(clients);
        self.log = Log::new(snapshot.op, snapshot.view);
        self.commit_min = snapshot.op;
        self.commit_max = self.commit_max.max(snapshot.op);
        if self.spec.report_applied {
            out.push(Effect::Restored { group: self.spec.group, op: snapshot.op, state });
        }
        assert!(self.commit_min == snapshot.op && self.log.op() == snapshot.op, "V6: the state is the snapshot's");
        Ok(())
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
        let data = encode(b"state", &clients, &membership);
        let (state, back, recorded) = decode(&data).unwrap();
        assert_eq!(&state[..], b"state");
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
