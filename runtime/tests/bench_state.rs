//! D5: `cohort bench --state log` grows the groups' state for the whole
//! run and reports a timeline and a floor for bytes. As for every bench
//! test, no speed is asserted: the keys are there, the shapes make sense.

use std::process::Command;

/// The report's keys D5 added, each a number.
const KEYS: [&str; 8] = [
    "mb_per_sec",
    "state_bytes",
    "rss_bytes",
    "disk_synced_mb_per_sec",
    "bytes_floor_mb_per_sec",
    "mb_per_sec_of_floor",
    "timeline_secs",
    "op_size_bytes",
];

/// Every timeline sample's keys, each a number.
const SAMPLE_KEYS: [&str; 8] = [
    "elapsed_secs",
    "writes",
    "writes_per_sec",
    "mb_per_sec",
    "latency_p50_us",
    "latency_p99_us",
    "state_bytes",
    "rss_bytes",
];

#[test]
fn d5_bench_state_log_reports_a_timeline_of_a_growing_state_and_a_bytes_floor() {
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args([
            "bench",
            "--state",
            "log",
            "--seconds",
            "3",
            "--warmup-secs",
            "1",
            "--timeline-secs",
            "1",
            "--writers",
            "4",
            "--op-size-bytes",
            "1024",
            "--json",
        ])
        .output()
        .expect("cohort bench runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("a JSON last line: {last}"));
    for key in KEYS {
        assert!(report.get(key).is_some_and(|value| value.is_number()), "{key} missing or not a number: {report}");
    }
    assert_eq!(report["state"], "log", "{report}");
    assert!(report["bytes_floor_mb_per_sec"].as_f64().is_some_and(|floor| floor > 0.0), "{report}");
    assert!(report["mb_per_sec"].as_f64().is_some_and(|mb| mb > 0.0), "{report}");
    // Every write was appended on every replica: the state holds at least the window's writes.
    let written = report["writes"].as_u64().unwrap_or(0) * 1024;
    assert!(report["state_bytes"].as_u64().is_some_and(|state| state >= written), "{report}");

    let timeline = report["timeline"].as_array().unwrap_or_else(|| panic!("a timeline array: {report}"));
    assert!(timeline.len() >= 2, "a sample a second of 3 s: {report}");
    for sample in timeline {
        for key in SAMPLE_KEYS {
            assert!(sample.get(key).is_some_and(|value| value.is_number()), "{key} of {sample}");
        }
        assert!(sample["latency_p50_us"].as_u64() <= sample["latency_p99_us"].as_u64(), "{sample}");
    }
    let field = |sample: &serde_json::Value, key: &str| sample[key].as_f64().unwrap_or(f64::NAN);
    for pair in timeline.windows(2) {
        assert!(field(&pair[0], "elapsed_secs") < field(&pair[1], "elapsed_secs"), "{report}");
        assert!(field(&pair[0], "state_bytes") < field(&pair[1], "state_bytes"), "the state grows: {report}");
    }
    let sampled: u64 = timeline.iter().map(|sample| sample["writes"].as_u64().unwrap_or(0)).sum();
    assert_eq!(sampled, report["writes"].as_u64().unwrap_or(0), "the samples cover the window: {report}");
    // One progress line per sample, even when stderr is a pipe.
    assert_eq!(stderr.lines().filter(|line| line.starts_with("timeline ")).count(), timeline.len(), "{stderr}");
}
