//! `cohort-sim`: run seeds of the deterministic simulator and report every
//! violation with the command that reproduces it. See docs/simulator.md.
//!
//! stdout: one line per violation, a JSON line per seed with `--json`, and
//! last `seeds=N violations=V ops_committed=C view_changes=X ...` (the
//! seeds that failed and the disks' fault counters, plus the session
//! counters with `--scenario metadata`, and the random primary transfers
//! unless `--transfers off`). stderr:
//! progress and seeds/s. Exit code 1 on any violation, 2 on bad arguments.

use std::process::ExitCode;
use std::time::Instant;

use cohort_core::metadata::AgentCounters;
use cohort_sim::Scenario;
use cohort_sim::cli::{self, Args};

/// Violation lines printed per seed; the rest are counted, not printed.
const VIOLATION_LINES_PER_SEED_MAX: usize = 10;

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("traffic") {
        argv.remove(0);
        return traffic(argv);
    }
    if argv.first().map(String::as_str) == Some("follow") {
        argv.remove(0);
        return follow(argv);
    }
    let args = match Args::parse(argv) {
        Ok(args) if args.help => {
            println!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(args) => args,
        Err(error) => {
            eprintln!("cohort-sim: {error}\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    cli::install_quiet_panic_hook();
    let started = Instant::now();
    let progress_every = (args.seeds / 10).max(1);
    let (mut violations, mut ops, mut views) = (0u64, 0u64, 0u64);
    let (mut agents, mut stops, mut seeds_expired) = (AgentCounters::default(), 0u64, 0u64);
    let (mut changes_started, mut changes_completed, mut seeds_changed) = (0u64, 0u64, 0u64);
    let (mut operations, mut seeds_operated) = (cohort_sim::sim::OperationCounts::default(), 0u64);
    let (mut disks, mut starts_refused, mut seeds_failed) = (cohort_sim::disk::DiskStats::default(), 0u64, 0u64);
    let mut checkpoints = cohort_sim::disk_kv::CheckpointCounts::default();
    let (mut apply_runs_lent, mut requests_waited_for_state) = (0u64, 0u64);
    let (mut refusals, mut forged_frames) = (cohort_core::Refusals::default(), 0u64);
    let mut footprint = cohort_core::Footprint::default();
    let mut transfers = cohort_sim::sim::TransferCounts::default();
    let (mut quiet, mut seeds_quiesced) = (cohort_sim::node::QuietCounts::default(), 0u64);
    let mut start_views_withheld = 0u64;
    let mut backlog_bytes_served = 0u64;
    let mut evicted_clients = 0u64;
    let mut batches_acknowledged = 0u64;
    for (done, seed) in (args.seed_start..args.seed_start + args.seeds).enumerate() {
        let config = args.config(seed);
        let outcome = cli::run_catching(config.clone());
        if args.json {
            println!("{}", cli::json_summary(&config, &outcome));
        }
        seeds_failed += u64::from(outcome.as_ref().map_or(true, |report| !report.violations.is_empty()));
        match &outcome {
            Ok(report) => {
                for violation in report.violations.iter().take(VIOLATION_LINES_PER_SEED_MAX) {
                    println!("seed={seed} violation: {violation} (reproduce: {})", args.reproduce(seed));
                }
                if report.violations.len() > VIOLATION_LINES_PER_SEED_MAX {
                    let more = report.violations.len() - VIOLATION_LINES_PER_SEED_MAX;
                    println!("seed={seed} and {more} more violations");
                }
                violations += report.violations.len() as u64;
                ops += report.ops_committed;
                views += report.view_changes;
                agents.sessions_opened += report.agents.sessions_opened;
                agents.sessions_expired += report.agents.sessions_expired;
                agents.reports_accepted += report.agents.reports_accepted;
                agents.reports_refused += report.agents.reports_refused;
                agents.expiries_proposed += report.agents.expiries_proposed;
                agents.groups_unloaded += report.agents.groups_unloaded;
                stops += report.node_stops;
                seeds_expired += u64::from(report.agents.sessions_expired > 0);
                operations.started += report.operations.started;
                operations.completed += report.operations.completed;
                operations.reverted += report.operations.reverted;
                operations.refused += report.operations.refused;
                operations.groups_created += report.operations.groups_created;
                operations.groups_deleted += report.operations.groups_deleted;
                operations.groups_recreated += report.operations.groups_recreated;
                operations.probes.0 += report.operations.probes.0;
                operations.probes.1 += report.operations.probes.1;
                operations.probes.2 += report.operations.probes.2;
                operations.transfers_asked += report.operations.transfers_asked;
                operations.transfers_started += report.operations.transfers_started;
                operations.freezes.0 += report.operations.freezes.0;
                operations.freezes.1 += report.operations.freezes.1;
                operations.metadata_switches += report.operations.metadata_switches;
                seeds_operated += u64::from(report.operations.completed > 0);
                changes_started += report.reconfigurations.0;
                changes_completed += report.reconfigurations.1;
                seeds_changed += u64::from(report.reconfigurations.1 > 0);
                checkpoints.taken += report.checkpoints.taken;
                checkpoints.failed += report.checkpoints.failed;
                checkpoints.rebuilt += report.checkpoints.rebuilt;
                checkpoints.streamed += report.checkpoints.streamed;
                checkpoints.resumed += report.checkpoints.resumed;
                apply_runs_lent += report.apply_runs_lent;
                requests_waited_for_state += report.requests_waited_for_state;
                disks.power_losses += report.disks.power_losses;
                disks.writes_torn += report.disks.writes_torn;
                disks.corrupt_reads += report.disks.corrupt_reads;
                disks.wipes += report.disks.wipes;
                disks.segments_cut += report.disks.segments_cut;
                disks.writes_refused_full += report.disks.writes_refused_full;
                disks.io_errors += report.disks.io_errors;
                starts_refused += report.starts_refused;
                refusals.add(&report.refusals);
                forged_frames += report.forged_frames;
                batches_acknowledged += report.batches_acknowledged;
                transfers.started += report.random_transfers.started;
                transfers.refused_behind += report.random_transfers.refused_behind;
                transfers.refused_other += report.random_transfers.refused_other;
                quiet.sum(report.quiet);
                start_views_withheld += report.start_views_withheld;
                backlog_bytes_served += report.backlog_bytes_served;
                evicted_clients += report.evicted_clients;
                seeds_quiesced += u64::from(report.quiet.quiesced > 0);
                footprint.log_entries_max = footprint.log_entries_max.max(report.footprint_max.log_entries_max);
                footprint.held_sends = footprint.held_sends.max(report.footprint_max.held_sends);
                footprint.queued_replies = footprint.queued_replies.max(report.footprint_max.queued_replies);
            }
            Err(panic) => {
                println!("seed={seed} panic: {panic} (reproduce: {})", args.reproduce(seed));
                violations += 1;
            }
        }
        let done = done as u64 + 1;
        if done.is_multiple_of(progress_every) && done < args.seeds {
            let rate = done as f64 / started.elapsed().as_secs_f64();
            eprintln!("progress: {done}/{} seeds, {violations} violations, {rate:.1} seeds/s", args.seeds);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("{} seeds in {elapsed:.1} s: {:.1} seeds/s", args.seeds, args.seeds as f64 / elapsed.max(1e-9));
    let mut last = format!(
        "seeds={} violations={violations} ops_committed={ops} view_changes={views} seeds_failed={seeds_failed} \
         power_losses={} writes_torn={} corrupt_reads={} disk_full_writes={} disk_io_errors={} disks_wiped={} segments_cut={} starts_refused={starts_refused}",
        args.seeds,
        disks.power_losses,
        disks.writes_torn,
        disks.corrupt_reads,
        disks.writes_refused_full,
        disks.io_errors,
        disks.wipes,
        disks.segments_cut
    );
    if args.state == cohort_sim::storage::StateKind::Disk {
        last.push_str(&format!(
            " checkpoints_taken={} checkpoints_failed={} replicas_rebuilt={} streams_installed={} streams_resumed={} \
             apply_runs_lent={apply_runs_lent} requests_waited_for_state={requests_waited_for_state}",
            checkpoints.taken, checkpoints.failed, checkpoints.rebuilt, checkpoints.streamed, checkpoints.resumed
        ));
    }
    if args.scenario == Scenario::Metadata {
        last.push_str(&format!(
            " sessions_opened={} sessions_expired={} seeds_with_expiry={seeds_expired} reports_accepted={} \
             reports_refused={} expiries_proposed={} groups_unloaded={} node_stops={stops} \
             operations_started={} operations_completed={} operations_reverted={} operations_refused={} \
             seeds_with_completed_operation={seeds_operated} groups_created={} groups_deleted={} \
             groups_recreated={} probes_answered={} probes_given_up={} probes_answered_by_ended_life={} \
             transfers_asked={} transfers_started={} freezes={} refused_frozen={} metadata_switches={}",
            agents.sessions_opened,
            agents.sessions_expired,
            agents.reports_accepted,
            agents.reports_refused,
            agents.expiries_proposed,
            agents.groups_unloaded,
            operations.started,
            operations.completed,
            operations.reverted,
            operations.refused,
            operations.groups_created,
            operations.groups_deleted,
            operations.groups_recreated,
            operations.probes.0,
            operations.probes.1,
            operations.probes.2,
            operations.transfers_asked,
            operations.transfers_started,
            operations.freezes.0,
            operations.freezes.1,
            operations.metadata_switches
        ));
    }
    last.push_str(&format!(
        " refusals={} refusals_forged={} start_views_withheld={start_views_withheld} backlog_bytes_served={backlog_bytes_served}",
        refusals.total(),
        refusals.forged()
    ));
    if args.op_batches {
        last.push_str(&format!(" batches_acknowledged={batches_acknowledged}"));
    }
    if args.transfers {
        last.push_str(&format!(
            " random_transfers_started={} random_transfers_refused_behind={} random_transfers_refused_other={}",
            transfers.started, transfers.refused_behind, transfers.refused_other
        ));
    }
    if let Some(forger) = args.forger {
        last.push_str(&format!(
            " forger={} forged_frames={forged_frames} log_entries_max={} held_sends_max={} queued_replies_max={}",
            forger.name(),
            footprint.log_entries_max,
            footprint.held_sends,
            footprint.queued_replies
        ));
    }
    if args.clients > args.clients_max {
        last.push_str(&format!(" evicted_clients={evicted_clients}"));
    }
    if args.quiesce_ticks.is_some() {
        last.push_str(&format!(
            " quiesced={} quiet_woken={} quiet_mismatches={} pair_heartbeats={} seeds_with_quiescence={seeds_quiesced}",
            quiet.quiesced, quiet.woken, quiet.mismatches, quiet.heartbeats
        ));
    }
    if args.scenario == Scenario::Reconfigure {
        last.push_str(&format!(
            " reconfigurations_started={changes_started} reconfigurations_completed={changes_completed} \
             seeds_with_completed_change={seeds_changed}"
        ));
    }
    println!("{last}");
    if violations == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// `cohort-sim traffic`: heartbeat traffic per node pair, batched and unbatched.
fn traffic(argv: Vec<String>) -> ExitCode {
    let config = match cohort_sim::traffic::parse_args(argv) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("cohort-sim traffic: {error}\n{}", cohort_sim::traffic::USAGE);
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "measuring {} partitions on {} nodes for {} simulated seconds ({:?}), batched and unbatched...",
        config.partitions, config.nodes, config.seconds, config.workload
    );
    let started = Instant::now();
    let report = cohort_sim::traffic::measure(&config);
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    println!("{}", report.render());
    ExitCode::SUCCESS
}

/// Z5: `cohort-sim follow`: a learner's metadata bytes per second against
/// the rate of changes and the state's size.
fn follow(argv: Vec<String>) -> ExitCode {
    let config = match cohort_sim::follow::parse_args(argv) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("cohort-sim follow: {error}\n{}", cohort_sim::follow::USAGE);
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "filling the metadata with {} groups on {} nodes, then {} simulated seconds at each of {:?} changes/s...",
        config.groups, config.nodes, config.seconds, config.rates
    );
    let started = Instant::now();
    let report = cohort_sim::follow::measure(&config);
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    println!("{}", report.render());
    ExitCode::SUCCESS
}
