//! The mutation suite: each hand-made mutant of a replica safety rule
//! (`cohort_core::mutants::Mutant`, switched on through the test-only
//! `CoreConfig::mutant`) must be caught, that is some checker reports a
//! violation (or the core's own invariants panic), in at least one of 20
//! seeds on 3 nodes. A checker that never fails proves nothing; a mutant
//! that survives is a hole in the simulator.
//!
//! Two kinds of run catch them. Where the swarm's random faults bite often
//! enough, a mutant runs the binary's default run. Where a rule guards
//! against a sequence random faults rarely line up, the test sets the
//! sequence up itself, as `broken_rule.rs` does, and the seed draws the rest
//! (the workload, the network's loss, duplication and delay, the disks'
//! speed). Every run also runs with the correct rules on the same seeds and
//! must then break nothing (the controls).
//!
//! A mutant's test stops at the first seed that catches it, so that the
//! suite stays cheap in debug builds. With `COHORT_MUTANTS_TALLY=1` every
//! mutant runs all its seeds and the tests print how many caught it and
//! what each first saw: the counts of the table in docs/simulator.md ("The
//! mutation suite"). The scenarios keep their histories small (a few
//! writers and readers, each with one request in flight), and the costly
//! linearizability search runs only when the per-step checkers found
//! nothing: many overlapping reads of an illegal history can make it run
//! for minutes.

use std::ops::Range;

use cohort_core::mutants::Mutant;
use cohort_messages::{Command, GroupId};
use cohort_sim::cli::{catch_panic, install_quiet_panic_hook};
use cohort_sim::kv::KvOp;
use cohort_sim::{FaultProfile, Scenario, Sim, SimConfig, linearizability};

/// The seeds every mutant gets.
const SEEDS: Range<u64> = 0..20;
/// The one group of the hand-made scenarios.
const G: GroupId = GroupId(0);
/// Values written by the scenarios (distinct from the random clients').
const VALUE_BASE: u64 = 0x5CE_0000_0000;

/// Set to run every seed of every mutant (for the table in docs/simulator.md).
const TALLY_ENV: &str = "COHORT_MUTANTS_TALLY";

/// True in tally mode: every mutant gets every seed, not only up to the
/// first that catches it.
fn tally_mode() -> bool {
    std::env::var_os(TALLY_ENV).is_some_and(|value| !value.is_empty() && value != "0")
}

/// A run of one seed: the violations found, or the core's panic.
fn outcome(seed: u64, mutant: Option<Mutant>, run: &impl Fn(u64, Option<Mutant>) -> Vec<String>) -> Vec<String> {
    match catch_panic(|| run(seed, mutant)) {
        Ok(violations) => violations,
        Err(panic) => vec![format!("panic: {panic}")],
    }
}

/// `mutant` is caught (a violation or a panic) in at least one seed. Stops
/// at the first catching seed unless in tally mode; prints the count.
fn assert_caught(mutant: Mutant, run: impl Fn(u64, Option<Mutant>) -> Vec<String>) {
    assert_caught_in(mutant, SEEDS, run);
}

/// As [`assert_caught`], over `seeds`: for a mutant only a random swarm
/// catches, in about one seed in ten.
fn assert_caught_in(mutant: Mutant, seeds: Range<u64>, run: impl Fn(u64, Option<Mutant>) -> Vec<String>) {
    install_quiet_panic_hook();
    let tally = tally_mode();
    let (mut ran, mut caught) = (0, Vec::new());
    for seed in seeds {
        ran += 1;
        if let Some(first) = outcome(seed, Some(mutant), &run).into_iter().next() {
            caught.push((seed, first));
            if !tally {
                break;
            }
        }
    }
    eprintln!("{}: caught in {} of {ran} seeds run", mutant.name(), caught.len());
    for (seed, first) in &caught {
        eprintln!("  seed {seed}: {first}");
    }
    assert!(!caught.is_empty(), "{} survived {ran} seeds: no checker noticed", mutant.name());
}

/// With the correct rules, the same runs break nothing, in every seed.
fn assert_control_clean(run: impl Fn(u64, Option<Mutant>) -> Vec<String>) {
    install_quiet_panic_hook();
    for seed in SEEDS {
        let violations = outcome(seed, None, &run);
        assert!(violations.is_empty(), "seed {seed}, correct rules: {violations:#?}");
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

/// What the checkers found. The per-step checkers come first; the
/// linearizability search (the costly one) runs only if they found nothing.
fn found(sim: &mut Sim) -> Vec<String> {
    // Refusals of reasons no correct peer causes (T5) count too: a rule
    // broken in one place may be stopped by a check behind it, which then
    // refuses what the broken rule let through.
    sim.check_refusals();
    if !sim.checkers.violations.is_empty() {
        return sim.checkers.violations.clone();
    }
    linearizability::check(sim.config.seed, &sim.history).iter().map(ToString::to_string).collect()
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
    found(&mut sim)
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
/// How many writers `write_to_primary` uses.
const WRITERS: usize = 3;

/// Writer `writer` puts a new value to key 0 through node `to`, if it is
/// idle; the history index of the write.
fn put(sim: &mut Sim, writer: usize, value: &mut u64, to: usize) -> Option<usize> {
    *value += 1;
    sim.submit_to(WRITER + writer, G, KvOp::Put { key: 0, value: VALUE_BASE + *value }, to)
}

/// The scenarios' reader clients: a few, each with at most one read in
/// flight. Many overlapping reads in an illegal history multiply the
/// linearizability search's work past any budget.
const READER: usize = 200;
/// How many readers there are.
const READERS: usize = 4;

/// Every idle reader asks node `to` for key 0.
fn read(sim: &mut Sim, to: usize) {
    for reader in 0..READERS {
        let _ = sim.submit_to(READER + reader, G, KvOp::Get { key: 0 }, to);
    }
}

fn answered(sim: &Sim, op: Option<usize>) -> bool {
    op.is_some_and(|op| sim.history[op].returned_tick.is_some())
}

/// Writers `writers` each register (H5) and write once through node `to`,
/// before a scenario's faults: the writes the scenario then sends carry
/// operations from the first, instead of registrations that apply nothing.
/// False if they were not all answered in time.
fn writers_registered(sim: &mut Sim, value: &mut u64, to: usize, writers: std::ops::RangeInclusive<usize>) -> bool {
    let writes: Vec<Option<usize>> = writers.map(|writer| put(sim, writer, value, to)).collect();
    sim.run_until(400, |sim| writes.iter().all(|write| answered(sim, *write)))
}

/// DoViewChanges node `from` has sent node `to` so far.
fn dvcs_sent(sim: &Sim, from: usize, to: usize) -> u64 {
    // In a frame of its own or in a ViewChangeBatch (Z4).
    sim.message_log.get(&(from, to, Command::DoViewChange)).copied().unwrap_or(0)
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
    // With the default 1,500 fault ticks, caught in 33 of seeds 0..1500
    // once every client registers before its first write (H5), which
    // changed the draws; with 8,000 (more member changes per run), in 69 of
    // seeds 0..400.
    assert_caught_in(Mutant::OtherIncarnationAccepted, 0..60, reconfigure_swarm);
}

/// The reconfigure scenario's run of `seed` under partitions, with a fault
/// phase of 8,000 ticks so that each run changes members many times.
fn reconfigure_swarm(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut config = SimConfig::new(seed);
    config.scenario = Scenario::Reconfigure;
    config.profile = Some(FaultProfile::Partitions);
    config.fault_ticks = 8_000;
    config.core.mutant = mutant;
    Sim::new(config).run().violations
}

/// The swarm runs that catch the mutants above are clean with the correct
/// rules, on the same seeds.
#[test]
fn swarm_controls_are_clean() {
    assert_control_clean(swarm(None));
    assert_control_clean(reconfigure_swarm);
}

/// R24: the old primary of an isolated group keeps serving reads while the
/// others elect a new primary and commit; readers keep asking it, a writer
/// writes through the others.
fn isolated_primary(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 6));
    let Some((old, _)) = warmed_up(&mut sim) else { return found(&mut sim) };
    isolate(&mut sim, old);
    let mut value = 0;
    for tick in 0..300u64 {
        read(&mut sim, old);
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
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let next = leader_of(view + 1);
    sim.block(old, next);
    sim.block(next, old);
    let mut value = 0;
    for tick in 0..300u64 {
        read(&mut sim, old);
        if tick % 10 == 0 {
            write_to_primary(&mut sim, &mut value, old);
        }
        sim.step(false);
    }
    settle(sim)
}

/// The first idle writer of a few puts a new value through the primary of
/// the highest view (`fallback` while there is none): a write stuck at a
/// primary that can no longer commit holds up only its own writer.
fn write_to_primary(sim: &mut Sim, value: &mut u64, fallback: usize) {
    let to = sim.primary_of(G).unwrap_or(fallback);
    if let Some(writer) = (0..WRITERS).find(|writer| sim.client_idle(WRITER + writer)) {
        put(sim, writer, value, to);
    }
}

#[test]
fn v7_lease_ignored_is_caught() {
    assert_caught(Mutant::LeaseIgnored, one_link_down);
}

/// C4: the lease release confuses the lease holder (the primary of the
/// backup's view) with the next view's primary. In `one_link_down` the next
/// view's primary is the member cut off from the primary, whose timeout
/// then elects it while the primary still serves reads.
#[test]
fn c4_lease_released_by_next_primary_is_caught() {
    assert_caught(Mutant::LeaseReleasedByNextPrimary, one_link_down);
}

#[test]
fn v7_one_link_down_control_is_clean() {
    assert_control_clean(one_link_down);
}

/// V7, reads: the DoViewChange that completes an election is held up on
/// its way (a stalled link, as a TCP connection holds frames through a
/// partition) while the others give up on that view, elect the next one
/// without the held-up leader and commit writes there. When the stall ends
/// the leader completes the old election from the late DoViewChange: it is
/// the primary of a view nobody else is in (the others' frames no longer
/// reach it), and must not serve reads before a quorum confirms the view.
fn late_election(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    let stall_end = sim.now + 400;
    isolate(&mut sim, old);
    sim.network.stalled.insert((third, next), stall_end);
    // A few copies of the DoViewChange are held (the network may lose one);
    // later frames are dropped.
    if !sim.run_until(300, |sim| dvcs_sent(sim, third, next) >= 3) {
        return settle(sim);
    }
    sim.block(third, next);
    sim.network.blocked.remove(&(old, third));
    sim.network.blocked.remove(&(third, old));
    let mut value = 0;
    while sim.now < stall_end {
        if sim.now.is_multiple_of(10) {
            write_to_primary(&mut sim, &mut value, third);
        }
        sim.step(false);
    }
    for _ in 0..80 {
        read(&mut sim, next);
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn v7_read_without_quorum_is_caught() {
    assert_caught(Mutant::ReadWithoutQuorum, late_election);
}

#[test]
fn v7_late_election_control_is_clean() {
    assert_control_clean(late_election);
}

/// V1, durability before acknowledgement: the primary commits two writes
/// that only the next view's leader holds besides itself (the third member
/// no longer hears the primary). The leader's disk is slow: its flush of the
/// first write is in flight when the second arrives, which waits in its
/// storage queue. Once both are answered, the primary crashes for good and
/// the leader loses power; it keeps at most what its flushes made durable.
/// The leader and the third member then elect the next view: if the leader
/// acknowledged a write before it was durable, that view lacks a committed
/// write and puts another one at its op.
fn acked_then_lost(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    sim.nodes[old].flush_latency_ticks = (1, 1);
    sim.nodes[next].flush_latency_ticks = (30, 30);
    sim.block(old, third);
    let mut value = 0;
    let writes = [put(&mut sim, 1, &mut value, old), put(&mut sim, 2, &mut value, old)];
    if !sim.run_until(200, |sim| writes.iter().all(|write| answered(sim, *write))) {
        return settle(sim);
    }
    sim.crash_node(old, 100_000);
    sim.power_off_node(next, 2);
    sim.nodes[next].flush_latency_ticks = (1, 1);
    sim.unblock_all();
    for _ in 0..400u64 {
        if sim.now.is_multiple_of(10) {
            write_to_primary(&mut sim, &mut value, next);
        }
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn v1_ack_before_durable_is_caught() {
    assert_caught(Mutant::AckBeforeDurable, acked_then_lost);
}

#[test]
fn v1_acked_then_lost_control_is_clean() {
    assert_control_clean(acked_then_lost);
}

/// Q3: on slow disks, the primary commits a write that only the next view's
/// leader holds besides itself, answers it, and dies before any backup
/// learns the commit point; the new primary inherits the write uncommitted
/// and needs the third member, which must first fetch and store it, to
/// commit it. The third member confirms the new view at once but its disk
/// is now slow, so the commit waits for a long flush. Readers ask the new
/// primary at once: it must not answer before it has committed and applied
/// what it inherited.
fn inherited_write(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    // The writer registers (H5) and writes once before the disks slow
    // down, so that the write below is the one op the new primary inherits.
    let mut value = 0;
    let first = put(&mut sim, 0, &mut value, old);
    if !sim.run_until(400, |sim| answered(sim, first)) {
        return settle(sim);
    }
    for node in &mut sim.nodes {
        node.flush_latency_ticks = (20, 20);
    }
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    sim.block(old, third);
    let write = put(&mut sim, 0, &mut value, old);
    if !sim.run_until(400, |sim| answered(sim, write)) {
        return settle(sim);
    }
    sim.crash_node(old, 100_000);
    sim.unblock_all();
    let _ = sim.run_until(400, |sim| sim.replica(next, G).is_some_and(|replica| replica.is_primary()));
    sim.nodes[next].flush_latency_ticks = (1, 1);
    sim.nodes[third].flush_latency_ticks = (60, 60);
    for _ in 0..100 {
        read(&mut sim, next);
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
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let mut value = 0;
    if !writers_registered(&mut sim, &mut value, old, 0..=8) || sim.primary_of(G) != Some(old) {
        return settle(sim);
    }
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    let stall_end = sim.now + 170;
    sim.network.stalled.insert((old, third), stall_end);
    steps(&mut sim, 80);
    sim.block(old, next);
    sim.block(next, old);
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
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let mut value = 0;
    if !writers_registered(&mut sim, &mut value, old, 0..=8) || sim.primary_of(G) != Some(old) {
        return settle(sim);
    }
    let next = leader_of(view + 1);
    let base = sim.replica(old, G).map_or(0, |replica| replica.op().0);
    isolate(&mut sim, old);
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

/// V2, the durable view. A DoViewChange for view v + 1 promises that its
/// sender takes no part in older views; the new primary builds v + 1 from
/// the log the DoViewChange carried. The promise holds only if the sender
/// made v + 1 durable before the message left.
///
/// The third member stops hearing the primary, times out, and sends the
/// next view's leader its DoViewChange. The leader still hears the primary:
/// its lease keeps it out of the election, and it keeps the DoViewChange
/// for when it joins. The third member's disk is slow and the view change's
/// superblock stage fails (R12), so its retry waits behind a whole slow
/// flush: the third member loses power in that window and restarts, hearing
/// the primary again. Then the leader pauses past its lease and the
/// primary's link to it fails; the primary, on a slow disk, commits a write
/// with the third member's acknowledgement, answers it, and crashes before
/// its Commit (held until its superblock is durable, R12) tells anyone. The
/// leader resumes and completes the next view at once from the DoViewChange
/// it kept, whose log lacks the write: a third member that forgot its
/// promise acknowledged a write its own DoViewChange had already left out.
/// With the rule kept, it restarts still electing the next view, refuses
/// the primary's Prepare, and the write is never answered.
fn forgotten_promise(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    let mut value = 0;
    for _ in 0..2 {
        let write = put(&mut sim, 0, &mut value, old);
        let _ = sim.run_until(100, |sim| answered(sim, write));
    }
    sim.nodes[third].flush_latency_ticks = (30, 30);
    sim.block(old, third);
    sim.block(third, old);
    // Once the Commits in flight have landed, the next superblock stage of
    // the third member is the view change's.
    steps(&mut sim, 10);
    sim.nodes[third].fail_next_superblock_stage(G);
    if !sim.run_until(300, |sim| dvcs_sent(sim, third, next) > 0) {
        return settle(sim);
    }
    // Long enough for the DoViewChange (and a re-send) to arrive, short of
    // the slow flushes that make the view durable.
    steps(&mut sim, 8);
    sim.power_off_node(third, 2);
    sim.nodes[third].flush_latency_ticks = (1, 1);
    sim.unblock_all();
    steps(&mut sim, 10);
    sim.block(old, next);
    sim.nodes[next].paused_until = sim.now + 80;
    sim.nodes[old].flush_latency_ticks = (15, 15);
    let write = put(&mut sim, 0, &mut value, old);
    let _ = sim.run_until(60, |sim| answered(sim, write));
    sim.crash_node(old, 100_000);
    for _ in 0..300u64 {
        if sim.now.is_multiple_of(10) {
            write_to_primary(&mut sim, &mut value, next);
        }
        sim.step(false);
    }
    settle(sim)
}

#[test]
fn v2_view_change_before_durable_is_caught() {
    assert_caught(Mutant::ViewChangeBeforeDurable, forgotten_promise);
}

#[test]
fn v2_forgotten_promise_control_is_clean() {
    assert_control_clean(forgotten_promise);
}

/// H1, the rebuild of issue 33 on simulated nodes: a write is acknowledged
/// by the primary and one backup while the third member is down; the
/// primary's node then loses its whole disk and restarts empty, while the
/// backup that holds the write goes down and the third member comes back.
/// The empty member must not vote as if it held its log: until the backup
/// returns the group may stay unavailable, but it never elects a log
/// without the acknowledged write and puts other writes at its op (which
/// the agreement and linearizability checkers see once the backup, with
/// the write applied, returns). Readers then read the register.
fn rebuilt_empty(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((primary, _)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let (holder, third) = ((primary + 1) % 3, (primary + 2) % 3);
    sim.crash_node(third, 100_000);
    let mut value = 0;
    let write = put(&mut sim, 0, &mut value, primary);
    if !sim.run_until(200, |sim| answered(sim, write)) {
        return settle(sim);
    }
    // The commit point reaches the holder, which applies the write.
    steps(&mut sim, 20);
    sim.crash_node(primary, 5);
    sim.nodes[primary].wipe(None);
    sim.crash_node(holder, 100_000);
    sim.nodes[third].down_until = sim.now + 5;
    writes_then_reads_after_heal(&mut sim, &mut value, third, holder)
}

#[test]
fn h1_recovery_ignored_is_caught() {
    assert_caught(Mutant::RecoveryIgnored, rebuilt_empty);
}

#[test]
fn h1_rebuilt_empty_control_is_clean() {
    assert_control_clean(rebuilt_empty);
}

/// H1, two members without their data and one holder: the third member's
/// disk goes while it is down; a write is then acknowledged by the primary
/// and the holder; the primary's disk goes too, and both come back empty,
/// while the holder, once they heard it, goes down. The two recovering
/// members are too few holders to wait for a primary: they may only lend
/// their votes to the holder's election. Voting with their own (empty)
/// logs, they elect each other and put new writes at the acknowledged
/// write's op, which the checkers see once the holder returns.
fn two_without_data(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut sim = Sim::new(scenario_config(seed, mutant, 0));
    let Some((primary, _)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let (holder, late) = ((primary + 1) % 3, (primary + 2) % 3);
    steps(&mut sim, 20);
    sim.crash_node(late, 100_000);
    sim.nodes[late].wipe(None);
    let mut value = 0;
    let write = put(&mut sim, 0, &mut value, primary);
    if !sim.run_until(200, |sim| answered(sim, write)) {
        return settle(sim);
    }
    steps(&mut sim, 20);
    sim.crash_node(primary, 5);
    sim.nodes[primary].wipe(None);
    sim.nodes[late].down_until = sim.now + 5;
    // The holder stays until a recovering member stopped recovering (the
    // mutant) or long enough to have heard everyone.
    let recovered = |sim: &Sim| {
        [primary, late]
            .iter()
            .any(|&node| sim.nodes[node].is_up() && sim.nodes[node].replicas().any(|replica| !replica.is_recovering()))
    };
    sim.run_until(60, recovered);
    sim.crash_node(holder, 100_000);
    writes_then_reads_after_heal(&mut sim, &mut value, primary, holder)
}

/// The H1 scenarios' end: 400 ticks of writes to the primary (or
/// `write_fallback` while none is known), then, healed, 300 ticks of reads
/// from the primary (or `read_fallback`), so that the checkers see whether
/// an acknowledged write survived.
fn writes_then_reads_after_heal(
    sim: &mut Sim,
    value: &mut u64,
    write_fallback: usize,
    read_fallback: usize,
) -> Vec<String> {
    for _ in 0..400u64 {
        if sim.now.is_multiple_of(10) {
            write_to_primary(sim, value, write_fallback);
        }
        sim.step(false);
    }
    sim.heal();
    for _ in 0..300u64 {
        if sim.now.is_multiple_of(10) {
            let to = sim.primary_of(G).unwrap_or(read_fallback);
            read(sim, to);
        }
        sim.step(false);
    }
    found(sim)
}

#[test]
fn h1_recovery_votes_with_its_log_is_caught() {
    assert_caught(Mutant::RecoveryVotesWithItsLog, two_without_data);
}

#[test]
fn h1_two_without_data_control_is_clean() {
    assert_control_clean(two_without_data);
}

/// The metadata scenario's default run of `seed` (M2: operations run
/// under the swarm's faults; the step-gate checker judges every step).
fn metadata_swarm(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut config = SimConfig::metadata(seed);
    config.core.mutant = mutant;
    Sim::new(config).run().violations
}

/// The default run of `seed` with quiescence on (Z3: groups rest, quiesce
/// and wake under the swarm's faults; the quiet rules are checked every tick).
fn quiet_swarm(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut config = SimConfig::new(seed);
    config.core.timing.commit_quiesce_timeout_ticks = Some(20);
    config.core.mutant = mutant;
    Sim::new(config).run().violations
}

/// M2: a step applied without the previous step's acks. The metadata
/// scenario's operator starts moves, replaces and joins in most seeds, and
/// the step-gate checker sees the first early step.
#[test]
fn m2_step_gate_without_acks_is_caught() {
    assert_caught(Mutant::StepGateWithoutAcks, metadata_swarm);
}

/// Z3: a pair's contact dated from a reply that did not match. Digest
/// mismatches happen in most seeds with quiescence on.
#[test]
fn z3_pair_contact_without_match_is_caught() {
    assert_caught(Mutant::PairContactWithoutMatch, quiet_swarm);
}

/// The metadata and quiescence swarms are clean with the correct rules.
#[test]
fn h5_metadata_and_quiet_swarm_controls_are_clean() {
    assert_control_clean(metadata_swarm);
    assert_control_clean(quiet_swarm);
}

/// Z3, following quiet: the idle group quiesces; then the primary hands it
/// to the next view's leader while its link to the third member is cut, so
/// the third member, still following the old primary quiesced, hears of the
/// new view first from its StartView. It must stop following the old
/// primary: from then on only the new primary's Commits may renew its
/// timeout and lease.
fn transfer_past_a_quiet_backup(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut config = scenario_config(seed, mutant, 0);
    config.core.timing.commit_quiesce_timeout_ticks = Some(20);
    let mut sim = Sim::new(config);
    let Some((old, view)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let (next, third) = (leader_of(view + 1), leader_of(view + 2));
    let quiet = |sim: &Sim, node: usize| sim.replica(node, G).is_some_and(|replica| replica.quiet_follow().is_some());
    if !sim.run_until(400, |sim| quiet(sim, next) && quiet(sim, third)) {
        return settle(sim);
    }
    sim.block(old, third);
    let to = cohort_sim::node::node_id(next);
    if let Some(shard) = sim.nodes[old].shard_for_mut(G) {
        let _ = shard.transfer_primary(G, to);
    }
    let _ = sim.run_until(30, |sim| sim.replica(third, G).is_some_and(|replica| replica.view().0 > view));
    steps(&mut sim, 5);
    settle(sim)
}

#[test]
fn z3_quiet_follow_across_views_is_caught() {
    assert_caught(Mutant::QuietFollowAcrossViews, transfer_past_a_quiet_backup);
}

#[test]
fn z3_transfer_past_a_quiet_backup_control_is_clean() {
    assert_control_clean(transfer_past_a_quiet_backup);
}

/// Exactly-once under eviction: the group's client table holds two
/// clients. A writer's two writes are applied and answered; two other
/// writers write once each, which evicts it; then its second request
/// arrives again (a late retry, or a duplicate the network held). The
/// table no longer knows the writer, so the request must be refused, not
/// applied a second time.
fn evicted_writer_retries(seed: u64, mutant: Option<Mutant>) -> Vec<String> {
    let mut config = scenario_config(seed, mutant, 0);
    config.core.clients_max = 2;
    let mut sim = Sim::new(config);
    let Some((primary, _)) = warmed_up(&mut sim) else { return found(&mut sim) };
    let mut value = 0;
    let mut retried = None;
    for _ in 0..2 {
        let write = put(&mut sim, 0, &mut value, primary);
        retried = write.and_then(|write| Some((write, sim.outstanding_request(write)?)));
        if !sim.run_until(200, |sim| answered(sim, write)) {
            return settle(sim);
        }
    }
    for writer in 1..=2 {
        let write = put(&mut sim, writer, &mut value, primary);
        if !sim.run_until(200, |sim| answered(sim, write)) {
            return settle(sim);
        }
    }
    if let Some((write, request)) = retried {
        let to = sim.primary_of(G).unwrap_or(primary);
        sim.send_raw(write, to, request);
    }
    steps(&mut sim, 50);
    settle(sim)
}

#[test]
fn h5_evicted_client_admitted_is_caught() {
    assert_caught(Mutant::EvictedClientAdmitted, evicted_writer_retries);
}

#[test]
fn h5_evicted_writer_retries_control_is_clean() {
    assert_control_clean(evicted_writer_retries);
}

/// H3: a replica removed on metadata a restart does not replay. The
/// metadata seed that found it (a node restarted right after removing a
/// deleted group's replica, its replayed copy placed the group there
/// again, and it served that life empty), 5001364, catches it through the
/// R24 window checker; 5005584 stands in for the other one that found it,
/// 5006819, whose run stop 46's idle acknowledgement asks and batched
/// transfers changed (of seeds 5000000 to 5009999 the mutant is caught in
/// 5001364, 5005584 and 5007772). The fix's control is
/// `driver_regression_seeds`.
#[test]
fn h3_unload_before_replayable_is_caught() {
    for seed in [5_001_364, 5_005_584] {
        assert_caught_in(Mutant::UnloadBeforeReplayable, seed..seed + 1, metadata_swarm);
    }
}

/// D1: the binary's run of `seed` with the kv groups' state on the
/// simulated disk (`--state disk`) in `profile` (None: the seed draws it):
/// power losses and process crashes that take each state machine back to
/// its last checkpoint, disk faults, and the state machines' checkpoints
/// lost with a node (`SimNode::wipe_state`).
fn disk_state_swarm(profile: Option<FaultProfile>) -> impl Fn(u64, Option<Mutant>) -> Vec<String> {
    move |seed, mutant| {
        let mut config = SimConfig::new(seed);
        config.profile = profile;
        config.state = cohort_sim::storage::StateKind::Disk;
        config.core.mutant = mutant;
        Sim::new(config).run().violations
    }
}

#[test]
fn d1_disk_state_swarm_controls_are_clean() {
    assert_control_clean(disk_state_swarm(None));
    assert_control_clean(disk_state_swarm(Some(FaultProfile::Durability)));
}

/// D1: a replica recovered from a snapshot whose state its state machine
/// lost answers from a state missing committed ops.
#[test]
fn d1_checkpoint_behind_accepted_is_caught() {
    let run = disk_state_swarm(Some(FaultProfile::Durability));
    assert_caught_in(Mutant::CheckpointBehindAccepted, 6_000_000..6_000_400, run);
}

/// D3: a replica that installed part of a streamed state answers from a
/// state missing committed ops.
#[test]
fn d3_stream_installed_short_is_caught() {
    assert_caught_in(Mutant::StreamInstalledShort, 6_000_000..6_000_300, disk_state_swarm(None));
}

/// D1: ops between storage's snapshot and the state machine's checkpoint
/// applied twice after a restart.
#[test]
fn d1_checkpoint_ahead_ignored_is_caught() {
    assert_caught_in(Mutant::CheckpointAheadIgnored, 6_000_000..6_000_300, disk_state_swarm(None));
}
