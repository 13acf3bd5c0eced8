//! K1: `cohort bench` runs a short window and prints every key of its
//! report. Speed lives in the benchmark, not here: no figure is asserted
//! beyond being there and making sense.

use std::process::Command;

/// Every key the JSON line must have.
const KEYS: [&str; 25] = [
    "writes",
    "writes_per_sec",
    "latency_p50_us",
    "latency_p99_us",
    "latency_p999_us",
    "cpu_us_per_write",
    "socket_writes_per_write",
    "fsyncs_per_write",
    "syncs_per_flush",
    "context_switches_per_write",
    "dropped_messages",
    "floor_us",
    "fdatasync_us",
    "round_trip_us",
    "load_average",
    "nodes",
    "writers",
    "rss_after_start_bytes",
    "memory_bytes_per_replica",
    "mb_per_sec",
    "state_bytes",
    "rss_bytes",
    "disk_synced_mb_per_sec",
    "bytes_floor_mb_per_sec",
    "mb_per_sec_of_floor",
];

#[test]
fn k1_bench_prints_every_key() {
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["bench", "--seconds", "2", "--warmup-secs", "1", "--writers", "16", "--json"])
        .output()
        .expect("cohort bench runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("a JSON last line: {last}"));
    for key in KEYS {
        assert!(report.get(key).is_some_and(|value| value.is_number()), "{key} missing or not a number: {report}");
    }
    assert!(report["writes"].as_u64().is_some_and(|writes| writes > 0), "{report}");
    assert!(report["latency_p50_us"].as_u64() <= report["latency_p99_us"].as_u64(), "{report}");
    assert!(report["dropped_by_reason"].is_object(), "{report}");
    // D5: the default is today's register, and a 2 s window with the
    // default 5 s timeline gets one sample, at its end.
    assert_eq!(report["state"], "register", "{report}");
    assert_eq!(report["timeline"].as_array().map(Vec::len), Some(1), "{report}");
}
