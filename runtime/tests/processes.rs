//! Three `cohort node` processes on loopback, driven through their client
//! ports: writes follow redirects to the primary (V5), a node killed with
//! SIGKILL fails over, and restarts from its data directory (V4).

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
const GROUPS: u64 = 6;

struct Ports {
    listen: SocketAddr,
    client: SocketAddr,
}

fn free_addresses(n: usize) -> Vec<SocketAddr> {
    let listeners: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind")).collect();
    listeners.iter().map(|l| l.local_addr().expect("address")).collect()
}

fn write_config(dir: &Path, index: usize, ports: &[Ports]) -> PathBuf {
    let mut text = format!(
        "[cluster]\ntick = \"50ms\"\ncommit_broadcast_interval = \"250ms\"\ncommit_heartbeat_timeout = \"2s\"\n\
         commit_idle_heartbeat_interval = \"500ms\"\ncommit_idle_heartbeat_timeout = \"2s\"\n\
         view_change_timeout = \"500ms\"\nrepair_timeout = \"100ms\"\n\n\
         [node]\ncluster_id = {}\nid = {}\nlisten = \"{}\"\nclient = \"{}\"\ndata_dir = \"{}\"\nshards = 2\n",
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
    text.push_str(&format!("\n[groups]\npartitions = {GROUPS}\n"));
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

/// A client connection speaking frames.
struct Client {
    stream: TcpStream,
    decoder: FrameDecoder,
    buffer: BytesMut,
}

impl Client {
    fn connect(address: SocketAddr) -> Option<Client> {
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
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
                return frame.message().ok();
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

/// Write `value` to `group` through the client ports, following redirects, for up to 20 s.
fn write(ports: &[Ports], group: GroupId, client: u128, value: &'static [u8]) -> Op {
    let request = Request {
        client: ClientId(client),
        request: RequestNumber(1),
        group,
        kind: RequestKind::Write,
        operation: Bytes::from_static(value),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut target = group.0 as usize % ports.len();
    while Instant::now() < deadline {
        let answer = Client::connect(ports[target].client).and_then(|mut client| client.call(&request));
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
    let ports: Vec<Ports> = (0..3).map(|i| Ports { listen: addresses[i], client: addresses[3 + i] }).collect();
    for index in 0..3 {
        write_config(&dir, index, &ports);
    }
    let mut children: Vec<Child> = (0..3).map(|index| spawn_node(&dir, index)).collect();
    let mut client = 1u128;
    for g in 0..GROUPS {
        client += 1;
        assert_eq!(write(&ports, GroupId(g), client, b"one"), Op(1), "{g}");
    }
    // SIGKILL node 1: the groups it led fail over to the others.
    children[0].kill().expect("SIGKILL");
    let _ = children[0].wait();
    for g in 0..GROUPS {
        client += 1;
        assert_eq!(write(&ports, GroupId(g), client, b"two"), Op(2), "{g}: the first write survived");
    }
    // Restart node 1 from its data directory; writes go on with it.
    children[0] = spawn_node(&dir, 0);
    for g in 0..GROUPS {
        client += 1;
        assert_eq!(write(&ports, GroupId(g), client, b"three"), Op(3), "{g}");
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
