//! P4 on the simulator harness: learners (P4) catch up by repair and
//! state transfer, are never counted, never start a view change, and stop
//! receiving once removed; and a seed sweep with learners under every
//! fault. Node indexes 0..3 are the voters of group 0 (member index = node
//! index); nodes 3 and 4 are the learner nodes.

use cohort_core::Role;
use cohort_messages::{Command as Wire, GroupId, Op, View};
use cohort_sim::cli::{reproduce, run_catching};
use cohort_sim::kv::KvOp;
use cohort_sim::{Faults, Sim, SimConfig};

const G: GroupId = GroupId(0);
const VOTERS: usize = 3;

fn cluster(learners: usize, from_start: bool) -> Sim {
    let mut config = SimConfig::new(11);
    config.faults = Some(Faults::default());
    config.nodes = VOTERS;
    config.learners = learners;
    config.learners_from_start = from_start;
    config.groups = 1;
    config.clients = 0;
    let mut sim = Sim::new(config);
    assert!(sim.run_until(20, |sim| sim.primary_of(G).is_some()), "group 0 has a primary at start");
    sim
}

fn done(sim: &Sim, op: usize) -> bool {
    sim.history[op].returned_tick.is_some()
}

fn write(sim: &mut Sim, key: u64, value: u64) -> usize {
    let primary = sim.primary_of(G).expect("a primary");
    let op = sim.submit(G, KvOp::Put { key, value }, primary);
    assert!(sim.run_until(300, |sim| done(sim, op)), "write {key}={value} committed");
    op
}

fn assert_clean(sim: &Sim) {
    assert_eq!(sim.checkers.violations, Vec::<String>::new());
}

/// Messages of `commands` sent from `from` (any node if `None`) to `to`,
/// each alone in its frame or in a ViewChangeBatch (Z4).
fn frames(sim: &Sim, from: Option<usize>, to: usize, commands: &[Wire]) -> u64 {
    sim.message_log
        .iter()
        .filter(|((f, t, command), _)| from.is_none_or(|from| *f == from) && *t == to && commands.contains(command))
        .map(|(_, count)| count)
        .sum()
}

const ELECTION: [Wire; 2] = [Wire::StartViewChange, Wire::DoViewChange];
const ANY: [Wire; 6] =
    [Wire::Prepare, Wire::Commit, Wire::StartView, Wire::StateChunk, Wire::StartViewChange, Wire::DoViewChange];

#[test]
fn p4_learner_catches_up_before_voting() {
    let mut sim = cluster(2, false);
    // A busy group: enough writes that the primary has snapshotted past the
    // start of its log (snapshot_interval_ops is 16), so a new replica needs
    // state transfer.
    for value in 0..40 {
        write(&mut sim, value % 3, value);
    }
    let primary = sim.primary_of(G).expect("a primary");
    assert!(sim.replica(primary, G).expect("up").log_base() > Op(0), "the primary snapshotted");
    sim.set_learners(G, &[3, 4]);
    for learner in [3, 4] {
        let replica = sim.replica(learner, G).expect("a learner replica was created");
        assert_eq!(replica.role(), Role::Learner);
        assert_eq!((replica.view(), replica.commit_min()), (View(0), Op(0)), "it starts empty");
        assert!(!sim.learner_caught_up(G, learner));
    }
    // Writes go on while the learners catch up.
    for value in 40..50 {
        write(&mut sim, value % 3, value);
    }
    assert!(
        sim.run_until(500, |sim| sim.learner_caught_up(G, 3) && sim.learner_caught_up(G, 4)),
        "both learners caught up"
    );
    let commit = sim.replica(primary, G).expect("up").commit_min();
    for learner in [3, 4] {
        assert!(frames(&sim, Some(primary), learner, &[Wire::StateChunk]) > 0, "node {learner}: state transfer");
        assert!(sim.run_until(50, |sim| sim.replica(learner, G).is_some_and(|r| r.commit_min() == commit)));
    }
    let progress = sim.replica(primary, G).expect("up").learner_progress();
    assert_eq!(progress.len(), 2);
    assert!(progress.iter().all(|(_, op)| *op >= commit), "{progress:?} against commit {commit}");

    // Never counted: with 2 of 3 voters down, nothing commits, although the
    // primary and both learners hold every op.
    let voters_down: Vec<usize> = (0..VOTERS).filter(|node| *node != primary).collect();
    for node in &voters_down {
        sim.crash_node(*node, 400);
    }
    let stuck = sim.submit(G, KvOp::Put { key: 9, value: 99 }, primary);
    sim.run_until(300, |_| false);
    assert!(!done(&sim, stuck), "no commit with one voter up and two learners");
    assert_eq!(sim.checkers.committed_digest(G, commit.next()), None, "nobody applied a new op");
    for learner in [3, 4] {
        assert_eq!(sim.replica(learner, G).expect("up").role(), Role::Learner);
    }
    // The voters return: the write commits, and the learners follow.
    assert!(sim.run_until(2000, |sim| done(sim, stuck)), "the write commits once voters are back");
    assert!(sim.run_until(500, |sim| sim.learner_caught_up(G, 3) && sim.learner_caught_up(G, 4)));
    assert_clean(&sim);
}

#[test]
fn p4_learner_never_starts_a_view_change() {
    let mut sim = cluster(1, true);
    for value in 0..5 {
        write(&mut sim, 1, value);
    }
    // Cut the learner off from every voter far past the idle heartbeat timeout.
    for voter in 0..VOTERS {
        sim.block(voter, 3);
    }
    let timing = sim.config.core.timing.clone();
    let cut_ticks = 3 * timing.idle_timeout_effective_ticks();
    for value in 5..10 {
        write(&mut sim, 1, value);
    }
    sim.run_until(cut_ticks, |_| false);
    let learner = sim.replica(3, G).expect("up");
    assert_eq!(learner.role(), Role::Learner);
    assert_eq!(learner.view(), View(0), "no view change of its own");
    for voter in 0..VOTERS {
        assert_eq!(sim.replica(voter, G).expect("up").view(), View(0), "the voters were not disturbed");
        assert_eq!(frames(&sim, Some(3), voter, &ELECTION), 0, "no election message from the learner");
    }
    sim.unblock_all();
    assert!(sim.run_until(300, |sim| sim.learner_caught_up(G, 3)), "caught up after the cut");

    // A real view change among the voters: the learner follows the new view.
    let old = sim.primary_of(G).expect("a primary");
    sim.crash_node(old, 100_000);
    assert!(sim.run_until(1000, |sim| sim.primary_of(G).is_some_and(|p| p != old)), "a new primary");
    let new = sim.primary_of(G).expect("a primary");
    let view = sim.replica(new, G).expect("up").view();
    write(&mut sim, 1, 100);
    assert!(
        sim.run_until(500, |sim| sim.replica(3, G).is_some_and(|r| r.view() == view) && sim.learner_caught_up(G, 3)),
        "the learner follows {view}"
    );
    for voter in 0..VOTERS {
        assert_eq!(frames(&sim, Some(3), voter, &ELECTION), 0, "no election message from the learner");
    }
    assert_eq!(frames(&sim, None, 3, &ELECTION), 0, "no election message is sent to a learner");
    assert_clean(&sim);
}

#[test]
fn p4_learners_removed_stop_receiving() {
    let mut sim = cluster(2, true);
    for value in 0..5 {
        write(&mut sim, 2, value);
    }
    assert!(sim.run_until(300, |sim| sim.learner_caught_up(G, 3) && sim.learner_caught_up(G, 4)));
    // Drop node 3: node 4 keeps its place as a learner, at index 3 now.
    sim.set_learners(G, &[4]);
    assert!(sim.replica(3, G).is_none(), "a removed learner unloads the group");
    sim.run_until(10, |_| false);
    let before = frames(&sim, None, 3, &ANY);
    for value in 5..15 {
        write(&mut sim, 2, value);
    }
    sim.run_until(200, |_| false);
    assert_eq!(frames(&sim, None, 3, &ANY), before, "nothing is sent to a removed learner");
    let primary = sim.primary_of(G).expect("a primary");
    let progress = sim.replica(primary, G).expect("up").learner_progress();
    assert_eq!(
        progress.iter().map(|(node, _)| node.0).collect::<Vec<_>>(),
        vec![5],
        "only node 4 (NodeId 5) is tracked"
    );
    assert!(sim.run_until(300, |sim| sim.learner_caught_up(G, 4)), "the kept learner still follows");
    let kept = sim.replica(4, G).expect("up");
    assert_eq!(kept.role(), Role::Learner);
    assert_eq!(kept.commit_min(), sim.replica(primary, G).expect("up").commit_min());
    assert_clean(&sim);
}

/// Seeds per sweep with learners.
const SEEDS: u64 = 50;

#[test]
fn p4_seeds_with_learners_under_faults() {
    let mut failures = Vec::new();
    for seed in 0..SEEDS {
        let mut config = SimConfig::new(seed);
        config.learners = 2;
        let command = reproduce(&config);
        match run_catching(config) {
            Ok(report) if report.violations.is_empty() => {}
            Ok(report) => failures.push(format!("seed {seed}: {}\n  reproduce: {command}", report.violations[0])),
            Err(panic) => failures.push(format!("seed {seed}: panicked: {panic}\n  reproduce: {command}")),
        }
    }
    assert!(failures.is_empty(), "{} of {SEEDS} seeds failed:\n{}", failures.len(), failures.join("\n"));
}

/// Seed 2081 with 2 learners: a learner acknowledged a view, crashed
/// before that view was durable, came back in the older view and ignored
/// the newer view's Commits, while the primary counted it as confirmed and
/// never re-sent the StartView. The primary now counts a learner silent
/// for a heartbeat timeout as unconfirmed again.
#[test]
fn p4_regression_seed_2081_learner_back_in_an_older_view_rejoins() {
    let mut config = SimConfig::new(2081);
    config.learners = 2;
    let command = reproduce(&config);
    let report = run_catching(config).unwrap_or_else(|panic| panic!("{panic}\n  reproduce: {command}"));
    assert_eq!(report.violations, Vec::<String>::new(), "reproduce: {command}");
}
