//! The mutation suite: each hand-made mutant of a replica safety rule
//! (`cohort_core::mutants::Mutant`, switched on through the test-only
//! `CoreConfig::mutant`) must be caught, that is some checker reports a
//! violation (or the core's own invariants panic), in at least one of 20
//! seeds on 3 nodes. A checker that never fails proves nothing; a mutant
//! that survives is a hole in the simulator.
//!
//! Two kinds of run catch them. Where the swarm's random faults bite often
//! enough, a mutant runs the binary's default run (one fault profile). Where
//! a rule guards against a sequence random faults rarely line up, the test
//! sets the sequence up itself, as `broken_rule.rs` does, and the seed draws
//! the rest (the workload, the network's loss, duplication and delay, the
//! disks' speed); each such scenario also runs with the correct rule on the
//! same seeds and must then break nothing. docs/simulator.md has the table
//! of mutants, rules and seeds caught; these tests print the counts.

use std::ops::Range;

use cohort_core::Status;
use cohort_core::mutants::Mutant;
use cohort_messages::GroupId;
use cohort_sim::cli::{catch_panic, install_quiet_panic_hook};
use cohort_sim::kv::KvOp;
use cohort_sim::{FaultProfile, Scenario, Sim, SimConfig, linearizability};

/// The seeds every mutant gets.
const SEEDS: Range<u64> = 0..20;
/// The one group of the hand-made scenarios.
const G: GroupId = GroupId(0);
/// Values written by the scenarios (distinct from the random clients').
const VALUE_BASE: u64 = 0x5CE_0000_0000;

/// How a mutant fared.
struct Tally {
    caught: Vec<(u64, String)>,
}

/// Run `run` on every seed with `mutant`; a panic counts as caught.
fn tally(mutant: Mutant, run: impl Fn(u64, Option<Mutant>) -> Vec<String>) -> Tally {
    install_quiet_panic_hook();
    let mut caught = Vec::new();
    for seed in SEEDS {
        match catch_panic(|| run(seed, Some(mutant))) {
            Ok(violations) => {
                if let Some(first) = violations.first() {
                    caught.push((seed, first.clone()));
                }
            }
            Err(panic) => caught.push((seed, format!("panic: {panic}"))),
        }
    }
    eprintln!("{}: caught in {} of {} seeds", mutant.name(), caught.len(), SEEDS.end - SEEDS.start);
    for (seed, first) in &caught {
        eprintln!("  seed {seed}: {first}");
    }
    Tally { caught }
}

/// `mutant` is caught in at least one seed.
fn assert_caught(mutant: Mutant, run: impl Fn(u64, Option<Mutant>) -> Vec<String>) {
    let tally = tally(mutant, run);
    assert!(!tally.caught.is_empty(), "{} survived {} seeds: no checker noticed", mutant.name(), SEEDS.end);
}

/// With the correct rules, the same runs break nothing.
fn assert_control_clean(run: impl Fn(u64, Option<Mutant>) -> Vec<String>) {
    install_quiet_panic_hook();
    for seed in SEEDS {
        match catch_panic(|| run(seed, None)) {
            Ok(violations) => assert!(violations.is_empty(), "seed {seed}, correct rules: {violations:#?}"),
            Err(panic) => panic!("seed {seed}, correct rules: panic {panic}"),
        }
    }
}

/// The binary's default run of `seed` in `profile` (None: the seed draws it).
fn swarm(profile: Option<FaultProfile>) -> impl Fn(u64, Option<Mutant>) -> Vec<String> {
    move |seed, mutant| {
        let mut config = SimConfig::new(seed);
        config.profile = profile;
        config.core.mutant = mutant;
        Sim::new(config).run().violations
    }
}

/// A hand-made scenario's cluster: 3 nodes, one group, the seed's network
/// noise and disk speed (partitions profile; only `Sim::step(false)` runs,
/// so the scenario injects every node fault itself).
fn scenario_config(seed: u64, mutant: Option<Mutant>, clients: usize) -> SimConfig {
    let mut config = SimConfig::new(seed);
    config.groups = 1;
    config.clients = clients;
    config.profile = Some(FaultProfile::Partitions);
    config.core.mutant = mutant;
    config
}

/// What the checkers found, linearizability included.
fn found(sim: &Sim) -> Vec<String> {
    let mut violations = sim.checkers.violations.clone();
    violations.extend(linearizability::check(sim.config.seed, &sim.history).iter().map(ToString::to_string));
    violations
}

fn steps(sim: &mut Sim, ticks: u64) {
    for _ in 0..ticks {
        sim.step(false);
    }
}

/// Heal, let the group settle, and report.
fn settle(mut sim: Sim) -> Vec<String> {
    sim.heal();
    steps(&mut sim, 300);
    found(&sim)
}

/// Cut `node` off from the other nodes, both ways (clients still reach it).
fn isolate(sim: &mut Sim, node: usize) {
    for other in (0..sim.nodes.len()).filter(|other| *other != node) {
        sim.block(node, other);
        sim.block(other, node);
    }
}

/// The node that leads view `view` of group 0 (members are nodes 0, 1, 2).
fn leader_of(view: u32) -> usize {
    (view % 3) as usize
}

/// The current primary of group 0 and its view, once the warm-up settled.
fn warmed_up(sim: &mut Sim) -> Option<(usize, u32)> {
    steps(sim, 100);
    if !sim.run_until(300, |sim| sim.primary_of(G).is_some()) {
        return None;
    }
    let primary = sim.primary_of(G)?;
    Some((primary, sim.replica(primary, G)?.view().0))
}

/// The scenarios' writer clients: each has at most one write in flight, so
/// that a history never holds more than a few writes of unknown outcome
/// (each one multiplies the linearizability search).
const WRITER: usize = 100;

/// Writer `writer` puts a new value to key 0 through node `to`, if it is
/// idle; the history index of the write.
fn put(sim: &mut Sim, writer: usize, value: &mut u64, to: usize) -> Option<usize> {
    *value += 1;
    sim.submit_to(WRITER + writer, G, KvOp::Put { key: 0, value: VALUE_BASE + *value }, to)
}

fn answered(sim: &Sim, op: Option<usize>) -> bool {
    op.is_some_and(|op| sim.history[op].returned_tick.is_some())
}

/// V1: a backup acknowledges an op before its log holds it durably. Caught
/// by the swarm's durability profile: outages of a quorum and power losses
/// on slow disks, with the flushes in flight torn.
#[test]
fn v1_ack_before_durable_is_caught() {
    assert_caught(Mutant::AckBeforeDurable, swarm(Some(FaultProfile::Durability)));
}

/// Qv: a view change one DoViewChange short. The swarm catches it.
#[test]
fn v2_view_change_quorum_short_is_caught() {
    assert_caught(Mutant::ViewChangeQuorumShort, swarm(None));
}

/// Qr: a commit one durable copy short. The swarm catches it (the
/// broken-rule test has the hand-made split for it).
#[test]
fn v1_commit_quorum_short_is_caught() {
    assert_caught(Mutant::CommitQuorumShort, swarm(None));
}

/// Fencing by incarnation: frames of another incarnation accepted. The
/// reconfigure scenario's member changes under partitions (stalled links
/// deliver old incarnations' frames late) catch it.
#[test]
fn v2_other_incarnation_accepted_is_caught() {
    assert_caught(Mutant::OtherIncarnationAccepted, |seed, mutant| {
        let mut config = SimConfig::new(seed);
        config.scenario = Scenario::Reconfigure;
        config.profile = Some(FaultProfile::Partitions);
        config.core.mutant = mutant;
        Sim::new(config).run().violations
    });
}

/// R24: the old primary of an isolated group keeps serving reads while the
/// others elect a new primary and commit; a reader keeps asking it, a
/// writer writes through the others.
fn isolated_primary(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 6));
    let Some((old, _)) = warmed_up(&mut sim) else { return found(&sim) };
    isolate(&mut sim, old);
    let mut value = 0;
    for tick in 0..300u64 {
        if tick % 2 == 0 {
            sim.submit(G, KvOp::Get { key: 0 }, old);
        }
        if tick % 10 == 0 {
            let to = (old + 1 + (tick / 10 % 2) as usize) % 3;
            put(&mut sim, 0, &mut value, to);
        }
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn r24_quorum_window_longer_than_the_lease_is_caught() {
    assert_caught(Mutant::QuorumWindowTooLong, isolated_primary);
}

#[test]
fn r24_isolated_primary_control_is_clean() {
    assert_control_clean(isolated_primary);
}

/// V7, leases: one link fails, between the primary and the member that
/// leads the next view; the third member hears both. It granted the primary
/// a lease, so it must not help elect the next view while the primary still
/// serves reads from its window.
fn one_link_down(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 6));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&sim) };
    let next = leader_of(view + 1);
    sim.block(old, next);
    sim.block(next, old);
    let mut value = 0;
    for tick in 0..300u64 {
        if tick % 2 == 0 {
            sim.submit(G, KvOp::Get { key: 0 }, old);
        }
        if tick % 10 == 0 {
            put(&mut sim, 0, &mut value, next);
        }
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn v7_lease_ignored_is_caught() {
    assert_caught(Mutant::LeaseIgnored, one_link_down);
}

#[test]
fn v7_one_link_down_control_is_clean() {
    assert_control_clean(one_link_down);
}

/// V7, reads: a member that was paused in the middle of an election
/// completes it, when it resumes, from DoViewChanges that waited for it,
/// while the others have moved on to a later view and committed writes
/// there; the later view's StartView does not reach it. It is then the
/// primary of a view nobody else is in, and it must not serve reads before
/// a quorum confirms that view.
fn stale_view_primary(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 6));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&sim) };
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    isolate(&mut sim, old);
    let electing = |sim: &Sim| {
        sim.replica(next, G).is_some_and(|replica| replica.status() == Status::ViewChange && replica.view().0 > view)
    };
    if !sim.run_until(300, electing) {
        return settle(sim);
    }
    let resume = sim.now + 200;
    sim.nodes[next].paused_until = resume;
    steps(&mut sim, 40);
    sim.unblock_all();
    let later = |sim: &Sim| sim.replica(third, G).is_some_and(|replica| replica.is_primary());
    if sim.run_until(resume - sim.now, later) {
        sim.block(third, next);
        sim.block(old, next);
    }
    let mut value = 0;
    while sim.now < resume {
        if sim.now.is_multiple_of(10) {
            put(&mut sim, 0, &mut value, third);
        }
        sim.step(false);
    }
    for tick in 0..80u64 {
        if tick % 2 == 0 {
            sim.submit(G, KvOp::Get { key: 0 }, next);
        }
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn v7_read_without_quorum_is_caught() {
    assert_caught(Mutant::ReadWithoutQuorum, stale_view_primary);
}

#[test]
fn v7_stale_view_primary_control_is_clean() {
    assert_control_clean(stale_view_primary);
}

/// Q3: on slow disks, the primary commits a write that only the next view's
/// leader holds besides itself, answers it, and dies before any backup
/// learns the commit point; the new primary inherits the write uncommitted
/// and needs the third member, which must first fetch and store it, to
/// commit it. A reader asks the new primary at once: it must not answer
/// before it has committed and applied what it inherited.
fn inherited_write(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&sim) };
    for node in &mut sim.nodes {
        node.flush_latency_ticks = (20, 20);
    }
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    sim.block(old, third);
    let mut value = 0;
    let write = put(&mut sim, 0, &mut value, old);
    if !sim.run_until(400, |sim| answered(sim, write)) {
        return settle(sim);
    }
    sim.crash_node(old, 100_000);
    sim.unblock_all();
    let _ = sim.run_until(400, |sim| sim.replica(next, G).is_some_and(|replica| replica.is_primary()));
    for _ in 0..100 {
        sim.submit(G, KvOp::Get { key: 0 }, next);
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn q3_inherited_ops_not_first_is_caught() {
    assert_caught(Mutant::InheritedOpsNotFirst, inherited_write);
}

#[test]
fn q3_inherited_write_control_is_clean() {
    assert_control_clean(inherited_write);
}

/// Fencing by view: the link from the primary to one backup stalls (its
/// frames are held, as a TCP connection holds them through a partition);
/// then the primary loses the other backup too, takes writes it can never
/// commit, and the two backups elect a new view. When the stall ends, the
/// old view's Prepares reach a member of the new view: it must ignore them.
fn stalled_old_view(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&sim) };
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    let stall_end = sim.now + 170;
    sim.network.stalled.insert((old, third), stall_end);
    steps(&mut sim, 80);
    sim.block(old, next);
    sim.block(next, old);
    let mut value = 0;
    for writer in 1..=8 {
        put(&mut sim, writer, &mut value, old);
    }
    while sim.now < stall_end + 5 {
        sim.step(false);
    }
    sim.network.stalled.clear();
    for _ in 0..4 {
        let primary = sim.primary_of(G).unwrap_or(next);
        let write = put(&mut sim, 0, &mut value, primary);
        let _ = sim.run_until(100, |sim| answered(sim, write));
    }
    settle(sim)
}

#[test]
fn v2_stale_view_accepted_is_caught() {
    assert_caught(Mutant::StaleViewAccepted, stalled_old_view);
}

#[test]
fn v2_stalled_old_view_control_is_clean() {
    assert_control_clean(stalled_old_view);
}

/// V2, log selection: the isolated primary prepares a pipeline of writes it
/// can never commit; the others elect a view and commit fewer ops than that;
/// then the new primary dies and the old one comes back. The next view's
/// primary has the old primary's longer log from an older view and the
/// shorter log of the newer view, which holds committed ops: it must take the
/// newer view's.
fn longer_older_log(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&sim) };
    let next = leader_of(view + 1);
    let base = sim.replica(old, G).map_or(0, |replica| replica.op().0);
    isolate(&mut sim, old);
    let mut value = 0;
    for writer in 1..=8 {
        put(&mut sim, writer, &mut value, old);
    }
    if !sim.run_until(400, |sim| sim.replica(next, G).is_some_and(|replica| replica.is_primary())) {
        return settle(sim);
    }
    let write = put(&mut sim, 0, &mut value, next);
    let committed = |sim: &Sim| sim.replica(next, G).is_some_and(|replica| replica.commit_max().0 > base);
    let _ = sim.run_until(200, |sim| committed(sim) && answered(sim, write));
    sim.crash_node(next, 100_000);
    sim.unblock_all();
    for _ in 0..300u64 {
        if sim.now.is_multiple_of(20)
            && let Some(primary) = sim.primary_of(G)
        {
            put(&mut sim, 0, &mut value, primary);
        }
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn v2_log_selection_by_op_is_caught() {
    assert_caught(Mutant::LogSelectionByOp, longer_older_log);
}

#[test]
fn v2_longer_older_log_control_is_clean() {
    assert_control_clean(longer_older_log);
}

/// V2, the durable view: the old primary's last write reaches one backup
/// only, and the old primary loses power with it in flight. The next view's
/// leader, on a slow disk, takes that backup's longer log and sends its
/// StartView; the StartView must not reach the old primary, and the
/// leader's power fails once its view change is durable but before the new
/// view is. Restarted in the middle of that election, it completes the same
/// view again from the old primary's DoViewChange, with a log that may lack
/// the write, while the backup that adopted the first StartView still holds
/// it as that view's.
fn forgotten_view(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&sim) };
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    let mut value = 0;
    for _ in 0..3 {
        let write = put(&mut sim, 0, &mut value, old);
        let _ = sim.run_until(100, |sim| answered(sim, write));
    }
    for node in [old, next] {
        sim.nodes[node].flush_latency_ticks = (30, 30);
    }
    sim.block(old, next);
    let held = sim.replica(third, G).map_or(0, |replica| replica.op().0);
    put(&mut sim, 1, &mut value, old);
    let _ = sim.run_until(50, |sim| sim.replica(third, G).is_some_and(|replica| replica.op().0 > held));
    sim.power_off_node(old, 20);
    sim.block(next, old);
    let electing = |sim: &Sim| {
        sim.replica(next, G).is_some_and(|replica| replica.status() == Status::ViewChange && replica.view().0 > view)
    };
    if !sim.run_until(300, electing) {
        return settle(sim);
    }
    // Its first flush (the view change's superblock) takes 30 ticks; the
    // next one holds the new view and its log.
    steps(&mut sim, 45);
    sim.power_off_node(next, 2);
    sim.nodes[next].flush_latency_ticks = (1, 1);
    sim.unblock_all();
    for _ in 0..600u64 {
        if sim.now.is_multiple_of(20)
            && let Some(primary) = sim.primary_of(G)
        {
            put(&mut sim, 0, &mut value, primary);
        }
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn v2_view_change_before_durable_is_caught() {
    assert_caught(Mutant::ViewChangeBeforeDurable, forgotten_view);
}

#[test]
fn v2_forgotten_view_control_is_clean() {
    assert_control_clean(forgotten_view);
}
