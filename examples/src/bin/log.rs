//! A partitioned, append-only message log on cohort: each partition is a
//! group whose state machine keeps its messages on disk, in segment files
//! (`cohort_runtime::log_store`, D1). Producers append in batches of
//! `--batch-messages` (K5: one write per batch, each message's result its
//! offset); consumers read by offset with linearizable reads, from the
//! files, and check that they see every message exactly once and each
//! producer's messages in the order it sent them.
//!
//! Under `--data-dir` (default: a temporary directory, removed on exit)
//! node N keeps its write-ahead log in `node-N/` and its partitions in
//! `node-N/log/partition-<id>/`. A partition keeps at most
//! `--retention-bytes` of segments (`--segment-size-max-bytes` each): a
//! consumer that asks for an offset retention has dropped is answered
//! "trimmed" with the earliest kept offset, goes on from there, and counts
//! what it missed. With the defaults (1 GiB, 64 MiB) nothing is dropped.
//!
//! ```text
//! cargo run -p cohort-examples --bin log -- --partitions 4 --producers 4 --messages 100 --batch-messages 16
//! cargo run -p cohort-examples --bin log -- --async    # Q4: acknowledged before replication
//! cargo run -p cohort-examples --bin log -- --data-dir /tmp/log --retention-bytes 4096 --segment-size-max-bytes 1024
//! ```

use std::collections::HashMap;
use std::path::PathBuf;

use clap::Parser;
use cohort_runtime::log_store::{
    Answer, FETCH_MESSAGES_MAX, LogStore, LogStoreConfig, RETENTION_BYTES_DEFAULT, SEGMENT_SIZE_MAX_BYTES_DEFAULT,
    decode_answer, fetch,
};
use cohort_runtime::prelude::*;

/// The example's flags.
#[derive(Parser)]
#[command(
    about = "A partitioned, append-only message log on cohort, kept on disk, with producers and consumers by offset"
)]
struct Flags {
    /// Partitions (one group each).
    #[arg(long, default_value_t = 4)]
    partitions: u64,
    /// Concurrent producers.
    #[arg(long, default_value_t = 4)]
    producers: u64,
    /// Messages per producer.
    #[arg(long, default_value_t = 100)]
    messages: u64,
    /// Messages per batch a producer sends (K5; 1 to 8192).
    #[arg(long, default_value_t = 16)]
    batch_messages: u64,
    /// Acknowledge appends once the primary's copy is durable (Q4), not after replication.
    #[arg(long = "async")]
    asynchronous: bool,
    /// Where the nodes keep their logs and partitions (default: a
    /// temporary directory, removed on exit).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A partition drops its oldest segments while it holds more than this.
    #[arg(long, default_value_t = RETENTION_BYTES_DEFAULT)]
    retention_bytes: u64,
    /// A partition's segments are cut at this size.
    #[arg(long, default_value_t = SEGMENT_SIZE_MAX_BYTES_DEFAULT)]
    segment_size_max_bytes: u64,
}

/// The partition of producer `producer`'s batch `batch`: its batches go
/// round the partitions.
fn partition_of(producer: u64, batch: u64, partitions: u64) -> GroupId {
    GroupId((producer + batch) % partitions)
}

/// The messages of producer `producer`'s batch `batch`, by sequence.
fn batch_sequences(batch: u64, batch_messages: u64, messages: u64) -> std::ops::Range<u64> {
    batch * batch_messages..((batch + 1) * batch_messages).min(messages)
}

/// Producer `producer` appends `messages` messages in batches of
/// `batch_messages`, spread over the partitions; the batches it sent.
async fn produce(
    client: Client,
    producer: u64,
    messages: u64,
    batch_messages: u64,
    partitions: u64,
) -> Result<u64, ClientError> {
    let batches = messages.div_ceil(batch_messages);
    for batch in 0..batches {
        let sequences = batch_sequences(batch, batch_messages, messages);
        let appended = sequences.clone().map(|sequence| format!("{producer}:{sequence}"));
        let written = client.write_batch(partition_of(producer, batch, partitions), appended).await?;
        debug_assert!(written.results.is_empty() || written.results.len() == sequences.count());
    }
    Ok(batches)
}

/// What a consumer read of its partition.
struct Consumed {
    /// Messages read, each producer's in order.
    read: u64,
    /// Messages retention dropped before they were read.
    trimmed: u64,
}

/// Read `partition` from offset 0 until `expected` messages; check each
/// producer's messages arrive in order. An offset retention dropped is
/// skipped (and counted): reading goes on at the earliest one kept.
async fn consume(client: Client, partition: GroupId, expected: u64) -> Result<Consumed, Box<dyn std::error::Error>> {
    let (mut offset, mut trimmed, mut next_of) = (0u64, 0u64, HashMap::<u64, u64>::new());
    while offset < expected {
        let answer = client.read(partition, fetch(offset, FETCH_MESSAGES_MAX)).await?.result;
        let batch = match decode_answer(&answer)? {
            Answer::Messages(batch) => batch,
            Answer::Trimmed { earliest } if earliest > offset => {
                trimmed += earliest - offset;
                offset = earliest;
                continue;
            }
            Answer::Trimmed { earliest } => {
                return Err(format!("{partition}: {offset} trimmed below {earliest}").into());
            }
            Answer::Failed(reason) => return Err(format!("{partition} offset {offset}: {reason}").into()),
        };
        for message in &batch {
            let text = std::str::from_utf8(message)?;
            let (producer, sequence) = text.split_once(':').ok_or("bad message")?;
            let (producer, sequence): (u64, u64) = (producer.parse()?, sequence.parse()?);
            let next = next_of.entry(producer).or_insert(sequence);
            if sequence < *next {
                return Err(format!("{partition} offset {offset}: {text} out of order or twice").into());
            }
            *next = sequence + 1;
            offset += 1;
        }
        if batch.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    Ok(Consumed { read: offset - trimmed, trimmed })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Flags {
        partitions,
        producers,
        messages,
        batch_messages,
        asynchronous,
        data_dir,
        retention_bytes,
        segment_size_max_bytes,
    } = Flags::parse();
    if !(1..=cohort_runtime::op_batch::OP_BATCH_OPS_MAX as u64).contains(&batch_messages) {
        return Err(format!("--batch-messages must be 1 to {}", cohort_runtime::op_batch::OP_BATCH_OPS_MAX).into());
    }
    let mode = if asynchronous { WriteMode::Async } else { WriteMode::Sync };
    let config = LogStoreConfig { segment_size_max_bytes, retention_bytes };
    config.check()?;
    let (dir, _removed_on_exit) = match data_dir {
        Some(dir) => (dir, None),
        None => tempfile::tempdir().map(|temporary| (temporary.path().to_owned(), Some(temporary)))?,
    };
    actix_rt::System::new().block_on(async move {
        let files = dir.clone();
        let cluster = LocalCluster::builder(3)
            .data_dir(dir)
            .group_kind_per_node("partition", move |node, group| {
                Box::new(LogStore::open_or_empty(&files.join(format!("node-{}", node.0)).join("log"), group, config))
            })
            .groups_with("partition", mode, (0..partitions).map(GroupId))
            .start()?;
        let started = std::time::Instant::now();
        let producing: Vec<_> = (0..producers)
            .map(|producer| {
                let client = Client::new(cluster.handles());
                actix_rt::spawn(produce(client, producer, messages, batch_messages, partitions))
            })
            .collect();
        let mut expected = vec![0u64; partitions as usize];
        for producer in 0..producers {
            for batch in 0..messages.div_ceil(batch_messages) {
                let partition = partition_of(producer, batch, partitions).0 as usize;
                expected[partition] += batch_sequences(batch, batch_messages, messages).count() as u64;
            }
        }
        let consuming: Vec<_> = (0..partitions)
            .map(|p| actix_rt::spawn(consume(cluster.client(), GroupId(p), expected[p as usize])))
            .collect();
        let mut batches = 0;
        for producer in producing {
            batches += producer.await??;
        }
        let (mut consumed, mut dropped) = (0, 0);
        for (partition, consumer) in consuming.into_iter().enumerate() {
            let Consumed { read, trimmed } = consumer.await??;
            match trimmed {
                0 => println!("partition {partition}: consumed {read} messages in producer order"),
                _ => println!(
                    "partition {partition}: consumed {read} messages in producer order, {trimmed} dropped by retention first"
                ),
            }
            (consumed, dropped) = (consumed + read, dropped + trimmed);
        }
        let appended = producers * messages;
        let elapsed = started.elapsed();
        match dropped {
            0 => println!(
                "log: {producers} producers appended {appended} messages in {batches} batches ({mode:?} writes), consumers read all {consumed} in order, in {elapsed:?}"
            ),
            _ => println!(
                "log: {producers} producers appended {appended} messages in {batches} batches ({mode:?} writes), consumers read {consumed} in order and skipped {dropped} dropped by retention, in {elapsed:?}"
            ),
        }
        cluster.stop();
        Ok(())
    })
}
