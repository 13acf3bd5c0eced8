//! The test network: one Linux network namespace per node, joined by veth
//! pairs to a bridge in a "switch" namespace, plus one veth from the root
//! namespace (where the workload runs) to the same bridge. Partitions are
//! nftables rules in the switch namespace's `bridge` table, so they cut
//! node-to-node traffic and leave the clients' paths alone.
//!
//! Each run takes a free run number `X` (1..=250): namespaces `cjepX-sw` and
//! `cjepX-n1..`, subnet `10.77.X.0/24` (node `i` is `.i`, the root
//! namespace's end `.254`). `ip netns add` fails when the name exists, which
//! makes the choice atomic between parallel runs. Cleanup runs on drop (also
//! while a panic unwinds), and a watchdog shell in its own process group
//! cleans up when the harness dies without unwinding (Ctrl-C, SIGKILL).

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};

use crate::jepsen::error::Error;

/// Run numbers to try.
const RUN_NUMBER_MAX: u32 = 250;
/// The second octet of every run's subnet (10.77.X.0/24).
const SUBNET_OCTET: u8 = 77;

/// A node-to-node cut: packets from node `from` to node `to` (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cut {
    /// Sender.
    pub from: usize,
    /// Receiver.
    pub to: usize,
}

/// The namespaces, bridge and rules of one run.
#[derive(Debug)]
pub struct Network {
    run: u8,
    switch: String,
    nodes: Vec<String>,
    host_veth: String,
    watchdog: Option<Child>,
    cleaned: bool,
}

/// Run `program args`, and fail with its stderr.
pub fn command(program: &str, args: &[&str]) -> Result<(), Error> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| Error::new(format!("cannot run {program}: {error}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::new(format!(
        "`{program} {}` failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Run `program args` with `input` on stdin.
fn command_with_input(program: &str, args: &[&str], input: &str) -> Result<(), Error> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| Error::new(format!("cannot run {program}: {error}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).map_err(|error| Error::new(format!("{program}: stdin: {error}")))?;
    }
    let output = child.wait_with_output().map_err(|error| Error::new(format!("{program}: {error}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::new(format!(
        "`{program} {}` failed ({}) on:\n{input}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

impl Network {
    /// Build the network for `nodes` nodes under a free run number.
    pub fn create(nodes: usize) -> Result<Network, Error> {
        assert!((1..=16).contains(&nodes), "1..=16 nodes");
        let first = std::process::id() % RUN_NUMBER_MAX;
        for offset in 0..RUN_NUMBER_MAX {
            let run = ((first + offset) % RUN_NUMBER_MAX + 1) as u8;
            let switch = format!("cjep{run}-sw");
            if command("ip", &["netns", "add", &switch]).is_err() {
                continue;
            }
            let mut network = Network {
                run,
                switch,
                nodes: (1..=nodes).map(|i| format!("cjep{run}-n{i}")).collect(),
                host_veth: format!("cjep{run}-h"),
                watchdog: None,
                cleaned: false,
            };
            network.watchdog = Some(network.spawn_watchdog()?);
            network.build()?;
            return Ok(network);
        }
        Err(Error::new("no free run number: 250 cjep*-sw namespaces exist (`ip netns list`; delete stale ones)"))
    }

    /// The run number X (the subnet is 10.77.X.0/24).
    pub fn run(&self) -> u8 {
        self.run
    }

    /// Node `index`'s (0-based) address.
    pub fn node_address(&self, index: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, SUBNET_OCTET, self.run, u8::try_from(index + 1).unwrap_or(u8::MAX))
    }

    /// The root namespace's address on the bridge (the clients').
    pub fn host_address(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, SUBNET_OCTET, self.run, 254)
    }

    /// Node `index`'s namespace.
    pub fn namespace(&self, index: usize) -> &str {
        &self.nodes[index]
    }

    /// The subnet, for reports.
    pub fn subnet(&self) -> String {
        format!("10.{SUBNET_OCTET}.{}.0/24", self.run)
    }

    fn build(&self) -> Result<(), Error> {
        let sw = self.switch.as_str();
        command("ip", &["-n", sw, "link", "add", "br0", "type", "bridge"])?;
        command("ip", &["-n", sw, "link", "set", "br0", "up"])?;
        for (index, ns) in self.nodes.iter().enumerate() {
            command("ip", &["netns", "add", ns])?;
            let port = format!("v{}", index + 1);
            command("ip", &["-n", sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns])?;
            command("ip", &["-n", sw, "link", "set", &port, "master", "br0", "up"])?;
            let address = format!("{}/24", self.node_address(index));
            command("ip", &["-n", ns, "addr", "add", &address, "dev", "eth0"])?;
            command("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
            command("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        let host = self.host_veth.as_str();
        command("ip", &["link", "add", host, "type", "veth", "peer", "name", "host", "netns", sw])?;
        command("ip", &["-n", sw, "link", "set", "host", "master", "br0", "up"])?;
        command("ip", &["addr", "add", &format!("{}/24", self.host_address()), "dev", host])?;
        command("ip", &["link", "set", host, "up"])?;
        self.nft(
            "add table bridge cohort\n\
                  add chain bridge cohort forward { type filter hook forward priority 0; policy accept; }\n",
        )
    }

    fn nft(&self, script: &str) -> Result<(), Error> {
        command_with_input("ip", &["netns", "exec", &self.switch, "nft", "-f", "-"], script)
    }

    /// Replace the partition rules with `cuts` (empty: heal).
    pub fn set_cuts(&self, cuts: &[Cut]) -> Result<(), Error> {
        let mut script = String::from("flush chain bridge cohort forward\n");
        for cut in cuts {
            debug_assert_ne!(cut.from, cut.to, "a node is never cut from itself");
            script.push_str(&format!(
                "add rule bridge cohort forward ip saddr {} ip daddr {} drop\n",
                self.node_address(cut.from),
                self.node_address(cut.to)
            ));
        }
        self.nft(&script)
    }

    /// The shell that cleans up if the harness dies without unwinding.
    fn spawn_watchdog(&self) -> Result<Child, Error> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {cleanup}",
            pid = std::process::id(),
            cleanup = self.cleanup_script()
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|error| Error::new(format!("cannot start the cleanup watchdog (sh): {error}")))
    }

    fn cleanup_script(&self) -> String {
        let mut script = String::new();
        for ns in self.nodes.iter().chain(std::iter::once(&self.switch)) {
            script.push_str(&format!(
                "ip netns pids {ns} 2>/dev/null | xargs -r kill -9; ip netns del {ns} 2>/dev/null; "
            ));
        }
        script.push_str(&format!("ip link del {} 2>/dev/null; true", self.host_veth));
        script
    }

    /// Kill every process left in the namespaces and delete them. Idempotent.
    pub fn cleanup(&mut self) {
        if self.cleaned {
            return;
        }
        self.cleaned = true;
        // Stop the watchdog first, so it can never delete a later run's
        // namespaces that reuse this run number.
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = Command::new("sh")
            .args(["-c", &self.cleanup_script()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.cleanup();
    }
}
