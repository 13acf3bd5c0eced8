//! The main job, as the README runs it: `cohort demo` ends cleanly (no
//! panic, exit 0) and loses no acknowledged write, with a node killed and
//! restarted on the way. Short and small, so it fits in the test run.

use std::process::Command;

#[test]
fn demo_runs_kills_restarts_and_loses_nothing() {
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["demo", "--duration-secs", "6", "--partitions", "60", "--json"])
        .output()
        .expect("cohort demo runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    assert!(!stderr.contains("panicked") && !stdout.contains("panicked"), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("a JSON last line: {last}"));
    assert_eq!(summary["lost_acked_writes"], 0, "{summary}");
    assert!(summary["committed_ops"].as_u64().is_some_and(|ops| ops > 0), "{summary}");
    for key in [
        "primaries_per_node",
        "failover_ms_max_busy",
        "failover_ms_max_idle",
        "failover_bound_ms_busy",
        "failover_bound_ms_idle",
        "start_to_first_write_ms",
        "memory_bytes_per_replica",
    ] {
        assert!(summary.get(key).is_some(), "{key} missing: {summary}");
    }
    assert!(summary["memory_bytes_per_replica"].as_u64().is_some_and(|bytes| bytes > 0), "{summary}");
}
