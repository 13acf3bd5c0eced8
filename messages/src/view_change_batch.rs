//! ViewChangeBatch (Z4): many groups' StartViewChange, DoViewChange and
//! StartView messages for one peer in one frame.
//!
//! When a node dies, each of its peers changes the view of every group the
//! dead node led: thousands of groups, each sending a StartViewChange to
//! every other member, a DoViewChange to the new primary and a StartView
//! back, all within a few ticks. One frame per message makes a node's death
//! cost O(groups) frames; with this command a shard's turn sends one frame
//! per peer for all of them (split only at the frame size limit), so it
//! costs O(node pairs) frames, as heartbeats do (R10).
//!
//! The batch changes no message: each entry is one of the three commands'
//! ordinary body, decoded and validated exactly as its own frame would be,
//! and handed to its group's shard as if it had come alone. Senders batch
//! only runs of consecutive view-change messages of a turn for one peer
//! ([`batch_view_changes`]), so the order in which a peer receives any two
//! messages is the order the core sent them.
//!
//! Layout: a sequence of entries, nothing else. An entry is an 8-byte entry
//! header, then its body: command u8 @0 (6, 7 or 8), reserved 3 bytes @1
//! (zero), body size u32 @4, then that many bytes. A body whose entries do
//! not tile it exactly, or with no entry, is a bad body (the frame is
//! rejected); an entry with another command, non-zero reserved bytes or a
//! body that does not decode or validate is rejected alone and counted, and
//! the other entries are handled (as R17 has it for Commit entries).

use bytes::{BufMut, Bytes, BytesMut};

use crate::command::Command;
use crate::error::{BodyError, EntryError};
use crate::header::TraceContext;
use crate::ids::GroupId;
use crate::le::get_u32;
use crate::limits::BODY_SIZE_MAX_BYTES;
use crate::message::Message;

/// Size of an entry's header.
pub const VIEW_CHANGE_ENTRY_HEADER_SIZE_BYTES: usize = 8;

/// A decoded batch body: its entries are decoded one by one on iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewChangeBatch {
    body: Bytes,
    len: usize,
}

/// Whether `command` may travel in a [`ViewChangeBatch`].
pub fn is_view_change(command: Command) -> bool {
    matches!(command, Command::StartViewChange | Command::DoViewChange | Command::StartView)
}

/// One entry's place in a body: its command byte, reserved bytes and body range.
struct Slot {
    command: u8,
    reserved_zero: bool,
    start: usize,
    end: usize,
}

/// Walk the entry headers from `offset`: the next slot, or why the body is bad.
fn next_slot(body: &[u8], offset: usize) -> Result<Slot, &'static str> {
    let header: &[u8; VIEW_CHANGE_ENTRY_HEADER_SIZE_BYTES] = body
        .get(offset..offset + VIEW_CHANGE_ENTRY_HEADER_SIZE_BYTES)
        .and_then(|raw| raw.try_into().ok())
        .ok_or("an entry header is cut short")?;
    let size = get_u32(header, 4) as usize;
    let start = offset + VIEW_CHANGE_ENTRY_HEADER_SIZE_BYTES;
    let end = start.checked_add(size).filter(|end| *end <= body.len()).ok_or("an entry's body runs past the frame")?;
    Ok(Slot { command: header[0], reserved_zero: header[1..4] == [0, 0, 0], start, end })
}

impl ViewChangeBatch {
    /// Check that the entries tile `body` exactly (at least one).
    pub fn from_body(body: Bytes) -> Result<ViewChangeBatch, BodyError> {
        let bad = |reason: &str| BodyError::Codec { command: Command::ViewChangeBatch, reason: reason.to_string() };
        let mut offset = 0;
        let mut len = 0;
        while offset < body.len() {
            offset = next_slot(&body, offset).map_err(bad)?.end;
            len += 1;
        }
        if len == 0 {
            return Err(bad("a view-change batch has no entry"));
        }
        Ok(ViewChangeBatch { body, len })
    }

    /// The encoded body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none (never, once built).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Each entry, decoded and validated on its own.
    pub fn entries(&self) -> impl Iterator<Item = Result<Message, EntryError>> + '_ {
        let mut offset = 0;
        (0..self.len).map_while(move |index| {
            let slot = next_slot(&self.body, offset).ok()?;
            offset = slot.end;
            Some(decode_entry(&self.body, index, &slot))
        })
    }

    /// Pack `messages` (each a StartViewChange, DoViewChange or StartView)
    /// into as few batches as the frame size limit allows, in order. A
    /// message too large to share a frame comes back alone, in `Err`, at its
    /// place; so does any other command.
    pub fn pack(messages: Vec<Message>) -> Vec<Result<ViewChangeBatch, Message>> {
        let mut out = Vec::new();
        let mut current = BytesMut::new();
        let mut count = 0;
        for message in messages {
            if !is_view_change(message.command()) {
                Self::close(&mut out, &mut current, &mut count);
                out.push(Err(message));
                continue;
            }
            let mark = current.len();
            encode_entry(&message, &mut current);
            if current.len() <= BODY_SIZE_MAX_BYTES {
                count += 1;
                continue;
            }
            current.truncate(mark);
            Self::close(&mut out, &mut current, &mut count);
            encode_entry(&message, &mut current);
            if current.len() <= BODY_SIZE_MAX_BYTES {
                count = 1;
            } else {
                current.clear();
                out.push(Err(message));
            }
        }
        Self::close(&mut out, &mut current, &mut count);
        out
    }

    fn close(out: &mut Vec<Result<ViewChangeBatch, Message>>, current: &mut BytesMut, count: &mut usize) {
        if *count > 0 {
            out.push(Ok(ViewChangeBatch { body: std::mem::take(current).freeze(), len: *count }));
        }
        *count = 0;
    }
}

fn encode_entry(message: &Message, out: &mut BytesMut) {
    debug_assert!(is_view_change(message.command()), "only view-change messages are batched");
    let start = out.len();
    out.put_u8(message.command() as u8);
    out.put_bytes(0, 3);
    out.put_u32_le(0);
    message.encode_body_into(out);
    let size = (out.len() - start - VIEW_CHANGE_ENTRY_HEADER_SIZE_BYTES) as u32;
    out[start + 4..start + VIEW_CHANGE_ENTRY_HEADER_SIZE_BYTES].copy_from_slice(&size.to_le_bytes());
}

fn decode_entry(body: &Bytes, index: usize, slot: &Slot) -> Result<Message, EntryError> {
    let error =
        |group: GroupId, reason: &'static str| EntryError { command: Command::ViewChangeBatch, index, group, reason };
    let command = Command::from_u8(slot.command)
        .filter(|command| is_view_change(*command))
        .ok_or_else(|| error(GroupId(0), "not_a_view_change"))?;
    if !slot.reserved_zero {
        return Err(error(GroupId(0), "reserved_not_zero"));
    }
    let message = Message::decode_body(command, &body.slice(slot.start..slot.end))
        .map_err(|_| error(GroupId(0), "body_does_not_decode"))?;
    let group = message.group().unwrap_or(GroupId(0));
    message.validate().map_err(|_| error(group, "invalid"))?;
    Ok(message)
}

/// Replace every run of two or more consecutive view-change messages
/// without a trace context by [`ViewChangeBatch`]es: what a shard's turn
/// sends one peer, in the order the core sent it (see the module docs).
pub fn batch_view_changes(messages: Vec<(Message, TraceContext)>) -> Vec<(Message, TraceContext)> {
    let batchable =
        |(message, trace): &(Message, TraceContext)| is_view_change(message.command()) && *trace == TraceContext::NONE;
    if messages.iter().filter(|message| batchable(message)).count() < 2 {
        return messages;
    }
    let mut out = Vec::with_capacity(messages.len());
    let mut run: Vec<Message> = Vec::new();
    let flush = |run: &mut Vec<Message>, out: &mut Vec<(Message, TraceContext)>| match run.len() {
        0 => {}
        1 => out.extend(run.drain(..).map(|message| (message, TraceContext::NONE))),
        _ => {
            for packed in ViewChangeBatch::pack(std::mem::take(run)) {
                let message = packed.map_or_else(|alone| alone, Message::ViewChangeBatch);
                out.push((message, TraceContext::NONE));
            }
        }
    };
    for item in messages {
        if batchable(&item) {
            run.push(item.0);
        } else {
            flush(&mut run, &mut out);
            out.push(item);
        }
    }
    flush(&mut run, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{StartView, StartViewChange};
    use crate::ids::{Incarnation, MemberIndex, Op, View};

    fn svc(group: u64) -> Message {
        Message::StartViewChange(StartViewChange {
            group: GroupId(group),
            incarnation: Incarnation(1),
            view: View(2),
            replica: MemberIndex(1),
        })
    }

    fn sv(group: u64) -> Message {
        Message::StartView(StartView {
            group: GroupId(group),
            incarnation: Incarnation(1),
            view: View(2),
            op: Op(0),
            commit: Op(0),
            replica: MemberIndex(2),
            log: Vec::new(),
        })
    }

    #[test]
    fn z4_entries_roundtrip_in_order() {
        let messages = vec![svc(1), sv(2), svc(3)];
        let packed = ViewChangeBatch::pack(messages.clone());
        assert_eq!(packed.len(), 1);
        let Ok(batch) = &packed[0] else { panic!("one batch") };
        let again = ViewChangeBatch::from_body(batch.body().clone()).expect("a good body");
        let decoded: Vec<Message> = again.entries().map(|entry| entry.expect("a good entry")).collect();
        assert_eq!(decoded, messages);
    }

    #[test]
    fn z4_a_bad_entry_is_rejected_alone() {
        let Ok(batch) = ViewChangeBatch::pack(vec![svc(1), svc(2), svc(3)]).remove(0) else { panic!("a batch") };
        let mut body = BytesMut::from(&batch.body()[..]);
        let first_size = u32::from_le_bytes([body[4], body[5], body[6], body[7]]) as usize;
        let second = VIEW_CHANGE_ENTRY_HEADER_SIZE_BYTES + first_size;
        body[second] = Command::Prepare as u8;
        let batch = ViewChangeBatch::from_body(body.freeze()).expect("the sizes still tile the body");
        let results: Vec<_> = batch.entries().collect();
        assert_eq!(results.len(), 3);
        assert_eq!(results[0], Ok(svc(1)));
        assert_eq!(results[1].as_ref().map_err(|error| error.reason), Err("not_a_view_change"));
        assert_eq!(results[2], Ok(svc(3)));
    }

    #[test]
    fn z4_a_body_the_entries_do_not_tile_is_bad() {
        let Ok(batch) = ViewChangeBatch::pack(vec![svc(1), svc(2)]).remove(0) else { panic!("a batch") };
        let body = batch.body();
        for cut in [1, body.len() - 1] {
            assert!(ViewChangeBatch::from_body(body.slice(..cut)).is_err(), "cut at {cut}");
        }
        assert!(ViewChangeBatch::from_body(Bytes::new()).is_err(), "no entry");
        let mut long = BytesMut::from(&body[..]);
        long[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(ViewChangeBatch::from_body(long.freeze()).is_err(), "a size past the frame");
    }

    #[test]
    fn z4_only_runs_of_view_changes_are_batched_and_order_is_kept() {
        let traced = TraceContext { trace_id: [1; 16], span_id: [2; 8], flags: 1 };
        let prepare_like = (Message::Commit(crate::batch::CommitBatch::encode(&[])), TraceContext::NONE);
        let messages = vec![
            (svc(1), TraceContext::NONE),
            (svc(2), TraceContext::NONE),
            prepare_like.clone(),
            (svc(3), TraceContext::NONE),
            (svc(4), traced),
            (svc(5), TraceContext::NONE),
            (sv(6), TraceContext::NONE),
        ];
        let out = batch_view_changes(messages);
        let commands: Vec<Command> = out.iter().map(|(message, _)| message.command()).collect();
        assert_eq!(
            commands,
            vec![
                Command::ViewChangeBatch,
                Command::Commit,
                Command::StartViewChange,
                Command::StartViewChange,
                Command::ViewChangeBatch
            ]
        );
        assert_eq!(out[3].1, traced, "a traced message keeps its own frame");
    }
}
