//! `cohort bench`: replicated writes at the machine's limit, measured.
//!
//! It starts an N-node cluster in this process on loopback TCP, with real
//! write-ahead logs in the data directory (on disk by default; a tmpfs path
//! such as `/dev/shm/cohort-bench` takes the sync cost away), and runs
//! `writers` concurrent writers against `groups` groups. Each writer has
//! its own exactly-once client id and sends one write at a time, to the
//! primary it last heard of. After a warm-up it measures a window of
//! `seconds`: writes, latency percentiles, and what the whole process spent
//! per write (CPU time, socket writes, syncs, context switches), beside the
//! physical floor measured in the same run (see [`floor`]). Speed is a
//! benchmark's business: no test asserts a figure from here.
//!
//! `--state log` makes the groups' state grow with every write (D5,
//! [`state`]), and a [`timeline`] samples the window every
//! `--timeline-secs`, so that a run of minutes shows how the figures move
//! as the state grows. The bench's own bookkeeping stays the same size
//! however long it runs: latencies go into fixed histograms ([`latency`]).
//!
//! The figures, and how to read them on a shared machine, are in
//! `docs/benchmarks.md`. `cohort bench --cluster` drives a running cluster
//! over the network instead ([`network`]).
//!
//! `--state message-log` runs the message log (K7): each group is a
//! partition, each writer a producer whose requests are batches of
//! messages, and `--consumers` read the partitions by offset while the
//! producers write ([`consumers`]); the report adds what they read and the
//! messages' end-to-end latency.

mod catch_up;
mod consumers;
mod direct_io;
pub(crate) mod floor;
mod latency;
pub(crate) mod network;
pub(crate) mod process;
mod report;
mod restart;
pub(crate) mod state;
mod timeline;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cohort_actors::{DropReason, Mailbox, Port, SyncKind};
use cohort_core::client::Sequence;
use cohort_messages::{ClusterId, GroupId, Incarnation, NodeId, ReplyError, RequestKind};
use indicatif::{ProgressBar, ProgressStyle};

pub(crate) use report::BenchReport;
pub(crate) use state::StateShape;

use self::latency::LatencyHistogram;
use self::process::ProcessUsage;
use self::state::StateSizes;
use self::timeline::{Schedule, TIMELINE_SAMPLES_MAX, TimelineSample};
use crate::node::{GroupKind, GroupPlacement, Node, NodeBuilder, NodeHandle, SubmitError};

/// The bench's cluster id.
pub(crate) const BENCH_CLUSTER: ClusterId = ClusterId(0xC0_4087_BE4C);

/// How long one attempt of a write waits for its answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct BenchOptions {
    /// Nodes (at least 1; 3 by default).
    pub nodes: usize,
    /// Groups, every node a member of each, primaries spread over the nodes.
    pub groups: usize,
    /// Concurrent writers, each one write at a time.
    pub writers: usize,
    /// The measured window.
    pub seconds: u64,
    /// Writes before the window, not measured.
    pub warmup_secs: u64,
    /// Bytes of each write's operation.
    pub op_size_bytes: usize,
    /// K5: ops per request (above 1: each request is an op batch of this
    /// many writes of `op_size_bytes`, to groups whose state machine takes
    /// op batches). Every op counts as a write.
    pub batch_ops: usize,
    /// Shards (threads) per node.
    pub shards: usize,
    /// Where the nodes' logs go (`None`: a fresh directory under the
    /// system's temp dir, removed afterwards).
    pub data_dir: Option<PathBuf>,
    /// What the groups' state machines keep (D5).
    pub state: StateShape,
    /// A timeline sample every this many seconds of the window (0: none).
    pub timeline_secs: u64,
    /// Draw the progress bar.
    pub progress: bool,
    /// After the window, wipe the last node and measure its catch-up
    /// (D3, [`catch_up`]).
    pub catch_up: bool,
    /// With `catch_up`: stop and start the new node again halfway.
    pub catch_up_interrupt: bool,
    /// After the window (and before a catch-up), stop the last node and
    /// start it again, its disk kept (D1, [`restart`]).
    pub restart: bool,
    /// D2: a `disk-log` applies on the shard's thread, not its apply
    /// worker (the comparison the apply worker is measured against).
    pub apply_inline: bool,
    /// K7: consumers of the message log (`--state message-log`), consumer
    /// `i` reading partition `i mod groups`.
    pub consumers: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            nodes: 3,
            groups: 1,
            writers: 256,
            seconds: 10,
            warmup_secs: 2,
            op_size_bytes: 8,
            batch_ops: 1,
            shards: 1,
            data_dir: None,
            state: StateShape::Register,
            timeline_secs: 5,
            progress: true,
            catch_up: false,
            catch_up_interrupt: false,
            restart: false,
            apply_inline: false,
            consumers: 0,
        }
    }
}

impl BenchOptions {
    fn check(&self) -> Result<(), String> {
        let rules = [
            (self.nodes >= 1, "--nodes must be at least 1"),
            (self.groups >= 1, "--groups must be at least 1"),
            (self.writers >= 1, "--writers must be at least 1"),
            (self.seconds >= 1, "--seconds must be at least 1"),
            (self.shards >= 1, "--shards must be at least 1"),
            (
                self.op_size_bytes <= cohort_messages::OPERATION_SIZE_MAX_BYTES,
                "--op-size-bytes exceeds the operation limit",
            ),
            (
                (1..=cohort_messages::op_batch::OP_BATCH_OPS_MAX).contains(&self.batch_ops),
                "--batch-ops must be 1 to 8192",
            ),
            (
                self.batch_ops == 1
                    || cohort_messages::op_batch::encoded_size_bytes(std::iter::repeat_n(
                        self.op_size_bytes,
                        self.batch_ops,
                    )) <= cohort_messages::OPERATION_SIZE_MAX_BYTES,
                "--batch-ops x --op-size-bytes exceeds the operation limit (1 MiB per request)",
            ),
            (
                self.timeline_secs == 0 || self.seconds / self.timeline_secs <= TIMELINE_SAMPLES_MAX,
                "--seconds / --timeline-secs exceeds the timeline's sample limit",
            ),
            (!self.catch_up || self.nodes >= 3, "--catch-up needs at least 3 nodes (a quorum while one rejoins)"),
            (self.catch_up || !self.catch_up_interrupt, "--catch-up-interrupt needs --catch-up"),
            (!self.restart || self.nodes >= 3, "--restart needs at least 3 nodes (a quorum while one restarts)"),
            (self.consumers == 0 || self.state == StateShape::MessageLog, "--consumers needs --state message-log"),
            (
                self.state != StateShape::MessageLog
                    || (consumers::STAMP_BYTES..=crate::log_store::MESSAGE_SIZE_MAX_BYTES)
                        .contains(&self.op_size_bytes),
                "--state message-log needs --op-size-bytes of 8 (the message's stamp) to 1 MiB",
            ),
        ];
        match rules.iter().find(|(holds, _)| !holds) {
            Some((_, rule)) => Err(rule.to_string()),
            None => Ok(()),
        }
    }
}

/// Run the bench in a new actix System.
pub(crate) fn run(options: BenchOptions) -> Result<BenchReport, String> {
    options.check()?;
    // A subdirectory of its own, removed afterwards: the data directory
    // given by the caller stays theirs.
    let parent = options.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = parent.join(format!("cohort-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // K5: a batch is synced as one record, so the floor's writes are requests.
    let floor = floor::measure(&dir, options.op_size_bytes * options.batch_ops, options.nodes)?;
    let system = actix_rt::System::new();
    let result = system.block_on(Bench::run(options, dir.clone(), floor));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The counters the window is measured by, summed over the nodes.
#[derive(Copy, Clone, Debug, Default)]
struct Counters {
    usage: ProcessUsage,
    socket_writes: u64,
    syncs: u64,
    log_syncs: u64,
    flushes: u64,
    dropped: u64,
}

struct Bench {
    options: BenchOptions,
    /// Per node; `--catch-up` replaces the last one's.
    handles: RefCell<Vec<NodeHandle>>,
    /// Per group, the index of the node that last answered as its primary.
    guess: RefCell<Vec<usize>>,
    /// Latencies of the writes acknowledged inside the window.
    latencies: RefCell<LatencyHistogram>,
    /// The same, since the last timeline sample.
    interval_latencies: RefCell<LatencyHistogram>,
    /// Every replica's state size.
    sizes: StateSizes,
    measuring: Cell<bool>,
    stopping: Cell<bool>,
    /// Writes acknowledged so far, window or not (for the progress bar).
    acknowledged: Cell<u64>,
    /// Writes that failed for good (refused), which a healthy run never has.
    refused: Cell<u64>,
    /// When the bench began: a message-log message's stamp counts from it.
    epoch: Instant,
    /// K7: per group, messages acknowledged to the producers.
    produced: RefCell<Vec<u64>>,
    /// K7: per consumer, the next offset it reads.
    consumed_offsets: RefCell<Vec<u64>>,
    /// K7: what the consumers read.
    consumption: RefCell<consumers::Consumption>,
}

/// One attempt of a request, as [`Bench::attempt_answer`] saw it.
enum Attempt {
    /// Answered: committed (a write) or served (a read).
    Answered(crate::node::Committed),
    /// Refused for good (counted by the caller).
    Refused,
    /// Not answered (no primary, a redirect, busy, a timeout): send it again.
    Again,
}

impl Bench {
    async fn run(options: BenchOptions, dir: PathBuf, floor: floor::Floor) -> Result<BenchReport, String> {
        let addresses = free_addresses(options.nodes)?;
        // The nodes talk mTLS, as a production cluster does (T1).
        let certs = cohort_actors::local_cluster(&dir.join("certs"), (1..=options.nodes as u64).map(NodeId))
            .map_err(|error| format!("throwaway certificates: {error}"))?;
        let sizes = StateSizes::default();
        let mut nodes = Vec::new();
        for index in 0..options.nodes {
            nodes.push(start_node(&options, index, &addresses, &dir, &certs, &sizes)?);
        }
        let bench = Rc::new(Bench {
            handles: RefCell::new(nodes.iter().map(Node::handle).collect()),
            guess: RefCell::new((0..options.groups).map(|g| g % options.nodes).collect()),
            latencies: RefCell::new(LatencyHistogram::default()),
            interval_latencies: RefCell::new(LatencyHistogram::default()),
            sizes,
            measuring: Cell::new(false),
            stopping: Cell::new(false),
            acknowledged: Cell::new(0),
            refused: Cell::new(0),
            epoch: Instant::now(),
            produced: RefCell::new(vec![0; options.groups]),
            consumed_offsets: RefCell::new(vec![0; options.consumers]),
            consumption: RefCell::new(consumers::Consumption::default()),
            options,
        });
        bench.wait_ready().await?;
        let rss_after_start_bytes = process::resident_bytes();
        let bar = bench.progress_bar();
        let mut writers = Vec::with_capacity(bench.options.writers);
        for writer in 0..bench.options.writers {
            let client = cohort_client::fresh_client_id().map_err(|error| error.to_string())?;
            let bench = Rc::clone(&bench);
            writers.push(actix_rt::spawn(async move { bench.write_loop(writer, client).await }));
        }
        for consumer in 0..bench.options.consumers {
            let bench = Rc::clone(&bench);
            writers.push(actix_rt::spawn(async move { bench.consume_loop(consumer).await }));
        }
        let warmup = Duration::from_secs(bench.options.warmup_secs);
        bench.tick_bar(&bar, "warming up", warmup, None).await;
        let before = bench.counters();
        let chunk_bytes_before = bench.shard_counter_total("state_chunk_bytes_taken");
        let started = Instant::now();
        bench.measuring.set(true);
        let mut timeline = Vec::new();
        let schedule = Schedule::new(bench.options.timeline_secs).map(|schedule| (schedule, &mut timeline));
        bench.tick_bar(&bar, "measuring", Duration::from_secs(bench.options.seconds), schedule).await;
        bench.measuring.set(false);
        let window = started.elapsed();
        let after = bench.counters();
        let consumer_lag_messages = bench.consumer_lag_messages();
        let chunk_bytes_taken = bench.shard_counter_total("state_chunk_bytes_taken").saturating_sub(chunk_bytes_before);
        let (state_bytes, rss_bytes) = (bench.sizes.largest_bytes(), process::resident_bytes());
        let last = bench.options.nodes - 1;
        let mut restart = |wipe: bool| -> Result<(), String> {
            if let Some(node) = nodes.pop() {
                node.stop();
            }
            let data = dir.join(format!("node-{}", last + 1));
            if wipe {
                std::fs::remove_dir_all(&data).map_err(|error| format!("wiping {}: {error}", data.display()))?;
            }
            let node = start_node(&bench.options, last, &addresses, &dir, &certs, &bench.sizes)?;
            bench.handles.borrow_mut()[last] = node.handle();
            nodes.push(node);
            Ok(())
        };
        if bench.options.restart || bench.options.catch_up {
            bar.finish_and_clear();
        }
        let restarted = if bench.options.restart { Some(bench.restart(&mut restart).await?) } else { None };
        let catch_up = if bench.options.catch_up {
            Some(bench.catch_up(&dir, bench.options.catch_up_interrupt, &mut restart).await?)
        } else {
            None
        };
        bench.stopping.set(true);
        for writer in writers {
            let _ = writer.await;
        }
        bar.finish_and_clear();
        let dropped_by_reason = bench.dropped_by_reason();
        let mut report = BenchReport::new(
            &bench.options,
            floor,
            window,
            &bench.latencies.borrow(),
            (before, after),
            bench.refused.get(),
            dropped_by_reason,
        );
        // Every node hosts every group (and its metadata replica).
        let replicas = (bench.options.groups + 1) * bench.options.nodes;
        report.rss_after_start_bytes = rss_after_start_bytes;
        report.state_bytes = state_bytes;
        report.rss_bytes = rss_bytes;
        report.state_chunk_bytes_taken = chunk_bytes_taken;
        report.timeline = timeline;
        report.catch_up = catch_up;
        report.restart = restarted;
        report.add_consumption(&bench.options, &bench.consumption.borrow(), consumer_lag_messages);
        report.memory_bytes_per_replica = rss_after_start_bytes / replicas.max(1) as u64;
        for node in nodes {
            node.stop();
        }
        Ok(report)
    }

    /// Every group commits a write before the bench starts (each has a primary).
    async fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        for group in 0..self.options.groups {
            let client = cohort_client::fresh_client_id().map_err(|error| error.to_string())?;
            // A fresh client's registration (H5) goes through the log as a
            // write does, and applies nothing.
            let request = Sequence::new(client, GroupId(group as u64))
                .registration()
                .ok_or_else(|| "a fresh client id is not registered yet".to_string())?;
            while self.attempt(&request).await.is_none() {
                if Instant::now() > deadline {
                    return Err(format!("group:{group} elected no primary within 30 s"));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    fn progress_bar(&self) -> ProgressBar {
        let total = (self.options.warmup_secs + self.options.seconds) * 1000;
        let bar = if self.options.progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
        let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    }

    /// Update the bar every 200 ms for `length`, and take the timeline's
    /// samples into `timeline` as they fall due.
    async fn tick_bar(
        &self,
        bar: &ProgressBar,
        phase: &str,
        length: Duration,
        mut timeline: Option<(Schedule, &mut Vec<TimelineSample>)>,
    ) {
        let started = Instant::now();
        let acknowledged = self.acknowledged.get();
        // One reading of the clock per tick: the tick that ends the loop
        // is the one that sees the window over.
        let mut elapsed = Duration::ZERO;
        while elapsed < length {
            tokio::time::sleep(Duration::from_millis(200).min(length)).await;
            bar.inc(200);
            elapsed = started.elapsed();
            let rate = (self.acknowledged.get() - acknowledged) as f64 / elapsed.as_secs_f64().max(0.001);
            bar.set_message(format!("{phase} | {rate:.0} writes/s"));
            if let Some((schedule, samples)) = &mut timeline
                && let Some(interval) = schedule.due(elapsed, elapsed >= length)
            {
                let sample = self.sample(interval);
                // Above the bar on a terminal, a plain line when piped.
                bar.suspend(|| eprintln!("{}", sample.line()));
                samples.push(sample);
            }
        }
    }

    /// The timeline's sample of `interval`; starts the next interval's latencies.
    fn sample(&self, interval: timeline::Interval) -> TimelineSample {
        let mut latencies = self.interval_latencies.borrow_mut();
        let sample = TimelineSample::new(
            interval,
            &latencies,
            (self.options.op_size_bytes, self.options.batch_ops),
            self.sizes.largest_bytes(),
            process::resident_bytes(),
        );
        latencies.clear();
        sample
    }

    fn counters(&self) -> Counters {
        let mut counters = Counters { usage: ProcessUsage::now().unwrap_or_default(), ..Counters::default() };
        for handle in self.handles.borrow().iter() {
            let metrics = handle.metrics();
            counters.socket_writes += metrics.socket_writes(Port::Peer);
            counters.syncs += SyncKind::ALL.iter().map(|kind| metrics.syncs(*kind)).sum::<u64>();
            counters.log_syncs += metrics.syncs(SyncKind::Log);
            counters.flushes += metrics.flushes();
            counters.dropped += metrics.dropped_total();
        }
        counters
    }

    fn dropped_by_reason(&self) -> Vec<(String, u64)> {
        let mut by_reason = Vec::new();
        for mailbox in Mailbox::ALL {
            for reason in DropReason::ALL {
                let count: u64 =
                    self.handles.borrow().iter().map(|handle| handle.metrics().dropped(mailbox, reason)).sum();
                if count > 0 {
                    by_reason.push((format!("{}/{}", mailbox.as_str(), reason.as_str()), count));
                }
            }
        }
        by_reason
    }

    /// One writer: its own client id, one write at a time to its group (a
    /// producer of the message log: to each partition in turn).
    async fn write_loop(&self, writer: usize, client: cohort_messages::ClientId) {
        let groups = self.options.groups;
        // K7: a producer of the message log sends its batches to every
        // partition in turn, from its own on; any other writer to its own.
        let producing = self.options.state == StateShape::MessageLog;
        let turns = if producing { groups } else { 1 };
        let mut sessions: Vec<Sequence> =
            (0..turns).map(|turn| Sequence::new(client, GroupId(((writer + turn) % groups) as u64))).collect();
        let operation = Bytes::from(vec![0x5A; self.options.op_size_bytes]);
        // K5: a batch of `batch_ops` such writes per request.
        let (kind, operation) = match self.options.batch_ops {
            1 if !producing => (RequestKind::Write, operation),
            ops => match cohort_messages::op_batch::encode(&vec![operation; ops]) {
                Ok(batch) => (RequestKind::WriteBatch, batch),
                Err(_) => return, // `check` refused the options.
            },
        };
        // H5: the registrations first, not counted as writes.
        for writes in &mut sessions {
            let Some(registration) = writes.registration() else { continue };
            let mut registered = None;
            while !self.stopping.get() && registered.is_none() {
                registered = self.attempt(&registration).await;
            }
            // A registration refused for good (counted) ends the writer.
            match registered {
                Some(op) if op > cohort_messages::Op(0) => writes.registered(op),
                _ => return,
            }
        }
        for turn in (0..turns).cycle() {
            if self.stopping.get() {
                return;
            }
            let writes = &mut sessions[turn];
            let started = Instant::now();
            let operation = match producing {
                // K7: a producer's messages are stamped afresh for each request.
                true => {
                    let made_us = started.duration_since(self.epoch).as_micros() as u64;
                    consumers::stamped(made_us, self.options.op_size_bytes, self.options.batch_ops)
                }
                false => operation.clone(),
            };
            let request = cohort_messages::Request { kind, ..writes.write(operation) };
            // The same request until it is answered: it applies once.
            while !self.stopping.get() && self.attempt(&request).await.is_none() {}
            if self.stopping.get() {
                return;
            }
            self.acknowledged.set(self.acknowledged.get() + self.options.batch_ops as u64);
            if producing {
                self.produced.borrow_mut()[request.group.0 as usize] += self.options.batch_ops as u64;
            }
            if self.measuring.get() {
                let latency_us = started.elapsed().as_micros() as u64;
                self.latencies.borrow_mut().record(latency_us);
                self.interval_latencies.borrow_mut().record(latency_us);
            }
        }
    }

    /// Send `request` once to its group's primary as last heard of; the op
    /// it committed at once it is acknowledged, `None` to send it again. A
    /// refusal for good (which a healthy run never sees) is counted and ends
    /// the write as done, at op 0.
    async fn attempt(&self, request: &cohort_messages::Request) -> Option<cohort_messages::Op> {
        match self.attempt_answer(request).await {
            Attempt::Answered(committed) => Some(committed.op),
            Attempt::Refused => {
                self.refused.set(self.refused.get() + 1);
                Some(cohort_messages::Op(0))
            }
            Attempt::Again => None,
        }
    }

    /// Send `request` once to its group's primary as last heard of, and
    /// follow what the answer says of the primary.
    async fn attempt_answer(&self, request: &cohort_messages::Request) -> Attempt {
        let index = request.group.0 as usize;
        let target = self.guess.borrow()[index];
        let handle = self.handles.borrow()[target].clone();
        match handle.submit_as(request.clone(), ATTEMPT_TIMEOUT).await {
            Ok(committed) => Attempt::Answered(committed),
            Err(SubmitError::NotPrimary { primary: Some(primary), .. })
                if primary.0 >= 1 && (primary.0 as usize) <= self.options.nodes =>
            {
                self.guess.borrow_mut()[index] = primary.0 as usize - 1;
                Attempt::Again
            }
            Err(SubmitError::Refused { code, .. }) if !cohort_core::client::retryable(code) => Attempt::Refused,
            Err(SubmitError::Refused { code: ReplyError::Busy, .. } | SubmitError::Busy { .. }) => {
                tokio::time::sleep(Duration::from_micros(200)).await;
                Attempt::Again
            }
            Err(_) => {
                self.guess.borrow_mut()[index] = (target + 1) % self.options.nodes;
                tokio::time::sleep(Duration::from_millis(5)).await;
                Attempt::Again
            }
        }
    }
}

fn start_node(
    options: &BenchOptions,
    index: usize,
    addresses: &[SocketAddr],
    dir: &std::path::Path,
    certs: &cohort_actors::LocalCerts,
    sizes: &StateSizes,
) -> Result<Node, String> {
    let node = NodeId(index as u64 + 1);
    let files = certs.node(node).ok_or_else(|| format!("no certificate for node {}", node.0))?;
    let mut builder = NodeBuilder::new(BENCH_CLUSTER, node)
        .tls(files.clone())
        .listen(addresses[index])
        .data_dir(dir.join(format!("node-{}", node.0)))
        .shards(options.shards)
        .state_machine({
            let (shape, sizes, inline) = (options.state, sizes.of_node(index), options.apply_inline);
            let op_batches = options.batch_ops > 1 || options.state == StateShape::MessageLog;
            let state_dir = dir.join(format!("node-{}", node.0)).join("state");
            move |group| shape.state_machine(&sizes, group, &state_dir, inline, op_batches)
        });
    for (peer, address) in addresses.iter().enumerate() {
        if peer != index {
            builder = builder.peer(NodeId(peer as u64 + 1), *address);
        }
    }
    let nodes = options.nodes;
    for g in 0..options.groups {
        let members = (0..nodes).map(|i| NodeId(((g + i) % nodes) as u64 + 1)).collect();
        builder = builder.group(GroupPlacement {
            group: GroupId(g as u64),
            incarnation: Incarnation(1),
            members,
            replication_quorum: None,
            write_mode: cohort_core::WriteMode::Sync,
            kind: GroupKind::default(),
        });
    }
    builder.start().map_err(|error| format!("node {}: {error}", node.0))
}

fn free_addresses(n: usize) -> Result<Vec<SocketAddr>, String> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").map_err(|error| format!("no free port: {error}")))
        .collect::<Result<_, _>>()?;
    listeners.iter().map(|l| l.local_addr().map_err(|error| error.to_string())).collect()
}
