//! What the `cohort-sim` binary needs besides its loop: argument parsing,
//! the command that reproduces a seed, running a seed with its panic caught,
//! and the JSON summary line. Kept in the library so tests use the same
//! code to run seeds and to say how to reproduce one.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::panic::{self, AssertUnwindSafe};

use cohort_core::mutants::Mutant;

use crate::sim::{FaultProfile, ForgerMode, Report, Scenario, Sim, SimConfig};
use crate::storage::{StateKind, StorageKind};

/// The usage text.
pub const USAGE: &str = "usage: cohort-sim --seeds N [--seed-start S] [--nodes 3|5] [--learners C] [--groups G] \
[--shards S] [--storage file|memory] [--state memory|disk] [--replication-quorum Q] [--fault-ticks T] [--liveness-ticks T] \
[--scenario default|metadata|reconfigure] [--profile mixed|durability|partitions] [--mutant NAME] \
[--forger non-member|replay] [--transfers on|off] [--quiesce-ticks T] [--metadata-voters V] \
[--clients C] [--clients-max M] [--op-batches] [--json]

Runs seeds S..S+N of the deterministic simulator and checks every run.
  --seeds N                 how many seeds (default 10)
  --seed-start S            the first seed (default 0)
  --nodes N                 nodes in the cluster, every node a member of every group (default 3)
  --learners C            extra nodes that are learners (P4) of every group: never
                            counted, never primary, must catch up after healing (default 0)
  --groups G                replication groups (default 4)
  --shards S                shards per node; groups go to shards as on a real node (default 2)
  --storage K               file: the real write-ahead log on a fault-injecting simulated disk
                            (default); memory: the core's in-memory storage
  --state K                 D1: where the kv groups' state machines keep their state: memory
                            (default; snapshotted whole) or disk (checkpointed to the simulated
                            disk; applies since the last checkpoint are lost at any crash)
  --replication-quorum Q    Qr, acks needed to commit, 1..=nodes (default: majority)
  --fault-ticks T           ticks of the fault phase (default 1500)
  --liveness-ticks T        tick budget of the liveness phase (default 1500)
  --scenario S              default, or metadata: every node also hosts the metadata group and
                            runs its metadata agent (sessions, expiry, re-owning), with long pauses;
                            or reconfigure: an operator changes group members under the faults
                            (seal the incarnation, switch the next members)
  --profile P               the family every seed draws its faults from (default: each seed draws
                            its own: mixed half of the time, durability or partitions a quarter each)
  --mutant NAME             break one safety rule on purpose (builds with the `mutants` feature
                            only): ack-before-durable, view-change-before-durable,
                            log-selection-by-op, view-change-quorum-short, commit-quorum-short,
                            inherited-ops-not-first, stale-view-accepted, other-incarnation-accepted,
                            read-without-quorum, quorum-window-too-long, lease-ignored,
                            lease-released-by-next-primary, recovery-ignored,
                            recovery-votes-with-its-log, step-gate-without-acks,
                            pair-contact-without-match, quiet-follow-across-views,
                            evicted-client-admitted, unload-before-replayable
  --forger F                T6: a forging peer joins the run: non-member, a node outside every group
                            that sends random well-formed messages of every command to every node;
                            or replay, a member that resends genuine frames it saw earlier, to any node
  --transfers on|off        C4: in the fault phase, now and then ask a primary to hand its group to a
                            random voter (default on; off leaves every other draw of a seed as it is)
  --quiesce-ticks T         Z3, opt-in: groups idle T ticks quiesce (commit_quiesce_timeout), and
                            each group rests now and then (no writes, a rare read) so they do;
                            absent (default): no quiescence, every draw of a seed as without it
  --metadata-voters V       metadata scenario: the metadata group's voters are the first V nodes
                            and the others learn its log (Z5); the operator also moves, replaces,
                            grows and shrinks its voters (Z6) (default: every node votes)
  --clients C               simulated clients, each with one request in flight (default 6)
  --clients-max M           H5: clients a group's client table holds (default 64); below --clients
                            the tables evict, an evicted client starts again under a fresh id
                            (default scenario only)
  --op-batches              K5: the kv groups' state machines take op batches; every write is sent
                            as one (a put or compare-and-set alone, or two to four puts of one key),
                            and a batch's results are checked to be its ops' one after another
  --json                    also print one JSON summary line per seed
The last line is `seeds=N violations=V ops_committed=C view_changes=X seeds_failed=F ...` with the
disks' fault counters (the metadata scenario adds its session counters, reconfigure its member
changes, `--forger` the frames it sent; every run the refusals, and how many of them only forged
input causes, and the random primary transfers started and refused); the exit code is 1
if any seed broke an invariant, 2 on bad arguments.";

/// Most nodes a command line may ask for (member indexes are one byte, and
/// more would only slow the run).
pub const NODES_MAX: usize = 9;

/// Most learner nodes a command line may ask for.
pub const LEARNERS_MAX: usize = 4;

/// Most groups a command line may ask for.
pub const GROUPS_MAX: usize = 1024;

/// Most shards per node a command line may ask for.
pub const SHARDS_MAX: usize = 16;

/// The most simulated clients `--clients` takes (each keeps one request in
/// flight, and every read widens the linearizability search).
pub const CLIENTS_MAX: usize = 64;

/// Parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// How many seeds.
    pub seeds: u64,
    /// The first seed.
    pub seed_start: u64,
    /// Nodes.
    pub nodes: usize,
    /// Learner nodes (P4).
    pub learners: usize,
    /// Groups.
    pub groups: usize,
    /// Shards per node.
    pub shards: usize,
    /// The storage of every shard.
    pub storage: StorageKind,
    /// D1: where the kv groups' state machines keep their state.
    pub state: StateKind,
    /// The broken rule (the `mutants` feature only).
    pub mutant: Option<Mutant>,
    /// The fault family (None: each seed draws its own).
    pub profile: Option<FaultProfile>,
    /// T6: the forging peer, if any.
    pub forger: Option<ForgerMode>,
    /// C4: random primary transfers in the fault phase.
    pub transfers: bool,
    /// Replication quorum (None: majority).
    pub replication_quorum: Option<usize>,
    /// Ticks of the fault phase.
    pub fault_ticks: u64,
    /// Tick budget of the liveness phase.
    pub liveness_ticks: u64,
    /// What runs besides the kv groups.
    pub scenario: Scenario,
    /// Z3: `commit_quiesce_timeout_ticks` (None: off).
    pub quiesce_ticks: Option<u64>,
    /// Z6, metadata scenario: the metadata group's voters (None: every node).
    pub metadata_voters: Option<usize>,
    /// Simulated clients.
    pub clients: usize,
    /// H5: `clients_max` of every group's client table.
    pub clients_max: usize,
    /// K5: every kv write is an op batch.
    pub op_batches: bool,
    /// Print a JSON line per seed.
    pub json: bool,
    /// Print the usage and exit.
    pub help: bool,
}

impl Default for Args {
    fn default() -> Self {
        let shape = SimConfig::new(0);
        Args {
            seeds: 10,
            seed_start: 0,
            nodes: shape.nodes,
            learners: shape.learners,
            groups: shape.groups,
            shards: shape.shards,
            storage: shape.storage,
            state: shape.state,
            mutant: None,
            profile: shape.profile,
            forger: shape.forger,
            transfers: shape.transfers,
            replication_quorum: shape.replication_quorum,
            fault_ticks: shape.fault_ticks,
            liveness_ticks: shape.liveness_ticks,
            scenario: shape.scenario,
            quiesce_ticks: shape.core.timing.commit_quiesce_timeout_ticks,
            metadata_voters: shape.metadata_voters,
            clients: shape.clients,
            clients_max: shape.core.clients_max,
            op_batches: shape.op_batches,
            json: false,
            help: false,
        }
    }
}

impl Args {
    /// Parse the arguments after the program name. The error says which
    /// argument is wrong and why.
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Args, String> {
        let mut parsed = Args::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--json" => parsed.json = true,
                "--op-batches" => parsed.op_batches = true,
                "--help" | "-h" => parsed.help = true,
                "--seeds" => parsed.seeds = number(&flag, args.next())?,
                "--seed-start" => parsed.seed_start = number(&flag, args.next())?,
                "--nodes" => parsed.nodes = number(&flag, args.next())?,
                "--learners" => parsed.learners = number(&flag, args.next())?,
                "--groups" => parsed.groups = number(&flag, args.next())?,
                "--shards" => parsed.shards = number(&flag, args.next())?,
                "--storage" => parsed.storage = storage(&flag, args.next())?,
                "--state" => parsed.state = state(&flag, args.next())?,
                "--mutant" => parsed.mutant = Some(mutant(&flag, args.next())?),
                "--profile" => parsed.profile = Some(profile(&flag, args.next())?),
                "--forger" => parsed.forger = Some(forger(&flag, args.next())?),
                "--transfers" => parsed.transfers = on_off(&flag, args.next())?,
                "--replication-quorum" => parsed.replication_quorum = Some(number(&flag, args.next())?),
                "--fault-ticks" => parsed.fault_ticks = number(&flag, args.next())?,
                "--liveness-ticks" => parsed.liveness_ticks = number(&flag, args.next())?,
                "--scenario" => parsed.scenario = scenario(&flag, args.next())?,
                "--quiesce-ticks" => parsed.quiesce_ticks = Some(number(&flag, args.next())?),
                "--metadata-voters" => parsed.metadata_voters = Some(number(&flag, args.next())?),
                "--clients" => parsed.clients = number(&flag, args.next())?,
                "--clients-max" => parsed.clients_max = number(&flag, args.next())?,
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        parsed.validate()?;
        Ok(parsed)
    }

    fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 || self.nodes > NODES_MAX {
            return Err(format!("--nodes must be 1..={NODES_MAX}, not {}", self.nodes));
        }
        if self.learners > LEARNERS_MAX {
            return Err(format!("--learners must be 0..={LEARNERS_MAX}, not {}", self.learners));
        }
        if self.learners > 0 && self.scenario != Scenario::Default {
            return Err("--learners runs in the default scenario only".into());
        }
        if let Some(voters) = self.metadata_voters {
            if self.scenario != Scenario::Metadata {
                return Err("--metadata-voters runs in the metadata scenario only".into());
            }
            if voters == 0 || voters > self.nodes {
                return Err(format!("--metadata-voters must be 1..={} (the node count), not {voters}", self.nodes));
            }
        }
        if self.groups == 0 || self.groups > GROUPS_MAX {
            return Err(format!("--groups must be 1..={GROUPS_MAX}, not {}", self.groups));
        }
        if self.shards == 0 || self.shards > SHARDS_MAX {
            return Err(format!("--shards must be 1..={SHARDS_MAX}, not {}", self.shards));
        }
        if self.mutant.is_some() && !cfg!(feature = "mutants") {
            return Err("--mutant needs a build with the `mutants` feature \
                        (cargo run --release -p cohort-sim --features mutants -- ...)"
                .into());
        }
        if let Some(quorum) = self.replication_quorum
            && (quorum == 0 || quorum > self.nodes)
        {
            return Err(format!("--replication-quorum must be 1..={} (the node count), not {quorum}", self.nodes));
        }
        if self.clients > CLIENTS_MAX {
            return Err(format!("--clients must be 0..={CLIENTS_MAX}, not {}", self.clients));
        }
        if self.clients_max == 0 {
            return Err("--clients-max must be at least 1".into());
        }
        if self.clients_max != Args::default().clients_max && self.scenario != Scenario::Default {
            return Err("--clients-max runs in the default scenario only".into());
        }
        if self.op_batches && self.scenario == Scenario::Metadata {
            return Err("--op-batches runs in the default and reconfigure scenarios (the metadata scenario's operator probes with plain writes)".into());
        }
        if self.quiesce_ticks == Some(0) {
            return Err("--quiesce-ticks must be at least 1".into());
        }
        if self.seed_start.checked_add(self.seeds).is_none() {
            return Err("--seed-start + --seeds overflows u64".into());
        }
        Ok(())
    }

    /// The run of `seed` with these arguments.
    pub fn config(&self, seed: u64) -> SimConfig {
        let mut config = SimConfig::new(seed);
        config.nodes = self.nodes;
        config.learners = self.learners;
        config.groups = self.groups;
        config.shards = self.shards;
        config.storage = self.storage;
        config.state = self.state;
        config.profile = self.profile;
        config.forger = self.forger;
        config.transfers = self.transfers;
        set_mutant(&mut config, self.mutant);
        config.replication_quorum = self.replication_quorum;
        config.fault_ticks = self.fault_ticks;
        config.liveness_ticks = self.liveness_ticks;
        config.scenario = self.scenario;
        config.core.timing.commit_quiesce_timeout_ticks = self.quiesce_ticks;
        config.metadata_voters = self.metadata_voters;
        config.clients = self.clients;
        config.core.clients_max = self.clients_max;
        config.op_batches = self.op_batches;
        config
    }

    /// The command that runs `seed` alone with these arguments.
    pub fn reproduce(&self, seed: u64) -> String {
        reproduce(&self.config(seed))
    }
}

/// Switch `mutant` on in `config` (only builds with the `mutants` feature
/// have the switch; `Args::validate` refuses a mutant in the others).
#[cfg(feature = "mutants")]
fn set_mutant(config: &mut SimConfig, mutant: Option<Mutant>) {
    config.core.mutant = mutant;
}

#[cfg(not(feature = "mutants"))]
fn set_mutant(_config: &mut SimConfig, _mutant: Option<Mutant>) {}

/// The mutant switched on in `config`, if the build has the switch.
#[cfg(feature = "mutants")]
fn mutant_of(config: &SimConfig) -> Option<Mutant> {
    config.core.mutant
}

#[cfg(not(feature = "mutants"))]
fn mutant_of(_config: &SimConfig) -> Option<Mutant> {
    None
}

fn storage(flag: &str, value: Option<String>) -> Result<StorageKind, String> {
    match value.as_deref() {
        Some("file") => Ok(StorageKind::File),
        Some("memory") => Ok(StorageKind::Memory),
        Some(other) => Err(format!("{flag} must be `file` or `memory`, not `{other}`")),
        None => Err(format!("{flag} needs a value")),
    }
}

fn state(flag: &str, value: Option<String>) -> Result<StateKind, String> {
    match value.as_deref() {
        Some("memory") => Ok(StateKind::Memory),
        Some("disk") => Ok(StateKind::Disk),
        Some(other) => Err(format!("{flag} must be `memory` or `disk`, not `{other}`")),
        None => Err(format!("{flag} needs a value")),
    }
}

fn profile(flag: &str, value: Option<String>) -> Result<FaultProfile, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    FaultProfile::from_name(&value)
        .ok_or_else(|| format!("{flag} must be `mixed`, `durability` or `partitions`, not `{value}`"))
}

fn forger(flag: &str, value: Option<String>) -> Result<ForgerMode, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    ForgerMode::from_name(&value).ok_or_else(|| format!("{flag} must be `non-member` or `replay`, not `{value}`"))
}

fn mutant(flag: &str, value: Option<String>) -> Result<Mutant, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    Mutant::from_name(&value).ok_or_else(|| {
        let names: Vec<&str> = Mutant::ALL.iter().map(|mutant| mutant.name()).collect();
        format!("{flag} must be one of {}, not `{value}`", names.join(", "))
    })
}

fn on_off(flag: &str, value: Option<String>) -> Result<bool, String> {
    match value.as_deref() {
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(format!("{flag} must be `on` or `off`, not `{other}`")),
        None => Err(format!("{flag} needs a value")),
    }
}

fn scenario(flag: &str, value: Option<String>) -> Result<Scenario, String> {
    match value.as_deref() {
        Some("default") => Ok(Scenario::Default),
        Some("metadata") => Ok(Scenario::Metadata),
        Some("reconfigure") => Ok(Scenario::Reconfigure),
        Some(other) => Err(format!("{flag} must be `default`, `metadata` or `reconfigure`, not `{other}`")),
        None => Err(format!("{flag} needs a value")),
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value.parse().map_err(|_| format!("{flag} needs a whole number, not `{value}`"))
}

/// The command line that reruns `config`'s seed alone. Only what the
/// command line can set is carried over (tick counts only when they differ
/// from the defaults): a test that changed anything else (faults, core
/// knobs) says so itself.
pub fn reproduce(config: &SimConfig) -> String {
    let defaults = SimConfig::new(config.seed);
    let mut command = format!(
        "cargo run --release --bin cohort-sim -- --seeds 1 --seed-start {} --nodes {} --groups {}",
        config.seed, config.nodes, config.groups
    );
    if config.learners > 0 {
        let _ = write!(command, " --learners {}", config.learners);
    }
    if let Some(voters) = config.metadata_voters {
        let _ = write!(command, " --metadata-voters {voters}");
    }
    if config.shards != defaults.shards {
        let _ = write!(command, " --shards {}", config.shards);
    }
    if config.storage != defaults.storage {
        let _ = write!(command, " --storage {}", config.storage.name());
    }
    if config.state != defaults.state {
        let _ = write!(command, " --state {}", config.state.name());
    }
    if let Some(quorum) = config.replication_quorum {
        let _ = write!(command, " --replication-quorum {quorum}");
    }
    if config.fault_ticks != defaults.fault_ticks {
        let _ = write!(command, " --fault-ticks {}", config.fault_ticks);
    }
    if config.liveness_ticks != defaults.liveness_ticks {
        let _ = write!(command, " --liveness-ticks {}", config.liveness_ticks);
    }
    if config.scenario != defaults.scenario {
        let _ = write!(command, " --scenario {}", config.scenario.name());
    }
    if let Some(profile) = config.profile {
        let _ = write!(command, " --profile {}", profile.name());
    }
    if let Some(forger) = config.forger {
        let _ = write!(command, " --forger {}", forger.name());
    }
    if let Some(ticks) = config.core.timing.commit_quiesce_timeout_ticks {
        let _ = write!(command, " --quiesce-ticks {ticks}");
    }
    if config.clients != defaults.clients {
        let _ = write!(command, " --clients {}", config.clients);
    }
    if config.core.clients_max != defaults.core.clients_max {
        let _ = write!(command, " --clients-max {}", config.core.clients_max);
    }
    if config.op_batches {
        command.push_str(" --op-batches");
    }
    if config.transfers != defaults.transfers {
        let _ = write!(command, " --transfers {}", if config.transfers { "on" } else { "off" });
    }
    if let Some(mutant) = mutant_of(config) {
        command = command.replacen("--bin cohort-sim", "-p cohort-sim --features mutants --bin cohort-sim", 1);
        let _ = write!(command, " --mutant {}", mutant.name());
    }
    command
}

thread_local! {
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Install a panic hook that, inside [`run_catching`], records the message
/// and where it was raised instead of printing it; elsewhere it prints as
/// before. For binaries that print the panic themselves, with the seed.
pub fn install_quiet_panic_hook() {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !CATCHING.with(Cell::get) {
            return previous(info);
        }
        let location = info.location().map(|at| format!(" at {}:{}", at.file(), at.line())).unwrap_or_default();
        let mut text = format!("{}{location}", payload_text(info.payload()));
        // With RUST_BACKTRACE set, where the panic came from too.
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            text.push_str(&format!("\n{backtrace}"));
        }
        LAST_PANIC.with(|last| *last.borrow_mut() = Some(text));
    }));
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Run one seed; a panic (a broken invariant inside the core or the
/// harness) comes back as its message.
pub fn run_catching(config: SimConfig) -> Result<Report, String> {
    catch_panic(|| Sim::new(config).run())
}

/// Run `run` (a hand-written scenario, say); a panic comes back as its
/// message (quietly, with [`install_quiet_panic_hook`] installed).
pub fn catch_panic<T>(run: impl FnOnce() -> T) -> Result<T, String> {
    LAST_PANIC.with(|last| last.borrow_mut().take());
    CATCHING.with(|catching| catching.set(true));
    let outcome = panic::catch_unwind(AssertUnwindSafe(run));
    CATCHING.with(|catching| catching.set(false));
    outcome.map_err(|payload| {
        LAST_PANIC.with(|last| last.borrow_mut().take()).unwrap_or_else(|| payload_text(payload.as_ref()))
    })
}

/// One JSON object (one line) summarising a run of `config`.
pub fn json_summary(config: &SimConfig, outcome: &Result<Report, String>) -> String {
    let quorum = config.replication_quorum.map_or_else(|| "null".to_string(), |q| q.to_string());
    let mut line = format!(
        "{{\"seed\":{},\"nodes\":{},\"groups\":{},\"replication_quorum\":{quorum}",
        config.seed, config.nodes, config.groups
    );
    if config.learners > 0 {
        let _ = write!(line, ",\"learners\":{}", config.learners);
    }
    match outcome {
        Ok(report) => {
            let first = report.violations.first().map_or_else(|| "null".to_string(), |text| json_string(text));
            let _ = write!(
                line,
                ",\"panic\":null,\"violations\":{},\"first_violation\":{first},\"ops_committed\":{},\
                 \"writes_acknowledged\":{},\"view_changes\":{},\"crashes\":{},\"frames_sent\":{},\
                 \"frames_rejected\":{},\"history_ops\":{},\"power_losses\":{},\"writes_torn\":{},\
                 \"corrupt_reads\":{},\"disk_full_writes\":{},\"disk_io_errors\":{},\"starts_refused\":{},\
                 \"refusals\":{},\"refusals_forged\":{},\"random_transfers_started\":{},\
                 \"random_transfers_refused\":{}}}",
                report.violations.len(),
                report.ops_committed,
                report.writes_acknowledged,
                report.view_changes,
                report.crashes,
                report.frames_sent,
                report.frames_rejected,
                report.history.len(),
                report.disks.power_losses,
                report.disks.writes_torn,
                report.disks.corrupt_reads,
                report.disks.writes_refused_full,
                report.disks.io_errors,
                report.starts_refused,
                report.refusals.total(),
                report.refusals.forged(),
                report.random_transfers.started,
                report.random_transfers.refused_behind + report.random_transfers.refused_other
            );
            if config.scenario == Scenario::Metadata {
                line.pop(); // The closing brace: the scenario's fields follow.
                let agents = &report.agents;
                let _ = write!(
                    line,
                    ",\"scenario\":\"metadata\",\"sessions_opened\":{},\"sessions_expired\":{},\
                     \"reports_accepted\":{},\"reports_refused\":{},\"expiries_proposed\":{},\
                     \"groups_unloaded\":{},\"node_stops\":{}}}",
                    agents.sessions_opened,
                    agents.sessions_expired,
                    agents.reports_accepted,
                    agents.reports_refused,
                    agents.expiries_proposed,
                    agents.groups_unloaded,
                    report.node_stops
                );
            }
            if let Some(forger) = config.forger {
                line.pop();
                let footprint = &report.footprint_max;
                let _ = write!(
                    line,
                    ",\"forger\":\"{}\",\"forged_frames\":{},\"log_entries_max\":{},\"held_sends_max\":{},\
                     \"queued_replies_max\":{}}}",
                    forger.name(),
                    report.forged_frames,
                    footprint.log_entries_max,
                    footprint.held_sends,
                    footprint.queued_replies
                );
            }
            if config.scenario == Scenario::Reconfigure {
                line.pop();
                let _ = write!(
                    line,
                    ",\"scenario\":\"reconfigure\",\"reconfigurations_started\":{},\"reconfigurations_completed\":{}}}",
                    report.reconfigurations.0, report.reconfigurations.1
                );
            }
        }
        Err(panic) => {
            let _ = write!(line, ",\"panic\":{},\"violations\":1}}", json_string(panic));
        }
    }
    line
}

/// `text` as a JSON string literal.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Args, String> {
        Args::parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn k5_op_batches_is_a_switch_of_the_default_and_reconfigure_scenarios() {
        let batches = parse("--op-batches --state disk").expect("valid");
        assert!(batches.op_batches && batches.config(3).op_batches);
        assert!(batches.reproduce(3).contains("--op-batches"), "{}", batches.reproduce(3));
        assert!(!parse("").expect("valid").config(3).op_batches, "off by default");
        assert!(parse("--op-batches --scenario reconfigure").is_ok());
        assert!(parse("--op-batches --scenario metadata").unwrap_err().contains("--op-batches"));
    }

    #[test]
    fn parses_every_flag() {
        let line = "--seeds 200 --seed-start 7 --nodes 5 --groups 2 --shards 3 --storage memory --state disk \
                    --replication-quorum 5 --fault-ticks 9 --liveness-ticks 8 --scenario metadata --profile durability \
                    --transfers off --quiesce-ticks 20 --json";
        assert_eq!(
            parse(line).expect("valid"),
            Args {
                seeds: 200,
                seed_start: 7,
                nodes: 5,
                learners: 0,
                groups: 2,
                shards: 3,
                storage: StorageKind::Memory,
                state: StateKind::Disk,
                mutant: None,
                profile: Some(FaultProfile::Durability),
                forger: None,
                transfers: false,
                replication_quorum: Some(5),
                fault_ticks: 9,
                liveness_ticks: 8,
                scenario: Scenario::Metadata,
                quiesce_ticks: Some(20),
                metadata_voters: None,
                clients: 6,
                clients_max: 64,
                op_batches: false,
                json: true,
                help: false
            }
        );
        assert_eq!(parse("").expect("defaults"), Args::default());
        let learners = parse("--learners 2").expect("valid");
        assert_eq!(learners.learners, 2);
        assert_eq!(learners.config(1).learners, 2);
        assert!(learners.reproduce(1).ends_with("--groups 4 --learners 2"), "{}", learners.reproduce(1));
        let quiet = parse("--quiesce-ticks 20").expect("valid");
        assert_eq!(quiet.config(1).core.timing.commit_quiesce_timeout_ticks, Some(20));
        assert!(quiet.reproduce(1).ends_with("--quiesce-ticks 20"), "{}", quiet.reproduce(1));
        assert!(parse("--quiesce-ticks 0").unwrap_err().contains("at least 1"));
        let evicting = parse("--clients 8 --clients-max 4").expect("valid");
        assert_eq!((evicting.config(1).clients, evicting.config(1).core.clients_max), (8, 4));
        assert!(evicting.reproduce(1).ends_with("--clients 8 --clients-max 4"), "{}", evicting.reproduce(1));
        assert!(parse("--clients-max 0").unwrap_err().contains("at least 1"));
        assert!(parse("--clients-max 4 --scenario metadata").unwrap_err().contains("default scenario only"));
    }

    #[test]
    fn rejects_bad_arguments_with_reason() {
        assert!(parse("--seeds").unwrap_err().contains("needs a value"));
        assert!(parse("--seeds ten").unwrap_err().contains("whole number"));
        assert!(parse("--verbose").unwrap_err().contains("unknown argument"));
        assert!(parse("--nodes 3 --replication-quorum 4").unwrap_err().contains("1..=3"));
        assert!(parse("--nodes 0").is_err());
        assert!(parse("--scenario sessions").unwrap_err().contains("`metadata` or `reconfigure`"));
        assert!(parse("--learners 9").unwrap_err().contains("0..=4"));
        assert!(parse("--learners 1 --scenario metadata").unwrap_err().contains("default scenario"));
        assert!(parse("--shards 0").unwrap_err().contains("1..=16"));
        assert!(parse("--storage disk").unwrap_err().contains("`file` or `memory`"));
        assert!(parse("--state file").unwrap_err().contains("`memory` or `disk`"));
        assert!(parse("--mutant nothing").unwrap_err().contains("ack-before-durable"));
        assert!(parse("--forger member").unwrap_err().contains("`non-member` or `replay`"));
        assert!(parse("--transfers no").unwrap_err().contains("`on` or `off`"));
    }

    #[test]
    fn reproduce_carries_the_shape() {
        let args = parse("--nodes 5 --groups 3 --replication-quorum 5").expect("valid");
        assert_eq!(
            args.reproduce(12),
            "cargo run --release --bin cohort-sim -- --seeds 1 --seed-start 12 --nodes 5 --groups 3 \
             --replication-quorum 5"
        );
        let metadata = parse("--scenario metadata").expect("valid");
        assert!(metadata.reproduce(4).ends_with("--groups 4 --scenario metadata"), "{}", metadata.reproduce(4));
        let sharded = parse("--shards 1 --storage memory").expect("valid");
        assert!(sharded.reproduce(2).ends_with("--groups 4 --shards 1 --storage memory"), "{}", sharded.reproduce(2));
        let forger = parse("--forger replay").expect("valid");
        assert_eq!(forger.config(5).forger, Some(ForgerMode::Replay));
        assert!(forger.reproduce(5).ends_with("--groups 4 --forger replay"), "{}", forger.reproduce(5));
        let quiet = parse("--transfers off").expect("valid");
        assert!(!quiet.config(5).transfers && parse("").expect("defaults").config(5).transfers);
        assert!(quiet.reproduce(5).ends_with("--groups 4 --transfers off"), "{}", quiet.reproduce(5));
        let mut config = args.config(3);
        config.fault_ticks = 400;
        assert!(reproduce(&config).ends_with("--replication-quorum 5 --fault-ticks 400"), "{}", reproduce(&config));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a \"b\"\\\n\u{1}"), "\"a \\\"b\\\"\\\\\\n\\u0001\"");
        let config = SimConfig::new(3);
        let line = json_summary(&config, &Err("boom \"x\"".into()));
        assert_eq!(
            line,
            "{\"seed\":3,\"nodes\":3,\"groups\":4,\"replication_quorum\":null,\"panic\":\"boom \\\"x\\\"\",\"violations\":1}"
        );
    }
}
