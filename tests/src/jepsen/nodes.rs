//! The `cohort node` processes under test: one per network namespace, each
//! with its own config file, data directory (kept across restarts, moved
//! away by a wipe) and stderr log (appended across restarts, with a marker
//! line per start). This file starts, kills, pauses, resumes and wipes
//! them, and notices when one exits, with its exit code and last stderr
//! lines: a node that stops itself is a finding, not noise.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;

use serde::Serialize;

use crate::jepsen::error::Error;
use crate::jepsen::net::Network;

/// The cluster id every node and client uses.
pub const CLUSTER_ID: u64 = 7;
/// Peer port in every namespace.
pub const PEER_PORT: u16 = 7101;
/// Client port in every namespace.
pub const CLIENT_PORT: u16 = 7201;
/// Admin port in every namespace.
pub const ADMIN_PORT: u16 = 7301;
/// Stderr lines kept in an exit report.
const STDERR_LINES_MAX: usize = 12;
/// The exit code of `cohort node` when its session policy stopped it (S3).
pub const EXIT_SESSION_STOPPED: i32 = 3;
/// Every node's `[admin] token` (T4), for the harness's admin calls.
pub const ADMIN_TOKEN: &str = "cohort-jepsen-admin-token";

/// The session settings of every node (`[session]`).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SessionSettings {
    /// `session_timeout_ms`.
    pub timeout_ms: u64,
    /// `session_keepalive_interval_ms`.
    pub keepalive_interval_ms: u64,
    /// `session_reconnect_attempts` (the policy is always `reconnect`).
    pub reconnect_attempts: u32,
}

/// One exit of a node process.
#[derive(Clone, Debug, Serialize)]
pub struct NodeExit {
    /// The node id (1-based).
    pub node: usize,
    /// When (s on the run's clock).
    pub at_s: f64,
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// True if the nemesis killed it (kill -9, also to wipe it): expected.
    pub by_nemesis: bool,
    /// What the exit means.
    pub cause: String,
    /// The last lines it wrote to stderr.
    pub last_stderr: Vec<String>,
}

struct NodeProcess {
    child: Option<Child>,
    paused: bool,
}

/// What a wipe did.
#[derive(Clone, Debug)]
pub struct Wiped {
    /// Where the node's data directory was moved (kept for a post-mortem).
    pub moved_to: PathBuf,
    /// Its size in bytes when it was moved.
    pub size_bytes: u64,
}

/// The node processes of a run.
pub struct Cluster {
    binary: PathBuf,
    dir: PathBuf,
    namespaces: Vec<String>,
    addresses: Vec<Ipv4Addr>,
    processes: Vec<NodeProcess>,
    exits: Vec<NodeExit>,
    client_tls: Arc<rustls::ClientConfig>,
}

impl Cluster {
    /// Write every node's config into `dir`; start nothing yet.
    pub fn new(
        binary: &Path,
        dir: &Path,
        network: &Network,
        nodes: usize,
        groups: u64,
        session: SessionSettings,
    ) -> Result<Cluster, Error> {
        let addresses: Vec<Ipv4Addr> = (0..nodes).map(|index| network.node_address(index)).collect();
        // T1, T2: the nodes and the workload speak mTLS, with a CA made the
        // way an operator makes one.
        let certs = dir.join("certs");
        let _ = std::fs::remove_dir_all(&certs);
        let certs_arg = certs.display().to_string();
        let nodes_arg = nodes.to_string();
        run_binary(binary, &["certs", "init", "--dir", &certs_arg, "--nodes", &nodes_arg])?;
        run_binary(binary, &["certs", "client", "--dir", &certs_arg, "--name", "jepsen"])?;
        let client_tls = crate::jepsen::port::client_tls(&certs, "jepsen")
            .map_err(|error| Error::new(format!("client certificate in {}: {error}", certs.display())))?;
        for index in 0..nodes {
            let text = config(index, &addresses, &dir.join(format!("data-{}", index + 1)), groups, session, &certs);
            let path = dir.join(format!("node-{}.toml", index + 1));
            std::fs::write(&path, text).map_err(|error| Error::new(format!("write {}: {error}", path.display())))?;
        }
        Ok(Cluster {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            namespaces: (0..nodes).map(|index| network.namespace(index).to_string()).collect(),
            addresses,
            processes: (0..nodes).map(|_| NodeProcess { child: None, paused: false }).collect(),
            exits: Vec::new(),
            client_tls,
        })
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// True if there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// Every node's admin port.
    pub fn admin_addresses(&self) -> Vec<SocketAddr> {
        self.addresses.iter().map(|address| SocketAddr::from((*address, ADMIN_PORT))).collect()
    }

    /// Node `index`'s data directory.
    pub fn data_dir(&self, index: usize) -> PathBuf {
        self.dir.join(format!("data-{}", index + 1))
    }

    /// Every node's client port.
    pub fn client_addresses(&self) -> Vec<crate::jepsen::port::Endpoint> {
        self.addresses
            .iter()
            .map(|address| crate::jepsen::port::Endpoint {
                address: SocketAddr::from((*address, CLIENT_PORT)),
                tls: Arc::clone(&self.client_tls),
            })
            .collect()
    }

    /// Node `index`'s stderr log.
    pub fn log_path(&self, index: usize) -> PathBuf {
        self.dir.join(format!("node-{}.log", index + 1))
    }

    /// True if node `index` has a live process.
    pub fn running(&self, index: usize) -> bool {
        self.processes[index].child.is_some()
    }

    /// Start node `index` (0-based) in its namespace; `at_s` marks the log.
    pub fn start(&mut self, index: usize, at_s: f64) -> Result<(), Error> {
        assert!(self.processes[index].child.is_none(), "node {} is already running", index + 1);
        let log_path = self.log_path(index);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|error| Error::new(format!("open {}: {error}", log_path.display())))?;
        let _ = writeln!(log, "--- cohort-jepsen: start at {at_s:.3} s");
        let config = self.dir.join(format!("node-{}.toml", index + 1));
        // `ip netns exec` execs the binary, so the child's pid is the node's.
        let child = Command::new("ip")
            .args(["netns", "exec", &self.namespaces[index]])
            .arg(&self.binary)
            .args(["node", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|error| Error::new(format!("start node {}: {error}", index + 1)))?;
        self.processes[index] = NodeProcess { child: Some(child), paused: false };
        Ok(())
    }

    /// kill -9 node `index`, and record the exit as the nemesis's.
    pub fn kill(&mut self, index: usize, at_s: f64) {
        let Some(mut child) = self.processes[index].child.take() else { return };
        let _ = child.kill();
        if let Ok(status) = child.wait() {
            self.record(index, at_s, status, true);
        }
        self.processes[index].paused = false;
    }

    /// H1: kill -9 node `index`, move its data directory to
    /// `data-N.wiped-K` (K counts this node's wipes) and start it again on
    /// an empty one: same config, same certificates, same node id.
    pub fn wipe(&mut self, index: usize, at_s: f64) -> Result<Wiped, Error> {
        self.kill(index, at_s);
        let data = self.data_dir(index);
        let moved_to = (1..)
            .map(|wipe| self.dir.join(format!("data-{}.wiped-{wipe}", index + 1)))
            .find(|path| !path.exists())
            .expect("some wipe number is free");
        let size_bytes = dir_size_bytes(&data);
        if data.exists() {
            std::fs::rename(&data, &moved_to)
                .map_err(|error| Error::new(format!("move {} to {}: {error}", data.display(), moved_to.display())))?;
        }
        debug_assert!(!data.exists(), "the node starts on an empty data directory");
        self.start(index, at_s)?;
        Ok(Wiped { moved_to, size_bytes })
    }

    /// SIGSTOP node `index`.
    pub fn pause(&mut self, index: usize) {
        if self.signal(index, "STOP") {
            self.processes[index].paused = true;
        }
    }

    /// SIGCONT node `index` if paused.
    pub fn resume(&mut self, index: usize) {
        if self.processes[index].paused && self.signal(index, "CONT") {
            self.processes[index].paused = false;
        }
    }

    /// True if node `index` is paused.
    pub fn paused(&self, index: usize) -> bool {
        self.processes[index].paused
    }

    fn signal(&self, index: usize, name: &str) -> bool {
        let Some(child) = &self.processes[index].child else { return false };
        Command::new("kill")
            .arg(format!("-{name}"))
            .arg(child.id().to_string())
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Notice nodes that exited on their own; returns their indices.
    pub fn poll(&mut self, at_s: f64) -> Vec<usize> {
        let mut exited = Vec::new();
        for index in 0..self.processes.len() {
            let status = match self.processes[index].child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => status,
                _ => continue,
            };
            self.processes[index] = NodeProcess { child: None, paused: false };
            self.record(index, at_s, status, false);
            exited.push(index);
        }
        exited
    }

    fn record(&mut self, index: usize, at_s: f64, status: ExitStatus, by_nemesis: bool) {
        let (code, signal) = (status.code(), status.signal());
        let cause = match (by_nemesis, code) {
            (true, _) => "killed by the nemesis (kill -9)".to_string(),
            (false, Some(EXIT_SESSION_STOPPED)) => {
                "stopped itself (exit 3): no new session after every reconnect attempt (S3)".to_string()
            }
            (false, Some(0)) => "exited cleanly on its own".to_string(),
            (false, Some(code)) => format!("exited with code {code}"),
            (false, None) => format!("ended by signal {}", signal.unwrap_or(0)),
        };
        let last_stderr = last_lines(&self.log_path(index), STDERR_LINES_MAX);
        self.exits.push(NodeExit { node: index + 1, at_s, code, signal, by_nemesis, cause, last_stderr });
    }

    /// Every exit so far.
    pub fn exits(&self) -> &[NodeExit] {
        &self.exits
    }

    /// Kill every node (SIGKILL works on stopped ones too).
    pub fn stop_all(&mut self) {
        for process in &mut self.processes {
            if let Some(mut child) = process.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            process.paused = false;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The last `n` lines of `path` written since its last start marker.
pub fn last_lines(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let since = text.rfind("--- cohort-jepsen: start").map_or(text.as_str(), |at| &text[at..]);
    let lines: Vec<&str> = since.lines().filter(|line| !line.starts_with("--- cohort-jepsen")).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|line| line.to_string()).collect()
}

/// The bytes of the files under `dir` (0 if it does not exist).
fn dir_size_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_size_bytes(&entry.path()),
            _ => entry.metadata().map_or(0, |metadata| metadata.len()),
        })
        .sum()
}

/// Run the `cohort` binary with `args` (outside the namespaces) and wait.
fn run_binary(binary: &Path, args: &[&str]) -> Result<(), Error> {
    let output = Command::new(binary)
        .args(args)
        .output()
        .map_err(|error| Error::new(format!("{} {}: {error}", binary.display(), args.join(" "))))?;
    if !output.status.success() {
        return Err(Error::new(format!(
            "{} {}: {}",
            binary.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// A node's config: fast timing as in `runtime/tests/processes.rs`.
fn config(
    index: usize,
    addresses: &[Ipv4Addr],
    data: &Path,
    groups: u64,
    session: SessionSettings,
    certs: &Path,
) -> String {
    let address = addresses[index];
    let mut text = format!(
        "[cluster]\ntick = \"50ms\"\ncommit_broadcast_interval = \"250ms\"\ncommit_heartbeat_timeout = \"2s\"\n\
         commit_idle_heartbeat_interval = \"500ms\"\ncommit_idle_heartbeat_timeout = \"2s\"\n\
         view_change_timeout = \"500ms\"\nrepair_timeout = \"100ms\"\n\n\
         [node]\ncluster_id = \"{CLUSTER_ID:x}\"\nid = {id}\nlisten = \"{address}:{PEER_PORT}\"\n\
         client = \"{address}:{CLIENT_PORT}\"\nadmin = \"{address}:{ADMIN_PORT}\"\ndata_dir = \"{data}\"\nshards = 2\n",
        id = index + 1,
        data = data.display(),
    );
    for (peer, address) in addresses.iter().enumerate() {
        if peer != index {
            text.push_str(&format!("\n[[node.peers]]\nid = {}\naddress = \"{address}:{PEER_PORT}\"\n", peer + 1));
        }
    }
    text.push_str(&format!("\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n"));
    text.push_str(&format!(
        "\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        certs.join("ca.pem").display(),
        certs.join(format!("node-{}.pem", index + 1)).display(),
        certs.join(format!("node-{}.key", index + 1)).display()
    ));
    // F1: link timing that fits the fast cluster timing above.
    text.push_str("\n[links]\nstall_timeout = \"1s\"\nconnect_timeout = \"500ms\"\nredial_backoff_max = \"500ms\"\n");
    text.push_str(&format!(
        "\n[groups]\npartitions = {groups}\n\n[session]\nsession_timeout_ms = {}\nsession_keepalive_interval_ms = {}\n\
         session_expired_policy = \"reconnect\"\nsession_reconnect_attempts = {}\n",
        session.timeout_ms, session.keepalive_interval_ms, session.reconnect_attempts
    ));
    text
}
