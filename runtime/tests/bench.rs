//! K1: `cohort bench` runs a short window and prints every key of its
//! report; D5: `--state log` grows the groups' state for the whole run and
//! reports a timeline and a floor for bytes. Speed lives in the benchmark,
//! not here: no figure is asserted beyond being there and making sense.

use std::process::Command;

/// Every key the JSON line must have, whatever `--state`.
const KEYS: [&str; 27] = [
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
    "timeline_secs",
    "op_size_bytes",
];

/// Run `cohort bench` with `args`: its JSON report (the last line of
/// stdout, every key of `keys` a number) and its stderr.
fn bench_report(args: &[&str], keys: &[&str]) -> (serde_json::Value, String) {
    let output =
        Command::new(env!("CARGO_BIN_EXE_cohort")).arg("bench").args(args).output().expect("cohort bench runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("a JSON last line: {last}"));
    for key in keys {
        assert!(report.get(key).is_some_and(|value| value.is_number()), "{key} missing or not a number: {report}");
    }
    (report, stderr.into_owned())
}

#[test]
fn k1_bench_prints_every_key() {
    let (report, _) = bench_report(&["--seconds", "2", "--warmup-secs", "1", "--writers", "16", "--json"], &KEYS);
    assert!(report["writes"].as_u64().is_some_and(|writes| writes > 0), "{report}");
    assert!(report["latency_p50_us"].as_u64() <= report["latency_p99_us"].as_u64(), "{report}");
    assert!(report["dropped_by_reason"].is_object(), "{report}");
    // D5: the default is today's register, and a 2 s window with the
    // default 5 s timeline gets one sample, at its end.
    assert_eq!(report["state"], "register", "{report}");
    assert_eq!(report["timeline"].as_array().map(Vec::len), Some(1), "{report}");
}

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
    let args = [
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
    ];
    let (report, stderr) = bench_report(&args, &KEYS);
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

/// Every key of the `catch_up` object, each a number.
const CATCH_UP_KEYS: [&str; 14] = [
    "state_bytes",
    "chunk_bytes_sent",
    "chunk_bytes_taken",
    "chunk_bytes_resent",
    "seconds",
    "bytes_per_sec",
    "streaming_seconds",
    "streaming_bytes_per_sec",
    "floor_bytes_per_sec",
    "floor_page_cache_bytes_per_sec",
    "floor_direct_bytes_per_sec",
    "floor_per_node_bytes_per_sec",
    "cpu_cores",
    "rss_bytes",
];

#[test]
fn d3_bench_catch_up_reports_a_new_replicas_stream_beside_the_disks_floors() {
    let args = [
        "--state",
        "disk-log",
        "--seconds",
        "3",
        "--warmup-secs",
        "1",
        "--writers",
        "4",
        "--op-size-bytes",
        "65536",
        "--catch-up",
        "--json",
    ];
    let (report, stderr) = bench_report(&args, &KEYS);
    let catch_up = &report["catch_up"];
    for key in CATCH_UP_KEYS {
        assert!(catch_up.get(key).is_some_and(|value| value.is_number()), "{key} missing or not a number: {catch_up}");
    }
    let number = |key: &str| catch_up[key].as_f64().unwrap_or(f64::NAN);
    // The new node took a stream, each byte once. What it streams is the
    // state at the sender's newest checkpoint, which may be older than the
    // wipe by up to a snapshot interval (1,024 ops: 64 MiB of these
    // writes; the rest comes from the log), so it can be a little less
    // than the state the others held at the wipe.
    assert!(number("state_bytes") > 0.0 && number("chunk_bytes_taken") > 0.0, "{catch_up}");
    assert_eq!(number("chunk_bytes_resent"), 0.0, "{catch_up}");
    assert!(number("bytes_per_sec") > 0.0 && number("seconds") > 0.0, "{catch_up}");
    assert!(number("streaming_seconds") <= number("seconds"), "{catch_up}");
    // The floor is the faster of the two ways to the disk; each node's
    // share is it over the three nodes.
    assert_eq!(
        number("floor_bytes_per_sec"),
        number("floor_page_cache_bytes_per_sec").max(number("floor_direct_bytes_per_sec")),
        "{catch_up}"
    );
    assert_eq!(number("floor_per_node_bytes_per_sec"), (number("floor_bytes_per_sec") / 3.0).floor(), "{catch_up}");
    assert!(number("cpu_cores") > 0.0, "{catch_up}");
    assert!(stderr.contains("catch-up: node 3 wiped and started again"), "{stderr}");
}

/// Every key of the `consumption` object (K7), each a number.
const CONSUMPTION_KEYS: [&str; 9] = [
    "consumers",
    "consumed_mb_per_sec",
    "consumed_of_produced",
    "consumer_lag_messages",
    "consumer_skipped_messages",
    "failed_reads",
    "end_to_end_p50_us",
    "end_to_end_p99_us",
    "end_to_end_p999_us",
];

#[test]
fn k7_bench_message_log_producers_write_every_partition_and_consumers_read_it_back() {
    let args = [
        "--state",
        "message-log",
        "--groups",
        "4",
        "--writers",
        "2",
        "--batch-ops",
        "16",
        "--op-size-bytes",
        "256",
        "--seconds",
        "3",
        "--warmup-secs",
        "1",
        "--timeline-secs",
        "0",
        "--json",
    ];
    let (report, _) = bench_report(&args, &KEYS);
    assert_eq!((report["state"].as_str(), report["batch_ops"].as_u64()), (Some("message-log"), Some(16)), "{report}");
    let consumption = &report["consumption"];
    for key in CONSUMPTION_KEYS {
        assert!(consumption.get(key).is_some_and(|value| value.is_number()), "{key} missing: {report}");
    }
    assert_eq!(consumption["consumers"], 4, "one consumer per partition by default: {report}");
    assert_eq!(
        (consumption["failed_reads"].as_u64(), consumption["consumer_skipped_messages"].as_u64()),
        (Some(0), Some(0))
    );
    // At this light load the consumers read what the producers wrote.
    let share = consumption["consumed_of_produced"].as_f64().unwrap_or(0.0);
    assert!((0.5..=2.0).contains(&share), "consumers keep up: {report}");
    let p = |key: &str| consumption[key].as_u64().unwrap_or(0);
    assert!(0 < p("end_to_end_p50_us"), "{report}");
    assert!(p("end_to_end_p50_us") <= p("end_to_end_p99_us") && p("end_to_end_p99_us") <= p("end_to_end_p999_us"));
    // Two producers write all four partitions in turn: each holds messages.
    let written = report["writes"].as_u64().unwrap_or(0) * 256 / 4;
    assert!(report["state_bytes"].as_u64().is_some_and(|state| state >= written), "{report}");

    let refused = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["bench", "--consumers", "2", "--seconds", "1"])
        .output()
        .expect("cohort bench runs");
    assert_eq!(refused.status.code(), Some(2), "consumers of a register are refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--consumers needs --state message-log"));
}
