//! Batching cuts heartbeat traffic, measured (R10, R26, R20).

use cohort_sim::traffic::{TrafficConfig, Workload, measure};

#[test]
fn r11_r27_idle_partitions_share_frames_and_cut_bytes_tenfold() {
    let report =
        measure(&TrafficConfig { nodes: 3, partitions: 300, seconds: 20, workload: Workload::Idle, tick_ms: 100 });
    println!("{}", report.render());
    assert!(report.frames_per_pair_per_send_tick() <= 2.0, "{}", report.render());
    assert!(report.unbatched_bytes_ratio() >= 10.0, "{}", report.render());
}
