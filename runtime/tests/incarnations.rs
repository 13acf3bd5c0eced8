//! H3 on real `cohort node` processes over mTLS, through the real `cohort`
//! binary: a group deleted and created again under the same id about a
//! second later starts empty in its new incarnation on every member, writes
//! on the other groups go on, and after a restart of one node and then of
//! every node every group is led again (docs/metadata.md, "A group id's
//! lives").
//!
//! The harness is a small copy of `operations.rs`'s: three nodes with admin
//! ports, their stderr in `node-N.log`, each node restartable on its data.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cohort_messages::{ClusterId, NodeId};

const CLUSTER: ClusterId = ClusterId(0x0B5E_4A83);
const NODES: usize = 3;
/// Configured groups (`[groups] partitions`); the test creates group 120.
const GROUPS: u64 = 4;
const GROUP: &str = "120";
const ADMIN_TOKEN: &str = "admin-token-of-the-incarnation-tests";
/// The longest any step below waits for the cluster (not a speed claim:
/// the steps normally take a few seconds).
const SETTLE: Duration = Duration::from_secs(90);

/// Three nodes' addresses, data and logs; the processes are killed and the
/// directory removed on drop.
struct Cluster {
    dir: PathBuf,
    listen: Vec<SocketAddr>,
    client: Vec<SocketAddr>,
    admin: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("cohort-incarnations-{name}-{}", std::process::id()));
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
            children: (0..NODES).map(|_| None).collect(),
        }
    }

    fn config(&self, index: usize) -> String {
        let files = cohort_runtime::tls::node_files(&self.dir.join("certs"), NodeId(index as u64 + 1));
        let mut text = format!(
            "[cluster]\ntick = \"50ms\"\ncommit_broadcast_interval = \"250ms\"\ncommit_heartbeat_timeout = \"2s\"\n\
             commit_idle_heartbeat_interval = \"500ms\"\ncommit_idle_heartbeat_timeout = \"2s\"\n\
             view_change_timeout = \"500ms\"\nrepair_timeout = \"100ms\"\n\n\
             [node]\ncluster_id = \"{:x}\"\nid = {}\nlisten = \"{}\"\nclient = \"{}\"\nadmin = \"{}\"\n\
             data_dir = \"{}\"\nshards = 2\n",
            CLUSTER.0,
            index + 1,
            self.listen[index],
            self.client[index],
            self.admin[index],
            self.dir.join(format!("data-{}", index + 1)).display()
        );
        for (peer, address) in self.listen.iter().enumerate() {
            if peer != index {
                text.push_str(&format!("\n[[node.peers]]\nid = {}\naddress = \"{address}\"\n", peer + 1));
            }
        }
        text.push_str(&format!(
            "\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n\n\
             [groups]\npartitions = {GROUPS}\n",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        ));
        text
    }

    /// Start node `index` on its data directory (its log is appended to).
    fn start(&mut self, index: usize) {
        let path = self.dir.join(format!("node-{}.toml", index + 1));
        std::fs::write(&path, self.config(index)).expect("write the config");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node-{}.log", index + 1)))
            .expect("a log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_cohort"));
        command.args(["node", "--config"]).arg(&path).stdout(Stdio::null()).stderr(log);
        command.env_remove("COHORT_LOG").env_remove("RUST_LOG");
        self.children[index] = Some(command.spawn().expect("cohort node starts"));
    }

    /// Stop node `index` (SIGKILL: nothing is flushed on the way out).
    fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.children[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn logs(&self) -> String {
        (1..=NODES)
            .map(|node| {
                let text = std::fs::read_to_string(self.dir.join(format!("node-{node}.log"))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                format!("--- node {node} (last lines) ---\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `cohort write|read` through the client ports of `nodes` (indexes).
    fn data(&self, nodes: &[usize], args: &[&str]) -> (Option<i32>, String) {
        let certs = self.dir.join("certs").display().to_string();
        let cluster: Vec<String> = nodes.iter().map(|index| self.client[*index].to_string()).collect();
        let mut all: Vec<String> = args.iter().map(ToString::to_string).collect();
        all.extend(["--cluster".into(), cluster.join(","), "--certs".into(), certs, "--client".into()]);
        all.extend(["local".into(), "--cluster-id".into(), format!("{:x}", CLUSTER.0)]);
        all.extend(["--timeout-secs".into(), "10".into()]);
        run(Command::new(env!("CARGO_BIN_EXE_cohort")).args(&all))
    }

    /// A write, sent again while a node whose copy of the metadata trails
    /// the group's creation answers that it knows no such group (O5).
    fn write(&self, group: &str, value: &str) -> (Option<i32>, String) {
        let mut last = (None, String::new());
        wait_for(SETTLE, || {
            last = self.data(&(0..NODES).collect::<Vec<_>>(), &["write", "--group", group, "--value", value]);
            last.0 == Some(0) || !last.1.contains("no such group")
        });
        last
    }

    fn read(&self, group: &str) -> (Option<i32>, String) {
        let mut last = (None, String::new());
        wait_for(SETTLE, || {
            last = self.data(&(0..NODES).collect::<Vec<_>>(), &["read", "--group", group]);
            last.0 == Some(0) || !last.1.contains("no such group")
        });
        last
    }

    /// `cohort admin --admin <node 1> --token … <action>`.
    fn admin(&self, action: &[&str]) -> (Option<i32>, String) {
        let mut args = vec!["admin".to_string(), "--admin".into(), self.admin[0].to_string()];
        args.extend(["--token".to_string(), ADMIN_TOKEN.to_string()]);
        args.extend(action.iter().map(ToString::to_string));
        run(Command::new(env!("CARGO_BIN_EXE_cohort")).args(&args))
    }

    /// Node `index`'s /status, if it answers.
    fn status(&self, index: usize) -> Option<serde_json::Value> {
        serde_json::from_str(&get(self.admin[index], "/status")?).ok()
    }

    /// The metadata's record of group `id` as node `index` shows it.
    fn record(&self, index: usize, id: u64) -> Option<serde_json::Value> {
        let status = self.status(index)?;
        status["metadata"]["groups"].as_array()?.iter().find(|record| record["id"] == id).cloned()
    }

    /// Every node answers, shows every node's session, and every live group
    /// (the configured ones and group 120) with an owner.
    fn every_group_led(&self) -> bool {
        (0..NODES).all(|index| {
            let Some(status) = self.status(index) else { return false };
            let sessions = status["metadata"]["nodes"]
                .as_array()
                .map_or(0, |nodes| nodes.iter().filter(|node| !node["session"].is_null()).count());
            let groups = status["metadata"]["groups"].as_array().cloned().unwrap_or_default();
            let live: Vec<&serde_json::Value> = groups.iter().filter(|g| g["live"] != false).collect();
            sessions == NODES && live.len() == GROUPS as usize + 1 && live.iter().all(|g| !g["owner"].is_null())
        })
    }

    /// How many groups each node leads, as node 1's metadata counts them.
    fn primaries(&self) -> serde_json::Value {
        self.status(0).map_or(serde_json::Value::Null, |status| status["metadata"]["primaries_per_node"].clone())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for index in 0..NODES {
            self.kill(index);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run `command`: (exit code, stdout + stderr).
fn run(command: &mut Command) -> (Option<i32>, String) {
    let output = command.output().expect("cohort runs");
    let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

/// GET `path` from an admin port (with the token); the body, if it answered.
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

fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// A read of group 120 that found the register empty: `group:120 at op:N: ""`.
fn empty(text: &str) -> bool {
    text.lines().any(|line| line.starts_with("group:120 at ") && line.ends_with(": \"\""))
}

/// The scenario (#33): write to group 120, delete it, create it
/// again a second later. Its new incarnation reads empty with each member
/// as its primary in turn (the read is served by the primary), writes on
/// another group go on, the new incarnation takes a write of its own, and
/// after a restart of one node, then of all three, every group is led
/// again and the restarted node leads some (the balancer runs again: it
/// waits for every live group to have an owner).
#[test]
fn h3_recreated_group_reads_empty_on_every_member() {
    let mut cluster = Cluster::new("recreate");
    for index in 0..NODES {
        cluster.start(index);
    }
    let came_up = |cluster: &Cluster| {
        wait_for(SETTLE, || {
            (0..NODES).all(|index| {
                cluster.status(index).is_some_and(|status| {
                    let groups = status["metadata"]["groups"].as_array().cloned().unwrap_or_default();
                    groups.len() >= GROUPS as usize && groups.iter().all(|g| !g["owner"].is_null())
                })
            })
        })
    };
    assert!(came_up(&cluster), "the cluster came up:\n{}", cluster.logs());

    let (code, text) = cluster.admin(&["create-group", "--group", GROUP, "--members", "1,2,3"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cluster.write(GROUP, "of-the-first-life");
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cluster.admin(&["delete-group", "--group", GROUP]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("stops serving it") && text.contains("as soon as it applies epoch"), "{text}");
    std::thread::sleep(Duration::from_secs(1));
    let (code, text) = cluster.admin(&["create-group", "--group", GROUP, "--members", "1,2,3"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("incarnation 2"), "{text}");

    // Each member leads the new incarnation in turn and finds it empty.
    for member in 1..=NODES as u64 {
        let led = |cluster: &Cluster| cluster.record(0, 120).is_some_and(|g| g["owner"]["node"] == member);
        if !led(&cluster) {
            assert!(
                wait_for(SETTLE, || cluster.record(0, 120).is_some_and(|g| !g["owner"].is_null())),
                "group:120 got an owner: {:?}\n{}",
                cluster.record(0, 120),
                cluster.logs()
            );
            let (code, text) = cluster.admin(&["transfer-primary", "--group", GROUP, "--to", &member.to_string()]);
            // Node 1's copy of the record may trail the metadata by an epoch.
            assert!(code == Some(0) || text.contains("already leads"), "{text}");
            assert!(wait_for(SETTLE, || led(&cluster)), "node:{member} leads group:120: {:?}", cluster.record(0, 120));
        }
        let (code, text) = cluster.read(GROUP);
        assert_eq!(code, Some(0), "{text}");
        assert!(empty(&text), "node:{member}'s replica of the new incarnation is empty: {text}");
    }
    let (code, text) = cluster.write("1", "after-the-re-creation");
    assert_eq!(code, Some(0), "writes on other groups go on: {text}");
    let (code, text) = cluster.write(GROUP, "of-the-second-life");
    assert_eq!(code, Some(0), "{text}");

    // A restart of one node, then of every node: every group is led again.
    cluster.kill(1);
    cluster.start(1);
    assert!(
        wait_for(SETTLE, || cluster.every_group_led() && cluster.primaries()["2"].as_u64().is_some_and(|led| led > 0)),
        "after node 2's restart every group is led, node 2 some: {}\n{}",
        cluster.primaries(),
        cluster.logs()
    );
    for index in 0..NODES {
        cluster.kill(index);
    }
    for index in 0..NODES {
        cluster.start(index);
    }
    assert!(
        wait_for(SETTLE, || cluster.every_group_led()
            && (1..=NODES).all(|node| cluster.primaries()[node.to_string()].as_u64().is_some_and(|led| led > 0))),
        "after a full restart every group is led, and every node leads some: {}\n{}",
        cluster.primaries(),
        cluster.logs()
    );
    let (code, text) = cluster.read(GROUP);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("of-the-second-life"), "the new incarnation keeps its own write: {text}");
    let (code, text) = cluster.write("2", "after-the-restarts");
    assert_eq!(code, Some(0), "{text}");
}
