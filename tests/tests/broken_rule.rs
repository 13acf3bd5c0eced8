//! The checkers bite: with a deliberately broken commit rule the harness's
//! checkers must report a violation.
//!
//! The mutant `Mutant::CommitQuorumShort` (the core's test-only switch,
//! `CoreConfig::mutant`) makes a primary commit (apply and reply) with one
//! durable copy fewer than the replication quorum Qr. Such a commit no longer meets every view-change quorum
//! (Qv + Qr - 1 = n), so a new view can be elected without it.
//!
//! Left to random faults, the core's own assertion (a member refusing to
//! rewrite an op it applied) usually fires first, so the checkers get little
//! chance. This test makes the loss visible to them on purpose: for each
//! seed (which draws the workload and the network's loss, duplication and
//! delay), it cuts the cluster in two once the group started: the view-0 primary with
//! Qr - 2 backups, which with the broken rule can still commit, and the
//! other n - Qr + 1 = Qv members, which elect a new view and commit other
//! ops at the same op numbers. The P3 checker (two different ops applied at
//! one op number), the acknowledged-write checker and the linearizability
//! checker must notice before the halves ever meet. With the correct rule
//! the same runs are clean.

use cohort_core::mutants::Mutant;
use cohort_sim::{Sim, SimConfig, linearizability};

/// Seeds the broken rule gets to show itself in.
const SEEDS_MAX: u64 = 20;
/// Ticks the cluster stays cut in two.
const SPLIT_TICKS: u64 = 800;
/// Ticks after healing in the control run.
const HEALED_TICKS: u64 = 600;

/// A run of `seed` with the cluster cut in two; the violations found.
fn split_run(seed: u64, nodes: usize, broken: bool, heal: bool) -> Vec<String> {
    let mut config = SimConfig::new(seed);
    config.nodes = nodes;
    config.groups = 1;
    config.core.mutant = broken.then_some(Mutant::CommitQuorumShort);
    let quorum = nodes / 2 + 1;
    let mut sim = Sim::new(config);
    // The group starts once every member heard from every other (H1: each
    // was created on a new disk); then the cut.
    let group = cohort_messages::GroupId(0);
    let started = sim.run_until(200, |sim| sim.primary_of(group) == Some(0));
    assert!(started, "seed {seed}: group 0 started with node 0 as its view-0 primary");
    // Node 0 is the view-0 primary of group 0; nodes 0..minority can commit
    // with the broken rule (Qr - 1 copies) and the rest form a Qv.
    let minority = quorum - 1;
    for a in 0..minority {
        for b in minority..nodes {
            sim.network.blocked.insert((a, b));
            sim.network.blocked.insert((b, a));
        }
    }
    for _ in 0..SPLIT_TICKS {
        sim.step(false);
    }
    if heal {
        sim.heal();
        for _ in 0..HEALED_TICKS {
            sim.step(false);
        }
    }
    let mut violations = sim.checkers.violations.clone();
    violations.extend(linearizability::check(seed, &sim.history).iter().map(ToString::to_string));
    violations
}

/// Checkers by the text their violations start with (after the tick).
const CHECKERS: [(&str, &str); 3] =
    [("P3", "P3 broken"), ("acknowledged writes", "acknowledged write"), ("linearizability", "linearizability broken")];

fn caught_within_seeds(nodes: usize) {
    let mut caught = Vec::new();
    let mut by_checker = [0u64; CHECKERS.len()];
    for seed in 0..SEEDS_MAX {
        let violations = split_run(seed, nodes, true, false);
        for (count, (_, marker)) in by_checker.iter_mut().zip(CHECKERS) {
            *count += u64::from(violations.iter().any(|violation| violation.contains(marker)));
        }
        if let Some(first) = violations.first() {
            caught.push(format!("seed {seed}: {} violations, first: {first}", violations.len()));
        }
    }
    eprintln!("{nodes} nodes, commit one copy short: caught in {} of {SEEDS_MAX} seeds", caught.len());
    for ((name, _), count) in CHECKERS.iter().zip(by_checker) {
        eprintln!("  {name} checker: {count} seeds");
    }
    for line in &caught {
        eprintln!("  {line}");
    }
    assert!(!caught.is_empty(), "no checker noticed commits one copy short of the quorum in {SEEDS_MAX} seeds");
    // The checkers look at different things (replicas' applied sequences,
    // acknowledged ops, clients' answers): each must bite on its own.
    for ((name, _), count) in CHECKERS.iter().zip(by_checker) {
        assert!(count > 0, "the {name} checker never noticed the broken rule in {SEEDS_MAX} seeds");
    }
}

#[test]
fn broken_commit_quorum_is_caught_3_nodes() {
    caught_within_seeds(3);
}

#[test]
fn broken_commit_quorum_is_caught_5_nodes() {
    caught_within_seeds(5);
}

/// The control: the same split with the correct rule breaks nothing, before
/// or after the halves meet again.
#[test]
fn correct_commit_quorum_survives_the_split() {
    for nodes in [3, 5] {
        for seed in 0..3 {
            let violations = split_run(seed, nodes, false, true);
            assert!(violations.is_empty(), "{nodes} nodes, seed {seed}: {violations:#?}");
        }
    }
}
