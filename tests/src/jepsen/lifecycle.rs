//! H3 during the workload: one group, created by the harness before the
//! clients start, is deleted and created again under its id while the
//! clients read and write it, at times drawn from the seed. Its new life
//! must start empty on every member; the checker
//! ([`crate::jepsen::checker`]) holds the reads to that.
//!
//! The operator does what a person at `cohort admin` would: it sends the
//! delete to one node's admin port, and on no answer or a refusal tries
//! the next one, until the metadata records it (exit 0, or a node's
//! `/status` shows the group deleted: an earlier attempt applied). Then it
//! waits [`Settings::gap_ms`], longer than an old primary's quorum window,
//! so that the old life's replicas have stopped answering on a healthy
//! cluster (docs/metadata.md, "A group id's lives"), and creates the group
//! again the same way. Each pair is one [`Recreation`] in the history.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::jepsen::admin::{CommandResult, Operator, created_incarnation};
use crate::jepsen::error::Error;
use crate::jepsen::history::{Clock, Recreation};
use crate::jepsen::workload::Shared;
use crate::rng::Rng;

/// Pause between two attempts of one command.
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// The most of a command's output kept in a detail.
const DETAIL_SIZE_MAX_BYTES: usize = 300;

/// When and how the group is deleted and created again.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settings {
    /// The group (a key of the workload, apart from the configured ones).
    pub group: u64,
    /// Clients of this group alone, besides those of the configured
    /// groups: while the group is deleted their ops wait out their
    /// timeouts, and the other clients must not wait with them.
    pub clients: usize,
    /// Their target ops/s, together.
    pub rate_per_s: f64,
    /// The first re-creation starts this long after the workload (ms).
    pub first_ms: (u64, u64),
    /// Between the starts of two re-creations (ms).
    pub interval_ms: (u64, u64),
    /// No re-creation starts less than this before the final heal (ms).
    pub before_heal_ms: u64,
    /// Between the recorded delete and the first create (ms).
    pub gap_ms: u64,
    /// The operator gives up a delete, or a create, after this long (ms).
    pub give_up_ms: u64,
}

/// The start times of the re-creations (ms on the run's clock) of a run
/// whose final heal starts at `heal_at_ms`: a function of the seed.
pub fn schedule(seed: u64, heal_at_ms: u64, settings: &Settings) -> Vec<u64> {
    let mut rng = Rng::new(seed ^ 0x0052_4543_5245_4154);
    let last_ms = heal_at_ms.saturating_sub(settings.before_heal_ms);
    let mut times = Vec::new();
    let mut at = rng.range(settings.first_ms.0, settings.first_ms.1);
    while at <= last_ms {
        times.push(at);
        at += rng.range(settings.interval_ms.0, settings.interval_ms.1);
    }
    times
}

/// The members argument naming every node (`1,2,3`).
fn members(nodes: usize) -> String {
    (1..=nodes).map(|node| node.to_string()).collect::<Vec<_>>().join(",")
}

/// Create the group before the workload, retrying until `timeout`; its
/// incarnation.
pub fn create_first(operator: &Operator, group: u64, timeout: Duration) -> Result<u64, Error> {
    let deadline = Instant::now() + timeout;
    let members = members(operator.nodes());
    let mut target = 0;
    loop {
        let result = operator.command(target, &["create-group", "--group", &group.to_string(), "--members", &members]);
        if result.code == Some(0) {
            return created_incarnation(&result.text)
                .ok_or_else(|| Error::new(format!("create-group answered without an incarnation: {}", result.text)));
        }
        if let Some(record) = operator.group_record(group).filter(|record| record.live) {
            return Ok(record.incarnation);
        }
        if Instant::now() >= deadline {
            return Err(Error::new(format!(
                "group {group} could not be created within {:.0} s: {}",
                timeout.as_secs_f64(),
                short(&result)
            )));
        }
        target = (target + 1) % operator.nodes();
        std::thread::sleep(RETRY_PAUSE);
    }
}

/// Start the operator's thread: one re-creation at each of `times`, until
/// `shared.stop` (a re-creation under way is finished first: the group is
/// never left deleted on purpose).
pub fn start(shared: &Arc<Shared>, operator: Operator, settings: Settings, times: Vec<u64>) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    std::thread::spawn(move || {
        for at_ms in times {
            let until = shared.clock.at(at_ms * 1_000_000);
            while Instant::now() < until && !shared.stop.load(Ordering::Relaxed) {
                std::thread::sleep(RETRY_PAUSE.min(until.saturating_duration_since(Instant::now())));
            }
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            let recreation = recreate(&operator, &settings, &shared.clock);
            shared.history.push_recreation(recreation);
        }
    })
}

/// One delete and creation again of `settings.group`.
pub fn recreate(operator: &Operator, settings: &Settings, clock: &Clock) -> Recreation {
    let group = settings.group.to_string();
    let members = members(operator.nodes());
    let give_up = Duration::from_millis(settings.give_up_ms);
    let old = operator.group_record(settings.group).map(|record| record.incarnation);
    let mut recreation = Recreation {
        key: settings.group,
        invoke_ns: clock.now_ns(),
        deleted_ns: None,
        create_invoke_ns: None,
        complete_ns: 0,
        incarnation: None,
        commands: 0,
        detail: None,
    };
    let mut target = 0;
    let deleted = until_recorded(give_up, operator.nodes(), &mut target, &mut recreation, |target, recreation| {
        recreation.commands += 1;
        let result = operator.command(target, &["delete-group", "--group", &group]);
        if result.code == Some(0) {
            return Some(());
        }
        recreation.detail = Some(format!("delete via n{}: {}", target + 1, short(&result)));
        // An earlier attempt may have applied.
        operator.group_record(settings.group).filter(|record| !record.live).map(|_| ())
    });
    if deleted.is_none() {
        recreation.complete_ns = clock.now_ns();
        return recreation;
    }
    recreation.deleted_ns = Some(clock.now_ns());
    std::thread::sleep(Duration::from_millis(settings.gap_ms));
    recreation.create_invoke_ns = Some(clock.now_ns());
    let created = until_recorded(give_up, operator.nodes(), &mut target, &mut recreation, |target, recreation| {
        recreation.commands += 1;
        let result = operator.command(target, &["create-group", "--group", &group, "--members", &members]);
        if let Some(incarnation) = created_incarnation(&result.text).filter(|_| result.code == Some(0)) {
            return Some(incarnation);
        }
        recreation.detail = Some(format!("create via n{}: {}", target + 1, short(&result)));
        operator
            .group_record(settings.group)
            .filter(|record| record.live && old.is_none_or(|old| record.incarnation > old))
            .map(|record| record.incarnation)
    });
    recreation.complete_ns = clock.now_ns();
    recreation.incarnation = created;
    if created.is_some() {
        debug_assert!(old.is_none_or(|old| created > Some(old)), "a new life has a higher incarnation");
    }
    recreation
}

/// Call `attempt` on node `target`, then the next of `nodes`, ... until it
/// returns `Some` or `give_up` passed.
fn until_recorded<T>(
    give_up: Duration,
    nodes: usize,
    target: &mut usize,
    recreation: &mut Recreation,
    mut attempt: impl FnMut(usize, &mut Recreation) -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + give_up;
    loop {
        if let Some(done) = attempt(*target, recreation) {
            return Some(done);
        }
        if Instant::now() >= deadline {
            return None;
        }
        *target = (*target + 1) % nodes;
        std::thread::sleep(RETRY_PAUSE);
    }
}

/// The first line of a command's output, cut to [`DETAIL_SIZE_MAX_BYTES`].
fn short(result: &CommandResult) -> String {
    let line = result.text.lines().find(|line| !line.trim().is_empty()).unwrap_or("").trim();
    let cut: String = line.chars().take(DETAIL_SIZE_MAX_BYTES).collect();
    match result.code {
        Some(code) => format!("exit {code}: {cut}"),
        None => cut,
    }
}
