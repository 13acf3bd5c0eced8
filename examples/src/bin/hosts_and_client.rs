//! One node per process, as production runs cohort: two host processes
//! that each embed one node, and a third process that hosts none and uses
//! the cluster through the network client (`cohort-client`, no actix).
//!
//! ```text
//! cargo run -p cohort-examples --bin hosts_and_client
//! ```
//!
//! Without a subcommand this process is the launcher: it makes throwaway
//! certificates and a cluster id in a temporary directory (what `cohort
//! certs init` and `cohort certs client` make), picks the ports, starts two
//! copies of itself as `host --node 1` and `host --node 2`, and once both
//! have written, a third as `client`. It stops the hosts by closing their
//! stdin when the client is done.
//!
//! - **A host** builds its node with `NodeBuilder` (peer link, client port,
//!   mTLS, its own group kind `guestbook`) and signs every group's guestbook
//!   through the ordinary embedded `Client`. Node 1 leads the even groups
//!   and node 2 the odd ones, so each host's writes to half the groups go
//!   over the other node's client port (`Client::client_ports`).
//! - **The client** builds a `ClusterClient` from the cluster id and its
//!   certificate, signs every guestbook and reads each one back
//!   (linearizable): three signatures, one per process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use clap::{Parser, Subcommand};
use cohort_runtime::prelude::*;

/// The groups every process signs.
const GROUPS: u64 = 4;

/// Entries a guestbook keeps; a longer one refuses new signatures.
const GUESTBOOK_ENTRIES_MAX: usize = 1024;

/// The example's flags.
#[derive(Parser)]
#[command(about = "Two host processes that each embed one cohort node, and a third that only uses the network client")]
struct Flags {
    #[command(subcommand)]
    role: Option<Role>,
}

/// Which process this is; none: the launcher of the three.
#[derive(Subcommand)]
enum Role {
    /// Embed one node of a two-node cluster and sign every group through it.
    Host {
        /// This node's id (1 or 2).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=2))]
        node: u64,
        /// The certificates directory (the launcher's).
        #[arg(long)]
        certs: PathBuf,
        /// Where this node keeps its write-ahead log.
        #[arg(long)]
        data: PathBuf,
        /// Where each node's peers dial it: node 1's,node 2's.
        #[arg(long, value_delimiter = ',', required = true)]
        listen: Vec<SocketAddr>,
        /// Each node's client port: node 1's,node 2's.
        #[arg(long, value_delimiter = ',', required = true)]
        clients: Vec<SocketAddr>,
    },
    /// Use the cluster from a process that hosts no node.
    Client {
        /// The certificates directory (`ca.pem`, `cluster-id`, `client-app.*`).
        #[arg(long)]
        certs: PathBuf,
        /// The nodes' client ports.
        #[arg(long, value_delimiter = ',', required = true)]
        cluster: Vec<SocketAddr>,
    },
}

/// A group's replicated state: the signatures, in commit order.
#[derive(Default)]
struct Guestbook(Vec<String>);

impl StateMachine for Guestbook {
    fn apply(&mut self, _op: Op, signature: &[u8]) -> Bytes {
        if self.0.len() >= GUESTBOOK_ENTRIES_MAX {
            return Bytes::from_static(b"full");
        }
        // One line per signature in the snapshot: no newline inside one.
        self.0.push(String::from_utf8_lossy(signature).replace('\n', " "));
        Bytes::from(self.0.len().to_string())
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::from(self.0.join(", "))
    }
    fn snapshot(&self) -> Bytes {
        Bytes::from(self.0.join("\n"))
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(snapshot).map_err(|error| error.to_string())?;
        self.0 = text.lines().map(str::to_string).collect();
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match Flags::parse().role {
        None => launch(),
        Some(Role::Host { node, certs, data, listen, clients }) => host(node, &certs, data, &listen, &clients),
        Some(Role::Client { certs, cluster }) => client(&certs, &cluster),
    }
}

/// One host: node `id` of two, and the host's own writes through it.
fn host(
    id: u64,
    certs: &Path,
    data: PathBuf,
    listen: &[SocketAddr],
    clients: &[SocketAddr],
) -> Result<(), Box<dyn std::error::Error>> {
    if listen.len() != 2 || clients.len() != 2 {
        return Err("--listen and --clients take two addresses each, node 1's first".into());
    }
    let cluster = cohort_client::read_cluster_id(certs.join(cohort_client::CLUSTER_ID_FILE))?;
    let (me, other) = (NodeId(id), NodeId(3 - id));
    let index = |node: NodeId| node.0 as usize - 1;
    actix_rt::System::new().block_on(async move {
        let mut builder = NodeBuilder::new(cluster, me)
            .tls(cohort_runtime::tls::node_files(certs, me))
            .listen(listen[index(me)])
            .peer(other, listen[index(other)])
            .client_port(clients[index(me)])
            .data_dir(data)
            .group_kind("guestbook", |_| Box::new(Guestbook::default()));
        for group in (0..GROUPS).map(GroupId) {
            // Node 1 first (and so primary of view 0) for even groups, node 2 for odd.
            let members = if group.0 % 2 == 0 { vec![NodeId(1), NodeId(2)] } else { vec![NodeId(2), NodeId(1)] };
            builder = builder.group(GroupPlacement::new(group, members).kind("guestbook"));
        }
        let node = builder.start()?;
        println!("host {id}: node {id} serves clients on {}", clients[index(me)]);
        // The ordinary client, given the client ports for the groups whose
        // primary is the other process's node.
        let client = Client::new([node.handle()]).client_ports(
            cluster,
            clients.iter().map(ToString::to_string),
            &cohort_runtime::tls::client_files(certs, "local"),
        )?;
        for group in (0..GROUPS).map(GroupId) {
            let signed = client.write(group, format!("host {id}")).await?;
            let path = if (group.0 % 2) + 1 == id { "its own node" } else { "the other node's client port" };
            println!("host {id}: signed {group} at {} through {path}", signed.op);
        }
        println!("host {id}: signed every group");
        // The launcher closes stdin to stop us.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            let _ = stop.send(());
        });
        let _ = stopped.await;
        println!("host {id}: stopping");
        node.stop();
        Ok(())
    })
}

/// The client-only process: no node, no actix, a plain tokio runtime.
fn client(certs: &Path, cluster: &[SocketAddr]) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let id = cohort_client::read_cluster_id(certs.join(cohort_client::CLUSTER_ID_FILE))?;
        let client = cohort_client::ClusterClient::builder(id, cluster.iter().map(ToString::to_string))
            .tls(cohort_client::TlsFiles::client_in(certs, "app"))
            .build()?;
        for group in (0..GROUPS).map(cohort_messages::GroupId) {
            let signed = client.write(group, "client").await?;
            let primary = client.route(group).map_or("?".to_string(), |route| route.node.to_string());
            println!("client: signed {group} at {} (primary {primary})", signed.op);
        }
        for group in (0..GROUPS).map(cohort_messages::GroupId) {
            let read = client.read(group, "").await?;
            println!("client: {group} guestbook at {}: {}", read.op, String::from_utf8_lossy(&read.result));
        }
        Ok(())
    })
}

/// A child that is stopped if the launcher fails.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Read `stdout` up to the line that ends with `last`, echoing every line.
fn echo_until(stdout: &mut BufReader<ChildStdout>, last: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            return Err(format!("a host exited before saying {last:?}").into());
        }
        print!("{line}");
        if line.trim_end().ends_with(last) {
            return Ok(());
        }
    }
}

/// Start both hosts, wait until they have signed, run the client, stop the hosts.
fn launch() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("cohort-hosts-and-client-{}", std::process::id()));
    let certs = dir.join("certs");
    // What `cohort certs init --nodes 2` and `cohort certs client --name app` make.
    cohort_runtime::tls::local_cluster(&certs, [NodeId(1), NodeId(2)])?;
    cohort_runtime::tls::Authority::load(&certs)?.write_client(&certs, "app")?;
    let ports = free_ports(4)?;
    let join = |addresses: &[SocketAddr]| addresses.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let (listen, clients) = (join(&ports[..2]), join(&ports[2..]));
    let me = std::env::current_exe()?;
    let mut hosts = Vec::new();
    for id in 1..=2 {
        let data = dir.join(format!("node-{id}"));
        let child = Command::new(&me)
            .args(["host", "--node", &id.to_string(), "--listen", &listen, "--clients", &clients])
            .arg("--certs")
            .arg(&certs)
            .arg("--data")
            .arg(&data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        hosts.push(Process(child));
    }
    let mut outputs = Vec::new();
    for host in &mut hosts {
        let mut stdout = BufReader::new(host.0.stdout.take().ok_or("a host's stdout")?);
        echo_until(&mut stdout, "signed every group")?;
        // Kept open: a host must not find its stdout closed.
        outputs.push(stdout);
    }
    let status = Command::new(&me).args(["client", "--cluster", &clients]).arg("--certs").arg(&certs).status()?;
    for (host, mut stdout) in hosts.iter_mut().zip(outputs) {
        // Closing stdin stops the host; it exits once its node has stopped.
        drop(host.0.stdin.take());
        echo_until(&mut stdout, "stopping")?;
        host.0.wait()?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !status.success() {
        return Err(format!("the client process failed: {status}").into());
    }
    println!("launcher: three processes, one cluster; the hosts have stopped");
    Ok(())
}

/// Free loopback ports (bound, then released for the hosts to bind).
fn free_ports(count: usize) -> std::io::Result<Vec<SocketAddr>> {
    let listeners: Vec<_> = (0..count).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    listeners.iter().map(std::net::TcpListener::local_addr).collect()
}
