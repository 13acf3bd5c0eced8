//! Z3: quiesced idle groups (opt-in, docs/heartbeats.md, "Quiescence"), on a
//! simulated 3-node cluster with no faults: idle groups stop their Commits
//! and one heartbeat per shard pair stands in for them; a read is still
//! served from the quorum window those heartbeats keep; a group whose
//! primary dies fails over within the idle bound; with the key absent,
//! nothing of it ever runs.

use cohort_messages::{Command, GroupId};
use cohort_sim::kv::KvOp;
use cohort_sim::{Sim, SimConfig};

const GROUPS: usize = 60;
const QUIESCE_TICKS: u64 = 20;

fn quiet_cluster(seed: u64) -> Sim {
    let mut config = SimConfig::new(seed);
    config.groups = GROUPS;
    config.clients = 0;
    config.core.timing.commit_quiesce_timeout_ticks = Some(QUIESCE_TICKS);
    config.faults = Some(cohort_sim::sim::Faults::default());
    Sim::new(config)
}

/// Group members quiesced on a primary's end, over the cluster.
fn quiesced(sim: &Sim) -> usize {
    sim.nodes.iter().flat_map(|node| &node.shards).map(|shard| shard.core().quiet_pairs().counts().0).sum()
}

fn frames(sim: &Sim, command: Command) -> u64 {
    sim.frame_log.iter().filter(|((_, _, c), _)| *c == command).map(|(_, (frames, _, _))| frames).sum()
}

fn mismatches(sim: &Sim) -> u64 {
    sim.nodes.iter().map(|node| node.quiet_counts().mismatches).sum()
}

#[test]
fn z3_idle_groups_quiesce_and_only_shard_pair_heartbeats_remain() {
    let mut sim = quiet_cluster(11);
    // Every group, for both of its backups.
    assert!(sim.run_until(1000, |sim| quiesced(sim) == 2 * GROUPS), "quiesced: {} of {}", quiesced(&sim), 2 * GROUPS);
    sim.frame_log.clear();
    for _ in 0..400 {
        sim.step(false);
    }
    assert_eq!(frames(&sim, Command::Commit), 0, "R20 extended: a quiesced group sends no Commit entry");
    assert_eq!(frames(&sim, Command::CommitReply), 0);
    // 400 ticks at one heartbeat per idle interval (20 ticks) per shard pair
    // with something to say: 6 ordered node pairs x 2 shards x 20.
    let heartbeats = frames(&sim, Command::PairHeartbeat);
    assert!(heartbeats > 0 && heartbeats <= 6 * 2 * 20, "{heartbeats} pair heartbeats");
    assert_eq!(frames(&sim, Command::PairHeartbeatReply), heartbeats, "each heartbeat is answered");
    assert_eq!(mismatches(&sim), 0, "no fault, no digest mismatch");
    assert_eq!(quiesced(&sim), 2 * GROUPS, "and nothing woke");
}

#[test]
fn z3_a_read_wakes_a_quiesced_group_and_is_served_from_the_pair_heartbeat_window() {
    let mut sim = quiet_cluster(12);
    assert!(sim.run_until(1000, |sim| quiesced(sim) == 2 * GROUPS));
    // Long after the last per-group CommitReply (quorum window: 50 ticks).
    for _ in 0..200 {
        sim.step(false);
    }
    let group = GroupId(3);
    let primary = sim.primary_of(group).expect("a primary");
    let index = sim.submit_as(0, group, KvOp::Get { key: 1 }, primary).expect("submitted");
    assert!(sim.run_until(20, |sim| sim.history[index].returned_tick.is_some()), "V7: the read is served at once");
    assert!(sim.run_until(200, |sim| quiesced(sim) == 2 * GROUPS), "and the group quiesces again");
    let check = cohort_sim::linearizability::check(sim.config.seed, &sim.history);
    assert!(check.is_empty(), "{check:?}");
}

#[test]
fn z3_quiesced_groups_stay_confirmed_and_led_from_their_pair_heartbeats_alone() {
    let mut sim = quiet_cluster(15);
    assert!(sim.run_until(1000, |sim| quiesced(sim) == 2 * GROUPS));
    let views = |sim: &Sim| -> Vec<Option<u32>> {
        (0..GROUPS).map(|group| sim.replica(0, GroupId(group as u64)).map(|replica| replica.view().0)).collect()
    };
    let before = views(&sim);
    // Four quorum windows (50 ticks) and backup lease periods past the last
    // per-group Commit and CommitReply: the pair heartbeats alone renew the
    // primaries' contact (R24) and the backups' timeout and lease (R8).
    for _ in 0..200 {
        sim.step(false);
    }
    assert_eq!(views(&sim), before, "no quiesced group changed view");
    assert_eq!(quiesced(&sim), 2 * GROUPS, "nor woke");
    for group in (0..GROUPS).map(|group| GroupId(group as u64)) {
        let primary = sim.primary_of(group).expect("a primary");
        let shard = sim.nodes[primary].shard_for(group).expect("hosted");
        // What the metadata agent reads between inputs: the group's contact
        // as its pairs hold it, though no input renewed the replica itself.
        assert!(shard.is_confirmed_primary(group, sim.now), "{group}: the quorum window holds from the pair replies");
        assert!(shard.hosted_replica(group, sim.now).is_some_and(|hosted| hosted.primary), "{group}: reported as led");
    }
}

#[test]
fn z3_a_quiesced_group_whose_primary_died_fails_over_within_the_idle_bound() {
    let mut sim = quiet_cluster(13);
    assert!(sim.run_until(1000, |sim| quiesced(sim) == 2 * GROUPS));
    let led_by = |sim: &Sim, node: usize| {
        (0..GROUPS).filter(|group| sim.primary_of(GroupId(*group as u64)) == Some(node)).count()
    };
    let dead = (0..3).max_by_key(|node| led_by(&sim, *node)).expect("three nodes");
    assert!(led_by(&sim, dead) > 0);
    sim.crash_node(dead, u64::MAX / 4);
    let crashed = sim.now;
    let taken_over =
        |sim: &Sim| (0..GROUPS).all(|group| sim.primary_of(GroupId(group as u64)).is_some_and(|node| node != dead));
    assert!(sim.run_until(1000, taken_over), "every group of node {dead} has a new primary");
    let timing = &sim.config.core.timing;
    let bound = timing.commit_idle_heartbeat_timeout_ticks + 2 * timing.commit_broadcast_interval_ticks;
    let ticks = sim.now - crashed;
    println!("{} groups failed over {ticks} ticks after the crash (bound {bound})", led_by(&sim, dead));
    assert!(
        ticks <= bound,
        "failover took {ticks} ticks, over commit_idle_heartbeat_timeout + 2 x broadcast = {bound}"
    );
}

#[test]
fn z3_without_the_key_no_group_quiesces_and_no_pair_heartbeat_is_sent() {
    let mut config = SimConfig::new(14);
    config.groups = GROUPS;
    config.clients = 0;
    config.faults = Some(cohort_sim::sim::Faults::default());
    let mut sim = Sim::new(config);
    for _ in 0..1000 {
        sim.step(false);
    }
    assert_eq!(quiesced(&sim), 0);
    assert_eq!(frames(&sim, Command::PairHeartbeat) + frames(&sim, Command::PairHeartbeatReply), 0);
    assert!(frames(&sim, Command::Commit) > 0, "R20: idle groups heartbeat");
}
