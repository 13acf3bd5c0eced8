//! One run, start to end: check the machine, build the network, start the
//! nodes, wait until every key answers, run the workload under the
//! nemesis's schedule, heal, read every key, check, report, clean up.
//!
//! At every phase boundary the nemesis first heals everything (clears the
//! cuts, SIGCONTs a paused node, restarts every node that is down, with its
//! data directory) and then applies the new phase's fault, so a node that
//! stopped itself comes back at the next boundary and its exit is reported.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::jepsen::checker;
use crate::jepsen::config::Config;
use crate::jepsen::error::Error;
use crate::jepsen::history::{Clock, History, OpRecord, jepsen_lines, seconds};
use crate::jepsen::nemesis::{self, Fault, Phase, PhaseKind};
use crate::jepsen::net::Network;
use crate::jepsen::nodes::Cluster;
use crate::jepsen::plot;
use crate::jepsen::preflight;
use crate::jepsen::report::{self, Report};
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
    wait_ready(config, &addresses, &mut cluster)?;

    let shared = Arc::new(Shared {
        clock: Clock::start(),
        history: History::default(),
        stop: AtomicBool::new(false),
        next_value: AtomicU64::new(1),
    });
    let settings = Settings {
        processes: config.processes,
        keys: config.groups,
        rate_per_s: config.rate_per_s,
        reads_per_mille: config.reads_per_mille,
        timeouts: config.timeouts,
    };
    let threads = workload::start(&shared, &addresses, settings, config.seed);
    let mut events = Vec::new();
    let nemesis_result = run_phases(config, &phases, &shared.clock, &mut cluster, &network, &mut events);
    shared.stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    nemesis_result?;
    let final_after_ns = shared.clock.now_ns();
    final_reads(config, &shared, &addresses);
    let end_s = seconds(shared.clock.now_ns());
    for index in cluster.poll(end_s) {
        events.push(NemesisEvent { at_s: end_s, what: format!("n{} exited after the run: see node exits", index + 1) });
    }
    cluster.stop_all();
    network.cleanup();

    let ops = shared.history.snapshot();
    say(config, &format!("cohort-jepsen: {} ops; checking linearizability per key", ops.len()));
    let keys: Vec<u64> = (0..config.groups).collect();
    let check = checker::check(&ops, &keys, final_after_ns, config.check_timeout);
    write_outputs(config, &binary, &network, &phases, &ops, events, cluster.exits().to_vec(), check)
}

#[allow(clippy::too_many_arguments)]
fn write_outputs(
    config: &Config,
    binary: &std::path::Path,
    network: &Network,
    phases: &[Phase],
    ops: &[OpRecord],
    events: Vec<NemesisEvent>,
    exits: Vec<crate::jepsen::nodes::NodeExit>,
    check: checker::CheckReport,
) -> Result<Report, Error> {
    let history_path = config.out.join("history.jsonl");
    write(&history_path, &jepsen_lines(ops))?;
    let svg_path = config.out.join("run.svg");
    let summary_path = config.out.join("summary.json");
    let facts = report::Facts {
        config,
        binary,
        subnet: network.subnet(),
        phases,
        ops,
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
    addresses: &[crate::jepsen::port::Endpoint],
    cluster: &mut Cluster,
) -> Result<(), Error> {
    let started = Instant::now();
    let clock = Clock::start();
    let timeouts = Timeouts { op: Duration::from_secs(2), attempt: Duration::from_secs(1) };
    let mut process = Process::new(usize::MAX, addresses.to_vec());
    for key in 0..config.groups {
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

/// Walk the schedule: heal and apply each phase at its start, watch the nodes.
fn run_phases(
    config: &Config,
    phases: &[Phase],
    clock: &Clock,
    cluster: &mut Cluster,
    network: &Network,
    events: &mut Vec<NemesisEvent>,
) -> Result<(), Error> {
    for phase in phases {
        sleep_until(clock, phase.start_ms, cluster, events);
        let at_s = seconds(clock.now_ns());
        heal(cluster, network, at_s, events)?;
        say(config, &format!("cohort-jepsen: {at_s:7.1} s  {}", phase.label()));
        events.push(NemesisEvent { at_s, what: format!("phase: {}", phase.label()) });
        if let PhaseKind::Fault(fault) = phase.kind {
            apply(fault, config.nodes, cluster, network, at_s, events)?;
            if let Fault::Pause { node, pause_ms } = fault {
                let resume_ms = (phase.start_ms + pause_ms).min(phase.end_ms);
                sleep_until(clock, resume_ms, cluster, events);
                cluster.resume(node);
                events.push(NemesisEvent { at_s: seconds(clock.now_ns()), what: format!("SIGCONT n{}", node + 1) });
            }
        }
    }
    sleep_until(clock, phases.last().map_or(0, |phase| phase.end_ms), cluster, events);
    Ok(())
}

fn apply(
    fault: Fault,
    nodes: usize,
    cluster: &mut Cluster,
    network: &Network,
    at_s: f64,
    events: &mut Vec<NemesisEvent>,
) -> Result<(), Error> {
    let cuts = fault.cuts(nodes);
    if !cuts.is_empty() {
        network.set_cuts(&cuts)?;
    }
    match fault {
        Fault::Kill { node } => cluster.kill(node, at_s),
        Fault::Pause { node, .. } => cluster.pause(node),
        _ => {}
    }
    events.push(NemesisEvent { at_s, what: fault.label() });
    Ok(())
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
fn final_reads(config: &Config, shared: &Arc<Shared>, addresses: &[crate::jepsen::port::Endpoint]) {
    let timeouts = Timeouts { op: config.final_read_timeout, attempt: Duration::from_secs(1) };
    let threads: Vec<_> = (0..config.groups)
        .map(|key| {
            let shared = Arc::clone(shared);
            let addresses = addresses.to_vec();
            let process = config.processes + key as usize;
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
