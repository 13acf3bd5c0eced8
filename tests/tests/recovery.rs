//! H1 in the simulator: members without their data recover, and none stays
//! recovering for good while its group runs on.

use cohort_sim::SimConfig;
use cohort_sim::cli::run_catching;
use cohort_sim::storage::{StateKind, StorageKind};

/// Seed `seed` of the `--nodes 5` shape runs without a violation.
fn five_nodes_clean(seed: u64) {
    let mut config = SimConfig::new(seed);
    config.nodes = 5;
    run_clean(config);
}

/// `config` runs without a violation.
fn run_clean(config: SimConfig) {
    let seed = config.seed;
    let report = run_catching(config).unwrap_or_else(|panic| panic!("seed {seed}: {panic}"));
    assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
}

/// Five nodes, seed 6100708 (the checker that every member ends its
/// recovery after the liveness phase found it): a recovering member's
/// answers showed no primary, so it lent its vote to a later view, while
/// the others went on under a primary of an earlier view. It promised not
/// to act before the view it voted in, so it never took that primary's
/// log, and stayed recovering with its group committing: one failure more
/// and the group would have stopped. A primary now counts such a member
/// as stranded (it asks the primary every repair timeout, so it hears it)
/// and moves the group up to its view once, as for a voter answering
/// Commits from a later view. Pinned by hand in
/// `h1_a_primary_moves_up_to_the_view_a_recovering_member_voted_in`
/// (actors/core/tests/recovery.rs).
#[test]
fn h1_regression_seed_6100708_a_member_that_lent_its_vote_ahead_still_recovers() {
    five_nodes_clean(6_100_708);
}

/// Five nodes, seed 6103286 (the same checker, on the build that fixed
/// 6100708): a member came back from a crash still recovering, its durable
/// view 5 from an election its crash cut short, while the group went on in
/// view 4. It decided to take view 4's log and could not (it promised not
/// to act before view 5), and it sent no vote, so nothing told the primary.
/// It now sends a StartViewChange of its view every round, and the primary
/// counts it as stranded there. Pinned by hand in
/// `h1_a_member_recovering_past_the_groups_view_says_where_it_stands`
/// (actors/core/tests/recovery.rs).
#[test]
fn h1_regression_seed_6103286_a_member_back_recovering_past_the_groups_view_recovers() {
    five_nodes_clean(6_103_286);
}

/// `--state disk --nodes 5` seed 6100212 and `--state disk --storage
/// memory` seed 6106411 (the same checker, stop 49's sweeps): a recovering
/// member decided on view 7 because a holder answered it, in a round
/// before that holder lost its data (its disk replaced, its replica
/// rebuilt); the group went on in view 6, which the member may not take,
/// and no StartView of view 7 ever came. A member whose target no holder
/// answers any more now says where it stands each round, a
/// StartViewChange of its target, and the primary counts it as stranded
/// there. Pinned by hand in
/// `h1_a_member_whose_target_no_holder_answers_any_more_says_where_it_stands`
/// (actors/core/tests/recovery.rs).
#[test]
fn h1_regression_seeds_6100212_6106411_a_member_whose_target_view_was_lost_recovers() {
    let mut five = SimConfig::new(6_100_212);
    five.nodes = 5;
    five.state = StateKind::Disk;
    run_clean(five);
    let mut three = SimConfig::new(6_106_411);
    three.state = StateKind::Disk;
    three.storage = StorageKind::Memory;
    run_clean(three);
}
