//! `cohort bench --cluster`: replicated writes on a running cluster,
//! driven over its client ports by the network client (C2), measured from
//! the client's side, with the nodes' own figures from their `/metrics`.
//!
//! Why beside the local bench: the local bench measures cohort with no
//! network client in the way (its writers submit to node handles in the
//! same process), which says what the engine can do; this one measures
//! what a client on another machine gets from a real deployment, through
//! TLS, the client port and the route cache. The keys of its report are the
//! local bench's where they mean the same.
//!
//! How it drives: one [`ClusterClient`] (one pipelined connection per
//! node) and `writers` writers, writer `w` on group `w % groups`, each with
//! its own exactly-once client id (registered with its group first, H5;
//! the registration is not counted as a write), one write at a time,
//! numbered by [`Sequence`] and sent with [`ClusterClient::retry`], so writers of one
//! group run in parallel and a write whose answer was lost is resent with
//! its id and number (it applies once). First every group commits one write
//! (the cluster is up, the routes cached); then a warm-up; then the
//! measured window. The bench writes to groups `0..groups`: on a register
//! (what `cohort node` runs) it replaces their values.

mod report;
pub(crate) mod scrape;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cohort_client::{ClientError, ClusterClient, fresh_client_id};
use cohort_core::client::Sequence;
use cohort_messages::GroupId;
use indicatif::{ProgressBar, ProgressStyle};

pub(crate) use report::NetworkReport;

use self::report::Measured;
use self::scrape::{ServerCounters, scrape};
use crate::bench::process::ProcessUsage;

/// The most writers (each one write in flight; the client carries up to
/// `requests_in_flight_max` per connection and queues the rest).
pub(crate) const WRITERS_MAX: usize = 100_000;

/// The most groups one run writes to (each commits a write before the run).
pub(crate) const GROUPS_MAX: usize = 100_000;

/// The pause after an attempt that reached no node (the client already
/// waited for its own timeout).
const UNREACHABLE_PAUSE: Duration = Duration::from_millis(50);

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct NetworkOptions {
    /// Groups `0..groups`.
    pub groups: usize,
    /// Concurrent writers, one write at a time each.
    pub writers: usize,
    /// The measured window.
    pub seconds: u64,
    /// Writes before the window, not measured.
    pub warmup_secs: u64,
    /// Bytes of each write's operation.
    pub op_size_bytes: usize,
    /// The nodes' admin (or metrics) addresses to scrape `/metrics` from;
    /// empty: no server figures.
    pub metrics: Vec<String>,
    /// Draw the progress bar.
    pub progress: bool,
}

impl NetworkOptions {
    fn check(&self) -> Result<(), String> {
        let rules = [
            ((1..=GROUPS_MAX).contains(&self.groups), format!("--groups must be 1 to {GROUPS_MAX}")),
            ((1..=WRITERS_MAX).contains(&self.writers), format!("--writers must be 1 to {WRITERS_MAX}")),
            (self.seconds >= 1, "--seconds must be at least 1".into()),
            (
                self.op_size_bytes <= cohort_messages::OPERATION_SIZE_MAX_BYTES,
                "--op-size-bytes exceeds the operation limit".into(),
            ),
        ];
        match rules.into_iter().find(|(holds, _)| !holds) {
            Some((_, rule)) => Err(rule),
            None => Ok(()),
        }
    }
}

/// Run the bench against the cluster `client` speaks to, on an async
/// runtime of its own (one thread: the client's cost is what is measured).
pub(crate) fn run(client: ClusterClient, options: NetworkOptions) -> Result<NetworkReport, String> {
    options.check()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))?;
    let result = runtime.block_on(drive(client, options));
    runtime.shutdown_timeout(Duration::from_millis(100));
    result
}

/// What the writers share.
struct Shared {
    client: ClusterClient,
    operation: Bytes,
    measuring: AtomicBool,
    stopping: AtomicBool,
    /// Writes acknowledged so far, window or not (for the progress bar).
    acknowledged: AtomicU64,
    refused: AtomicU64,
    retries: AtomicU64,
    /// Latencies of the writes acknowledged inside the window.
    latencies_us: Mutex<Vec<u64>>,
}

async fn drive(client: ClusterClient, options: NetworkOptions) -> Result<NetworkReport, String> {
    let addresses = client.addresses().join(",");
    wait_ready(&client, options.groups).await.map_err(|error| format!("through {addresses}: {error}"))?;
    let shared = Arc::new(Shared {
        client,
        operation: Bytes::from(vec![0x5A; options.op_size_bytes]),
        measuring: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        acknowledged: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        retries: AtomicU64::new(0),
        latencies_us: Mutex::new(Vec::new()),
    });
    let writers: Vec<_> = (0..options.writers)
        .map(|writer| {
            let shared = Arc::clone(&shared);
            tokio::spawn(write_loop(shared, GroupId((writer % options.groups) as u64)))
        })
        .collect();
    let bar = progress_bar(&options);
    tick_bar(&shared, &bar, "warming up", Duration::from_secs(options.warmup_secs)).await;
    let before = scrape_all(&options.metrics).await;
    let usage_before = ProcessUsage::now().unwrap_or_default();
    let started = Instant::now();
    shared.measuring.store(true, Ordering::Relaxed);
    tick_bar(&shared, &bar, "measuring", Duration::from_secs(options.seconds)).await;
    shared.measuring.store(false, Ordering::Relaxed);
    let window = started.elapsed();
    let usage = ProcessUsage::now().unwrap_or_default().since(usage_before);
    let after = scrape_all(&options.metrics).await;
    shared.stopping.store(true, Ordering::Relaxed);
    bar.finish_and_clear();
    let mut failure = None;
    for writer in writers {
        if let Ok(Err(error)) = writer.await {
            failure.get_or_insert(error);
        }
    }
    if let Some(error) = failure {
        return Err(format!("a writer stopped: {error}"));
    }
    let latencies_us = std::mem::take(&mut *shared.latencies_us.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(NetworkReport::new(Measured {
        addresses: shared.client.addresses(),
        groups: options.groups,
        writers: options.writers,
        op_size_bytes: options.op_size_bytes,
        window,
        latencies_us,
        usage,
        refused_writes: shared.refused.load(Ordering::Relaxed),
        retries: shared.retries.load(Ordering::Relaxed),
        server: server_deltas(&options.metrics, &before, &after),
    }))
}

/// Every group commits a write (each has a primary, and its route is cached).
async fn wait_ready(client: &ClusterClient, groups: usize) -> Result<(), ClientError> {
    let all: Vec<GroupId> = (0..groups as u64).map(GroupId).collect();
    // A warm cache saves each group its first route query; a failure here
    // is not final: the writes below find their way by themselves.
    let _ = client.refresh_routes(&all).await;
    let writes: Vec<_> = all
        .into_iter()
        .map(|group| {
            let client = client.clone();
            tokio::spawn(async move { client.write(group, Bytes::new()).await })
        })
        .collect();
    for write in writes {
        if let Ok(Err(error)) = write.await {
            return Err(error);
        }
    }
    Ok(())
}

/// One writer: its own client id, one write at a time to `group`, each
/// resent with its id and number until it is answered. Ends with an error
/// only for what retrying cannot fix (TLS, a forbidden group, no randomness).
async fn write_loop(shared: Arc<Shared>, group: GroupId) -> Result<(), ClientError> {
    let mut writes = Sequence::new(fresh_client_id()?, group);
    while !shared.stopping.load(Ordering::Relaxed) {
        // H5: a fresh id (the first, or one after a refusal) registers first.
        let registration = writes.registration();
        let registering = registration.is_some();
        let request = registration.unwrap_or_else(|| writes.write(shared.operation.clone()));
        let started = Instant::now();
        loop {
            match shared.client.retry(request.clone()).await {
                Ok(registered) if registering => {
                    writes.registered(registered.op);
                    break;
                }
                Ok(_) => {
                    shared.acknowledged.fetch_add(1, Ordering::Relaxed);
                    if shared.measuring.load(Ordering::Relaxed) {
                        let latency_us = started.elapsed().as_micros() as u64;
                        shared.latencies_us.lock().unwrap_or_else(PoisonError::into_inner).push(latency_us);
                    }
                    break;
                }
                Err(ClientError::Refused { .. }) => {
                    // Superseded or rejected: this id's numbering is over.
                    shared.refused.fetch_add(1, Ordering::Relaxed);
                    writes.restart(fresh_client_id()?);
                    break;
                }
                Err(error) if error.may_have_applied() => {
                    shared.retries.fetch_add(1, Ordering::Relaxed);
                }
                Err(ClientError::Io { .. } | ClientError::NoRoute { .. }) => {
                    shared.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(UNREACHABLE_PAUSE).await;
                }
                Err(error) => return Err(error),
            }
            if shared.stopping.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
    }
    Ok(())
}

fn progress_bar(options: &NetworkOptions) -> ProgressBar {
    let total = (options.warmup_secs + options.seconds) * 1000;
    let bar = if options.progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
    let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// Update the bar every 200 ms for `length`.
async fn tick_bar(shared: &Shared, bar: &ProgressBar, phase: &str, length: Duration) {
    let started = Instant::now();
    let acknowledged = shared.acknowledged.load(Ordering::Relaxed);
    while started.elapsed() < length {
        tokio::time::sleep(Duration::from_millis(200).min(length)).await;
        bar.inc(200);
        let done = shared.acknowledged.load(Ordering::Relaxed) - acknowledged;
        let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
        bar.set_message(format!("{phase} | {rate:.0} writes/s"));
    }
}

/// Scrape every address at once, off the async thread; a failure is
/// reported on stderr and leaves that node out.
async fn scrape_all(addresses: &[String]) -> Vec<Option<ServerCounters>> {
    let scrapes: Vec<_> = addresses
        .iter()
        .map(|address| {
            let address = address.clone();
            tokio::task::spawn_blocking(move || scrape(&address).map_err(|error| format!("{address}: {error}")))
        })
        .collect();
    let mut counters = Vec::new();
    for scrape in scrapes {
        match scrape.await {
            Ok(Ok(scraped)) => counters.push(Some(scraped)),
            Ok(Err(error)) => {
                eprintln!("cohort bench: no server figures from {error}");
                counters.push(None);
            }
            Err(error) => {
                eprintln!("cohort bench: a scrape failed: {error}");
                counters.push(None);
            }
        }
    }
    counters
}

/// The summed deltas of the nodes scraped at both ends, if any.
fn server_deltas(
    addresses: &[String],
    before: &[Option<ServerCounters>],
    after: &[Option<ServerCounters>],
) -> Option<(usize, ServerCounters)> {
    let both: Vec<ServerCounters> =
        before.iter().zip(after).filter_map(|(before, after)| Some(after.as_ref()?.since(*before.as_ref()?))).collect();
    debug_assert!(both.len() <= addresses.len(), "one scrape per address and end");
    if both.is_empty() {
        return None;
    }
    Some((both.len(), both.into_iter().fold(ServerCounters::default(), ServerCounters::plus)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> NetworkOptions {
        NetworkOptions {
            groups: 1,
            writers: 1,
            seconds: 1,
            warmup_secs: 0,
            op_size_bytes: 8,
            metrics: Vec::new(),
            progress: false,
        }
    }

    #[test]
    fn c2_network_bench_options_are_bounded() {
        assert!(options().check().is_ok());
        assert!(NetworkOptions { writers: 0, ..options() }.check().is_err());
        assert!(NetworkOptions { groups: GROUPS_MAX + 1, ..options() }.check().is_err());
        assert!(NetworkOptions { seconds: 0, ..options() }.check().is_err());
        let too_big = NetworkOptions { op_size_bytes: cohort_messages::OPERATION_SIZE_MAX_BYTES + 1, ..options() };
        assert!(too_big.check().is_err());
    }

    #[test]
    fn c2_only_nodes_scraped_at_both_ends_count() {
        let one = ServerCounters { syncs: 2.0, ..ServerCounters::default() };
        let two = ServerCounters { syncs: 5.0, ..ServerCounters::default() };
        let addresses = vec!["a:1".to_string(), "b:1".to_string()];
        let deltas = server_deltas(&addresses, &[Some(one), None], &[Some(two), Some(two)]);
        assert_eq!(deltas.map(|(nodes, counters)| (nodes, counters.syncs)), Some((1, 3.0)));
        assert_eq!(server_deltas(&addresses, &[None, None], &[Some(two), Some(two)]), None);
    }
}
