//! Batching cuts heartbeat traffic, measured (R10, R26, R20).

use cohort_sim::traffic::{QUIESCE_TICKS_DEFAULT, TrafficConfig, Workload, measure};

fn idle(partitions: usize) -> TrafficConfig {
    TrafficConfig {
        nodes: 3,
        partitions,
        seconds: 20,
        workload: Workload::Idle,
        tick_ms: 100,
        quiesce_ticks: QUIESCE_TICKS_DEFAULT,
    }
}

#[test]
fn r11_r27_idle_partitions_share_frames_and_cut_bytes_tenfold() {
    let report = measure(&idle(300));
    println!("{}", report.render());
    assert!(report.frames_per_pair_per_send_tick() <= 2.0, "{}", report.render());
    assert!(report.unbatched_bytes_ratio() >= 10.0, "{}", report.render());
}

#[test]
fn z3_quiesced_idle_partitions_cost_under_a_kibibyte_per_second_per_node_pair() {
    let report = measure(&idle(3000));
    println!("{}", report.render());
    assert!(report.quiesced_bytes_per_sec_per_node_pair_max() <= 1024.0, "{}", report.render());
    assert!(report.bytes_per_sec_per_pair() > 10.0 * report.quiesced_bytes_per_sec_per_pair(), "{}", report.render());
}
