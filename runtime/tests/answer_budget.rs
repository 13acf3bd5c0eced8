//! H4 on a real node: a client that stores a large value, then floods reads
//! of it on several connections and never reads the answers, holds at most
//! its connection's answer budget on each, and all of them together at most
//! the node's; the node stops reading their requests meanwhile, serves
//! another client, and delivers every answer once the flooder reads.
//!
//! The node runs in this process and its client port speaks mTLS, as a
//! `cohort node` does. This binary counts live heap bytes with a counting
//! allocator, so the bound is checked on what the process holds, not only
//! on what the port's own gauges say. The tests take turns (one lock), so
//! one test's heap is not another's.

use std::alloc::System;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cap::Cap;
use cohort_messages::{ClientId, FrameDecoder, Handshake, Message, Outcome, Request, TraceContext, WIRE_REVISION};
use cohort_runtime::local::LOCAL_CLUSTER_ID;
use cohort_runtime::metrics::{AnswerBudget, NodeMetrics};
use cohort_runtime::network::{ClusterClient, TlsFiles};
use cohort_runtime::node::{ANSWER_RESERVE_BYTES, ClientPortLimits};
use cohort_runtime::prelude::*;
use cohort_runtime::tls::Credentials;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// One test at a time: the heap counts are the process's.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The value the flooder stores: half the largest operation.
const VALUE_SIZE_BYTES: usize = 512 * 1024;

/// The group the flooder reads; the well-behaved client uses another.
const FLOODED: GroupId = GroupId(1);
const QUIET: GroupId = GroupId(2);

/// A node with a client port and the given bounds. The write timeout is
/// long because the flooders wait on purpose before they read, on a
/// machine that may be busy with other builds.
fn node(limits: ClientPortLimits) -> LocalCluster {
    LocalCluster::builder(1)
        .client_ports()
        .client_limits(ClientPortLimits { write_timeout: Duration::from_secs(120), ..limits })
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [FLOODED, QUIET])
        .start()
        .expect("the node starts")
}

/// A raw mTLS client of the port, past the Handshake.
struct RawClient {
    stream: tokio_rustls::client::TlsStream<TcpStream>,
    buffer: BytesMut,
    decoder: FrameDecoder,
}

impl RawClient {
    async fn connect(cluster: &LocalCluster) -> RawClient {
        let address = cluster.client_addresses()[0];
        let credentials = Credentials::load(&cluster.certs().client).expect("client credentials");
        let config = cohort_runtime::tls::client_config(&credentials).expect("client config");
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = rustls_pki_types::ServerName::try_from("nodes.cohort").expect("a name");
        let tcp = TcpStream::connect(address).await.expect("connect");
        let stream = connector.connect(name, tcp).await.expect("TLS");
        let mut client = RawClient { stream, buffer: BytesMut::new(), decoder: FrameDecoder::new(LOCAL_CLUSTER_ID) };
        let hello = Handshake { revision: WIRE_REVISION, cluster: LOCAL_CLUSTER_ID, node: NodeId(0), shard_count: 1 };
        client.send(&[Message::Handshake(hello)]).await;
        assert!(matches!(client.next().await, Some(Message::Handshake(_))), "the node greets back");
        client
    }

    /// Every message's frame, in one write.
    async fn send(&mut self, messages: &[Message]) {
        let mut bytes = BytesMut::new();
        for message in messages {
            message.encode_into(LOCAL_CLUSTER_ID, NodeId(0), TraceContext::NONE, &mut bytes);
        }
        self.stream.write_all(&bytes).await.expect("the node reads");
        self.stream.flush().await.expect("flushed");
    }

    async fn next(&mut self) -> Option<Message> {
        loop {
            if let Ok(Some(frame)) = self.decoder.decode(&mut self.buffer) {
                return frame.message().ok();
            }
            let read = tokio::time::timeout(Duration::from_secs(30), self.stream.read_buf(&mut self.buffer)).await;
            if !matches!(read, Ok(Ok(n)) if n > 0) {
                return None;
            }
        }
    }
}

fn request(client: u128, number: u64, kind: RequestKind, operation: Bytes) -> Message {
    Message::Request(Request {
        client: ClientId(client),
        request: RequestNumber(number),
        group: FLOODED,
        kind,
        operation,
    })
}

/// Store the large value through the port; returns it.
async fn store_value(cluster: &LocalCluster) -> Bytes {
    let value = Bytes::from((0..VALUE_SIZE_BYTES).map(|index| (index % 251) as u8).collect::<Vec<u8>>());
    let mut writer = RawClient::connect(cluster).await;
    // Client 1's registration (H5: request 1, no operation), then the write.
    writer.send(&[request(1, 1, RequestKind::Write, Bytes::new())]).await;
    let registered = match writer.next().await {
        Some(Message::Reply(reply)) if matches!(reply.outcome, Outcome::Ok(_)) => reply.op,
        other => panic!("the registration's answer, not {other:?}"),
    };
    // H5: the write is numbered after the registration's op.
    writer.send(&[request(1, registered.0 + 1, RequestKind::Write, value.clone())]).await;
    match writer.next().await {
        Some(Message::Reply(reply)) => assert!(matches!(reply.outcome, Outcome::Ok(_)), "{reply:?}"),
        other => panic!("the write's reply, not {other:?}"),
    }
    value
}

/// `connections` raw clients, each of which sends `reads` reads of the
/// value in one write and reads nothing back.
async fn flood(cluster: &LocalCluster, connections: usize, reads: u64) -> Vec<RawClient> {
    let mut flooders = Vec::new();
    for _ in 0..connections {
        flooders.push(RawClient::connect(cluster).await);
    }
    send_reads(&mut flooders, 1..=reads).await;
    flooders
}

/// Each flooder sends the reads numbered `numbers`, in one write.
async fn send_reads(flooders: &mut [RawClient], numbers: std::ops::RangeInclusive<u64>) {
    for (index, flooder) in flooders.iter_mut().enumerate() {
        let client_id = 100 + index as u128;
        let messages: Vec<Message> =
            numbers.clone().map(|number| request(client_id, number, RequestKind::Read, Bytes::new())).collect();
        flooder.send(&messages).await;
    }
}

/// Read `reads` answers on each flooder, all of them at once: every one
/// the stored value. (One after another would not do: a flooder that is
/// not reading yet holds its share of the node's budget, which the one
/// reading may be waiting for, until the write timeout.)
async fn read_every_answer(flooders: Vec<RawClient>, reads: u64, value: &Bytes) {
    let mut readers = tokio::task::JoinSet::new();
    for (index, mut flooder) in flooders.into_iter().enumerate() {
        let value = value.clone();
        readers.spawn(async move {
            let mut numbers = Vec::new();
            for _ in 0..reads {
                match flooder.next().await {
                    Some(Message::Reply(reply)) => {
                        assert_eq!(reply.outcome, Outcome::Ok(value.clone()), "flooder {index}: the value, whole");
                        numbers.push(reply.request.0);
                    }
                    other => panic!("flooder {index}: a reply, not {other:?} after {} answers", numbers.len()),
                }
            }
            numbers.sort_unstable();
            assert_eq!(numbers, (1..=reads).collect::<Vec<_>>(), "flooder {index}: every read answered once");
        });
    }
    while let Some(read) = readers.join_next().await {
        read.expect("a flooder read every answer");
    }
}

/// Wait up to 30 s for `done`, checking every `every`.
async fn eventually(every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(every).await;
    }
    done()
}

/// Wait until the queued bytes stay put for a moment: the flooders'
/// answers have filled what the kernel's socket buffers take, then the
/// budgets.
async fn settled(metrics: &NodeMetrics) {
    let mut last = u64::MAX;
    let settled = eventually(Duration::from_millis(300), || {
        let now = metrics.client_answer_bytes().queued_bytes;
        now > 0 && std::mem::replace(&mut last, now) == now
    });
    assert!(settled.await, "the queue settles: {:?}", metrics.client_answer_bytes());
}

/// Pauses so far, for each budget.
fn pauses(metrics: &NodeMetrics) -> [u64; 2] {
    AnswerBudget::ALL.map(|budget| metrics.client_reads_paused(budget))
}

/// Wait until the node has stopped reading `at_least` times (for either
/// budget, or for `budget` alone).
async fn paused(metrics: &NodeMetrics, budget: Option<AnswerBudget>, at_least: u64) {
    let count = || budget.map_or(pauses(metrics).iter().sum(), |budget| metrics.client_reads_paused(budget));
    let paused = eventually(Duration::from_millis(20), || count() >= at_least).await;
    assert!(paused, "{at_least} pauses for {budget:?}: {:?}, {:?}", pauses(metrics), metrics.client_answer_bytes());
}

/// Nothing stays queued once every answer was read.
async fn drained(metrics: &NodeMetrics) {
    let empty = eventually(Duration::from_millis(20), || metrics.client_answer_bytes().queued_bytes == 0);
    assert!(empty.await, "{:?}", metrics.client_answer_bytes());
}

/// A client that reads its answers: writes and reads of small values on
/// the other group, over its own connections to the same port.
async fn well_behaved(cluster: &LocalCluster) -> usize {
    let files = &cluster.certs().client;
    let files = TlsFiles { ca: files.ca.clone(), cert: files.cert.clone(), key: files.key.clone() };
    let client = ClusterClient::builder(LOCAL_CLUSTER_ID, cluster.client_addresses().iter().map(ToString::to_string))
        .tls(files)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a network client");
    let mut served = 0;
    for round in 0..10 {
        let value = format!("quiet {round}");
        client.write(QUIET, value.clone()).await.unwrap_or_else(|error| panic!("write {round}: {error}"));
        let read = client.read(QUIET, Bytes::new()).await.unwrap_or_else(|error| panic!("read {round}: {error}"));
        assert_eq!(read.result, Bytes::from(value));
        served += 2;
    }
    served
}

/// The largest answer frame: a Reply that carries the value.
fn answer_size_bytes(value: &Bytes) -> u64 {
    let reply = cohort_messages::Reply {
        client: ClientId(1),
        request: RequestNumber(1),
        group: FLOODED,
        view: cohort_messages::View(1),
        op: cohort_messages::Op(1),
        outcome: Outcome::Ok(value.clone()),
    };
    Message::Reply(reply).frame_size_bytes() as u64
}

#[actix_rt::test]
async fn h4_a_client_that_never_reads_holds_at_most_its_answer_budget() {
    let _turn = TURN.lock().await;
    let limits = ClientPortLimits::default();
    let cluster = node(limits);
    let handle = cluster.handle(NodeId(1)).expect("node 1");
    let metrics = handle.metrics();
    let value = store_value(&cluster).await;
    const CONNECTIONS: usize = 4;
    const READS: u64 = 256;
    const LATE_READS: u64 = 64;
    let heap_before = ALLOCATOR.allocated();
    // 4 x 256 reads of 512 KiB: 512 MiB of answers asked for, none read.
    let mut flooders = flood(&cluster, CONNECTIONS, READS).await;
    settled(metrics).await;
    // More reads, past the 256 a connection may have in flight: they wait
    // in the socket (not one is answered Busy), as the node reads no more.
    send_reads(&mut flooders, READS + 1..=READS + LATE_READS).await;
    paused(metrics, Some(AnswerBudget::Connection), CONNECTIONS as u64).await;
    let served = well_behaved(&cluster).await;
    let queued = metrics.client_answer_bytes();
    // The most the process held since the flood began (an upper bound: the
    // counter keeps the peak since the binary started).
    let heap_peak_growth = ALLOCATOR.max_allocated().saturating_sub(heap_before);
    eprintln!(
        "H4 defaults: {CONNECTIONS} connections x {READS} reads of {VALUE_SIZE_BYTES} B unread: {queued:?} \
         (budgets {} B per connection, {} B per node); paused {} times; live heap grew by at most {} KiB; \
         another client was served {served} times meanwhile",
        limits.answer_bytes_max,
        limits.answer_bytes_node_max,
        metrics.client_reads_paused(AnswerBudget::Connection),
        heap_peak_growth >> 10,
    );
    let connection_max = limits.answer_bytes_max as u64;
    assert!(queued.connection_peak_bytes <= connection_max, "one connection held {queued:?}");
    assert!(queued.connection_peak_bytes > connection_max / 2, "the budget was reached: {queued:?}");
    let reserves = (CONNECTIONS as u64 + 2) * ANSWER_RESERVE_BYTES as u64;
    let node_bound = CONNECTIONS as u64 * connection_max + reserves;
    assert!(queued.queued_peak_bytes <= node_bound, "the node held {queued:?}");
    // What the process holds: the queued answers and little else (before
    // H4 every answer was held, here 512 MiB, and copied once more to write).
    let heap_bound = node_bound as usize + 32 * 1024 * 1024;
    assert!(heap_peak_growth < heap_bound, "the heap grew by {heap_peak_growth} B at its peak");
    // Once they read, the flooders get every answer, and nothing stays queued.
    read_every_answer(flooders, READS + LATE_READS, &value).await;
    assert_eq!(metrics.refused(cohort_runtime::metrics::Port::Client, "in_flight_max"), 0, "no read was refused");
    drained(metrics).await;
}

#[actix_rt::test]
async fn h4_the_node_budget_caps_every_connection_together_and_other_clients_are_still_served() {
    let _turn = TURN.lock().await;
    let limits = ClientPortLimits { answer_bytes_max: 1 << 20, answer_bytes_node_max: 2 << 20, ..Default::default() };
    let cluster = node(limits);
    let handle = cluster.handle(NodeId(1)).expect("node 1");
    let metrics = handle.metrics();
    let value = store_value(&cluster).await;
    const CONNECTIONS: usize = 6;
    const READS: u64 = 64;
    // 6 connections, 1 MiB each: 6 MiB of budgets under a 2 MiB node.
    let mut flooders = flood(&cluster, CONNECTIONS, READS).await;
    settled(metrics).await;
    send_reads(&mut flooders, READS + 1..=READS + 1).await;
    paused(metrics, Some(AnswerBudget::Node), 1).await;
    let node_full = metrics.client_answer_bytes().queued_bytes;
    let served = well_behaved(&cluster).await;
    let queued = metrics.client_answer_bytes();
    eprintln!(
        "H4 node budget: {CONNECTIONS} connections x {READS} reads of {VALUE_SIZE_BYTES} B unread: queued {queued:?} \
         (budgets {} B per connection, {} B per node); paused {} times for connections, {} for the node; \
         another client served {served} times while {node_full} B were queued",
        limits.answer_bytes_max,
        limits.answer_bytes_node_max,
        metrics.client_reads_paused(AnswerBudget::Connection),
        metrics.client_reads_paused(AnswerBudget::Node),
    );
    let node_max = limits.answer_bytes_node_max as u64;
    let reserves = (CONNECTIONS as u64 + 2) * ANSWER_RESERVE_BYTES as u64;
    assert!(queued.queued_peak_bytes <= node_max + reserves, "the node held {queued:?}");
    assert!(queued.connection_peak_bytes <= limits.answer_bytes_max as u64, "one connection held {queued:?}");
    assert!(node_full + answer_size_bytes(&value) > node_max, "the node's budget was full: {node_full} B");
    read_every_answer(flooders, READS + 1, &value).await;
    drained(metrics).await;
}

#[actix_rt::test]
async fn h4_an_answer_larger_than_the_whole_budget_is_still_delivered_one_at_a_time() {
    let _turn = TURN.lock().await;
    let budget = cohort_runtime::node::ANSWER_BUDGET_MIN_BYTES;
    let limits = ClientPortLimits { answer_bytes_max: budget, ..Default::default() };
    let cluster = node(limits);
    let handle = cluster.handle(NodeId(1)).expect("node 1");
    let metrics = handle.metrics();
    let value = store_value(&cluster).await;
    const READS: u64 = 64;
    let mut flooders = flood(&cluster, 2, READS).await;
    settled(metrics).await;
    send_reads(&mut flooders, READS + 1..=READS + 1).await;
    paused(metrics, None, 2).await;
    let queued = metrics.client_answer_bytes();
    let answer = answer_size_bytes(&value);
    eprintln!("H4 oversized: answers of {answer} B under a {budget} B budget: queued {queued:?}");
    assert!(answer > budget as u64, "each answer is larger than the whole budget");
    assert!(queued.connection_peak_bytes <= answer, "one answer at a time per connection: {queued:?}");
    let reserve = ANSWER_RESERVE_BYTES as u64;
    assert!(queued.queued_peak_bytes <= 2 * (answer + reserve), "one per connection, and greetings: {queued:?}");
    read_every_answer(flooders, READS + 1, &value).await;
    drained(metrics).await;
}
