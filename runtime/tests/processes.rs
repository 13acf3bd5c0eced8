//! Three `cohort node` processes on loopback, driven through their client
//! ports: writes follow redirects to the primary (V5), a node killed with
//! SIGKILL fails over, and restarts from its data directory (V4). Nodes
//! stalled with SIGSTOP longer than the session timeout lose their session:
//! with `shutdown` the node exits (S3), with `reconnect` it opens a new one
//! and no group ever commits under two primaries (S5).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cohort_messages::{
    ClientId, ClusterId, FrameDecoder, GroupId, Handshake, Message, NodeId, Op, Outcome, Request, RequestKind,
    RequestNumber, TraceContext, WIRE_REVISION,
};

const CLUSTER: ClusterId = ClusterId(7);

/// T1, T2: the nodes' and the client's certificates, made once per test
/// directory; the nodes speak mTLS to each other and to the client.
fn certs(dir: &Path) -> PathBuf {
    let certs = dir.join("certs");
    if !certs.join(cohort_runtime::tls::CA_CERT_FILE).exists() {
        cohort_runtime::tls::local_cluster(&certs, (1..=NODES_MAX).map(NodeId)).expect("throwaway certificates");
    }
    certs
}

/// TLS of the client certificate `local` in `dir`'s certificates.
fn client_tls(dir: &Path) -> std::sync::Arc<rustls::ClientConfig> {
    let files = cohort_runtime::tls::client_files(&certs(dir), "local");
    let credentials = cohort_runtime::tls::Credentials::load(&files).expect("client credentials");
    std::sync::Arc::new(cohort_runtime::tls::client_config(&credentials).expect("client TLS"))
}
const GROUPS: u64 = 6;
/// The most nodes a test here starts (Z6 needs one past the five metadata voters).
const NODES_MAX: u64 = 6;
/// The admin token of the nodes that have an admin port.
const ADMIN_TOKEN: &str = "admin-token-of-the-process-tests";

struct Ports {
    listen: SocketAddr,
    client: SocketAddr,
    admin: Option<SocketAddr>,
    tls: std::sync::Arc<rustls::ClientConfig>,
}

fn free_addresses(n: usize) -> Vec<SocketAddr> {
    let listeners: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind")).collect();
    listeners.iter().map(|l| l.local_addr().expect("address")).collect()
}

fn write_config(dir: &Path, index: usize, ports: &[Ports]) -> PathBuf {
    write_config_with(dir, index, ports, "")
}

/// A node's config with `extra` TOML appended (e.g. a `[session]` table).
fn write_config_with(dir: &Path, index: usize, ports: &[Ports], extra: &str) -> PathBuf {
    let mut text = format!(
        "[cluster]\ntick = \"50ms\"\ncommit_broadcast_interval = \"250ms\"\ncommit_heartbeat_timeout = \"2s\"\n\
         commit_idle_heartbeat_interval = \"500ms\"\ncommit_idle_heartbeat_timeout = \"2s\"\n\
         view_change_timeout = \"500ms\"\nrepair_timeout = \"100ms\"\n\n\
         [node]\ncluster_id = \"{:x}\"\nid = {}\nlisten = \"{}\"\nclient = \"{}\"\ndata_dir = \"{}\"\nshards = 2\n",
        CLUSTER.0,
        index + 1,
        ports[index].listen,
        ports[index].client,
        dir.join(format!("data-{}", index + 1)).display()
    );
    for (peer, port) in ports.iter().enumerate() {
        if peer != index {
            text.push_str(&format!("\n[[node.peers]]\nid = {}\naddress = \"{}\"\n", peer + 1, port.listen));
        }
    }
    if let Some(admin) = ports[index].admin {
        text = text.replace("shards = 2\n", &format!("shards = 2\nadmin = \"{admin}\"\n"));
        text.push_str(&format!("\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n"));
    }
    let files = cohort_runtime::tls::node_files(&certs(dir), NodeId(index as u64 + 1));
    text.push_str(&format!(
        "\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        files.ca.display(),
        files.cert.display(),
        files.key.display()
    ));
    text.push_str(&format!("\n[groups]\npartitions = {GROUPS}\n"));
    text.push_str(extra);
    let path = dir.join(format!("node-{}.toml", index + 1));
    std::fs::write(&path, text).expect("write config");
    path
}

fn spawn_node(dir: &Path, index: usize) -> Child {
    let log = std::fs::File::create(dir.join(format!("node-{}.log", index + 1))).expect("log file");
    Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["node", "--config"])
        .arg(dir.join(format!("node-{}.toml", index + 1)))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn cohort node")
}

/// A client connection speaking frames, over mTLS.
struct Client {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    decoder: FrameDecoder,
    buffer: BytesMut,
}

impl Client {
    fn connect(address: SocketAddr, tls: &std::sync::Arc<rustls::ClientConfig>) -> Option<Client> {
        let tcp = TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()?;
        // Also bounds the TLS handshake: a stopped node accepts TCP but never answers.
        tcp.set_read_timeout(Some(Duration::from_millis(700))).ok()?;
        let name = rustls::pki_types::ServerName::try_from("nodes.cohort").ok()?;
        let connection = rustls::ClientConnection::new(std::sync::Arc::clone(tls), name).ok()?;
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        let hello = Message::Handshake(Handshake {
            revision: WIRE_REVISION,
            cluster: CLUSTER,
            node: NodeId(0),
            shard_count: 1,
        })
        .encode(CLUSTER, NodeId(0), TraceContext::NONE);
        stream.write_all(&hello.to_bytes()).ok()?;
        Some(Client { stream, decoder: FrameDecoder::new(CLUSTER), buffer: BytesMut::new() })
    }

    fn call(&mut self, request: &Request) -> Option<Message> {
        let frame = Message::Request(request.clone()).encode(CLUSTER, NodeId(0), TraceContext::NONE);
        self.stream.write_all(&frame.to_bytes()).ok()?;
        loop {
            if let Ok(Some(frame)) = self.decoder.decode(&mut self.buffer) {
                match frame.message().ok()? {
                    // The node's own greeting: which node this address is.
                    Message::Handshake(_) => continue,
                    message => return Some(message),
                }
            }
            let mut chunk = [0u8; 4096];
            let read = self.stream.read(&mut chunk).ok()?;
            if read == 0 {
                return None;
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}

/// Write `value` to `group` through the client ports as a fresh `client`
/// (its registration first, H5), following redirects, for up to 20 s each.
fn write(ports: &[Ports], group: GroupId, client: u128, value: &'static [u8]) -> Op {
    let registration = Request {
        client: ClientId(client),
        request: RequestNumber(1),
        group,
        kind: RequestKind::Write,
        operation: Bytes::new(),
    };
    let registered = call_until_ok(ports, &registration);
    let first =
        Request { request: RequestNumber(registered.0 + 1), operation: Bytes::from_static(value), ..registration };
    call_until_ok(ports, &first)
}

/// Send `request` until it is answered Ok, following redirects, for up to 20 s.
fn call_until_ok(ports: &[Ports], request: &Request) -> Op {
    let group = request.group;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut target = group.0 as usize % ports.len();
    while Instant::now() < deadline {
        let answer =
            Client::connect(ports[target].client, &ports[target].tls).and_then(|mut client| client.call(request));
        match answer {
            Some(Message::Reply(reply)) => match reply.outcome {
                Outcome::Ok(_) => return reply.op,
                Outcome::Error { .. } => std::thread::sleep(Duration::from_millis(100)),
            },
            Some(Message::Redirect(redirect)) => match redirect.primary {
                Some(primary) if (primary.0 as usize - 1) != target => {
                    target = primary.0 as usize - 1;
                    continue;
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            },
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
        target = (target + 1) % ports.len();
    }
    panic!("{group}: no write committed within 20 s");
}

#[test]
fn v5_v4_three_node_processes_redirect_fail_over_and_restart() {
    let dir = std::env::temp_dir().join(format!("cohort-processes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let addresses = free_addresses(6);
    let ports: Vec<Ports> = (0..3)
        .map(|i| Ports { listen: addresses[i], client: addresses[3 + i], admin: None, tls: client_tls(&dir) })
        .collect();
    for index in 0..3 {
        write_config(&dir, index, &ports);
    }
    let mut children: Vec<Child> = (0..3).map(|index| spawn_node(&dir, index)).collect();
    let mut client = 1u128;
    for g in 0..GROUPS {
        client += 1;
        // A fresh client each time: its registration takes an op (H5).
        assert_eq!(write(&ports, GroupId(g), client, b"one"), Op(2), "{g}");
    }
    // H1: on new disks every member recovers first; give the members that
    // did not acknowledge the first writes the round trips to take the log.
    std::thread::sleep(Duration::from_secs(2));
    // SIGKILL node 1: the groups it led fail over to the others.
    children[0].kill().expect("SIGKILL");
    let _ = children[0].wait();
    for g in 0..GROUPS {
        client += 1;
        assert_eq!(write(&ports, GroupId(g), client, b"two"), Op(4), "{g}: the first write survived");
    }
    // Restart node 1 from its data directory; writes go on with it.
    children[0] = spawn_node(&dir, 0);
    for g in 0..GROUPS {
        client += 1;
        assert_eq!(write(&ports, GroupId(g), client, b"three"), Op(6), "{g}");
    }
    // SIGTERM stops a node cleanly.
    let pid = children[1].id();
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let status = children[1].wait().expect("node 2 exits");
    assert!(status.success(), "SIGTERM gives a clean exit: {status}");
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// C1: the network client (`cohort-client`) against three `cohort node`
/// processes: every group written through a list that starts at any node,
/// and, after the primary's process is SIGKILLed, the new primary found
/// among the same addresses, with no help.
#[test]
fn c1_network_client_on_three_node_processes_writes_every_group_and_follows_a_kill() {
    let dir = std::env::temp_dir().join(format!("cohort-processes-c1-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let addresses = free_addresses(6);
    let ports: Vec<Ports> = (0..3)
        .map(|i| Ports { listen: addresses[i], client: addresses[3 + i], admin: None, tls: client_tls(&dir) })
        .collect();
    for index in 0..3 {
        write_config(&dir, index, &ports);
    }
    let mut children: Vec<Child> = (0..3).map(|index| spawn_node(&dir, index)).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let files = cohort_runtime::tls::client_files(&certs(&dir), "local");
    let files = cohort_runtime::network::TlsFiles { ca: files.ca, cert: files.cert, key: files.key };
    let client_of = |first: usize| {
        let mut list: Vec<String> = ports.iter().map(|port| port.client.to_string()).collect();
        list.rotate_left(first);
        cohort_runtime::network::ClusterClient::builder(CLUSTER, list)
            .tls(files.clone())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("a network client")
    };
    runtime.block_on(async {
        for first in 0..3 {
            let client = client_of(first);
            for g in (0..GROUPS).map(GroupId) {
                let value = format!("through node {} first", first + 1);
                client.write(g, value.clone()).await.unwrap_or_else(|error| panic!("{g}: {error}"));
                assert_eq!(client.read(g, "").await.expect("a read").result, Bytes::from(value), "{g}");
            }
        }
    });
    let client = client_of(0);
    let group = GroupId(0);
    let primary = runtime.block_on(async {
        client.write(group, "before the kill").await.expect("a write");
        client.route(group).expect("a cached route").node
    });
    let victim = &mut children[primary.0 as usize - 1];
    victim.kill().expect("SIGKILL");
    let _ = victim.wait();
    runtime.block_on(async {
        client.write(group, "after the kill").await.expect("a write after the primary's process died");
        assert_ne!(client.route(group).expect("a route").node, primary, "the route moved");
        let read = client.read(group, "").await.expect("a read");
        assert_eq!(read.result, Bytes::from_static(b"after the kill"));
    });
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Short sessions for the stall tests: 1 s timeout, keepalives every 200 ms.
fn session_table(policy: &str) -> String {
    format!(
        "\n[session]\nsession_timeout_ms = 1000\nsession_keepalive_interval_ms = 200\n\
         session_expired_policy = \"{policy}\"\nsession_reconnect_attempts = 3\n"
    )
}

/// Start three nodes with admin ports and `extra` config; returns the ports and children.
fn start_stall_cluster(dir: &Path, extra: &str) -> (Vec<Ports>, Vec<Child>) {
    start_cluster(dir, 3, extra)
}

/// Start `nodes` nodes with admin ports and `extra` config.
fn start_cluster(dir: &Path, nodes: usize, extra: &str) -> (Vec<Ports>, Vec<Child>) {
    assert!(nodes as u64 <= NODES_MAX, "certificates are made for {NODES_MAX} nodes");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("temp dir");
    let addresses = free_addresses(3 * nodes);
    let ports: Vec<Ports> = (0..nodes)
        .map(|i| Ports {
            listen: addresses[i],
            client: addresses[nodes + i],
            admin: Some(addresses[2 * nodes + i]),
            tls: client_tls(dir),
        })
        .collect();
    for index in 0..nodes {
        write_config_with(dir, index, &ports, extra);
    }
    let children = (0..nodes).map(|index| spawn_node(dir, index)).collect();
    (ports, children)
}

/// GET /status from a node's admin port; `None` if it does not answer.
fn status(admin: SocketAddr) -> Option<serde_json::Value> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    // With the token: session ids are shown only to the token's holder (T4).
    let request =
        format!("GET /status HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (_, body) = answer.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Every node's /status shows three live sessions and an owner for every group.
fn sessions_and_owners(ports: &[Ports]) -> bool {
    ports.iter().all(|port| {
        status(port.admin.expect("admin")).is_some_and(|s| {
            let nodes = s["metadata"]["nodes"].as_array().cloned().unwrap_or_default();
            let groups = s["metadata"]["groups"].as_array().cloned().unwrap_or_default();
            nodes.len() == 3
                && nodes.iter().all(|n| !n["session"].is_null())
                && groups.len() == GROUPS as usize
                && groups.iter().all(|g| !g["owner"].is_null())
        })
    })
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status().expect("kill");
    assert!(status.success(), "kill -{name}");
}

#[test]
fn s3_shutdown_policy_stops_node() {
    let dir = std::env::temp_dir().join(format!("cohort-s3-{}", std::process::id()));
    let (ports, mut children) = start_stall_cluster(&dir, &session_table("shutdown"));
    assert!(wait_for(Duration::from_secs(20), || sessions_and_owners(&ports)), "sessions open");
    // Node 3 stalls past its session timeout; on resuming it learns that its
    // session expired and, by policy, stops with a non-zero exit and the reason.
    signal(&children[2], "STOP");
    std::thread::sleep(Duration::from_millis(2500));
    signal(&children[2], "CONT");
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = children[2].try_wait().expect("wait") {
            break Some(exit);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(dir.join("node-3.log")).unwrap_or_default();
    let exit = exit.unwrap_or_else(|| panic!("node 3 did not stop; its log:\n{log}"));
    assert_eq!(exit.code(), Some(3), "S3 exit code; log:\n{log}");
    assert!(log.contains("session expired"), "the reason is printed; log:\n{log}");
    // The others go on, without node 3's session.
    assert!(
        wait_for(Duration::from_secs(5), || status(ports[0].admin.expect("admin")).is_some_and(|s| {
            s["metadata"]["nodes"].as_array().is_some_and(|n| n.iter().any(|n| n["id"] == 3 && n["session"].is_null()))
        })),
        "node 3's session is gone from the metadata"
    );
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One acknowledged write: its group, op, value and the value it replaced
/// (the register returns what it overwrote), and when it was acknowledged.
#[derive(Clone, Debug)]
struct Acked {
    group: u64,
    op: Op,
    value: Vec<u8>,
    replaced: Vec<u8>,
    at: Instant,
}

/// One attempt at a write (or read) through the client ports, following
/// redirects, for up to `budget`. `None`: no definite answer.
/// A fresh client's write `request` (numbered 2) within `budget`: its
/// registration (request 1, H5) first, then the write.
fn try_write(ports: &[Ports], client: ClientId, group: GroupId, value: Bytes, budget: Duration) -> Option<(Op, Bytes)> {
    let deadline = Instant::now() + budget;
    let mut writes = cohort_core::client::Sequence::new(client, group);
    let registration = writes.registration().expect("a fresh id registers first");
    let (registered, _) = try_call(ports, &registration, budget)?;
    writes.registered(registered);
    try_call(ports, &writes.write(value), deadline.saturating_duration_since(Instant::now()))
}

fn try_call(ports: &[Ports], request: &Request, budget: Duration) -> Option<(Op, Bytes)> {
    let deadline = Instant::now() + budget;
    let mut target = request.group.0 as usize % ports.len();
    while Instant::now() < deadline {
        let answer = Client::connect(ports[target].client, &ports[target].tls).and_then(|mut client| {
            client.stream.sock.set_read_timeout(Some(Duration::from_millis(700))).ok()?;
            client.call(request)
        });
        match answer {
            Some(Message::Reply(reply)) => match reply.outcome {
                Outcome::Ok(result) => return Some((reply.op, result)),
                Outcome::Error { .. } => std::thread::sleep(Duration::from_millis(50)),
            },
            Some(Message::Redirect(redirect)) => {
                if let Some(primary) = redirect.primary.filter(|p| p.0 as usize - 1 != target) {
                    target = primary.0 as usize - 1;
                    continue;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => {}
        }
        target = (target + 1) % ports.len();
    }
    None
}

#[test]
fn s5_sigstop_primary_longer_than_session_timeout_never_commits_twice() {
    let dir = std::env::temp_dir().join(format!("cohort-s5-{}", std::process::id()));
    let (ports, mut children) = start_stall_cluster(&dir, &session_table("reconnect"));
    assert!(wait_for(Duration::from_secs(20), || sessions_and_owners(&ports)), "sessions open");
    // The victim: the primary of a written group that is not the metadata
    // primary (its stall then tests a partition primary, not the CMS's failover).
    let first = status(ports[0].admin.expect("admin")).expect("status");
    let metadata_primary =
        (0..3).find(|i| status(ports[*i].admin.expect("admin")).is_some_and(|s| s["metadata_primary"] == true));
    let (group, victim) = first["metadata"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| Some((g["id"].as_u64()?, g["owner"]["node"].as_u64()? as usize - 1)))
        .find(|(_, owner)| Some(*owner) != metadata_primary)
        .expect("a group led by a node other than the metadata primary");
    let victim_status = status(ports[victim].admin.expect("admin")).expect("victim status");
    let old_session = victim_status["session"].as_u64().expect("victim session");

    // A writer per written group: unique values, fresh client per write.
    let ports = std::sync::Arc::new(ports);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let written = [group, (group + 1) % GROUPS, (group + 2) % GROUPS];
    let writers: Vec<_> = written
        .iter()
        .map(|&g| {
            let (ports, stop) = (std::sync::Arc::clone(&ports), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut k = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    k += 1;
                    let value = format!("g{g}-w{k}").into_bytes();
                    let client = ClientId((u128::from(g) << 64) | u128::from(k) | (1 << 100));
                    let written = Bytes::from(value.clone());
                    if let Some((op, replaced)) = try_write(&ports, client, GroupId(g), written, Duration::from_secs(3))
                    {
                        acked.push(Acked { group: g, op, value, replaced: replaced.to_vec(), at: Instant::now() });
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // Stall the victim well past the session timeout (1 s) and the failover
    // time (2 s heartbeat timeout + election), and long enough that a writer
    // whose 3 s attempt went to the victim just before the stall still has
    // the new primary's answer inside it (4.5 s once fell short in CI,
    // beside the other process tests).
    signal(&children[victim], "STOP");
    let stopped_at = Instant::now();
    std::thread::sleep(Duration::from_millis(6500));
    signal(&children[victim], "CONT");
    let resumed_at = Instant::now();
    // The victim learns its session expired and opens a new one.
    let reopened = wait_for(Duration::from_secs(10), || {
        status(ports[victim].admin.expect("admin")).is_some_and(|s| {
            s["session"].as_u64().is_some_and(|session| session > old_session)
                && s["sessions"]["expired"].as_u64() >= Some(1)
        })
    });
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<Acked> = writers.into_iter().flat_map(|w| w.join().expect("writer")).collect();
    let log = std::fs::read_to_string(dir.join(format!("node-{}.log", victim + 1))).unwrap_or_default();
    assert!(reopened, "the victim reopened a session after resuming; its log:\n{log}");

    // Writes to the victim's group were acknowledged during the stall, via the others.
    let during = acked.iter().filter(|a| a.group == group && a.at > stopped_at && a.at < resumed_at).count();
    assert!(during > 0, "writes to {group} were acknowledged while its old primary was stopped");
    // No two acknowledged writes share an op, and each acknowledged write was
    // the one the next acknowledged op replaced: nothing lost or overwritten.
    for &g in &written {
        let mut ops: Vec<&Acked> = acked.iter().filter(|a| a.group == g).collect();
        ops.sort_by_key(|a| a.op);
        assert!(ops.len() > 3, "group {g}: writes went on ({} acked)", ops.len());
        for pair in ops.windows(2) {
            assert_ne!(pair[0].op, pair[1].op, "group {g}: two acknowledged writes at {}", pair[0].op);
            if pair[1].op.0 == pair[0].op.0 + 1 {
                assert_eq!(pair[1].replaced, pair[0].value, "group {g}: the write at {} was lost", pair[0].op);
            }
        }
        // Read back: a final write replaces exactly the last acknowledged value
        // (or one written after it whose answer was lost), and a read sees it.
        let last = ops.last().expect("acked");
        let client = ClientId((u128::from(g) << 64) | (1 << 101));
        let final_value = Bytes::from(format!("final-{g}"));
        let (op, replaced) =
            try_write(&ports, client, GroupId(g), final_value, Duration::from_secs(10)).expect("final write");
        assert!(op > last.op, "group {g}: the final write follows every acknowledged one");
        if op.0 == last.op.0 + 1 {
            assert_eq!(replaced.to_vec(), last.value, "group {g}: the last acknowledged write is read back");
        }
        let read = Request {
            client: ClientId((u128::from(g) << 64) | (1 << 102)),
            request: RequestNumber(1),
            group: GroupId(g),
            kind: RequestKind::Read,
            operation: Bytes::new(),
        };
        let (_, value) = try_call(&ports, &read, Duration::from_secs(10)).expect("read");
        assert_eq!(value, Bytes::from(format!("final-{g}")), "group {g}: read back");
    }
    // The old primary does not serve as primary of its old view: a request
    // sent to it directly is redirected, or answered consistently (at an op
    // after every acknowledged one).
    let last_op = acked.iter().filter(|a| a.group == group).map(|a| a.op).max().expect("acked");
    // A fresh client's registration: a write through the log that applies nothing.
    let probe = Request {
        client: ClientId((u128::from(group) << 64) | (1 << 103)),
        request: RequestNumber(1),
        group: GroupId(group),
        kind: RequestKind::Write,
        operation: Bytes::new(),
    };
    match Client::connect(ports[victim].client, &ports[victim].tls).and_then(|mut client| client.call(&probe)) {
        Some(Message::Redirect(redirect)) => {
            assert_ne!(redirect.primary, Some(NodeId(victim as u64 + 1)), "it does not name itself")
        }
        Some(Message::Reply(reply)) => {
            if let Outcome::Ok(_) = reply.outcome {
                assert!(reply.op > last_op, "answered after every acknowledged write")
            }
        }
        other => panic!("the old primary answers after resuming: {other:?}"),
    }
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Run `cohort` with `args` and return (exit code, stdout + stderr).
fn cohort(args: &[String]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_cohort")).args(args).output().expect("cohort runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code(), text)
}

/// `cohort admin … <action>` against node `node`'s admin port.
fn admin(ports: &[Ports], node: usize, action: &[&str]) -> (Option<i32>, String) {
    let mut args: Vec<String> = ["admin", "--admin"].iter().map(ToString::to_string).collect();
    args.push(ports[node - 1].admin.expect("an admin port").to_string());
    args.extend(["--token".to_string(), ADMIN_TOKEN.to_string()]);
    args.extend(action.iter().map(ToString::to_string));
    cohort(&args)
}

/// `cohort write --cluster <every client port> --group G --value V`.
fn cli_write(dir: &Path, ports: &[Ports], group: u64, value: &str) -> (Option<i32>, String) {
    let cluster: Vec<String> = ports.iter().map(|port| port.client.to_string()).collect();
    let certs = certs(dir).display().to_string();
    let args = [
        "write",
        "--cluster",
        &cluster.join(","),
        "--group",
        &group.to_string(),
        "--value",
        value,
        "--certs",
        &certs,
        "--client",
        "local",
        "--cluster-id",
        &format!("{:x}", CLUSTER.0),
        "--timeout-secs",
        "10",
    ];
    cohort(&args.map(str::to_string))
}

/// The metadata's record of `group` as node 1 shows it.
fn group_record(ports: &[Ports], group: u64) -> Option<serde_json::Value> {
    let status = status(ports[0].admin.expect("admin"))?;
    status["metadata"]["groups"].as_array()?.iter().find(|record| record["id"] == group).cloned()
}

/// The groups in node `node`'s run-time placements file.
fn placed_groups(dir: &Path, node: usize) -> Vec<u64> {
    let path = dir.join(format!("data-{node}")).join(cohort_runtime::node::PLACEMENTS_FILE);
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let content: serde_json::Value = serde_json::from_str(&text).expect("the placements file is JSON");
    content["placements"]
        .as_array()
        .map_or(Vec::new(), |list| list.iter().filter_map(|p| p["group"].as_u64()).collect())
}

/// C3, C4 and the freeze on three `cohort node` processes, through the
/// `cohort` CLI only: a group created at run time takes a write, its primary
/// moves to the member asked for, a freeze refuses a move (naming its epoch)
/// while writes go on and the move runs after the unfreeze, and a deleted
/// group's replicas and records leave every node.
#[test]
fn c3_c4_groups_created_transferred_frozen_and_deleted_on_three_node_processes() {
    let dir = std::env::temp_dir().join(format!("cohort-processes-c3-{}", std::process::id()));
    let (ports, mut children) = start_stall_cluster(&dir, "");
    // Up in about 3 s alone; with the other process tests starting their
    // clusters at the same time on two cores it once took past 30 s (two
    // CI runs, stops 44 and 45). A bound on liveness, not on speed.
    assert!(wait_for(Duration::from_secs(90), || sessions_and_owners(&ports)), "the cluster came up");

    // C3: create a group on running nodes, then write to it.
    let (code, text) = admin(&ports, 2, &["create-group", "--group", "100", "--members", "1,2,3"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("created group:100 (kind default, incarnation 1"), "{text}");
    let created = Instant::now();
    let (code, text) = cli_write(&dir, &ports, 100, "first");
    assert_eq!(code, Some(0), "a write to the new group: {text}");
    eprintln!("c3: group:100 took its first write {:?} after create-group returned", created.elapsed());
    let (code, text) = admin(&ports, 1, &["create-group", "--group", "100", "--members", "1,2,3"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("refused: group:100 exists"), "{text}");
    let (code, text) = admin(&ports, 1, &["create-group", "--group", "101", "--members", "1,9"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("node:9 is not registered"), "{text}");

    // C4: hand the primary to another member.
    assert!(wait_for(Duration::from_secs(20), || group_record(&ports, 100).is_some_and(|g| !g["owner"].is_null())));
    let owner = group_record(&ports, 100).expect("a record")["owner"]["node"].as_u64().expect("an owner");
    let to = owner % 3 + 1;
    let (code, text) = admin(&ports, 3, &["transfer-primary", "--group", "100", "--to", &to.to_string()]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        wait_for(Duration::from_secs(20), || group_record(&ports, 100).is_some_and(|g| g["owner"]["node"] == to)),
        "node:{to} leads group:100: {text}"
    );
    assert_eq!(cli_write(&dir, &ports, 100, "after the transfer").0, Some(0));

    // The freeze: a move is refused naming it, writes go on, and after
    // the unfreeze the move runs.
    let (code, text) = admin(&ports, 1, &["create-group", "--group", "101", "--members", "1,2"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = admin(&ports, 2, &["freeze"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("frozen since epoch"), "{text}");
    let since = status(ports[0].admin.expect("admin")).expect("a status")["metadata"]["frozen"]["since_epoch"].clone();
    let (code, text) = admin(&ports, 1, &["move", "--group", "101", "--from", "2", "--to", "3"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(&format!("frozen since epoch {since}")), "the refusal names the freeze: {text}");
    assert_eq!(cli_write(&dir, &ports, 0, "while frozen").0, Some(0), "writes go on while frozen");
    let (code, text) = admin(&ports, 3, &["unfreeze"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = admin(&ports, 1, &["move", "--group", "101", "--from", "2", "--to", "3"]);
    assert_eq!(code, Some(0), "the move runs after the unfreeze: {text}");
    assert!(
        wait_for(Duration::from_secs(60), || group_record(&ports, 101)
            .is_some_and(|g| g["members"] == serde_json::json!([1, 3]))),
        "the move completed: {:?}",
        group_record(&ports, 101)
    );

    // C3: delete; every member drops its replica and its placement record.
    assert!((1..=3).all(|node| placed_groups(&dir, node).contains(&100)), "recorded where hosted");
    let (code, text) = admin(&ports, 1, &["delete-group", "--group", "100"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        wait_for(Duration::from_secs(30), || (1..=3).all(|node| !placed_groups(&dir, node).contains(&100))),
        "every node removed group:100"
    );
    let (code, text) = cli_write(&dir, &ports, 100, "after the delete");
    assert_ne!(code, Some(0), "a deleted group takes no writes: {text}");
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The metadata group's voters as node `node`'s /status shows them.
fn metadata_voters(ports: &[Ports], node: usize) -> Option<Vec<u64>> {
    let status = status(ports[node - 1].admin.expect("admin"))?;
    status["metadata_members"].as_array().map(|list| list.iter().filter_map(serde_json::Value::as_u64).collect())
}

/// Z6 on six `cohort node` processes: the metadata group's voters are nodes
/// 1 to 5 and node 6 learns its log. Node 1 dies for good and `cohort admin
/// replace --group metadata` puts node 6 in its place; then nodes 2 and 3
/// die too. Three of the five voters the cluster started with are gone,
/// which would end a fixed voter set, and the metadata still commits: a
/// group is created and takes a write.
#[test]
fn z6_a_dead_metadata_voter_is_replaced_and_the_metadata_outlives_three_of_its_first_voters() {
    let dir = std::env::temp_dir().join(format!("cohort-processes-z6-{}", std::process::id()));
    let (ports, mut children) = start_cluster(&dir, 6, "");
    let recorded = || {
        status(ports[1].admin.expect("admin")).is_some_and(|s| {
            let nodes = s["metadata"]["nodes"].as_array().cloned().unwrap_or_default();
            nodes.len() == 6 && nodes.iter().all(|n| !n["session"].is_null())
        }) && metadata_voters(&ports, 2) == Some(vec![1, 2, 3, 4, 5])
            && status(ports[1].admin.expect("admin")).is_some_and(|s| s["metadata_recorded"] == true)
    };
    let seen = || {
        status(ports[1].admin.expect("admin")).map(|s| {
            format!("{} recorded {} primary {}", s["metadata"]["nodes"], s["metadata_recorded"], s["metadata_primary"])
        })
    };
    assert!(wait_for(Duration::from_secs(60), recorded), "six sessions and voters 1 to 5: {:?}", seen());

    let _ = children[0].kill();
    let _ = children[0].wait();
    let (code, text) = admin(&ports, 2, &["replace", "--group", "metadata", "--dead", "1", "--with", "6"]);
    assert_eq!(code, Some(0), "{text}");
    let replaced = || {
        metadata_voters(&ports, 2) == Some(vec![6, 2, 3, 4, 5])
            && status(ports[1].admin.expect("admin"))
                .is_some_and(|s| s["operations"].as_array().is_some_and(Vec::is_empty))
    };
    let operations = || {
        status(ports[1].admin.expect("admin"))
            .map(|s| format!("{} {} epoch {}", s["operations"], s["metadata"]["nodes"], s["metadata"]["config_epoch"]))
    };
    assert!(wait_for(Duration::from_secs(60), replaced), "node 6 took node 1's vote: {:?}", operations());
    let started = Instant::now();

    for child in &mut children[1..3] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (code, text) = admin(&ports, 4, &["create-group", "--group", "100", "--members", "4,5,6"]);
    assert_eq!(code, Some(0), "the metadata commits with nodes 4, 5 and 6 of its voters: {text}");
    let (code, text) = cli_write(&dir, &ports, 100, "after three voters died");
    assert_eq!(code, Some(0), "a write to the new group: {text}");
    eprintln!("z6: a group created and written {:?} after nodes 2 and 3 died", started.elapsed());
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// H1, the rebuild scenario of issue 33, as docs/storage.md describes a
/// rebuild: a write to a group is acknowledged while node 3 is down; node 1
/// is stopped, its data directory moved away and node 1 started again
/// empty, while node 2 (which holds the write) is down and node 3 is back.
/// Node 1 recovers: it votes in no election and acknowledges nothing, so
/// nodes 1 and 3 cannot elect a log without the write (writes wait instead).
/// Once node 2 is back every group is led again and the register reads the
/// last acknowledged value. `COHORT_REBUILD_RUNS` runs it that many times
/// (default 1; the figure is 20 of 20).
#[test]
fn h1_a_node_rebuilt_empty_loses_no_acknowledged_write() {
    let runs: usize = std::env::var("COHORT_REBUILD_RUNS").ok().and_then(|runs| runs.parse().ok()).unwrap_or(1);
    for run in 0..runs {
        rebuild_run(run, Loss::Wiped);
    }
}

/// H2, the same scenario with node 1's data cut instead of moved away:
/// the newest log segment of each of its shards is cut inside its last
/// records (synced and acknowledged ones among them). Node 1 must not
/// start as if it held them: its log names the file, its groups recover
/// from their peers, and no acknowledged write is lost.
/// `COHORT_REBUILD_RUNS` runs it that many times too.
#[test]
fn h2_a_node_whose_log_was_cut_loses_no_acknowledged_write() {
    let runs: usize = std::env::var("COHORT_REBUILD_RUNS").ok().and_then(|runs| runs.parse().ok()).unwrap_or(1);
    for run in 0..runs {
        rebuild_run(run, Loss::SegmentCut);
    }
}

/// How node 1 loses its data in [`rebuild_run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// Its data directory is moved away (H1).
    Wiped,
    /// The newest segment of each of its shards is cut inside its records (H2).
    SegmentCut,
}

/// Cut the newest `wal-*.seg` of every shard directory under `data` a
/// few bytes before the end of its records (the zeros ahead of them do
/// not count), so that its last records are gone.
fn cut_newest_segments(data: &Path) -> usize {
    let mut cut = 0;
    let shards = std::fs::read_dir(data).expect("node 1's data directory").flatten().map(|entry| entry.path());
    for shard in shards.filter(|path| path.is_dir()) {
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&shard)
            .expect("a shard directory")
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with("wal-") && name.ends_with(".seg"))
            })
            .collect();
        segments.sort();
        let Some(newest) = segments.last() else { continue };
        let bytes = std::fs::read(newest).expect("the newest segment");
        let Some(last) = bytes.iter().rposition(|byte| *byte != 0) else { continue };
        // Past the 32-byte segment header, inside the last record.
        let at = (last as u64).saturating_sub(8).max(33);
        let file = std::fs::OpenOptions::new().write(true).open(newest).expect("open the newest segment");
        file.set_len(at).expect("cut the newest segment");
        file.sync_all().expect("sync the cut");
        cut += 1;
    }
    cut
}

fn rebuild_run(run: usize, loss: Loss) {
    let dir = std::env::temp_dir().join(format!("cohort-{loss:?}-{}-{run}", std::process::id()));
    let (ports, mut children) = start_cluster(&dir, 3, "");
    let logs = |dir: &Path| {
        (1..=3)
            .map(|node| std::fs::read_to_string(dir.join(format!("node-{node}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(wait_for(Duration::from_secs(30), || sessions_and_owners(&ports)), "run {run}: cluster up");
    let group = GroupId(5 % GROUPS);
    let mut acked: Vec<(Op, Bytes)> = Vec::new();
    let mut next_client = 1u128 << 90 | (run as u128) << 32;
    let mut put = |ports: &[Ports], value: String, budget: Duration| {
        next_client += 1;
        try_write(ports, ClientId(next_client), group, Bytes::from(value.clone()), budget)
            .map(|(op, _)| (op, Bytes::from(value)))
    };
    // Node 3 down; the write is acknowledged by nodes 1 and 2.
    let _ = children[2].kill();
    let _ = children[2].wait();
    let written = put(&ports, format!("acknowledged-{run}"), Duration::from_secs(20));
    let written =
        written.unwrap_or_else(|| panic!("run {run}: the write is acknowledged by nodes 1 and 2\n{}", logs(&dir)));
    acked.push(written);
    // Node 1 is rebuilt empty while node 2 is down and node 3 back.
    for node in [0, 1] {
        let _ = children[node].kill();
        let _ = children[node].wait();
    }
    match loss {
        Loss::Wiped => std::fs::rename(dir.join("data-1"), dir.join("data-1.broken")).expect("move node 1's data away"),
        Loss::SegmentCut => assert!(cut_newest_segments(&dir.join("data-1")) > 0, "run {run}: node 1 has segments"),
    }
    children[0] = spawn_node(&dir, 0);
    children[2] = spawn_node(&dir, 2);
    std::thread::sleep(Duration::from_secs(4));
    // Writes now may wait (no quorum holds the data); any acknowledged
    // one must come after the first.
    if let Some(late) = put(&ports, format!("while-rebuilding-{run}"), Duration::from_secs(4)) {
        acked.push(late);
    }
    children[1] = spawn_node(&dir, 1);
    assert!(
        wait_for(Duration::from_secs(60), || sessions_and_owners(&ports)),
        "run {run}: every group led again once node 2 is back\n{}",
        logs(&dir)
    );
    let last = put(&ports, format!("after-{run}"), Duration::from_secs(20));
    acked.push(last.unwrap_or_else(|| panic!("run {run}: a write after the rebuild\n{}", logs(&dir))));
    let ops: Vec<Op> = acked.iter().map(|(op, _)| *op).collect();
    assert!(ops.windows(2).all(|pair| pair[0] < pair[1]), "run {run}: acknowledged writes keep their ops: {ops:?}");
    let read = Request {
        client: ClientId(next_client + 1),
        request: RequestNumber(1),
        group,
        kind: RequestKind::Read,
        operation: Bytes::new(),
    };
    let (_, value) = try_call(&ports, &read, Duration::from_secs(20)).expect("read");
    assert_eq!(value, acked.last().expect("acked").1, "run {run}: the register reads the last acknowledged write");
    if loss == Loss::SegmentCut {
        let log = std::fs::read_to_string(dir.join("node-1.log")).unwrap_or_default();
        assert!(
            log.contains("synced log records lost in") && log.contains("wal-"),
            "run {run}: node 1's log names the cut segment\n{log}"
        );
    }
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
