//! What an operator meets, on real `cohort node` processes over mTLS and
//! the real `cohort` binary (O1, O5; docs/operations.md).
//!
//! - O1: one node started with another cluster id costs its peers a few
//!   log lines and a few dials a second, not thousands; refusals name the
//!   address they came from; `[log] format = "json"` writes one JSON object
//!   per line; `COHORT_LOG` filters; a bad `[log]` setting stops the node
//!   at start with the key named.
//! - O5: a write or read of a group the metadata does not know, and a
//!   create of a kind no node registers, are refused at once with the
//!   cause.
//!
//! The harness is a small copy of `processes.rs`'s: three nodes with
//! admin ports, their stderr in `node-N.log`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cohort_messages::{ClusterId, NodeId};

const CLUSTER: ClusterId = ClusterId(0x0B5E_4A7E);
/// The cluster id of the misconfigured node.
const OTHER_CLUSTER: ClusterId = ClusterId(0x0B5E_4A7F);
const NODES: usize = 3;
const GROUPS: u64 = 4;
const ADMIN_TOKEN: &str = "admin-token-of-the-operations-tests";

/// Three nodes' addresses, their data and logs; the processes are killed
/// and the directory removed on drop.
struct Cluster {
    dir: PathBuf,
    listen: Vec<SocketAddr>,
    client: Vec<SocketAddr>,
    admin: Vec<SocketAddr>,
    children: Vec<Child>,
    /// A node the others do not list among their peers (it still lists
    /// them): a node of another cluster that dials in.
    outsider: Option<usize>,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("cohort-operations-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp dir");
        cohort_runtime::tls::local_cluster(&dir.join("certs"), (1..=NODES as u64).map(NodeId))
            .expect("throwaway certificates");
        let listeners: Vec<_> =
            (0..3 * NODES).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port")).collect();
        let addresses: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().expect("an address")).collect();
        Cluster {
            dir,
            listen: addresses[..NODES].to_vec(),
            client: addresses[NODES..2 * NODES].to_vec(),
            admin: addresses[2 * NODES..].to_vec(),
            children: Vec::new(),
            outsider: None,
        }
    }

    /// Node `index`'s config, on cluster `cluster`, with `extra` TOML.
    fn config(&self, index: usize, cluster: ClusterId, extra: &str) -> String {
        let files = cohort_runtime::tls::node_files(&self.dir.join("certs"), NodeId(index as u64 + 1));
        let mut text = format!(
            "[cluster]\ntick = \"50ms\"\ncommit_broadcast_interval = \"250ms\"\ncommit_heartbeat_timeout = \"2s\"\n\
             commit_idle_heartbeat_interval = \"500ms\"\ncommit_idle_heartbeat_timeout = \"2s\"\n\
             view_change_timeout = \"500ms\"\nrepair_timeout = \"100ms\"\n\n\
             [node]\ncluster_id = \"{:x}\"\nid = {}\nlisten = \"{}\"\nclient = \"{}\"\nadmin = \"{}\"\n\
             data_dir = \"{}\"\nshards = 2\n",
            cluster.0,
            index + 1,
            self.listen[index],
            self.client[index],
            self.admin[index],
            self.dir.join(format!("data-{}", index + 1)).display()
        );
        for (peer, address) in self.listen.iter().enumerate() {
            if peer != index && (self.outsider != Some(peer) || self.outsider == Some(index)) {
                text.push_str(&format!("\n[[node.peers]]\nid = {}\naddress = \"{address}\"\n", peer + 1));
            }
        }
        text.push_str(&format!(
            "\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n\n\
             [groups]\npartitions = {GROUPS}\n{extra}",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        ));
        text
    }

    /// Write node `index`'s config and start it with `env` set.
    fn start(&mut self, index: usize, cluster: ClusterId, extra: &str, env: &[(&str, &str)]) {
        let path = self.dir.join(format!("node-{}.toml", index + 1));
        std::fs::write(&path, self.config(index, cluster, extra)).expect("write the config");
        let log = std::fs::File::create(self.log_path(index)).expect("a log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_cohort"));
        command.args(["node", "--config"]).arg(&path).stdout(Stdio::null()).stderr(log);
        command.env_remove("COHORT_LOG").env_remove("RUST_LOG");
        command.envs(env.iter().copied());
        self.children.push(command.spawn().expect("cohort node starts"));
    }

    fn log_path(&self, index: usize) -> PathBuf {
        self.dir.join(format!("node-{}.log", index + 1))
    }

    fn log(&self, index: usize) -> String {
        std::fs::read_to_string(self.log_path(index)).unwrap_or_default()
    }

    /// `cohort` with the client flags of this cluster (every client port),
    /// waited for at most `hang` (then killed: the call hung).
    fn cohort(&self, args: &[&str], hang: Duration) -> (Option<i32>, String) {
        let certs = self.dir.join("certs").display().to_string();
        let cluster: Vec<String> = self.client.iter().map(ToString::to_string).collect();
        let mut all: Vec<String> = args.iter().map(ToString::to_string).collect();
        if matches!(args.first(), Some(&"write") | Some(&"read")) {
            let id = format!("{:x}", CLUSTER.0);
            all.extend(["--cluster".into(), cluster.join(","), "--certs".into(), certs, "--client".into()]);
            all.extend(["local".into(), "--cluster-id".into(), id]);
        }
        run_within(Command::new(env!("CARGO_BIN_EXE_cohort")).args(&all), hang)
    }

    /// `cohort admin --admin <node 1> --token … <action>`.
    fn admin(&self, action: &[&str]) -> (Option<i32>, String) {
        let mut args = vec!["admin".to_string(), "--admin".into(), self.admin[0].to_string()];
        args.extend(["--token".to_string(), ADMIN_TOKEN.to_string()]);
        args.extend(action.iter().map(ToString::to_string));
        run_within(Command::new(env!("CARGO_BIN_EXE_cohort")).args(&args), Duration::from_secs(60))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run `command` and return (exit code, stdout + stderr); a command still
/// running after `hang` is killed and the test fails: it waited for
/// something it should have refused at once.
fn run_within(command: &mut Command, hang: Duration) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = command
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("cohort runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for cohort") {
            break status;
        }
        if started.elapsed() > hang {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} still ran after {hang:?}: it waited instead of refusing at once");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&out).unwrap_or_default() + &std::fs::read_to_string(&err).unwrap_or_default();
    (status.code(), text)
}

/// GET `path` from an admin port; the body, if it answered.
fn get(admin: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_millis(1000))).ok()?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// The sum of a counter's samples whose line contains every one of `labels`.
fn counter(admin: SocketAddr, name: &str, labels: &[&str]) -> Option<f64> {
    let text = get(admin, "/metrics")?;
    let sum = text
        .lines()
        .filter(|line| line.starts_with(name) && labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Some(sum)
}

fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Node `admin`'s /status shows `nodes` live sessions and, if `groups`,
/// an owner for every configured group.
fn up(admin: SocketAddr, nodes: usize, groups: bool) -> bool {
    let Some(status) = get(admin, "/status").and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
    else {
        return false;
    };
    let sessions =
        status["metadata"]["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| !n["session"].is_null()).count());
    let records = status["metadata"]["groups"].as_array().cloned().unwrap_or_default();
    let owned = records.len() == GROUPS as usize && records.iter().all(|g| !g["owner"].is_null());
    sessions >= nodes && (owned || !groups)
}

/// O1 on three processes, node 3 on another cluster id (run with
/// `COHORT_LOG=warn`), node 2 writing JSON. Nodes 1 and 2 form the
/// cluster and do not list node 3; node 3 lists them and dials in. (A
/// cluster on new disks starts its metadata group only once every voter
/// has answered, H1: with node 3 among the voters it would never start.)
/// - the peers refuse node 3 and say so with its address, once per window
///   with a count of the rest, and no side dials more than a backoff
///   allows (the issue this answers: 12,226 reconnects and ~13,500 lines
///   in 8 s, "closing connection from None");
/// - node 1's log says what an operator asks about: links up, sessions,
///   recovery;
/// - every line of node 2's log is a JSON object;
/// - node 3's log holds warnings and nothing below.
#[test]
fn o1_a_node_on_another_cluster_costs_its_peers_few_lines_and_few_dials() {
    let mut cluster = Cluster::new("o1");
    cluster.outsider = Some(2);
    let started = Instant::now();
    cluster.start(0, CLUSTER, "", &[]);
    cluster.start(1, CLUSTER, "\n[log]\nformat = \"json\"\n", &[]);
    cluster.start(2, OTHER_CLUSTER, "", &[("COHORT_LOG", "warn")]);
    assert!(
        wait_for(Duration::from_secs(30), || up(cluster.admin[0], 2, false)),
        "nodes 1 and 2 came up:\n{}",
        cluster.log(0)
    );
    // Past a window of repeats (10 s), so the summaries of the refusals
    // are in the logs.
    assert!(
        wait_for(Duration::from_secs(30), || cluster.log(0).contains("more in the last 10 s")),
        "node 1 summarised the refusals it did not log:\n{}",
        cluster.log(0)
    );
    let node_1 = cluster.log(0);
    let lines = node_1.lines().count();
    // Each refused dial is counted; a few per second and link are
    // allowed by the backoff (20 ms doubling to 1 s), not thousands.
    let dials = counter(cluster.admin[2], "cohort_peer_link_events_total", &["connected"]).expect("node 3's metrics");
    let refused = counter(cluster.admin[0], "cohort_refusals_total", &["peer", "cluster_mismatch"]).expect("metrics");
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("o1: node 1 wrote {lines} lines; node 3 dialed {dials} times; node 1 refused {refused} connections");
    assert!(dials > 0.0 && refused > 0.0, "node 3 dialed and was refused: {dials} {refused}");
    assert!(dials <= 4.0 * (10.0 + seconds), "node 3 redialed without backing off: {dials} connections");
    assert!(refused <= 4.0 * (10.0 + seconds), "node 1 was dialed without back-off: {refused} refusals");
    assert!(lines < 400, "node 1 wrote {lines} lines in well under a minute:\n{node_1}");
    assert!(!node_1.contains("None"), "a refusal names its address:\n{node_1}");
    // "refusing a peer connection from …" or, when its first frame is of
    // another cluster, "closing the peer connection from …".
    let refusals: Vec<&str> = node_1.lines().filter(|line| line.contains("peer connection from")).collect();
    assert!(!refusals.is_empty(), "node 1 said it refused node 3:\n{node_1}");
    assert!(refusals.iter().all(|line| line.contains("from 127.0.0.1:")), "with its address: {refusals:?}");
    assert!(refusals.len() <= 10, "once per window, not per connection: {refusals:#?}");
    for said in ["peer link up: node 2 at", "opened session", "storage recovered in", "WARN", "INFO"] {
        assert!(node_1.contains(said), "node 1's log says {said:?}:\n{node_1}");
    }

    let node_2 = cluster.log(1);
    let mut levels = std::collections::BTreeSet::new();
    for line in node_2.lines().filter(|line| !line.trim().is_empty()) {
        let object: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not a JSON line ({error}): {line}"));
        levels.insert(object["level"].as_str().unwrap_or_else(|| panic!("no level: {line}")).to_string());
        assert!(object["timestamp"].is_string() && object["target"].is_string(), "{line}");
    }
    assert!(levels.contains("INFO"), "node 2 logged at info: {levels:?}");
    assert!(node_2.contains("\"node\":2"), "fields are top-level keys:\n{node_2}");

    let node_3 = cluster.log(2);
    assert!(node_3.contains("the peer closed the connection right after our Handshake"), "{node_3}");
    assert!(!node_3.contains(" INFO ") && !node_3.contains(" DEBUG "), "COHORT_LOG=warn:\n{node_3}");
}

/// O1: `[log]` is checked at start like every table; the node does not
/// run with a log it was not asked for.
#[test]
fn o1_a_bad_log_setting_stops_the_node_naming_the_key() {
    let cluster = Cluster::new("o1-config");
    let run = |extra: &str, env: &[(&str, &str)]| {
        let path = cluster.dir.join("node-1.toml");
        std::fs::write(&path, cluster.config(0, CLUSTER, extra)).expect("write the config");
        let mut command = Command::new(env!("CARGO_BIN_EXE_cohort"));
        command.args(["node", "--config"]).arg(&path).env_remove("COHORT_LOG").env_remove("RUST_LOG");
        run_within(command.envs(env.iter().copied()), Duration::from_secs(60))
    };
    let (code, text) = run("\n[log]\nlevel = \"loud\"\n", &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("log.level") && text.contains("error, warn, info, debug, trace, off"), "{text}");
    let (code, text) = run("\n[log]\ncolour = true\n", &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("colour") && text.contains("format"), "the unknown key and the known ones: {text}");
    let (code, text) = run("\n[log]\nformat = \"xml\"\n", &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("xml") && text.contains("json"), "{text}");
    let (code, text) = run("", &[("COHORT_LOG", "cohort_actors=loud")]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("$COHORT_LOG"), "the variable is named: {text}");
}

/// O5 on three processes through the real CLI: a write and a read of a
/// group the metadata does not know, with an hour of `--timeout-secs`,
/// end at once with the cause; so does a create of a kind no node
/// registers, and nothing is created.
#[test]
fn o5_unknown_groups_and_kinds_are_refused_at_once_on_three_node_processes() {
    let mut cluster = Cluster::new("o5");
    for index in 0..NODES {
        cluster.start(index, CLUSTER, "", &[]);
    }
    assert!(wait_for(Duration::from_secs(30), || up(cluster.admin[0], NODES, true)), "the cluster came up");
    let hang = Duration::from_secs(60);
    let (code, text) = cluster.cohort(&["write", "--group", "999", "--value", "x", "--timeout-secs", "3600"], hang);
    assert_eq!(code, Some(1), "nothing applied: {text}");
    assert!(text.contains("group:999: no such group") && text.contains("does not exist"), "{text}");
    assert!(!text.contains("ClusterClient") && !text.contains("may still commit"), "{text}");
    let (code, text) = cluster.cohort(&["read", "--group", "999", "--timeout-secs", "3600"], hang);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("no such group"), "{text}");
    // A configured group still takes writes.
    let (code, text) = cluster.cohort(&["write", "--group", "1", "--value", "x"], hang);
    assert_eq!(code, Some(0), "{text}");

    let (code, text) = cluster.admin(&["create-group", "--group", "102", "--kind", "nope", "--members", "1,2,3"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("kind \"nope\" is not registered on node:1") && text.contains("\"default\""), "{text}");
    let status: serde_json::Value =
        serde_json::from_str(&get(cluster.admin[0], "/status").expect("a status")).expect("JSON");
    let groups = status["metadata"]["groups"].as_array().cloned().unwrap_or_default();
    assert!(groups.iter().all(|group| group["id"] != 102), "nothing was created: {status}");
    // The same group of the registered kind is created, and written at once.
    let (code, text) = cluster.admin(&["create-group", "--group", "102", "--members", "1,2,3"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cluster.cohort(&["write", "--group", "102", "--value", "x"], hang);
    assert_eq!(code, Some(0), "a group just created is no unknown group: {text}");
}
