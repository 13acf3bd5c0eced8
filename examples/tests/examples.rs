//! Runs every example as a process, as a user would, and checks what it
//! prints (and, for `kv`, what it answers over real HTTP).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn run(binary: &str, args: &[&str]) -> String {
    let Output { status, stdout, stderr } = Command::new(binary).args(args).output().expect("the example runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr));
    assert!(status.success(), "{binary} failed: {status}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

#[test]
fn embed_sums_every_write() {
    let out = run(env!("CARGO_BIN_EXE_embed"), &[]);
    let sum: u64 = out.lines().filter_map(|line| line.split_once(": total ")?.1.parse::<u64>().ok()).sum();
    assert_eq!(sum, (1..=100).sum::<u64>(), "{out}");
    assert!(out.contains("Primary(View(0))"), "node 1 leads group 0: {out}");
}

/// The docs and the README say how long the shortest host is; count it
/// as they do (no blank lines, no comments).
#[test]
fn embed_is_as_long_as_the_docs_say() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let code = read("examples/src/bin/embed.rs");
    let lines = code.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with("//")).count();
    let claim = format!("{lines} lines (not counting blank");
    for doc in ["docs/embedding.md", "README.md"] {
        let text = read(doc).replace('\n', " ");
        assert!(text.contains(&claim), "{doc} should say embed.rs is {claim}");
    }
}

#[test]
fn log_consumers_read_every_message_in_order() {
    let batches = [
        &["--messages", "40"][..],
        &["--messages", "20", "--async"][..],
        &["--messages", "30", "--batch-messages", "1"][..],
    ];
    for args in batches {
        let out = run(env!("CARGO_BIN_EXE_log"), args);
        assert_eq!(out.lines().filter(|line| line.contains("in producer order")).count(), 4, "{out}");
        assert!(out.contains("consumers read all"), "{out}");
    }
}

#[test]
fn d1_log_keeps_each_node_s_partitions_in_segment_files_under_its_data_dir() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = run(env!("CARGO_BIN_EXE_log"), &["--messages", "20", "--data-dir", dir.path().to_str().expect("utf-8")]);
    assert_eq!(out.lines().filter(|line| line.contains("in producer order")).count(), 4, "{out}");
    for node in 1..=3 {
        for partition in 0..4 {
            let path = dir.path().join(format!("node-{node}/log/partition-{partition}"));
            let generations = std::fs::read_dir(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            let first_segments = generations
                .map(|entry| entry.expect("entry").path().join("00000000000000000000.log"))
                .filter(|segment| segment.is_file());
            assert_eq!(first_segments.count(), 1, "{} holds its first segment", path.display());
        }
    }
}

#[test]
fn d1_log_consumers_skip_what_retention_dropped_and_still_check_the_order() {
    let args = ["--messages", "100", "--retention-bytes", "64", "--segment-size-max-bytes", "32"];
    let out = run(env!("CARGO_BIN_EXE_log"), &args);
    assert_eq!(out.lines().filter(|line| line.contains("in producer order")).count(), 4, "{out}");
    assert!(out.contains("400 messages in 28 batches (Sync writes), consumers read"), "{out}");
}

#[test]
fn custom_actor_indexes_and_fails_over() {
    let out = run(env!("CARGO_BIN_EXE_custom_actor"), &[]);
    assert_eq!(out.matches("linearizable: [4]").count(), 3, "every node's index answers: {out}");
    assert!(out.contains("node:2 group:0: index is now on the primary of view:1"), "{out}");
    assert!(out.contains("finds \"failover\" in notes [6]"), "{out}");
}

#[test]
fn c2_two_host_processes_and_a_client_process_sign_every_guestbook() {
    let out = run(env!("CARGO_BIN_EXE_hosts_and_client"), &[]);
    for id in 1..=2 {
        assert!(out.contains(&format!("host {id}: signed every group")), "{out}");
        assert!(
            out.contains(&format!("host {id}: stopping")),
            "host {id} stops when the launcher closes its stdin: {out}"
        );
    }
    // Each host reached the groups led by the other process's node over its client port.
    assert_eq!(out.matches("through the other node's client port").count(), 4, "{out}");
    for group in 0..4 {
        let line = out
            .lines()
            .find(|line| line.starts_with(&format!("client: group:{group} guestbook at ")))
            .unwrap_or_else(|| panic!("group:{group} is read back: {out}"));
        let mut signatures: Vec<&str> = line.rsplit_once(": ").map_or("", |(_, list)| list).split(", ").collect();
        signatures.sort_unstable();
        assert_eq!(signatures, ["client", "host 1", "host 2"], "one signature per process: {line}");
    }
}

#[test]
fn every_example_parses_its_flags_with_clap() {
    for binary in [
        env!("CARGO_BIN_EXE_embed"),
        env!("CARGO_BIN_EXE_kv"),
        env!("CARGO_BIN_EXE_log"),
        env!("CARGO_BIN_EXE_custom_actor"),
        env!("CARGO_BIN_EXE_hosts_and_client"),
    ] {
        assert!(run(binary, &["--help"]).contains("Usage:"), "{binary} --help");
        let Output { status, stderr, .. } = Command::new(binary).arg("--no-such-flag").output().expect("runs");
        assert_eq!(status.code(), Some(2), "{binary} refuses an unknown flag");
        assert!(String::from_utf8_lossy(&stderr).contains("--no-such-flag"), "{binary}");
    }
}

/// One HTTP exchange on a fresh connection; the status code and the body.
fn http(address: &str, request: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    stream.write_all(request).expect("send");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let status = text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.windows(4).position(|w| w == b"\r\n\r\n").map(|at| response[at + 4..].to_vec());
    (status, body.unwrap_or_default())
}

/// What every request below sends: one request per connection.
const HEADERS: &str = "Host: t\r\nConnection: close\r\n";

fn put(key: &str, value: &[u8]) -> Vec<u8> {
    let head = format!("PUT /kv/{key} HTTP/1.1\r\n{HEADERS}Content-Length: {}\r\n\r\n", value.len());
    [head.as_bytes(), value].concat()
}

fn get(key: &str) -> Vec<u8> {
    format!("GET /kv/{key} HTTP/1.1\r\n{HEADERS}\r\n").into_bytes()
}

struct Kv(Child);

impl Drop for Kv {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn kv_answers_curl_style_requests() {
    let child = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(["--http", "127.0.0.1:0", "--partitions", "4"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kv starts");
    let mut kv = Kv(child);
    let mut stdout = BufReader::new(kv.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("kv says where it serves");
    let address = line.split("http://").nth(1).and_then(|rest| rest.split_whitespace().next()).expect("address");

    assert_eq!(http(address, &put("greeting", b"hello")), (200, b"ok\n".to_vec()));
    assert_eq!(http(address, &get("greeting")), (200, b"hello".to_vec()));
    let binary: Vec<u8> = (0..=255).collect();
    assert_eq!(http(address, &put("bytes", &binary)).0, 200);
    assert_eq!(http(address, &get("bytes")), (200, binary));
    let delete = format!("DELETE /kv/greeting HTTP/1.1\r\n{HEADERS}\r\n");
    assert_eq!(http(address, delete.as_bytes()), (200, b"deleted\n".to_vec()));
    assert_eq!(http(address, &get("greeting")).0, 404);
    // Garbage, limits and wrong routes are answered, and the server lives on.
    assert_eq!(http(address, b"\x00\x01garbage\r\n\r\n").0, 400);
    let too_big = format!("PUT /kv/big HTTP/1.1\r\n{HEADERS}Content-Length: {}\r\n\r\n", 1 << 20);
    assert_eq!(http(address, too_big.as_bytes()).0, 413);
    let long_key = format!("GET /kv/{} HTTP/1.1\r\n{HEADERS}\r\n", "k".repeat(300));
    assert_eq!(http(address, long_key.as_bytes()).0, 404);
    assert_eq!(http(address, format!("GET /elsewhere HTTP/1.1\r\n{HEADERS}\r\n").as_bytes()).0, 404);
    assert_eq!(http(address, format!("POST /kv/x HTTP/1.1\r\n{HEADERS}\r\n").as_bytes()).0, 405);
    assert_eq!(http(address, &get("bytes")).0, 200, "still serving");

    // SIGTERM stops it cleanly.
    let pid = kv.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(killed.success());
    let status = kv.0.wait().expect("kv exits");
    let mut rest = String::new();
    let _ = stdout.read_to_string(&mut rest);
    assert!(status.success() && rest.contains("kv: stopping"), "{status}: {rest}");
}

/// `kv` started with `args`, and the address it serves on.
fn start_kv(args: &[&str]) -> (Kv, BufReader<std::process::ChildStdout>, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_kv")).args(args).stdout(Stdio::piped()).spawn().expect("kv starts");
    let mut kv = Kv(child);
    let mut stdout = BufReader::new(kv.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("kv says where it serves");
    let address = line.split("http://").nth(1).and_then(|rest| rest.split_whitespace().next()).expect("address");
    (kv, stdout, address.to_owned())
}

/// Stop `kv` with SIGTERM and wait for it to exit cleanly.
fn stop_kv(mut kv: Kv, mut stdout: BufReader<std::process::ChildStdout>) {
    let killed = Command::new("kill").args(["-TERM", &kv.0.id().to_string()]).status().expect("kill runs");
    assert!(killed.success());
    let status = kv.0.wait().expect("kv exits");
    let mut rest = String::new();
    let _ = stdout.read_to_string(&mut rest);
    assert!(status.success() && rest.contains("kv: stopping"), "{status}: {rest}");
}

#[test]
fn d1_kv_keeps_each_node_s_groups_in_redb_files_under_its_data_dir_across_a_restart() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data_dir = dir.path().to_str().expect("utf-8 path");
    let args = ["--http", "127.0.0.1:0", "--partitions", "2", "--data-dir", data_dir];
    let (kv, stdout, address) = start_kv(&args);
    assert_eq!(http(&address, &put("kept", b"across a restart")), (200, b"ok\n".to_vec()));
    stop_kv(kv, stdout);
    for node in 1..=3 {
        for group in 0..2 {
            let file = dir.path().join(format!("node-{node}/kv/group-{group}.redb"));
            assert!(file.is_file(), "{} is there", file.display());
        }
    }
    let (kv, stdout, address) = start_kv(&args);
    assert_eq!(http(&address, &get("kept")), (200, b"across a restart".to_vec()));
    stop_kv(kv, stdout);
}
