//! Writes the seed corpus of the fuzz targets: for the decoders, one valid
//! frame of every command, a stream of several frames, batches with a bad
//! entry, each in the frame_decoder input format (a control byte, then the
//! stream); for `shard_inputs`, scripts that commit, snapshot, change view
//! and restart (`cohort_fuzz::shard_inputs::seeds`, each checked to do so).
//!
//! Run from the repository root:
//! `cargo run --manifest-path fuzz/Cargo.toml --bin seed_corpus`
//! It writes `fuzz/corpus/frame_decoder/`, `fuzz/corpus/batch_entries/` and
//! `fuzz/corpus/shard_inputs/`.

use std::fs;
use std::path::Path;

use bytes::Bytes;
use cohort_fuzz::{frame_of, sample_batches};
use cohort_messages::*;

fn main() -> std::io::Result<()> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let frames_dir = corpus.join("frame_decoder");
    let batches_dir = corpus.join("batch_entries");
    fs::create_dir_all(&frames_dir)?;
    fs::create_dir_all(&batches_dir)?;

    let messages = every_message();
    let mut stream = Vec::new();
    for message in &messages {
        let frame = frame_of(message);
        stream.extend_from_slice(&frame);
        // Control byte 0: fed in varied chunks, checksums as sent.
        fs::write(frames_dir.join(format!("seed-{}", message.command().name())), [&[0u8][..], &frame].concat())?;
    }
    fs::write(frames_dir.join("seed-stream-all-commands"), [&[0x2a_u8][..], &stream].concat())?;
    // Control byte 1: the target re-seals checksums, so mutations survive them.
    fs::write(frames_dir.join("seed-stream-all-commands-sealed"), [&[0x01_u8][..], &stream].concat())?;

    let (commits, replies) = sample_batches();
    let mut bad_commits = commits.body().to_vec();
    bad_commits[COMMIT_ENTRY_SIZE_BYTES + 36] = 7; // entry 1: unknown heartbeat_state
    let mut bad_replies = replies.body().to_vec();
    bad_replies[30] = 1; // entry 0: reserved byte set
    for (name, body) in [
        ("commit", commits.body().to_vec()),
        ("commit-reply", replies.body().to_vec()),
        ("commit-bad-entry", bad_commits.clone()),
        ("commit-reply-bad-entry", bad_replies.clone()),
    ] {
        fs::write(batches_dir.join(format!("seed-{name}")), &body)?;
    }
    let bad_commit_frame = frame_of(&Message::Commit(CommitBatch::from_body(Bytes::from(bad_commits)).expect("whole")));
    fs::write(frames_dir.join("seed-commit-bad-entry"), [&[0u8][..], &bad_commit_frame].concat())?;
    let bad_reply_frame =
        frame_of(&Message::CommitReply(CommitReplyBatch::from_body(Bytes::from(bad_replies)).expect("whole")));
    fs::write(frames_dir.join("seed-commit-reply-bad-entry"), [&[0u8][..], &bad_reply_frame].concat())?;

    let scripts_dir = corpus.join("shard_inputs");
    fs::create_dir_all(&scripts_dir)?;
    for (name, script) in cohort_fuzz::shard_inputs::seeds() {
        fs::write(scripts_dir.join(format!("seed-{name}")), script)?;
    }

    println!("wrote {}, {} and {}", frames_dir.display(), batches_dir.display(), scripts_dir.display());
    Ok(())
}

/// One valid message of every command.
fn every_message() -> Vec<Message> {
    let (commits, replies) = sample_batches();
    let entry = |op| LogEntry {
        op: Op(op),
        view: View(1),
        client: ClientId(9),
        request: RequestNumber(op),
        operation: Bytes::from_static(b"set x 1"),
    };
    let group = GroupId(4);
    let incarnation = Incarnation(1);
    let replica = MemberIndex(1);
    vec![
        Message::Handshake(Handshake {
            revision: WIRE_REVISION,
            cluster: cohort_fuzz::CLUSTER,
            node: NodeId(3),
            shard_count: 2,
        }),
        Message::Request(Request {
            client: ClientId(9),
            request: RequestNumber(1),
            group,
            kind: RequestKind::Write,
            operation: Bytes::from_static(b"set x 1"),
        }),
        Message::Reply(Reply {
            client: ClientId(9),
            request: RequestNumber(1),
            group,
            view: View(2),
            op: Op(5),
            outcome: Outcome::Error { code: ReplyError::Busy, detail: "pipeline full".to_owned() },
        }),
        Message::Prepare(Prepare { group, incarnation, view: View(2), commit: Op(4), replica, entry: entry(5) }),
        Message::PrepareOk(PrepareOk { group, incarnation, view: View(2), op: Op(5), replica }),
        Message::StartViewChange(StartViewChange { group, incarnation, view: View(3), replica }),
        Message::DoViewChange(DoViewChange {
            group,
            incarnation,
            view: View(3),
            log_view: View(2),
            op: Op(6),
            commit: Op(4),
            replica,
            log: vec![entry(5), entry(6)],
        }),
        Message::StartView(StartView {
            group,
            incarnation,
            view: View(3),
            op: Op(6),
            commit: Op(5),
            replica,
            log: vec![entry(5), entry(6)],
        }),
        Message::Commit(commits),
        Message::CommitReply(replies),
        Message::RequestPrepares(RequestPrepares {
            group,
            incarnation,
            view: View(3),
            replica,
            op_min: Op(5),
            op_max: Op(9),
        }),
        Message::RequestStateTransfer(RequestStateTransfer {
            group,
            incarnation,
            view: View(3),
            replica,
            snapshot_op: Op(0),
            offset_bytes: 0,
        }),
        Message::StateChunk(StateChunk {
            group,
            incarnation,
            view: View(3),
            replica,
            snapshot_op: Op(100),
            snapshot_view: View(2),
            offset_bytes: 16,
            total_size_bytes: 64,
            chunk: Bytes::from_static(&[0xab; 16]),
        }),
        Message::Redirect(Redirect {
            group,
            client: ClientId(9),
            request: RequestNumber(1),
            view: View(3),
            primary: Some(NodeId(2)),
        }),
        Message::SessionOpen(SessionOpen { node: NodeId(3), attempt: 1 }),
        Message::SessionKeepalive(SessionKeepalive { node: NodeId(3), session: SessionId(11) }),
        Message::SessionExpired(SessionExpired { node: NodeId(3), session: SessionId(11), epoch: Epoch(40) }),
        Message::SessionOpened(SessionOpened { node: NodeId(3), session: SessionId(12), epoch: Epoch(41) }),
    ]
}
