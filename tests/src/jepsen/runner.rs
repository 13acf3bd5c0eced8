//! One run, start to end: check the machine, build the network, start the
//! nodes, create the group that will be re-created, wait until every key
//! answers, run the workload and the operator's re-creations under the
//! nemesis's schedule, heal, read every key, check, report, clean up.
//!
//! At every phase boundary the nemesis first heals everything (clears the
//! cuts, SIGCONTs a paused node, restarts every node that is down, with its
//! data directory) and then applies the new phase's fault, so a node that
//! stopped itself comes back at the next boundary and its exit is reported.
//! A wipe waits for the previous wiped node to have recovered
//! ([`crate::jepsen::wipe`]); if it has not, the phase passes without a
//! fault and the nemesis says why.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::jepsen::admin::Operator;
use crate::jepsen::checker;
use crate::jepsen::config::Config;
use crate::jepsen::error::Error;
use crate::jepsen::history::{Clock, History, OpRecord, Recreation, jepsen_lines, seconds};
use crate::jepsen::lifecycle;
use crate::jepsen::nemesis::{self, Fault, Phase, PhaseKind};
use crate::jepsen::net::Network;
use crate::jepsen::nodes::Cluster;
use crate::jepsen::plot;
use crate::jepsen::preflight;
use crate::jepsen::report::{self, Report};
use crate::jepsen::wipe::{WipeReport, Wipes};
use crate::jepsen::workload::{self, Process, Settings, Shared, Timeouts};

/// How often the nemesis looks at the nodes.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Something the nemesis did or saw.
#[derive(Clone, Debug, Serialize)]
pub struct NemesisEvent {
    /// When (s on the run's clock).
    pub at_s: f64,
    /// What.
    pub what: String,
}

/// A scripted schedule tiles the run and ends with the final heal.
fn check_scripted(phases: &[Phase], seconds: u64) -> Result<(), Error> {
    let tiles = phases.first().is_some_and(|first| first.start_ms == 0)
        && phases.windows(2).all(|pair| pair[0].end_ms == pair[1].start_ms)
        && phases.last().is_some_and(|last| last.kind == PhaseKind::FinalHeal && last.end_ms == seconds * 1000);
    if tiles {
        Ok(())
    } else {
        Err(Error::new(format!("a scripted schedule must tile 0..{seconds} s and end with the final heal: {phases:?}")))
    }
}

/// Run the harness as `config` says.
pub fn run(config: &Config) -> Result<Report, Error> {
    preflight::check_environment()?;
    let binary = preflight::find_binary(config.binary.as_deref())?;
    let _lock = prepare_out_dir(config)?;
    let phases = match &config.phases {
        Some(phases) => {
            check_scripted(phases, config.seconds)?;
            phases.clone()
        }
        None => nemesis::schedule(config.seed, config.seconds, config.nodes, config.timing),
    };
    let mut network = Network::create(config.nodes)?;
    say(
        config,
        &format!(
            "cohort-jepsen: seed {} for {} s, {} nodes in namespaces cjep{}-n* on {}, binary {}, output {}",
            config.seed,
            config.seconds,
            config.nodes,
            network.run(),
            network.subnet(),
            binary.display(),
            config.out.display()
        ),
    );
    let mut cluster = Cluster::new(&binary, &config.out, &network, config.nodes, config.groups, config.session)?;
    for index in 0..config.nodes {
        cluster.start(index, 0.0)?;
    }
    let addresses = cluster.client_addresses();
    let operator = Operator::new(&binary, cluster.admin_addresses());
    if let Some(recreate) = &config.recreate {
        let incarnation = lifecycle::create_first(&operator, recreate.group, config.ready_timeout)?;
        say(config, &format!("cohort-jepsen: created group {} (incarnation {incarnation})", recreate.group));
    }
    let keys = config.keys();
    wait_ready(config, &keys, &addresses, &mut cluster)?;

    let shared = Arc::new(Shared {
        clock: Clock::start(),
        history: History::default(),
        stop: AtomicBool::new(false),
        next_value: AtomicU64::new(1),
    });
    let settings = Settings {
        first_process: 0,
        processes: config.processes,
        keys: (0..config.groups).collect(),
        rate_per_s: config.rate_per_s,
        reads_per_mille: config.reads_per_mille,
        timeouts: config.timeouts,
    };
    let mut threads = workload::start(&shared, &addresses, settings, config.seed);
    if let Some(recreate) = config.recreate {
        let settings = Settings {
            first_process: config.processes,
            processes: recreate.clients,
            keys: vec![recreate.group],
            rate_per_s: recreate.rate_per_s,
            reads_per_mille: config.reads_per_mille,
            timeouts: config.timeouts,
        };
        threads.extend(workload::start(&shared, &addresses, settings, config.seed));
        let heal_at_ms = phases.iter().find(|phase| phase.kind == PhaseKind::FinalHeal).map_or(0, |p| p.start_ms);
        let times = lifecycle::schedule(config.seed, heal_at_ms, &recreate);
        threads.push(lifecycle::start(&shared, operator.clone(), recreate, times));
    }
    let mut events = Vec::new();
    let mut wipes = Wipes::default();
    let mut nemesis = Nemesis { config, clock: &shared.clock, cluster: &mut cluster, network: &network, operator };
    let nemesis_result = nemesis.run_phases(&phases, &mut events, &mut wipes);
    shared.stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    nemesis_result?;
    let final_after_ns = shared.clock.now_ns();
    final_reads(config, &keys, &shared, &addresses);
    let end_s = seconds(shared.clock.now_ns());
    for index in cluster.poll(end_s) {
        events.push(NemesisEvent { at_s: end_s, what: format!("n{} exited after the run: see node exits", index + 1) });
    }
    let wipes = wipes.finish();
    cluster.stop_all();
    network.cleanup();

    let ops = shared.history.snapshot();
    let recreations = shared.history.recreations();
    say(config, &format!("cohort-jepsen: {} ops; checking linearizability per key", ops.len()));
    let check = checker::check(&ops, &recreations, &keys, final_after_ns, config.check_timeout);
    let run = RunFacts { phases: &phases, ops: &ops, recreations, wipes, events, exits: cluster.exits().to_vec() };
    write_outputs(config, &binary, &network, run, check)
}

/// What a run did, for the outputs.
struct RunFacts<'a> {
    phases: &'a [Phase],
    ops: &'a [OpRecord],
    recreations: Vec<Recreation>,
    wipes: Vec<WipeReport>,
    events: Vec<NemesisEvent>,
    exits: Vec<crate::jepsen::nodes::NodeExit>,
}

fn write_outputs(
    config: &Config,
    binary: &std::path::Path,
    network: &Network,
    run: RunFacts<'_>,
    check: checker::CheckReport,
) -> Result<Report, Error> {
    let RunFacts { phases, ops, recreations, wipes, events, exits } = run;
    let history_path = config.out.join("history.jsonl");
    write(&history_path, &jepsen_lines(ops, &recreations))?;
    let svg_path = config.out.join("run.svg");
    let summary_path = config.out.join("summary.json");
    let facts = report::Facts {
        config,
        binary,
        subnet: network.subnet(),
        phases,
        ops,
        recreations,
        wipes,
        events,
        exits,
        check,
        svg: svg_path.clone(),
        history: history_path,
        summary: summary_path.clone(),
    };
    let report = report::build(facts);
    plot::draw(&svg_path, &report, ops)?;
    write(&summary_path, &report.json_pretty())?;
    Ok(report)
}

fn write(path: &std::path::Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|error| Error::new(format!("write {}: {error}", path.display())))
}

fn say(config: &Config, line: &str) {
    if config.progress {
        eprintln!("{line}");
    }
}

/// Holds an output directory for one run; removed on drop.
struct OutLock(std::path::PathBuf);

impl Drop for OutLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Create and lock the output directory (`run.lock` holds the harness's
/// pid), then remove the data and logs of an earlier run there. Two live
/// runs never share one directory: their nodes would share data dirs.
fn prepare_out_dir(config: &Config) -> Result<OutLock, Error> {
    let out = &config.out;
    std::fs::create_dir_all(out).map_err(|error| Error::new(format!("create {}: {error}", out.display())))?;
    let lock = out.join("run.lock");
    let holder = std::fs::read_to_string(&lock).ok().and_then(|pid| pid.trim().parse::<u32>().ok());
    if let Some(pid) = holder.filter(|pid| *pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()) {
        return Err(Error::new(format!(
            "{} is in use by another run (pid {pid}); choose another --out",
            out.display()
        )));
    }
    std::fs::write(&lock, std::process::id().to_string())
        .map_err(|error| Error::new(format!("write {}: {error}", lock.display())))?;
    let lock = OutLock(lock);
    let entries = std::fs::read_dir(out).map_err(|error| Error::new(format!("{}: {error}", out.display())))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("data-") {
            let _ = std::fs::remove_dir_all(entry.path());
        } else if name.starts_with("node-") && name.ends_with(".log") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(lock)
}

/// Wait until a read of every key is answered.
fn wait_ready(
    config: &Config,
    keys: &[u64],
    addresses: &[crate::jepsen::port::Endpoint],
    cluster: &mut Cluster,
) -> Result<(), Error> {
    let started = Instant::now();
    let clock = Clock::start();
    let timeouts = Timeouts { op: Duration::from_secs(2), attempt: Duration::from_secs(1) };
    let mut process = Process::new(usize::MAX, addresses.to_vec());
    for key in keys.iter().copied() {
        loop {
            if process.read(key, &clock, timeouts).is_ok() {
                break;
            }
            let exited = cluster.poll(0.0);
            if !exited.is_empty() || started.elapsed() > config.ready_timeout {
                let logs: Vec<String> = (0..cluster.len())
                    .map(|index| {
                        format!(
                            "node {}:\n    {}",
                            index + 1,
                            crate::jepsen::nodes::last_lines(&cluster.log_path(index), 8).join("\n    ")
                        )
                    })
                    .collect();
                return Err(Error::new(format!(
                    "the cluster did not answer a read of key {key} within {:.0} s (nodes exited: {:?}); last stderr:\n{}",
                    started.elapsed().as_secs_f64(),
                    exited.iter().map(|index| index + 1).collect::<Vec<_>>(),
                    logs.join("\n")
                )));
            }
        }
    }
    say(
        config,
        &format!("cohort-jepsen: every key answers after {:.1} s; workload starts", started.elapsed().as_secs_f64()),
    );
    Ok(())
}

/// What the nemesis acts on.
struct Nemesis<'a> {
    config: &'a Config,
    clock: &'a Clock,
    cluster: &'a mut Cluster,
    network: &'a Network,
    operator: Operator,
}

impl Nemesis<'_> {
    /// Walk the schedule: heal and apply each phase at its start, watch the nodes.
    fn run_phases(&mut self, phases: &[Phase], events: &mut Vec<NemesisEvent>, wipes: &mut Wipes) -> Result<(), Error> {
        for phase in phases {
            sleep_until(self.clock, phase.start_ms, self.cluster, events);
            let at_s = seconds(self.clock.now_ns());
            heal(self.cluster, self.network, at_s, events)?;
            say(self.config, &format!("cohort-jepsen: {at_s:7.1} s  {}", phase.label()));
            events.push(NemesisEvent { at_s, what: format!("phase: {}", phase.label()) });
            if let PhaseKind::Fault(fault) = phase.kind {
                self.apply(fault, at_s, events, wipes)?;
                if let Fault::Pause { node, pause_ms } = fault {
                    let resume_ms = (phase.start_ms + pause_ms).min(phase.end_ms);
                    sleep_until(self.clock, resume_ms, self.cluster, events);
                    self.cluster.resume(node);
                    events.push(NemesisEvent {
                        at_s: seconds(self.clock.now_ns()),
                        what: format!("SIGCONT n{}", node + 1),
                    });
                }
            }
        }
        sleep_until(self.clock, phases.last().map_or(0, |phase| phase.end_ms), self.cluster, events);
        Ok(())
    }

    fn apply(
        &mut self,
        fault: Fault,
        at_s: f64,
        events: &mut Vec<NemesisEvent>,
        wipes: &mut Wipes,
    ) -> Result<(), Error> {
        let cuts = fault.cuts(self.config.nodes);
        if !cuts.is_empty() {
            self.network.set_cuts(&cuts)?;
        }
        match fault {
            Fault::Kill { node } => self.cluster.kill(node, at_s),
            Fault::Pause { node, .. } => self.cluster.pause(node),
            Fault::Wipe { node } => {
                // H1: one member without its data at a time (see `wipe`).
                if let Some(earlier) = wipes.unrecovered() {
                    let what = format!(
                        "{} skipped: n{} (wiped at {:.1} s) is not known to have recovered ({} of {} members)",
                        fault.label(),
                        earlier.node,
                        earlier.at_s,
                        earlier.members_recovered,
                        earlier.groups_hosted
                    );
                    say(self.config, &format!("cohort-jepsen: {what}"));
                    events.push(NemesisEvent { at_s, what });
                    return Ok(());
                }
                let wiped = self.cluster.wipe(node, at_s)?;
                events.push(NemesisEvent {
                    at_s,
                    what: format!(
                        "n{} killed, its data ({} bytes) moved to {}, started again empty",
                        node + 1,
                        wiped.size_bytes,
                        wiped.moved_to.display()
                    ),
                });
                wipes.watch(self.operator.clone(), node, at_s, wiped, *self.clock, self.config.groups);
            }
            _ => {}
        }
        events.push(NemesisEvent { at_s, what: fault.label() });
        Ok(())
    }
}

/// Clear every cut, resume paused nodes, restart nodes that are down.
fn heal(cluster: &mut Cluster, network: &Network, at_s: f64, events: &mut Vec<NemesisEvent>) -> Result<(), Error> {
    network.set_cuts(&[])?;
    for index in 0..cluster.len() {
        if cluster.paused(index) {
            cluster.resume(index);
            events.push(NemesisEvent { at_s, what: format!("SIGCONT n{}", index + 1) });
        }
        if !cluster.running(index) {
            cluster.start(index, at_s)?;
            events.push(NemesisEvent { at_s, what: format!("restart n{} (same data dir)", index + 1) });
        }
    }
    Ok(())
}

/// Sleep until `ms` on the clock, noticing node exits meanwhile.
fn sleep_until(clock: &Clock, ms: u64, cluster: &mut Cluster, events: &mut Vec<NemesisEvent>) {
    let until = clock.at(ms * 1_000_000);
    loop {
        let at_s = seconds(clock.now_ns());
        for index in cluster.poll(at_s) {
            let cause = cluster.exits().last().map_or(String::new(), |exit| exit.cause.clone());
            events.push(NemesisEvent { at_s, what: format!("n{} exited on its own: {cause}", index + 1) });
        }
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep(POLL_INTERVAL.min(until - now));
    }
}

/// Read every key once more after the workload, in parallel; recorded in the history.
fn final_reads(config: &Config, keys: &[u64], shared: &Arc<Shared>, addresses: &[crate::jepsen::port::Endpoint]) {
    let timeouts = Timeouts { op: config.final_read_timeout, attempt: Duration::from_secs(1) };
    let threads: Vec<_> = keys
        .iter()
        .copied()
        .enumerate()
        .map(|(index, key)| {
            let shared = Arc::clone(shared);
            let addresses = addresses.to_vec();
            let process = config.clients() + index;
            std::thread::spawn(move || {
                let mut reader = Process::new(process, addresses);
                let op = reader.read(key, &shared.clock, timeouts);
                shared.history.push(op);
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
}
