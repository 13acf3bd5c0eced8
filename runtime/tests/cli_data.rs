//! C2: the `cohort` binary's data commands against a running cluster: a
//! `LocalCluster` whose nodes serve their client ports over mTLS and their
//! admin ports, driven by `cohort write`, `cohort read` and `cohort bench
//! --cluster` processes exactly as an operator runs them; and a command
//! whose reader left early (`cohort certs init … | head`) neither panics
//! nor leaves its work undone.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use cohort_runtime::prelude::*;

const GROUPS: u64 = 4;

fn cluster() -> LocalCluster {
    LocalCluster::builder(3)
        .client_ports()
        .admin_ports()
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", (0..GROUPS).map(GroupId))
        .start()
        .expect("cluster starts")
}

/// `--cluster` with every node's client port, starting at node `first`.
fn cluster_flag(cluster: &LocalCluster, first: usize) -> String {
    let mut addresses: Vec<String> = cluster.client_addresses().iter().map(ToString::to_string).collect();
    addresses.rotate_left(first);
    addresses.join(",")
}

/// The connection flags of the cluster's `local` client certificate: the
/// certificates directory, or the three files.
fn tls_flags(cluster: &LocalCluster, explicit_files: bool) -> Vec<String> {
    let files = &cluster.certs().client;
    // A local cluster's nodes speak LOCAL_CLUSTER_ID, not the id in its
    // throwaway certificates' `cluster-id` file.
    let id = format!("{:x}", cohort_runtime::local::LOCAL_CLUSTER_ID.0);
    let mut flags = vec!["--cluster-id".to_string(), id, "--timeout-secs".into(), "20".into()];
    if explicit_files {
        for (flag, path) in [("--ca", &files.ca), ("--cert", &files.cert), ("--key", &files.key)] {
            flags.extend([flag.to_string(), path.display().to_string()]);
        }
    } else {
        let dir = files.ca.parent().expect("the certificates directory");
        flags.extend(["--certs".to_string(), dir.display().to_string(), "--client".into(), "local".into()]);
    }
    flags
}

/// Run the `cohort` binary off the test's thread (the nodes' actors share
/// it) and wait for it.
async fn cohort(args: Vec<String>) -> (Option<i32>, String, String) {
    let output = actix_rt::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_cohort")).args(&args).output().expect("cohort runs")
    })
    .await
    .expect("the command's thread");
    let Output { status, stdout, stderr } = output;
    (status.code(), String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned())
}

fn args(command: &str, flags: &[&str], tls: &[String]) -> Vec<String> {
    std::iter::once(command).chain(flags.iter().copied()).map(str::to_string).chain(tls.iter().cloned()).collect()
}

#[actix_rt::test]
async fn c2_cli_write_then_read_round_trips_through_any_node() {
    let cluster = cluster();
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    for group in 0..GROUPS {
        // The list starts at another node for each group, and the read's at
        // yet another: the client finds the primary from any of them.
        let first = group as usize % 3;
        let value = format!("value of group {group}");
        let write = args(
            "write",
            &["--cluster", &cluster_flag(&cluster, first), "--group", &group.to_string(), "--value", &value],
            &tls_flags(&cluster, false),
        );
        let (code, stdout, stderr) = cohort(write).await;
        assert_eq!(code, Some(0), "write to group:{group}: {stdout}{stderr}");
        assert!(
            stdout.starts_with(&format!("group:{group} committed at op:")) && stdout.contains("; replaced \"\""),
            "{stdout}"
        );
        let read = args(
            "read",
            &["--cluster", &cluster_flag(&cluster, first + 1), "--group", &group.to_string()],
            &tls_flags(&cluster, true),
        );
        let (code, stdout, stderr) = cohort(read).await;
        assert_eq!(code, Some(0), "read of group:{group}: {stdout}{stderr}");
        assert!(stdout.trim_end().ends_with(&format!(": \"{value}\"")), "{stdout}");
    }

    // With --json, one object; a second write answers what it replaced.
    let json_write = args(
        "write",
        &["--cluster", &cluster_flag(&cluster, 2), "--group", "1", "--value", "second", "--json"],
        &tls_flags(&cluster, false),
    );
    let (code, stdout, stderr) = cohort(json_write).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let written: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(written["result"], "value of group 1", "{written}");
    let json_read =
        args("read", &["--cluster", &cluster_flag(&cluster, 0), "--group", "1", "--json"], &tls_flags(&cluster, false));
    let (code, stdout, _) = cohort(json_read).await;
    let read: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((code, read["value"].as_str()), (Some(0), Some("second")));
    assert!(read["op"].as_u64() >= written["op"].as_u64(), "a linearizable read sees the write: {read} {written}");
}

#[actix_rt::test]
async fn c2_cli_failures_name_the_group_or_the_address_and_exit_non_zero() {
    let cluster = cluster();
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let mut tls = tls_flags(&cluster, false);
    let at = tls.iter().position(|flag| flag == "--timeout-secs").expect("a timeout flag");
    tls[at + 1] = "2".into();

    // A group the metadata does not know: nothing applied, exit 1, the
    // group named and the cause said (O5: at once, not at the timeout).
    let unknown = args("write", &["--cluster", &cluster_flag(&cluster, 0), "--group", "999", "--value", "x"], &tls);
    let (code, stdout, stderr) = cohort(unknown).await;
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("cohort write: write to group:999 through 127.0.0.1:"), "{stderr}");
    assert!(stderr.contains("no such group"), "{stderr}");

    // An address where nothing listens: exit 1, the address named.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
    let nowhere = args("read", &["--cluster", &port.to_string(), "--group", "0"], &tls);
    let (code, _, stderr) = cohort(nowhere).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{port}: ")), "{stderr}");

    // O5: another cluster id than the nodes': a usage error at once, both
    // ids named (a timeout would say "no definite answer within"; this one
    // is a minute long, so only the nodes' answer ends the command).
    let mut other = tls_flags(&cluster, false);
    let id = other.iter().position(|flag| flag == "--cluster-id").expect("a cluster id flag");
    other[id + 1] = "c0ffee".into();
    let at = other.iter().position(|flag| flag == "--timeout-secs").expect("a timeout flag");
    other[at + 1] = "60".into();
    let wrong = args("write", &["--cluster", &cluster_flag(&cluster, 0), "--group", "0", "--value", "x"], &other);
    let (code, stdout, stderr) = cohort(wrong).await;
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    let nodes =
        format!("the node is in cluster {}", cohort_client::format_cluster_id(cohort_runtime::local::LOCAL_CLUSTER_ID));
    assert!(stderr.contains(&nodes), "{stderr}");
    assert!(stderr.contains("this client in cluster 00000000000000000000000000c0ffee"), "{stderr}");
    assert!(stderr.contains("--cluster-id"), "{stderr}");
    let json = args("read", &["--cluster", &cluster_flag(&cluster, 1), "--group", "0", "--json"], &other);
    let (code, stdout, _) = cohort(json).await;
    let error: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((code, error["result"].as_str()), (Some(2), Some("usage")), "{error}");

    // No client certificate where --certs points: a usage error saying how to make one.
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = args(
        "read",
        &["--cluster", &cluster_flag(&cluster, 0), "--group", "0", "--certs", &dir.path().display().to_string()],
        &["--cluster-id".into(), "1".into()],
    );
    let (code, _, stderr) = cohort(missing).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cohort certs client --dir"), "{stderr}");
}

/// Every key of `cohort bench --cluster --json`: the local bench's
/// throughput and latency keys, the client's cost, the nodes' figures.
const KEYS: [&str; 19] = [
    "writes",
    "window_secs",
    "writes_per_sec",
    "latency_p50_us",
    "latency_p99_us",
    "latency_p999_us",
    "cpu_us_per_write",
    "context_switches_per_write",
    "refused_writes",
    "retries",
    "writers",
    "groups",
    "op_size_bytes",
    "load_average",
    "metrics_nodes",
    "socket_writes_per_write",
    "fsyncs_per_write",
    "syncs_per_flush",
    "ops_applied_per_write",
];

#[actix_rt::test]
async fn c2_bench_over_the_network_prints_every_key() {
    let cluster = cluster();
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let metrics: Vec<String> =
        (1..=3).filter_map(|id| cluster.node(NodeId(id))?.admin_address()).map(|a| a.to_string()).collect();
    assert_eq!(metrics.len(), 3);
    let bench = args(
        "bench",
        &[
            "--cluster",
            &cluster_flag(&cluster, 0),
            "--metrics",
            &metrics.join(","),
            "--seconds",
            "2",
            "--warmup-secs",
            "1",
            "--writers",
            "8",
            "--groups",
            &GROUPS.to_string(),
            "--json",
        ],
        &tls_flags(&cluster, false),
    );
    let (code, stdout, stderr) = cohort(bench).await;
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("a JSON last line: {last}"));
    for key in KEYS {
        assert!(report.get(key).is_some_and(serde_json::Value::is_number), "{key} missing or not a number: {report}");
    }
    assert!(report["dropped_messages"].is_u64(), "{report}");
    assert!(report["writes"].as_u64().is_some_and(|writes| writes > 0), "{report}");
    assert!(report["latency_p50_us"].as_u64() <= report["latency_p99_us"].as_u64(), "{report}");
    assert_eq!(report["metrics_nodes"], 3, "{report}");
    // Every member applies every write: about three per write here.
    let applied = report["ops_applied_per_write"].as_f64().unwrap_or_default();
    assert!((1.0..=6.0).contains(&applied), "{report}");
    assert_eq!(report["addresses"].as_array().map(Vec::len), Some(3), "{report}");
}

#[test]
fn t1_certs_init_into_a_closed_pipe_writes_every_certificate_and_exits_cleanly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let certs = dir.path().join("certs");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["certs", "init", "--nodes", "5", "--dir"])
        .arg(&certs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cohort certs runs");
    // The reader leaves before the first line, as `| head -0` does.
    drop(child.stdout.take());
    let Output { status, stderr, .. } = child.wait_with_output().expect("it exits");
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(status.success() && !stderr.contains("panicked"), "{status}: {stderr}");
    for id in 1..=5 {
        for ending in ["pem", "key"] {
            let file = certs.join(format!("node-{id}.{ending}"));
            assert!(file.exists(), "{} was not written: {stderr}", file.display());
        }
    }
}
