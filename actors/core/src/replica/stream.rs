//! Streamed state transfer (D3): a persistent state machine's state sent
//! in chunks from a point-in-time view, staged by the receiver's state
//! machine, and installed in one step.
//!
//! A state machine that keeps its state in memory is sent as before: its
//! saved snapshot, whole, in chunks, buffered by the receiver and capped
//! by `state_transfer_size_max_bytes` (the receiver holds it in memory).
//! A persistent state machine that offers an export
//! ([`crate::StateMachine::export`]) is streamed instead, and then nothing
//! on either side costs memory in proportion to the state:
//!
//! - The sender serves its newest checkpoint: the state machine's view of
//!   it and cohort's saved snapshot (state held) are at the same op, the
//!   log's base, so the log joins the state the receiver gets. The sender
//!   goes on checkpointing while it streams (its log must stay short: a
//!   view change carries it whole); the committed entries it drops from
//!   the log meanwhile are kept beside the stream, its *tail*, and answer
//!   the receiver's repair requests once the state is in, so the receiver
//!   catches up from the streamed op. The sender notes where each
//!   receiver stands: one fetching the stream needs the whole tail, one
//!   that installed it needs the tail from its repair request on, and one
//!   whose repair the log answers needs none of it. The tail's front that
//!   no receiver needs any more is let go, and the stream with it once no
//!   receiver needs anything (so a receiver that installed and catches up
//!   while the writes go on holds the tail only as long as it is behind,
//!   and the tail's bound applies to what it still needs, not to all the
//!   sender dropped since the stream opened). The stream and its tail are
//!   also dropped once nobody asked for either in
//!   `state_stream_patience_ticks`, or once the tail holds
//!   `state_transfer_log_bytes_max`. A stream whose tail lost its front
//!   is not served to a new receiver (it would install a state the tail no
//!   longer joins): a new stream of the newest checkpoint is opened.
//! - The stream is a header, then the state machine's bytes. Header
//!   (little-endian): magic `b"COHX"`, version u8 (1), record size u32,
//!   lineage size u16, the checkpoint record (`COHC`, see `snapshot`) of
//!   the state sent (its op, view, client table and membership), then the
//!   view's lineage ([`crate::StateExport::lineage`], at most
//!   [`LINEAGE_SIZE_MAX_BYTES`]). The sender sends the header in chunks of
//!   its own, so the state machine's chunks start where it said they do.
//! - The receiver keeps the header in memory (at most
//!   [`STREAM_HEADER_SIZE_MAX_BYTES`]), then hands each chunk to its state
//!   machine's staging, which makes it durable before it is taken (the
//!   receiver pulls chunks by offset, two ahead at most once the header
//!   is in: its flow control, `repair::STREAM_CHUNKS_IN_FLIGHT`). The
//!   last chunk installs the staged state and the record in one atomic
//!   step, then the replica takes the record's snapshot as its own.
//! - The staging is named by a key: the source's node and the lineage, or
//!   with no lineage the source, the stream's size and its header. Once a
//!   header is whole the receiver begins staging under its key; a staging
//!   of the same key goes on at its staged length. So a transfer cut by a
//!   dropped link, a view change or a restart of the receiver goes on where
//!   it stopped if the source still serves that stream, and, with a
//!   lineage, also when the source moved on to a later checkpoint (its tail
//!   full): only the new header is sent again. A source that cannot read on
//!   where the receiver stopped answers with its first chunk, and the
//!   receiver drops its staging and starts over.
//!
//! Every length and offset is checked: a forged or damaged stream is
//! refused and counted (`snapshot_unusable`), never installed.

use bytes::{BufMut, Bytes, BytesMut};
use cohort_messages::{LogEntry, MemberIndex, Message, NodeId, Op, STATE_CHUNK_SIZE_MAX_BYTES, StateChunk, View};

use std::collections::{BTreeMap, VecDeque};

use super::repair::StateTransfer;
use super::snapshot::{decode_checkpoint, state_is_held};
use super::{Context, Replica};
use crate::effects::Effects;

use crate::state_machine::StateExport;
use crate::storage::Snapshot;

const MAGIC: &[u8; 4] = b"COHX";
const VERSION: u8 = 1;
/// Magic, version, record size and lineage size.
const HEADER_FIXED_BYTES: usize = 11;
/// The largest stream header: what a receiver holds in memory.
pub(crate) const STREAM_HEADER_SIZE_MAX_BYTES: usize =
    HEADER_FIXED_BYTES + STREAM_RECORD_SIZE_MAX_BYTES + LINEAGE_SIZE_MAX_BYTES;
/// The longest lineage a header may carry.
pub(crate) const LINEAGE_SIZE_MAX_BYTES: usize = 256;
/// Staging keys: one stream (`KEY_STREAM`: source, total size, header), or
/// a lineage (`KEY_LINEAGE`: source, lineage).
const KEY_STREAM: u8 = 0;
const KEY_LINEAGE: u8 = 1;

/// The largest checkpoint record a stream's header may declare: the
/// receiver holds it in memory until the header is whole. A record is a
/// few hundred bytes per client of the group (`clients_max`, 4,096 by
/// default), so this leaves room for results of tens of KiB each.
pub(crate) const STREAM_RECORD_SIZE_MAX_BYTES: usize = 64 << 20;

/// What a replica serves a state transfer from.
pub(crate) enum Served {
    /// A snapshot whole: a persistent state machine's state encoded at
    /// the applied point, for one that exports no view.
    Whole(Box<Snapshot>),
    /// D3: a stream of the newest checkpoint.
    Stream(Box<Export>),
}

/// D3: a stream being served.
pub(crate) struct Export {
    /// The checkpoint's op and view.
    pub op: Op,
    pub view: View,
    /// The stream's header (magic, version, record).
    header: Bytes,
    view_of_state: Box<dyn StateExport>,
    /// Header and state.
    size_bytes: u64,
    /// After this tick without a chunk or tail entry asked for, the
    /// stream is dropped.
    pub expiry_tick: u64,
    /// The committed entries that the log dropped since the stream opened,
    /// in op order from `tail_start`, less the front no receiver needs any
    /// more, and their operations' bytes.
    tail: VecDeque<LogEntry>,
    tail_start: Op,
    tail_bytes: u64,
    /// Per receiver, the first op of the tail it still needs (`op + 1`
    /// while it fetches the stream).
    needs: BTreeMap<MemberIndex, Op>,
    /// The end of the furthest chunk sent (what lies below went out).
    sent_end: u64,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Served::Whole(snapshot) => write!(f, "Whole({:?}, {} bytes)", snapshot.op, snapshot.data.len()),
            Served::Stream(export) => write!(f, "Stream({:?}, {} bytes)", export.op, export.size_bytes),
        }
    }
}

impl Served {
    /// The op the served state is at.
    pub(crate) fn op(&self) -> Op {
        match self {
            Served::Whole(snapshot) => snapshot.op,
            Served::Stream(export) => export.op,
        }
    }

    /// The op the served state, with a stream's tail, reaches.
    fn reaches(&self) -> Op {
        match self {
            Served::Whole(snapshot) => snapshot.op,
            Served::Stream(export) => export.reaches(),
        }
    }

    /// Whether a log starting after `base` joins the served state: a whole
    /// state at or past it, a stream whose tail ends right before it.
    fn joins(&self, base: Op) -> bool {
        match self {
            Served::Whole(snapshot) => snapshot.op >= base,
            Served::Stream(_) => self.reaches() == base,
        }
    }
}

/// The header of a stream carrying `record`, of `lineage`.
fn encode_header(record: &[u8], lineage: &[u8]) -> Bytes {
    assert!(lineage.len() <= LINEAGE_SIZE_MAX_BYTES, "a lineage within its limit");
    let mut out = BytesMut::with_capacity(HEADER_FIXED_BYTES + record.len() + lineage.len());
    out.put_slice(MAGIC);
    out.put_u8(VERSION);
    out.put_u32_le(u32::try_from(record.len()).expect("a checkpoint record under 4 GiB"));
    out.put_u16_le(lineage.len() as u16);
    out.put_slice(record);
    out.put_slice(lineage);
    out.freeze()
}

/// A whole header's record and lineage.
fn header_parts(header: &[u8]) -> (&[u8], &[u8]) {
    let record = u32::from_le_bytes([header[5], header[6], header[7], header[8]]) as usize;
    let body = &header[HEADER_FIXED_BYTES..];
    body.split_at(record.min(body.len()))
}

/// True if `data` starts a stream (rather than a whole snapshot).
pub(crate) fn is_stream(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

/// The whole header's size, once its fixed part is in `data`; `Err` for
/// a header that is not one or too large.
fn header_size(data: &[u8]) -> Result<Option<usize>, String> {
    let Some(fixed) = data.get(..HEADER_FIXED_BYTES) else { return Ok(None) };
    if &fixed[..4] != MAGIC || fixed[4] != VERSION {
        return Err("stream header has a bad magic or version".into());
    }
    let record = u32::from_le_bytes([fixed[5], fixed[6], fixed[7], fixed[8]]) as usize;
    let lineage = u16::from_le_bytes([fixed[9], fixed[10]]) as usize;
    if record > STREAM_RECORD_SIZE_MAX_BYTES || lineage > LINEAGE_SIZE_MAX_BYTES {
        return Err(format!("stream record of {record} bytes or lineage of {lineage} exceeds its limit"));
    }
    Ok(Some(HEADER_FIXED_BYTES + record + lineage))
}

/// The key a receiver names its staging by: the stream itself (source,
/// size, header), or with a lineage, the source and the lineage (any view
/// of it goes on with what was staged).
fn encode_key(source: NodeId, total_size_bytes: u64, header: &[u8]) -> Bytes {
    let (_, lineage) = header_parts(header);
    let mut out = BytesMut::with_capacity(17 + header.len());
    if lineage.is_empty() {
        out.put_u8(KEY_STREAM);
        out.put_u64_le(source.0);
        out.put_u64_le(total_size_bytes);
        out.put_slice(header);
    } else {
        out.put_u8(KEY_LINEAGE);
        out.put_u64_le(source.0);
        out.put_slice(lineage);
    }
    out.freeze()
}

/// A staging key of one stream read back from the state machine: (source,
/// total size, header); `None` if it is not one or does not decode (then
/// it is not resumed this way).
fn decode_key(key: &[u8]) -> Option<(NodeId, u64, &[u8])> {
    if *key.first()? != KEY_STREAM {
        return None;
    }
    let source = NodeId(u64::from_le_bytes(key.get(1..9)?.try_into().ok()?));
    let total = u64::from_le_bytes(key.get(9..17)?.try_into().ok()?);
    let header = key.get(17..)?;
    (header_size(header).ok()?? == header.len()).then_some((source, total, header))
}

/// The checkpoint snapshot a whole header names.
fn header_snapshot(header: &[u8]) -> Result<Snapshot, String> {
    let snapshot = decode_checkpoint(header_parts(header).0)?;
    debug_assert!(state_is_held(&snapshot.data), "a checkpoint's state is held");
    Ok(snapshot)
}

/// Where a receiving replica is within a stream.
#[derive(Clone, Debug)]
pub(crate) struct Stream {
    /// The header's size; chunks past it go to the state machine.
    pub header_size_bytes: u64,
    /// The state machine stages it (`import_begin` was called).
    pub staging: bool,
}

impl Replica {
    /// D3: open a stream of the newest checkpoint if the state machine
    /// offers a view of it at the log's base. `None`: it offers none (or
    /// one of another op), and the transfer falls back to a whole
    /// snapshot.
    fn open_export(&mut self, now: u64, out: &mut Effects) -> Option<Served> {
        let saved = self.snapshot.as_ref()?;
        if saved.op != self.log.base() || !state_is_held(&saved.data) {
            return None;
        }
        let view_of_state = match self.state.export() {
            Ok(Some(view_of_state)) => view_of_state,
            Ok(None) => return None,
            Err(_) => {
                out.count_transfer_failure();
                return None;
            }
        };
        let record = view_of_state.record();
        let checkpoint = decode_checkpoint(&record).ok()?;
        if checkpoint.op != saved.op {
            // The state machine's newest checkpoint is not cohort's: a
            // failed save, or one in flight. A whole snapshot serves.
            return None;
        }
        let lineage = view_of_state.lineage();
        if lineage.len() > LINEAGE_SIZE_MAX_BYTES {
            out.count_transfer_failure();
            return None;
        }
        let header = encode_header(&record, &lineage);
        let size_bytes = header.len() as u64 + view_of_state.size_bytes();
        out.count_stream_opened();
        Some(Served::Stream(Box::new(Export {
            op: checkpoint.op,
            view: checkpoint.view,
            header,
            view_of_state,
            size_bytes,
            expiry_tick: now + self.config.state_stream_patience_ticks,
            tail: VecDeque::new(),
            tail_start: checkpoint.op.next(),
            tail_bytes: 0,
            needs: BTreeMap::new(),
            sent_end: 0,
        })))
    }

    /// What a state transfer serves now: a state machine in memory's saved
    /// snapshot; for a persistent one a stream of its newest checkpoint,
    /// or (with no export) its state encoded whole at the applied point,
    /// kept while the log still joins it. A sealed replica serves the state
    /// before its seal, which the receiver must still apply.
    pub(crate) fn served(&mut self, now: u64, out: &mut Effects) -> Option<&mut Served> {
        if !self.persistent() {
            let snapshot = self.snapshot.clone()?;
            self.served = Some(Served::Whole(Box::new(snapshot)));
            return self.served.as_mut();
        }
        let base = self.log.base();
        if !self.served.as_ref().is_some_and(|served| served.joins(base)) {
            if self.lent.is_some() {
                // D2: a new view of the state needs the state machine,
                // which is away: the member asks again.
                return None;
            }
            self.served = None;
            if let Some(stream) = self.open_export(now, out) {
                self.served = Some(stream);
            } else if let Some(saved) = self.snapshot.as_ref().filter(|saved| !state_is_held(&saved.data)) {
                // A checkpoint failed and cohort kept the state itself.
                self.served = Some(Served::Whole(Box::new(saved.clone())));
            } else {
                let op =
                    self.sealed.as_ref().map_or(self.commit_min, |sealed| Op(sealed.op.0 - 1).min(self.commit_min));
                let view = self.log.view_at(op)?;
                self.served = Some(Served::Whole(Box::new(self.encode_whole(op, view))));
            }
        }
        assert!(self.served.as_ref().is_some_and(|served| served.joins(base)), "a served state joins the log");
        self.served.as_mut()
    }

    /// Send `to` the chunk at `offset_bytes` of what is served, if it is
    /// of `snapshot_op`; otherwise (or if the offset cannot be served) the
    /// first chunk of what is served now. `None`: the first chunk of
    /// whatever is served (a repair request below the log). A request for
    /// another snapshot than a served stream that only reaches the log
    /// through its tail opens a new stream at the log's base: the member
    /// asking (one electing a new primary, say) may already be past the
    /// old one.
    pub(crate) fn serve_chunk(
        &mut self,
        snapshot_op: Option<Op>,
        offset_bytes: u64,
        to: MemberIndex,
        now: u64,
        out: &mut Effects,
    ) {
        let base = self.log.base();
        if let (Some(op), Some(Served::Stream(export))) = (snapshot_op, &self.served)
            && op != export.op
            && export.op < base
        {
            self.served = None;
        }
        // A stream whose tail lost its front joins the log no more from
        // its own op: a new receiver gets a new stream.
        if matches!(&self.served, Some(Served::Stream(export)) if export.tail_start > export.op.next()) {
            self.served = None;
        }
        let chunk_max = self.config.state_chunk_size_bytes;
        let patience = self.config.state_stream_patience_ticks;
        let Some(served) = self.served(now, out) else { return };
        let offset = if Some(served.op()) == snapshot_op { offset_bytes } else { 0 };
        let mut again = false;
        let (op, view, total, piece) = match served {
            Served::Whole(snapshot) => {
                // A whole snapshot goes in the largest chunks (it is in
                // memory on both sides anyway); the configured size is
                // for streams.
                let total = snapshot.data.len();
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(total);
                let end = (start + STATE_CHUNK_SIZE_MAX_BYTES).min(total);
                (snapshot.op, snapshot.view, total as u64, Some((start as u64, snapshot.data.slice(start..end))))
            }
            Served::Stream(export) => {
                export.expiry_tick = now + patience;
                // It fetches the stream: it needs the whole tail.
                export.needs.insert(to, export.op.next());
                let piece = export.chunk_at(offset, chunk_max).ok();
                if let Some((start, chunk)) = &piece {
                    again = *start < export.sent_end;
                    export.sent_end = export.sent_end.max(start + chunk.len() as u64);
                }
                (export.op, export.view, export.size_bytes, piece)
            }
        };
        let Some((offset_bytes, chunk)) = piece else {
            // The state machine failed to read its view: counted, dropped;
            // the receiver asks again and gets a fresh one.
            out.count_transfer_failure();
            self.served = None;
            return;
        };
        out.count_chunk_sent(chunk.len() as u64, again);
        let message = StateChunk {
            group: self.spec.group,
            incarnation: self.spec.incarnation,
            view: self.view,
            replica: self.spec.me,
            snapshot_op: op,
            snapshot_view: view,
            offset_bytes,
            total_size_bytes: total,
            chunk,
        };
        debug_assert!(message.validate().is_ok(), "a served chunk is well formed: {message:?}");
        out.send(self.node_of(to), Message::StateChunk(message));
    }

    /// D3: the log drops `dropped` (committed, in op order, right after
    /// what the served state reaches): a served stream keeps them as its
    /// tail, until the tail would pass `state_transfer_log_bytes_max`.
    /// Any other served state no longer joins the log and is dropped.
    pub(crate) fn keep_tail(&mut self, dropped: impl Iterator<Item = LogEntry>) {
        let max = self.config.state_transfer_log_bytes_max;
        let base = self.log.base();
        let Some(Served::Stream(export)) = self.served.as_mut().filter(|served| served.joins(base)) else {
            // Not a stream, or one the log no longer joins (the log was
            // replaced since: a StartView, an installed snapshot).
            self.served = None;
            return;
        };
        for entry in dropped {
            let next = Op(export.tail_start.0 + export.tail.len() as u64);
            assert_eq!(entry.op, next, "a tail has no gap");
            export.tail_bytes += entry.operation.len() as u64;
            export.tail.push_back(entry);
        }
        export.let_go_of_the_front();
        if export.tail_bytes > max {
            self.served = None;
        }
        debug_assert!(self.served_tail_bytes() <= max, "D3: a tail within its bound");
    }

    /// D3: `receiver` holds every op through `op` (it acknowledged it, or
    /// repairs from the op after it): a served stream's tail lets go of
    /// what it no longer needs, and the stream goes once no receiver needs
    /// anything of it.
    pub(crate) fn receiver_holds(&mut self, receiver: MemberIndex, op: Op) {
        let Some(Served::Stream(export)) = &mut self.served else { return };
        let reaches = export.reaches();
        let Some(needed) = export.needs.get_mut(&receiver) else { return };
        if op < reaches {
            *needed = (*needed).max(op.next());
            export.let_go_of_the_front();
            return;
        }
        export.needs.remove(&receiver);
        if export.needs.is_empty() {
            self.served = None;
        } else {
            export.let_go_of_the_front();
        }
    }

    /// D3: a repair request from `op_min` that a served stream's tail
    /// answers (the receiver installed the stream, and asks for what
    /// followed it): send the tail's entries from `op_min` up to `op_max`,
    /// while `size_max_bytes` of operations last (one entry at least), and
    /// return the op after the last one sent and the bytes sent; `None` if
    /// the tail does not hold `op_min`. What lies below `op_min` the
    /// receiver needs no more.
    pub(crate) fn serve_tail(
        &mut self,
        op_min: Op,
        op_max: Op,
        receiver: MemberIndex,
        size_max_bytes: u64,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Option<(Op, u64)> {
        let patience = self.config.state_stream_patience_ticks;
        let Some(Served::Stream(export)) = &mut self.served else { return None };
        if op_min < export.tail_start || op_min > export.reaches() {
            return None;
        }
        export.expiry_tick = now + patience;
        export.needs.insert(receiver, op_min);
        export.let_go_of_the_front();
        let skip = (op_min.0 - export.tail_start.0) as usize;
        let (entries, sent_bytes) = super::repair::answer_from(export.tail.iter().skip(skip), op_max, size_max_bytes);
        Some((self.send_answer(receiver, op_min, entries, cx), sent_bytes))
    }

    /// D3: a stream no chunk was asked for within its patience is dropped
    /// (its view of the state released, checkpoints free to go on).
    pub(crate) fn expire_stream(&mut self, now: u64) {
        if matches!(&self.served, Some(Served::Stream(export)) if export.expiry_tick <= now) {
            self.served = None;
        }
    }

    /// D3: bytes of operations the served stream's tail holds.
    pub(crate) fn served_tail_bytes(&self) -> u64 {
        match &self.served {
            Some(Served::Stream(export)) => export.tail_bytes,
            _ => 0,
        }
    }

    /// The tick a served stream expires at, if one is served.
    pub(crate) fn stream_expiry_tick(&self) -> Option<u64> {
        match &self.served {
            Some(Served::Stream(export)) => Some(export.expiry_tick),
            _ => None,
        }
    }

    /// D3: a transfer from `source` that resumes the stream the state
    /// machine has staged from it, if any.
    pub(crate) fn resumed_transfer(&self, source: MemberIndex) -> Option<StateTransfer> {
        if !self.persistent() {
            return None;
        }
        let (key, staged_bytes) = self.state.import_staged()?;
        let (node, total, header) = decode_key(&key)?;
        if node != self.node_of(source) {
            return None;
        }
        let snapshot = header_snapshot(header).ok().filter(|snapshot| snapshot.op > self.commit_min)?;
        let received = (header.len() as u64).checked_add(staged_bytes).filter(|received| *received < total)?;
        Some(StateTransfer {
            source,
            snapshot_op: snapshot.op,
            snapshot_view: snapshot.view,
            total_size_bytes: total,
            received_bytes: received,
            data: header.to_vec(),
            stream: Some(Stream { header_size_bytes: header.len() as u64, staging: true }),
            from_scratch: false,
            asked: Default::default(),
            stale_asked: 0,
            held: Default::default(),
        })
    }

    /// D3: take a chunk of a stream (already checked to be the next one of
    /// the transfer). `Err` refuses the stream; the transfer is dropped.
    pub(crate) fn take_stream_chunk(
        &mut self,
        chunk: &StateChunk,
        out: &mut Effects,
    ) -> Result<StreamStep, StreamError> {
        if !self.persistent() {
            return Err(StreamError::Refused);
        }
        let node = self.node_of(chunk.replica);
        let transfer = self.state_transfer.as_deref_mut().expect("a chunk is taken into a transfer");
        let stream = transfer.stream.get_or_insert(Stream { header_size_bytes: u64::MAX, staging: false });
        if !stream.staging {
            // The header: kept in memory until whole.
            transfer.data.extend_from_slice(&chunk.chunk);
            transfer.received_bytes += chunk.chunk.len() as u64;
            let Some(size) = header_size(&transfer.data).map_err(|_| StreamError::Refused)? else {
                return Ok(StreamStep::More);
            };
            if transfer.data.len() < size {
                return Ok(StreamStep::More);
            }
            if transfer.data.len() > size || size as u64 > transfer.total_size_bytes {
                return Err(StreamError::Refused);
            }
            let snapshot = header_snapshot(&transfer.data).map_err(|_| StreamError::Refused)?;
            if snapshot.op != transfer.snapshot_op || snapshot.view != transfer.snapshot_view {
                return Err(StreamError::Refused);
            }
            stream.header_size_bytes = size as u64;
            let key = encode_key(node, transfer.total_size_bytes, &transfer.data);
            if transfer.from_scratch {
                // No key is empty: this drops what is staged.
                self.state.import_begin(&[]).map_err(|_| failed(out))?;
            }
            self.state.import_begin(&key).map_err(|_| failed(out))?;
            // A staging of the same key (a view of the same lineage, or
            // this very stream) goes on where it stopped.
            let staged = self.state.import_staged().filter(|(staged, _)| *staged == key).map_or(0, |(_, bytes)| bytes);
            let transfer = self.state_transfer.as_deref_mut().expect("still fetching");
            if staged > transfer.total_size_bytes - size as u64 {
                // More than this view holds: the state machine broke its
                // lineage's promise. Counted; the transfer starts again.
                return Err(failed(out));
            }
            transfer.received_bytes += staged;
            transfer.stream.as_mut().expect("a stream").staging = true;
        } else {
            let offset = transfer.received_bytes - stream.header_size_bytes;
            transfer.received_bytes += chunk.chunk.len() as u64;
            if self.apply_off_shard {
                // Staged on the apply worker; the transfer goes on (or ends)
                // when the state machine is back.
                self.lend_chunk(offset, chunk.chunk.clone(), out);
                return Ok(StreamStep::Staging);
            }
            self.state.import_write(offset, &chunk.chunk).map_err(|_| failed(out))?;
        }
        self.finish_if_whole(out)
    }

    /// D3: after a chunk is staged: install the stream if it was the last.
    fn finish_if_whole(&mut self, out: &mut Effects) -> Result<StreamStep, StreamError> {
        let transfer = self.state_transfer.as_deref().expect("still fetching");
        let short = self.config.mutated(crate::mutants::Mutant::StreamInstalledShort)
            && transfer.received_bytes > transfer.stream.as_ref().map_or(u64::MAX, |stream| stream.header_size_bytes);
        if transfer.received_bytes < transfer.total_size_bytes && !short {
            return Ok(StreamStep::More);
        }
        let (record, _) = header_parts(&transfer.data);
        let snapshot = decode_checkpoint(record).map_err(|_| StreamError::Refused)?;
        self.state.import_finish(record).map_err(|_| failed(out))?;
        out.count_stream_installed();
        Ok(StreamStep::Whole(snapshot))
    }

    /// D3: the apply worker staged a chunk of the transfer from `source`
    /// of the snapshot at `snapshot_op` (whose bytes received were
    /// `received_bytes` with it), or failed to. A failure drops the
    /// transfer (counted; repair asks again, and the staging resumes from
    /// what the state machine made durable). If the chunk was the
    /// transfer's last, the stream is installed. Then the chunks of the
    /// transfer that arrived meanwhile are taken, in order.
    pub(crate) fn on_chunk_staged(
        &mut self,
        source: MemberIndex,
        snapshot_op: Op,
        received_bytes: u64,
        staged: Result<(), String>,
        now: u64,
        cx: &mut Context<'_>,
    ) {
        // As for a chunk that arrives (`take_chunk`): a transfer the
        // applied point passed is over, and a primary takes no chunk.
        self.drop_stale_transfer();
        let current = !self.is_primary()
            && self.state_transfer.as_deref().is_some_and(|transfer| {
                transfer.source == source
                    && transfer.snapshot_op == snapshot_op
                    && transfer.received_bytes == received_bytes
                    && transfer.stream.as_ref().is_some_and(|stream| stream.staging)
            });
        if staged.is_err() {
            cx.out.count_transfer_failure();
        }
        if current {
            match staged.map_err(|_| StreamError::Failed).and_then(|()| self.finish_if_whole(cx.out)) {
                // The next chunks were asked for when this one was lent.
                Ok(StreamStep::More) => {}
                step => self.after_stream_step(step, None, now, cx),
            }
        }
        let held = self.state_transfer.as_deref_mut().map(|transfer| std::mem::take(&mut transfer.held));
        for chunk in held.into_iter().flatten() {
            self.on_state_chunk(chunk, now, cx);
        }
    }
}

/// What a stream chunk led to.
pub(crate) enum StreamStep {
    /// Ask for the next chunk.
    More,
    /// The chunk is staged on the apply worker (D2): ask for the next
    /// chunks meanwhile; the transfer goes on when the state machine is
    /// back ([`Replica::on_chunk_staged`]).
    Staging,
    /// The state machine installed the stream: the replica takes this
    /// snapshot (its state held).
    Whole(Snapshot),
}

/// Why a stream was dropped.
pub(crate) enum StreamError {
    /// It is not a stream this replica takes (counted as
    /// `snapshot_unusable`).
    Refused,
    /// The state machine failed to stage or install it (counted as a
    /// transfer failure).
    Failed,
}

/// Count a state machine's failure to stage or install a stream.
fn failed(out: &mut Effects) -> StreamError {
    out.count_transfer_failure();
    StreamError::Failed
}

impl Export {
    /// The op the stream with its tail reaches.
    fn reaches(&self) -> Op {
        Op(self.tail_start.0 - 1 + self.tail.len() as u64)
    }

    /// Drop the tail's entries below what every receiver still needs.
    fn let_go_of_the_front(&mut self) {
        let Some(&needed) = self.needs.values().min() else { return };
        while self.tail_start < needed
            && let Some(entry) = self.tail.pop_front()
        {
            debug_assert_eq!(entry.op, self.tail_start, "the tail's front is at its start");
            self.tail_bytes -= entry.operation.len() as u64;
            self.tail_start = self.tail_start.next();
        }
        debug_assert!(self.tail_start > self.op, "the tail starts after the streamed op");
    }

    /// The chunk at `offset` (the header's chunks, then the state
    /// machine's), or the first one if the view cannot start there.
    fn chunk_at(&mut self, offset: u64, chunk_max: usize) -> Result<(u64, Bytes), String> {
        let header = self.header.len() as u64;
        if offset < header || offset >= self.size_bytes {
            let start = if offset < header { offset as usize } else { 0 };
            let end = (start + chunk_max).min(self.header.len());
            return Ok((start as u64, self.header.slice(start..end)));
        }
        let state_size = self.size_bytes - header;
        match self.view_of_state.read(offset - header, chunk_max)? {
            Some(chunk)
                if !chunk.is_empty()
                    && chunk.len() <= chunk_max
                    && (offset - header).checked_add(chunk.len() as u64).is_some_and(|end| end <= state_size) =>
            {
                Ok((offset, chunk))
            }
            Some(chunk) => Err(format!("the state machine's view gave {} bytes at {offset}", chunk.len())),
            None => Ok((0, self.header.slice(..chunk_max.min(self.header.len())))),
        }
    }
}
