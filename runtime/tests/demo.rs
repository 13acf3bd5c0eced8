//! The main job, as the README runs it: `cohort demo` ends cleanly (no
//! panic, exit 0) and loses no acknowledged write, with a node killed and
//! restarted on the way. Short and small, so it fits in the test run.

use std::process::Command;

/// Also O5: with its output piped, the demo prints its progress as lines,
/// and they say what it did.
#[test]
fn demo_runs_kills_restarts_and_loses_nothing() {
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["demo", "--duration-secs", "21", "--partitions", "60", "--json"])
        .output()
        .expect("cohort demo runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    let progress: Vec<&str> =
        stderr.lines().filter(|line| line.starts_with("cohort demo: ") && line.contains(" s of 21: ")).collect();
    assert!(progress.len() >= 4, "progress lines while piped:\n{stderr}");
    for said in ["steady", "killed node", "restarted node", "reading back every acknowledged write"] {
        assert!(progress.iter().any(|line| line.contains(said)), "a progress line says {said:?}:\n{stderr}");
    }
    assert!(!stderr.contains("panicked") && !stdout.contains("panicked"), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("a JSON last line: {last}"));
    assert_eq!(summary["lost_acked_writes"], 0, "{summary}");
    assert_eq!(summary["unverified_groups"], 0, "every group read back: {summary}");
    assert!(summary["committed_ops"].as_u64().is_some_and(|ops| ops > 0), "{summary}");
    for key in [
        "primaries_per_node",
        "failover_ms_max_busy",
        "failover_ms_max_idle",
        "failover_bound_ms_busy",
        "failover_bound_ms_idle",
        "start_to_first_write_ms",
        "restart_to_connected_ms",
        "memory_bytes_per_replica",
    ] {
        assert!(summary.get(key).is_some(), "{key} missing: {summary}");
    }
    assert!(summary["memory_bytes_per_replica"].as_u64().is_some_and(|bytes| bytes > 0), "{summary}");
    // C5: the restarted node leads its share again before the summary (the
    // demo waits for it, 31 s at most for these 60 groups).
    assert!(summary["restart_to_balanced_ms"].as_u64().is_some(), "not balanced after the restart: {summary}");
    let counts: Vec<u64> = summary["primaries_per_node"]
        .as_array()
        .map_or_else(Vec::new, |counts| counts.iter().filter_map(|c| c.as_u64()).collect());
    assert!(counts.len() == 3 && counts.iter().all(|count| count.abs_diff(20) <= 2), "{summary}");
}

/// O5: a run too short to kill a node, let its groups fail over and
/// restart it is refused before anything starts, with the shortest that
/// works; nothing claims a kill.
#[test]
fn o5_the_demo_refuses_a_run_too_short_to_kill_and_restart() {
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["demo", "--duration-secs", "6", "--partitions", "60"])
        .output()
        .expect("cohort demo runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(2), "a usage error:\n{stdout}\n{stderr}");
    assert!(stderr.contains("--duration-secs 6: too short") && stderr.contains("give at least 21"), "{stderr}");
    let claims = |text: &str| (1..=3).any(|node| text.contains(&format!("killed node {node}")));
    assert!(!claims(&stderr) && !claims(&stdout), "{stdout}\n{stderr}");
}

/// The release build of `cohort`, built now if needed: 10,000 groups are
/// too many for the unoptimised binary to run at speed (a debug demo of 21 s
/// takes minutes and misses every timing bound through slowness alone).
/// `-p cohort-runtime` resolves features for that crate alone, as
/// `cargo install --path runtime` does, so runtime/tests/install.rs reuses
/// this build. The nested build does not wait on its parent: `cargo test`
/// lets go of the target directory's lock before it runs the test binaries.
fn release_binary() -> std::path::PathBuf {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Without the test's own CARGO_* variables, which would make it build again.
    let status = cohort_sim::nested_cargo::command()
        .current_dir(&workspace)
        .args(["build", "--release", "--quiet", "-p", "cohort-runtime", "--bin", "cohort"])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --release -p cohort-runtime --bin cohort failed: {status}");
    let debug = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cohort"));
    let target = debug.parent().and_then(std::path::Path::parent).expect("the binary lives in target/<profile>");
    target.join("release").join("cohort")
}

/// #15 item 4 (R22 bounds by state): at 10,000 groups the demo finishes (a run that hangs
/// is killed and fails), loses no acknowledged write, every group of the
/// killed node fails over before the end, and each within the bound of the
/// state it was in: busy groups within commit_heartbeat_timeout + 2 ×
/// commit_broadcast_interval, idle ones within
/// commit_idle_heartbeat_timeout + 2 × commit_broadcast_interval. The run
/// lasts 21 s: the kill at 7 s, the restart at 14 s, after the bounds.
#[test]
fn r22_a_10000_group_demo_finishes_and_each_failover_is_within_the_bound_of_its_state() {
    const HANG_AFTER_SECS: u64 = 240;
    let binary = release_binary();
    let dir = tempfile::tempdir().expect("a temp dir");
    let (stdout_path, stderr_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(&binary)
        .args(["demo", "--partitions", "10000", "--duration-secs", "21", "--json"])
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("cohort demo starts");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the demo") {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(HANG_AFTER_SECS) {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            let tail: String = stderr.chars().rev().take(2000).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("the 10,000-group demo hung: still running after {HANG_AFTER_SECS} s; stderr ends:\n{tail}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(status.success(), "exit {status}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("a JSON last line: {last}"));
    let number = |key: &str| summary[key].as_u64().unwrap_or_else(|| panic!("{key} missing: {summary}"));
    assert_eq!(number("lost_acked_writes"), 0, "{summary}");
    assert_eq!(number("unverified_groups"), 0, "every group read back: {summary}");
    assert!(number("failover_groups") > 3000, "the busiest node led a third of the groups: {summary}");
    assert_eq!(number("failover_groups_done"), number("failover_groups"), "a group never failed over: {summary}");
    assert!(
        number("failover_ms_max_busy") <= number("failover_bound_ms_busy"),
        "busy failover over its bound: {summary}"
    );
    assert!(
        number("failover_ms_max_idle") <= number("failover_bound_ms_idle"),
        "idle failover over its bound: {summary}"
    );
}
