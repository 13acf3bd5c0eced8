//! Member changes by sealing an incarnation and switching to the next one
//! (the core of M2–M5 moves: see `actors/core/src/replica/seal.rs`).

use cohort_messages::seal::Seal;
use cohort_messages::{GroupId, Incarnation, NodeId};
use cohort_sim::kv::KvOp;
use cohort_sim::sim::{Faults, Scenario, Sim, SimConfig};

const G: GroupId = GroupId(0);

fn cluster(nodes: usize) -> Sim {
    let mut config = SimConfig::new(7);
    config.faults = Some(Faults::default());
    config.nodes = nodes;
    config.groups = 1;
    config.clients = 0;
    let mut sim = Sim::new(config);
    assert!(sim.run_until(20, |sim| sim.primary_of(G).is_some()), "group 0 has a primary at start");
    sim
}

fn done(sim: &Sim, op: usize) -> bool {
    sim.history[op].returned_tick.is_some()
}

/// Write through client `client` (retrying across the switch), to completion.
fn write(sim: &mut Sim, client: usize, key: u64, value: u64) -> usize {
    let to = sim.primary_of(G).unwrap_or(0);
    let op = sim.submit_as(client, G, KvOp::Put { key, value }, to).expect("the client is idle");
    assert!(sim.run_until(600, |sim| done(sim, op)), "write {key}={value} answered");
    op
}

fn read(sim: &mut Sim, key: u64) -> u64 {
    let to = sim.primary_of(G).unwrap_or(0);
    let op = sim.submit(G, KvOp::Get { key }, to);
    assert!(sim.run_until(600, |sim| done(sim, op)), "read of {key} answered");
    sim.history[op].output.expect("a read returns a value")
}

fn seal(members: &[u64], incarnation: u64) -> Seal {
    let members: Vec<NodeId> = members.iter().map(|node| NodeId(*node)).collect();
    let replication_quorum = (members.len() / 2 + 1) as u8;
    Seal { incarnation: Incarnation(incarnation), members, replication_quorum }
}

fn all_sealed(sim: &Sim, nodes: &[usize], seal: &Seal) -> bool {
    nodes.iter().all(|&n| sim.replica(n, G).and_then(|r| r.seal_durable()).is_some_and(|s| s.seal == *seal))
}

fn assert_clean(sim: &Sim) {
    assert!(sim.checkers.violations.is_empty(), "{:#?}", sim.checkers.violations);
}

/// Seal incarnation 1 naming `next`, wait for every next member, switch them.
fn change_members(sim: &mut Sim, next: &[u64]) -> Seal {
    let seal = seal(next, 2);
    assert!(sim.propose_seal(G, Incarnation(1), &seal), "the primary takes the seal");
    let indexes: Vec<usize> = next.iter().map(|node| (*node - 1) as usize).collect();
    assert!(sim.run_until(400, |sim| all_sealed(sim, &indexes, &seal)), "every next member holds the seal durably");
    for &index in &indexes {
        sim.switch_incarnation(index, G).expect("switches");
    }
    seal
}

#[test]
fn seal_then_switch_keeps_every_acknowledged_write_and_moves_the_primary() {
    let mut sim = cluster(3);
    for value in 1..=5 {
        write(&mut sim, 0, 1, value);
    }
    change_members(&mut sim, &[3, 1, 2]);
    for node in 0..3 {
        let replica = sim.replica(node, G).expect("up");
        assert_eq!(replica.incarnation(), Incarnation(2), "node {node}");
        assert_eq!(replica.members(), &[NodeId(3), NodeId(1), NodeId(2)]);
    }
    assert!(sim.run_until(100, |sim| sim.primary_of(G) == Some(2)), "member 0 of the new incarnation leads view 0");
    assert_eq!(read(&mut sim, 1), 5, "the state came across");
    write(&mut sim, 0, 1, 6);
    assert_eq!(read(&mut sim, 1), 6);
    assert_clean(&sim);
}

#[test]
fn a_sealed_incarnation_refuses_requests_and_the_next_one_applies_them_once() {
    let mut sim = cluster(3);
    write(&mut sim, 0, 1, 1);
    let seal = seal(&[2, 3, 1], 2);
    assert!(sim.propose_seal(G, Incarnation(1), &seal));
    // A write now waits: the incarnation is sealed; the client retries.
    let to = sim.primary_of(G).expect("a primary");
    let pending = sim.submit_as(0, G, KvOp::Put { key: 1, value: 2 }, to).expect("idle client");
    assert!(sim.run_until(200, |sim| all_sealed(sim, &[0, 1, 2], &seal)));
    assert!(!done(&sim, pending), "no write enters a sealed incarnation");
    assert!(!sim.propose_seal(G, Incarnation(1), &seal), "a second seal is refused");
    for node in 0..3 {
        sim.switch_incarnation(node, G).expect("switches");
    }
    assert!(sim.run_until(600, |sim| done(sim, pending)), "the retried write lands in incarnation 2");
    assert_eq!(read(&mut sim, 1), 2);
    assert_clean(&sim);
}

#[test]
fn a_member_alone_in_a_later_view_still_reaches_the_seal() {
    let mut sim = cluster(3);
    write(&mut sim, 0, 1, 1);
    let primary = sim.primary_of(G).expect("a primary");
    let lone = (primary + 1) % 3;
    // Cut `lone` off until it gives up on the primary and moves to a later view alone.
    for other in 0..3 {
        if other != lone {
            sim.network.blocked.insert((other, lone));
            sim.network.blocked.insert((lone, other));
        }
    }
    let view = sim.replica(primary, G).expect("up").view();
    assert!(sim.run_until(400, |sim| sim.replica(lone, G).is_some_and(|r| r.view() > view)), "lone moved on");
    sim.network.blocked.clear();
    write(&mut sim, 0, 1, 2);
    let seal = seal(&[1, 2, 3], 2);
    // The sealing group follows the lone member's later view, so the lone
    // member gets the seal too. A view change may drop a seal that had not
    // committed yet: the operator proposes it again, as the metadata does.
    let sealed = (0..20).any(|_| {
        let _ = sim.propose_seal(G, Incarnation(1), &seal);
        sim.run_until(200, |sim| all_sealed(sim, &[0, 1, 2], &seal))
    });
    assert!(sealed, "every member, the lone one included, holds the seal");
    assert_clean(&sim);
}

#[test]
fn a_removed_member_keeps_its_sealed_state_and_serves_nothing() {
    let mut sim = cluster(5);
    write(&mut sim, 0, 1, 1);
    change_members(&mut sim, &[1, 2, 3, 4]);
    let removed = 4;
    let replica = sim.replica(removed, G).expect("still hosted until unloaded");
    assert_eq!(replica.incarnation(), Incarnation(1));
    assert!(replica.sealed().is_some());
    let op = sim.submit(G, KvOp::Put { key: 1, value: 9 }, removed);
    assert!(sim.run_until(600, |sim| done(sim, op)), "the client is sent on and the write lands");
    assert_eq!(read(&mut sim, 1), 9);
    assert!(sim.replica(removed, G).is_some_and(|r| r.commit_min() == r.sealed().expect("sealed").op));
    assert_clean(&sim);
}

#[test]
fn a_member_that_crashes_right_after_switching_recovers_the_new_incarnation() {
    let mut sim = cluster(3);
    write(&mut sim, 0, 1, 1);
    let seal = seal(&[2, 3, 1], 2);
    assert!(sim.propose_seal(G, Incarnation(1), &seal));
    assert!(sim.run_until(400, |sim| all_sealed(sim, &[0, 1, 2], &seal)));
    for node in 0..3 {
        sim.switch_incarnation(node, G).expect("switches");
    }
    // Crash node 0 before its switch's writes flushed: it may come back sealed
    // in incarnation 1 (then it switches again) or in incarnation 2.
    sim.crash_node(0, 5);
    assert!(sim.run_until(50, |sim| sim.replica(0, G).is_some()), "restarted");
    let replica = sim.replica(0, G).expect("up");
    if replica.incarnation() == Incarnation(1) {
        assert!(replica.sealed().is_some(), "the seal was durable: the restart applies it again");
        sim.switch_incarnation(0, G).expect("switches again");
    }
    assert_eq!(sim.replica(0, G).expect("up").incarnation(), Incarnation(2));
    write(&mut sim, 0, 1, 2);
    assert_eq!(read(&mut sim, 1), 2);
    assert_clean(&sim);
}

#[test]
fn reconfigure_seed_sweep() {
    let (mut completed, mut violations) = (0, Vec::new());
    for seed in 0..40 {
        let config = SimConfig { scenario: Scenario::Reconfigure, ..SimConfig::new(seed) };
        let report = Sim::new(config).run();
        completed += report.reconfigurations.1;
        violations.extend(report.violations.iter().map(|v| format!("seed {seed}: {v}")));
    }
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(completed >= 40, "member changes completed: {completed}");
}

/// V2: the first primary of a new incarnation leads its view 0 without a
/// view change, so nothing it prepares may leave before that view is
/// durable. Otherwise a power loss makes it forget the switch; the operator
/// switches it again after its restart, and it leads the same view 0 with
/// another log than the one its backups already hold.
#[test]
fn v2_a_switched_primary_prepares_nothing_before_its_switch_is_durable() {
    let mut sim = cluster(3);
    write(&mut sim, 0, 1, 1);
    // Node index 1 (NodeId 2) is member 0 of incarnation 2: it leads view 0.
    let seal = seal(&[2, 3, 1], 2);
    assert!(sim.propose_seal(G, Incarnation(1), &seal), "the primary takes the seal");
    assert!(sim.run_until(400, |sim| all_sealed(sim, &[0, 1, 2], &seal)), "every member holds the seal");
    let leader = 1;
    sim.nodes[leader].flush_latency_ticks = (40, 40);
    for node in 0..3 {
        sim.switch_incarnation(node, G).expect("switches");
    }
    let base = sim.replica(leader, G).expect("up").log_base();
    let _pending = sim.submit_as(0, G, KvOp::Put { key: 1, value: 2 }, leader).expect("the client is idle");
    for _ in 0..10 {
        sim.step(false);
    }
    assert!(sim.replica(leader, G).expect("up").op() > base, "the new primary took the write");
    for backup in [0, 2] {
        assert_eq!(
            sim.replica(backup, G).expect("up").op(),
            base,
            "node {backup} got no Prepare before the switch was durable"
        );
    }
    sim.power_off_node(leader, 30);
    assert!(sim.run_until(100, |sim| sim.nodes[leader].is_up()), "the leader restarts");
    // The operator switches it again if the switch did not survive.
    let _ = sim.switch_incarnation(leader, G);
    for value in 3..=5 {
        write(&mut sim, 1, 1, value);
    }
    assert_eq!(read(&mut sim, 1), 5);
    assert_clean(&sim);
}

/// Z6 (what seed 606879 of the Z6 shape once found): a seal that shrinks
/// the group to one voter commits once that voter holds it, but the voter
/// crashes before the Commit reaches it. The other members apply the seal
/// and go on as learners of the next incarnation, as the metadata group's
/// nodes past its voters do. The lone voter restarts with the seal
/// uncommitted at the end of its log and elects in the old incarnation,
/// which everyone else left; the new one has no primary to send it a
/// frame. A replica of the new incarnation answers a frame of the old one
/// from one of its voters with a frame of its own, and that frame says the
/// seal committed: the voter applies it, its host switches it, and the
/// group serves writes again.
#[test]
fn z6_a_lone_next_voter_electing_in_the_old_incarnation_learns_the_seal_committed() {
    /// Ticks the lone voter gets to hear the seal committed once its links heal.
    const TOLD_WITHIN_TICKS: u64 = 200;
    let mut sim = cluster(3);
    write(&mut sim, 0, 1, 1);
    let primary = sim.primary_of(G).expect("a primary");
    let lone = (primary + 1) % 3;
    let others: Vec<usize> = (0..3).filter(|node| *node != lone).collect();
    let seal = seal(&[lone as u64 + 1], 2);
    assert!(sim.propose_seal(G, Incarnation(1), &seal), "the primary takes the seal");
    // The seal commits on the primary once the lone next voter holds it.
    // The Commit that would tell the voter is in flight: crash the voter
    // before it lands, and cut its links so it comes back alone.
    assert!(sim.run_until(400, |sim| sim.replica(primary, G).is_some_and(|r| r.sealed().is_some())));
    let view = sim.replica(lone, G).expect("up").view();
    sim.crash_node(lone, 5);
    for &other in &others {
        sim.block(lone, other);
        sim.block(other, lone);
    }
    assert!(sim.run_until(50, |sim| all_sealed(sim, &others, &seal)), "the other members apply the seal");
    for &other in &others {
        sim.switch_incarnation_as_learner(other, G, &seal, &others).expect("switches as a learner");
    }
    // The lone voter restarts in the old incarnation with the seal
    // uncommitted, and elects there in vain.
    let electing = |sim: &Sim| sim.replica(lone, G).is_some_and(|r| r.view() > view);
    assert!(sim.run_until(400, electing), "the lone voter elects in the old incarnation");
    let replica = sim.replica(lone, G).expect("up");
    assert_eq!(replica.incarnation(), Incarnation(1));
    assert!(replica.sealed().is_none(), "the lone voter never heard the seal committed");
    assert!(!replica.is_primary());
    sim.unblock_all();
    let told = |sim: &Sim| sim.replica(lone, G).is_some_and(|r| r.sealed().is_some_and(|s| s.seal == seal));
    assert!(sim.run_until(TOLD_WITHIN_TICKS, told), "a learner of the next incarnation tells it the seal committed");
    sim.switch_incarnation(lone, G).expect("the lone voter switches");
    let learners = others.iter().map(|other| NodeId(*other as u64 + 1)).collect();
    sim.nodes[lone].shard_for_mut(G).expect("up").set_learners(G, learners).expect("a valid list");
    assert!(sim.run_until(100, |sim| sim.primary_of(G) == Some(lone)), "the lone voter leads incarnation 2");
    assert_eq!(read(&mut sim, 1), 1, "the state came across");
    write(&mut sim, 0, 1, 2);
    assert_eq!(read(&mut sim, 1), 2);
    assert_clean(&sim);
}
