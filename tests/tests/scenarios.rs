//! Hand-written scenarios on the simulator harness, named after requirement ids.

use cohort_sim::{Faults, Sim, SimConfig};

fn quiet(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(seed);
    config.faults = Some(Faults::default());
    config.fault_ticks = 300;
    config.liveness_ticks = 300;
    config
}

#[test]
fn v1_writes_commit_without_faults() {
    let report = Sim::new(quiet(1)).run();
    assert_eq!(report.violations, Vec::<String>::new());
    assert!(report.writes_acknowledged > 20, "only {} writes acknowledged", report.writes_acknowledged);
    assert_eq!(report.view_changes, 0);
}

#[test]
fn debug_trace() {
    let seed: u64 = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut config = SimConfig::new(seed);
    config.replication_quorum = std::env::var("Q").ok().and_then(|s| s.parse().ok());
    let mut sim = Sim::new(config);
    for _ in 0..1500 {
        sim.step(true);
    }
    sim.heal();
    for _ in 0..300 {
        sim.step(false);
    }
    for node in &sim.nodes {
        let Some(shard) = node.shard.as_ref() else {
            eprintln!("node {} down", node.index);
            continue;
        };
        for replica in shard.replicas() {
            eprintln!("node {} {:?} role {:?}", node.index, replica, replica.role());
        }
    }
    for op in sim.history.iter().rev().take(8) {
        eprintln!("{op:?}");
    }
    eprintln!("net {:?} violations {:?}", sim.network.stats, sim.checkers.violations.len());
}
