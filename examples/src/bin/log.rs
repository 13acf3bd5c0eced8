//! A partitioned, append-only message log on cohort: each partition is a
//! group whose state machine is the list of its messages. Producers append
//! (the write's result is the message's offset); consumers read by offset
//! with linearizable reads and check that they see every message exactly once
//! and each producer's messages in the order it sent them.
//!
//! ```text
//! cargo run -p cohort-examples --bin log -- --partitions 4 --producers 4 --messages 100
//! cargo run -p cohort-examples --bin log -- --async    # Q4: acknowledged before replication
//! ```

use std::collections::HashMap;

use clap::Parser;
use cohort_runtime::prelude::*;

/// The example's flags.
#[derive(Parser)]
#[command(about = "A partitioned, append-only message log on cohort, with producers and consumers by offset")]
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
    /// Acknowledge appends once the primary's copy is durable (Q4), not after replication.
    #[arg(long = "async")]
    asynchronous: bool,
}

/// A consumer reads at most this many messages per read.
const FETCH_MESSAGES_MAX: u32 = 64;

/// One partition: its messages, by offset.
#[derive(Default)]
struct Partition(Vec<Bytes>);

impl StateMachine for Partition {
    /// Append; the result is the new message's offset.
    fn apply(&mut self, _op: Op, message: &[u8]) -> Bytes {
        self.0.push(Bytes::copy_from_slice(message));
        Bytes::copy_from_slice(&(self.0.len() as u64 - 1).to_le_bytes())
    }

    /// Query: offset (u64) and count (u32). Answer: messages, each length-prefixed (u32).
    fn read(&self, query: &[u8]) -> Bytes {
        let (Some(offset), Some(count)) = (query.get(..8), query.get(8..12)) else { return Bytes::new() };
        let offset = u64::from_le_bytes(offset.try_into().unwrap_or_default()) as usize;
        let count = u32::from_le_bytes(count.try_into().unwrap_or_default()).min(FETCH_MESSAGES_MAX) as usize;
        encode(self.0.iter().skip(offset).take(count))
    }

    fn snapshot(&self) -> Bytes {
        encode(self.0.iter())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = decode(snapshot).ok_or("snapshot is truncated")?;
        Ok(())
    }
}

fn encode<'a>(messages: impl Iterator<Item = &'a Bytes>) -> Bytes {
    let mut out = Vec::new();
    for message in messages {
        out.extend_from_slice(&(message.len() as u32).to_le_bytes());
        out.extend_from_slice(message);
    }
    out.into()
}

fn decode(mut input: &[u8]) -> Option<Vec<Bytes>> {
    let mut messages = Vec::new();
    while !input.is_empty() {
        let length = u32::from_le_bytes(input.get(..4)?.try_into().ok()?) as usize;
        messages.push(Bytes::copy_from_slice(input.get(4..4 + length)?));
        input = &input[4 + length..];
    }
    Some(messages)
}

/// Producer `producer` appends `messages` messages, spread over the partitions.
async fn produce(client: Client, producer: u64, messages: u64, partitions: u64) -> Result<u64, ClientError> {
    for sequence in 0..messages {
        let partition = GroupId((producer + sequence) % partitions);
        client.write(partition, format!("{producer}:{sequence}")).await?;
    }
    Ok(messages)
}

/// Read `partition` from offset 0 until `expected` messages; check each
/// producer's messages arrive in order. Returns the messages read.
async fn consume(client: Client, partition: GroupId, expected: usize) -> Result<usize, Box<dyn std::error::Error>> {
    let (mut offset, mut next_of) = (0u64, HashMap::<u64, u64>::new());
    while (offset as usize) < expected {
        let query = [&offset.to_le_bytes()[..], &FETCH_MESSAGES_MAX.to_le_bytes()].concat();
        let batch = decode(&client.read(partition, query).await?.result).ok_or("bad fetch answer")?;
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
    Ok(offset as usize)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Flags { partitions, producers, messages, asynchronous } = Flags::parse();
    let mode = if asynchronous { WriteMode::Async } else { WriteMode::Sync };
    actix_rt::System::new().block_on(async move {
        let cluster = LocalCluster::builder(3)
            .group_kind("partition", |_| Box::new(Partition::default()))
            .groups_with("partition", mode, (0..partitions).map(GroupId))
            .start()?;
        let started = std::time::Instant::now();
        let producing: Vec<_> = (0..producers)
            .map(|producer| actix_rt::spawn(produce(Client::new(cluster.handles()), producer, messages, partitions)))
            .collect();
        let mut expected = vec![0usize; partitions as usize];
        for producer in 0..producers {
            for sequence in 0..messages {
                expected[((producer + sequence) % partitions) as usize] += 1;
            }
        }
        let consuming: Vec<_> = (0..partitions)
            .map(|p| actix_rt::spawn(consume(cluster.client(), GroupId(p), expected[p as usize])))
            .collect();
        for producer in producing {
            producer.await??;
        }
        let mut consumed = 0;
        for (partition, consumer) in consuming.into_iter().enumerate() {
            let read = consumer.await??;
            println!("partition {partition}: consumed {read} messages in producer order");
            consumed += read;
        }
        println!(
            "log: {producers} producers appended {} messages ({mode:?} writes), consumers read all {consumed} in order, in {:?}",
            producers * messages,
            started.elapsed()
        );
        Ok(())
    })
}
