//! Criterion benchmark of the batch codecs (R10, R26).
//!
//! Encode: build the batch body from 10,000 entries and seal it into a frame
//! (header, both crc32c checksums). Decode: check the frame (header, cluster,
//! body checksum), decode the message, then decode and validate every entry,
//! as a receiver does before routing entries to their shards.
//!
//! Throughput is reported per entry and per byte of frame (header included).
//! Run: `cargo bench -p cohort-messages --bench batch_codec`.

use std::hint::black_box;

use cohort_messages::{
    Batch, ClusterId, CommitBatch, CommitEntry, CommitReplyBatch, CommitReplyEntry, FixedEntry, GroupId,
    HeartbeatState, Incarnation, MemberIndex, Message, NodeId, Op, Timestamp, TraceContext, View, decode_message,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Entries per batch: a shard leading 10,000 groups, one Commit each.
const BATCH_ENTRIES: u64 = 10_000;
const CLUSTER: ClusterId = ClusterId(0xc0);
const SENDER: NodeId = NodeId(1);

fn commit_entries() -> Vec<CommitEntry> {
    let states = [HeartbeatState::Busy, HeartbeatState::Idle, HeartbeatState::Eager];
    (0..BATCH_ENTRIES)
        .map(|group| CommitEntry {
            group: GroupId(group),
            partition_incarnation: Incarnation(1 + group % 3),
            view: View(7),
            commit: Op(1_000_000 + group),
            timestamp_monotonic: Timestamp(5_000 + group),
            heartbeat_state: states[group as usize % 3],
            replica: MemberIndex((group % 3) as u8),
        })
        .collect()
}

fn commit_reply_entries() -> Vec<CommitReplyEntry> {
    (0..BATCH_ENTRIES)
        .map(|group| CommitReplyEntry {
            group: GroupId(group),
            partition_incarnation: Incarnation(1 + group % 3),
            view: View(7),
            timestamp_monotonic: Timestamp(5_000 + group),
            replica: MemberIndex((group % 3) as u8),
        })
        .collect()
}

/// Benchmark encoding and decoding one batch kind. `wrap` makes the message
/// of a batch; `unwrap` gets the batch back out of a decoded message.
fn bench_batch<E: FixedEntry>(
    criterion: &mut Criterion,
    name: &str,
    entries: &[E],
    wrap: fn(Batch<E>) -> Message,
    unwrap: fn(Message) -> Option<Batch<E>>,
) {
    let frame = wrap(Batch::encode(entries)).encode(CLUSTER, SENDER, TraceContext::NONE).to_bytes();
    let mut group = criterion.benchmark_group(name);
    group.throughput(Throughput::ElementsAndBytes { elements: BATCH_ENTRIES, bytes: frame.len() as u64 });

    group.bench_function("encode", |bencher| {
        bencher.iter(|| wrap(Batch::encode(black_box(entries))).encode(CLUSTER, SENDER, TraceContext::NONE))
    });

    group.bench_function("decode", |bencher| {
        bencher.iter(|| {
            let (_, message) = decode_message(black_box(frame.clone()), CLUSTER).expect("a valid frame");
            let batch = unwrap(message).expect("the same command");
            let mut valid = 0u64;
            for entry in batch.entries() {
                valid += u64::from(black_box(entry).is_ok());
            }
            assert_eq!(valid, BATCH_ENTRIES);
        })
    });
    group.finish();
}

fn commit_batch(criterion: &mut Criterion) {
    bench_batch::<CommitEntry>(
        criterion,
        "commit_batch_10000",
        &commit_entries(),
        |batch: CommitBatch| Message::Commit(batch),
        |message| match message {
            Message::Commit(batch) => Some(batch),
            _ => None,
        },
    );
}

fn commit_reply_batch(criterion: &mut Criterion) {
    bench_batch::<CommitReplyEntry>(
        criterion,
        "commit_reply_batch_10000",
        &commit_reply_entries(),
        |batch: CommitReplyBatch| Message::CommitReply(batch),
        |message| match message {
            Message::CommitReply(batch) => Some(batch),
            _ => None,
        },
    );
}

criterion_group!(benches, commit_batch, commit_reply_batch);
criterion_main!(benches);
