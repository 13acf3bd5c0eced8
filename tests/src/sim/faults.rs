//! The fault mix of a run, drawn from its seed (swarm testing), and its
//! injection tick by tick.
//!
//! Why swarm: a run in which every fault is on at a moderate rate rarely
//! lines up the few faults a bug needs, because the others keep getting in
//! the way (a crash of the node that held the only copy, a partition that
//! stops the traffic the bug needed). So each seed first picks a *profile*
//! (a family of faults: everything mixed, durability, or partitions), then
//! decides which kinds of fault it has at all, then how often each strikes;
//! some seeds crash nodes constantly on slow disks and nothing else, some
//! only cut links.
//! On top of the independent faults come the correlated ones real clusters
//! see: a power outage that takes a quorum (or every node) down at once,
//! with the flushes that were in flight torn; splits that leave no side a
//! quorum; single links that fail one way; and a *storm*, a long stretch of
//! the fault phase in which crashes, outages and partitions come ten times
//! as often on disks at their slowest. docs/simulator.md lists every fault
//! with its range.

use cohort_messages::GroupId;

use super::Sim;
use crate::disk::DiskFaults;
use crate::network::NetworkFaults;
use crate::rng::Rng;

/// D3: the chance per tick (per mille) that a node staging a streamed
/// state crashes, in runs with crashes and the kv state on disk.
const MID_TRANSFER_CRASH_PER_MILLE: u64 = 20;

/// How much more often crashes, outages and partitions strike in a storm.
const STORM_FACTOR: u64 = 10;
/// The slowest flush (ticks) of a storm.
const STORM_FLUSH_TICKS_MAX: u64 = 20;
/// D2: the slowest a node's apply worker hands a run back, in ticks: each
/// node of a `--state disk` run draws its own slowest, 0 to this.
const APPLY_LATENCY_MAX_TICKS: u64 = 8;
/// A full disk lasts up to this many ticks.
const DISK_FULL_TICKS_MAX: u64 = 300;
/// A full disk has up to this many bytes left when it fills.
const DISK_FULL_ROOM_BYTES_MAX: u64 = 16 * 1024;
/// A node whose start failed (its recovery met a disk fault) tries again after this long.
pub(super) const START_RETRY_TICKS: u64 = 20;

/// The family a seed's faults are drawn from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum FaultProfile {
    /// Every kind of fault, each on or off by the seed.
    #[default]
    Mixed,
    /// Power losses and outages of a quorum on slow disks, with the
    /// flushes in flight torn; failing and full disks; few network faults.
    Durability,
    /// Isolated nodes, splits, single failed links and pauses; few crashes.
    Partitions,
}

impl FaultProfile {
    /// Every profile.
    pub const ALL: [FaultProfile; 3] = [FaultProfile::Mixed, FaultProfile::Durability, FaultProfile::Partitions];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultProfile::Mixed => "mixed",
            FaultProfile::Durability => "durability",
            FaultProfile::Partitions => "partitions",
        }
    }

    /// The profile named `name`.
    pub fn from_name(name: &str) -> Option<FaultProfile> {
        FaultProfile::ALL.into_iter().find(|profile| profile.name() == name)
    }

    /// A seed's profile: mixed half of the time, each other a quarter. The
    /// metadata scenario never draws durability: its point is sessions that
    /// expire while a node is paused, and a durability seed's constant
    /// outages leave the metadata group without a quorum to expire them (run
    /// it with `--profile durability` to have both).
    pub fn draw(rng: &mut Rng, scenario: super::Scenario) -> FaultProfile {
        match rng.below(4) {
            0 | 1 => FaultProfile::Mixed,
            2 if scenario != super::Scenario::Metadata => FaultProfile::Durability,
            2 => FaultProfile::Mixed,
            _ => FaultProfile::Partitions,
        }
    }
}

/// Directed links cut until a tick (a partition, a split, a failed link):
/// their frames are dropped, or with `stall` held back and delivered when
/// the cut ends, as a TCP connection delivers what it queued through a
/// partition (stale by then: old views, old incarnations).
#[derive(Clone, Debug)]
pub(super) struct Cut {
    links: Vec<(usize, usize)>,
    until: u64,
    stall: bool,
}

/// Fault rates of a run (per mille per tick for node faults).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// The family the rates were drawn from.
    pub profile: FaultProfile,
    /// Network faults.
    pub network: NetworkFaults,
    /// Chance per tick that a random node crashes (and later restarts).
    pub crash_per_mille: u64,
    /// Chance per tick that a random node pauses longer than every timeout.
    pub pause_per_mille: u64,
    /// Chance per tick that a partition starts (symmetric or one-way).
    pub partition_per_mille: u64,
    /// Chance per tick that a random node's next disk write fails (it dies).
    pub disk_fail_per_mille: u64,
    /// Chance per tick that a random node's link to a random peer congests
    /// for a while (K4: Prepares to it are held back until it drains).
    pub congestion_per_mille: u64,
    /// Chance per tick that a random group's next superblock stage fails (R12).
    pub superblock_fail_per_mille: u64,
    /// Chance per tick that the power fails on a quorum of the nodes, or on
    /// every node, at once; each comes back after its own downtime.
    pub outage_per_mille: u64,
    /// Chance per tick that one link between two nodes fails, one way or
    /// both (the others keep working).
    pub link_cut_per_mille: u64,
    /// Chance per tick that the nodes split into two or three sides that
    /// hear only their own side (often no side holds a quorum).
    pub split_per_mille: u64,
    /// Of all network cuts, the share (per mille) that stall instead of
    /// drop: their frames arrive, stale, when the cut ends.
    pub stall_per_mille: u64,
    /// Of all crashes, the share (per mille) that are power losses, which
    /// lose and tear what was not synced; the rest are process crashes.
    pub power_loss_per_mille: u64,
    /// Each node's flushes take 1 to its own maximum ticks, drawn up to this
    /// (0 or 1: one tick).
    pub flush_latency_max_ticks: u64,
    /// Chance per tick that a random node's next sync fails (EIO; it dies).
    pub sync_fail_per_mille: u64,
    /// Chance per tick that a random node's disk fills up for a while.
    pub disk_full_per_mille: u64,
    /// Chance per start that one read of the recovery returns a flipped bit
    /// (the WAL must refuse to start; the node tries again later).
    pub corrupt_read_per_mille: u64,
    /// H1, H5: of all crashes, the share (per mille) after which the node's
    /// data is gone (a new disk, or one shard's directory emptied), while
    /// every other node runs with all its replicas holding their data: the
    /// group must then lose nothing it acknowledged.
    pub wipe_per_mille: u64,
    /// The storm: crashes, outages and partitions ten times as likely in
    /// ticks `start..end` of the fault phase, flushes at their slowest.
    pub storm: Option<(u64, u64)>,
}

/// A kind of fault is in a seed's mix with this chance (per mille).
fn enabled(rng: &mut Rng, per_mille: u64, low: u64, high: u64) -> u64 {
    if rng.chance(per_mille) { rng.range(low, high) } else { 0 }
}

impl Faults {
    /// A seed's mix in `profile` (see the module docs): each kind of fault
    /// on or off, then its rate. `fault_ticks` places the storm.
    pub fn draw(rng: &mut Rng, fault_ticks: u64, profile: FaultProfile) -> Faults {
        let mut faults = match profile {
            FaultProfile::Mixed => Faults::mixed(rng),
            FaultProfile::Durability => Faults::durability(rng),
            FaultProfile::Partitions => Faults::partitions(rng),
        };
        faults.profile = profile;
        let storm_per_mille = if profile == FaultProfile::Durability { 600 } else { 400 };
        faults.storm = rng.chance(storm_per_mille).then(|| {
            let start = rng.below(fault_ticks.max(1));
            (start, start + rng.range(200, 600))
        });
        faults
    }

    fn mixed(rng: &mut Rng) -> Faults {
        Faults {
            network: NetworkFaults {
                loss_per_mille: enabled(rng, 750, 1, 300),
                duplicate_per_mille: enabled(rng, 600, 1, 50),
                corrupt_per_mille: enabled(rng, 500, 1, 5),
                delay_max_ticks: enabled(rng, 750, 1, 4),
            },
            crash_per_mille: enabled(rng, 700, 1, 5),
            pause_per_mille: enabled(rng, 500, 1, 2),
            partition_per_mille: enabled(rng, 600, 1, 5),
            disk_fail_per_mille: enabled(rng, 300, 1, 1),
            superblock_fail_per_mille: enabled(rng, 500, 1, 5),
            congestion_per_mille: enabled(rng, 500, 1, 8),
            outage_per_mille: enabled(rng, 400, 1, 2),
            link_cut_per_mille: enabled(rng, 400, 1, 4),
            split_per_mille: enabled(rng, 300, 1, 2),
            stall_per_mille: enabled(rng, 500, 100, 1000),
            power_loss_per_mille: rng.range(0, 1000),
            flush_latency_max_ticks: if rng.chance(500) { rng.range(2, 30) } else { 1 },
            sync_fail_per_mille: enabled(rng, 300, 1, 1),
            disk_full_per_mille: enabled(rng, 300, 1, 2),
            corrupt_read_per_mille: enabled(rng, 300, 100, 500),
            wipe_per_mille: enabled(rng, 300, 50, 400),
            ..Faults::default()
        }
    }

    fn durability(rng: &mut Rng) -> Faults {
        Faults {
            network: NetworkFaults {
                loss_per_mille: enabled(rng, 500, 1, 50),
                duplicate_per_mille: enabled(rng, 300, 1, 20),
                corrupt_per_mille: 0,
                delay_max_ticks: enabled(rng, 500, 1, 2),
            },
            crash_per_mille: rng.range(2, 8),
            pause_per_mille: enabled(rng, 300, 1, 1),
            partition_per_mille: enabled(rng, 500, 1, 3),
            disk_fail_per_mille: enabled(rng, 500, 1, 2),
            superblock_fail_per_mille: enabled(rng, 300, 1, 3),
            congestion_per_mille: 0,
            outage_per_mille: rng.range(1, 4),
            link_cut_per_mille: enabled(rng, 300, 1, 2),
            split_per_mille: enabled(rng, 500, 1, 2),
            stall_per_mille: enabled(rng, 300, 100, 1000),
            power_loss_per_mille: rng.range(700, 1000),
            flush_latency_max_ticks: rng.range(5, 30),
            sync_fail_per_mille: enabled(rng, 500, 1, 2),
            disk_full_per_mille: enabled(rng, 500, 1, 3),
            corrupt_read_per_mille: enabled(rng, 500, 100, 500),
            wipe_per_mille: enabled(rng, 500, 100, 600),
            ..Faults::default()
        }
    }

    fn partitions(rng: &mut Rng) -> Faults {
        Faults {
            network: NetworkFaults {
                loss_per_mille: enabled(rng, 300, 1, 100),
                duplicate_per_mille: enabled(rng, 500, 1, 50),
                corrupt_per_mille: enabled(rng, 300, 1, 3),
                delay_max_ticks: enabled(rng, 750, 1, 4),
            },
            crash_per_mille: enabled(rng, 500, 1, 2),
            pause_per_mille: enabled(rng, 600, 1, 3),
            partition_per_mille: rng.range(1, 6),
            disk_fail_per_mille: 0,
            superblock_fail_per_mille: enabled(rng, 300, 1, 3),
            congestion_per_mille: enabled(rng, 500, 1, 8),
            outage_per_mille: enabled(rng, 200, 1, 1),
            link_cut_per_mille: rng.range(2, 8),
            split_per_mille: enabled(rng, 600, 1, 3),
            stall_per_mille: enabled(rng, 700, 100, 1000),
            power_loss_per_mille: rng.range(0, 1000),
            flush_latency_max_ticks: if rng.chance(500) { rng.range(2, 10) } else { 1 },
            ..Faults::default()
        }
    }

    /// True if tick `now` is in the storm.
    pub fn in_storm(&self, now: u64) -> bool {
        self.storm.is_some_and(|(start, end)| (start..end).contains(&now))
    }
}

impl Sim {
    /// Each node's slowest flush, drawn once per run.
    pub(super) fn draw_flush_latencies(&mut self) {
        let max = self.faults.flush_latency_max_ticks.max(1);
        for node in &mut self.nodes {
            let slowest = self.rng.range(1, max);
            node.flush_latency_ticks = (1, slowest);
        }
    }

    /// D2: each node's slowest apply worker, drawn once per run with the
    /// state on disk (where runs are lent); the runs of the state in
    /// memory draw nothing, so they stay as they were.
    pub(super) fn draw_apply_latencies(&mut self) {
        if self.config.state != crate::storage::StateKind::Disk {
            return;
        }
        for node in &mut self.nodes {
            let slowest = self.rng.range(0, APPLY_LATENCY_MAX_TICKS);
            node.apply_latency_ticks = (0, slowest);
        }
    }

    /// The node dies (a crash fault, or its storage failed) and restarts
    /// after 20 to 200 ticks.
    pub(super) fn kill(&mut self, index: usize, _why: &str) {
        let until = self.now + self.rng.range(20, 200);
        let power_loss = self.rng.chance(self.faults.power_loss_per_mille);
        self.take_down(index, until, power_loss);
    }

    /// Node `index` goes down until `until`, with a power loss or a process crash.
    pub(super) fn take_down(&mut self, index: usize, until: u64, power_loss: bool) {
        self.collect_applies(index);
        self.retire_agent(index);
        self.checkers.crashed(index);
        // Its links' congestion is gone with its process (a new one starts drained).
        self.congested.retain(|entry| entry.0 != index);
        self.nodes[index].crash(until, power_loss);
        self.crashes += 1;
        if self.faults.wipe_per_mille > 0 && self.rng.chance(self.faults.wipe_per_mille) && self.may_wipe(index) {
            // A new disk, one shard's directory emptied, or (H2) one
            // shard's newest segment cut, a third of the time each; with
            // the kv state on disk (D1), also the state machines'
            // checkpoints lost, a quarter of the time each.
            let shard = self.rng.below(self.nodes[index].shard_count() as u64) as usize;
            let ways = if self.nodes[index].state_kind() == crate::storage::StateKind::Disk { 4 } else { 3 };
            let cut = match self.rng.below(ways) {
                0 => false,
                1 => {
                    self.nodes[index].wipe(Some(shard));
                    true
                }
                2 => self.nodes[index].cut_newest_segment(shard, &mut self.rng),
                _ => self.nodes[index].wipe_state(),
            };
            if !cut {
                self.nodes[index].wipe(None);
            }
            self.nodes[index].lost_data = true;
            self.wipes += 1;
            // The machine went down with its disk: what its old process
            // sent and the network still holds (a stalled link) is gone
            // with its connections' buffers. Election messages of that
            // process, delivered after its data went, would count promises
            // the rebuilt member no longer keeps (seed 2000400: a stale
            // DoViewChange for view 2 elected a log without an op the
            // rebuilt member then acknowledged in view 1).
            self.network.drop_from(crate::network::Endpoint::Node(index));
        }
    }

    /// H5: a node's data may go only while every other node runs, and
    /// fewer than `min(Qr, Qv) − 1` other nodes are still without data
    /// they held (their disk went and some replica of theirs has not yet
    /// durably taken its primary's log back; a recovery that ended only in
    /// memory starts again after a crash). Beyond that, losing a write is
    /// allowed to any replication scheme: every node that acknowledged it
    /// may be among them. Members that recover without ever having held
    /// data (a new group's, a first flush lost) do not count: they are the
    /// case the ballot of a recovering member exists for.
    fn may_wipe(&mut self, index: usize) -> bool {
        // Not yet where the metadata places and moves replicas (metadata,
        // reconfigure): a wiped node there re-hosts what its agent learns,
        // which the simulator does not model yet (see docs/simulator.md).
        if self.config.scenario != super::Scenario::Default {
            return false;
        }
        let quorums = self.specs[0].quorums;
        let tolerated = quorums.replication.min(quorums.view_change).saturating_sub(1);
        let mut without_data = 0;
        for other in (0..self.nodes.len()).filter(|other| *other != index) {
            let node = &mut self.nodes[other];
            if !node.is_up() {
                return false;
            }
            if node.lost_data && node.replicas().all(|replica| !replica.recovering_durably()) {
                node.lost_data = false;
            }
            without_data += usize::from(node.lost_data);
        }
        without_data < tolerated
    }

    pub(super) fn inject_faults(&mut self) {
        let nodes = self.nodes.len() as u64;
        let storm = self.faults.in_storm(self.now);
        let factor = if storm { STORM_FACTOR } else { 1 };
        let scaled = |per_mille: u64| (per_mille * factor).min(1000);
        self.set_storm_latency(storm);
        if self.rng.chance(scaled(self.faults.crash_per_mille)) {
            let index = self.rng.below(nodes) as usize;
            if self.nodes[index].is_up() {
                self.kill(index, "crash fault");
            }
        }
        if self.faults.crash_per_mille > 0 && self.config.state == crate::storage::StateKind::Disk {
            // D3: a node that stages a streamed state crashes mid-transfer
            // now and then; after its restart the transfer resumes.
            for index in 0..self.nodes.len() {
                if self.nodes[index].is_up()
                    && self.nodes[index].staging_a_stream()
                    && self.rng.chance(MID_TRANSFER_CRASH_PER_MILLE)
                {
                    self.kill(index, "crash mid-transfer");
                }
            }
        }
        if self.rng.chance(scaled(self.faults.outage_per_mille)) {
            self.outage();
        }
        if self.rng.chance(self.faults.pause_per_mille) {
            let index = self.rng.below(nodes) as usize;
            let longest = self.config.core.timing.idle_timeout_effective_ticks();
            self.nodes[index].paused_until = self.now + longest + self.rng.range(10, 100);
        }
        self.inject_partitions(
            scaled(self.faults.partition_per_mille),
            scaled(self.faults.split_per_mille),
            scaled(self.faults.link_cut_per_mille),
        );
        self.inject_disk_faults();
        if self.rng.chance(self.faults.superblock_fail_per_mille) {
            let index = self.rng.below(nodes) as usize;
            let group = GroupId(self.rng.below(self.specs.len() as u64));
            self.nodes[index].fail_next_superblock_stage(group);
        }
        if self.rng.chance(self.faults.congestion_per_mille) && nodes > 1 {
            let index = self.rng.below(nodes) as usize;
            let peer = (index + 1 + self.rng.below(nodes - 1) as usize) % nodes as usize;
            let shard = self.rng.below(self.nodes[index].shard_count() as u64) as usize;
            let until = self.now + self.rng.range(5, 150);
            // The shard's driver reads it from the link at its next turn's end.
            if self.nodes[index].is_up() {
                self.congested.push((index, shard, peer, until));
            }
        }
    }

    /// The power fails on a quorum of the nodes (or on all of them) at once;
    /// each restarts after a downtime of its own, so they come back in any
    /// order.
    fn outage(&mut self) {
        let nodes = self.nodes.len();
        let count = if self.rng.chance(500) { nodes } else { nodes / 2 + 1 };
        let mut order: Vec<usize> = (0..nodes).collect();
        for i in (1..nodes).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        for &index in &order[..count] {
            if self.nodes[index].is_up() {
                // Some come back at once, some much later: the order decides
                // which logs the next view change sees.
                let until = self.now + self.rng.range(20, 600);
                self.take_down(index, until, true);
            }
        }
    }

    /// New network faults, each cutting links until its own end: one node
    /// cut off (symmetric, or one-way: it sends but hears nothing), a split
    /// into two or three sides, one failed link (one way or both). Each cut
    /// drops its frames or stalls them. The links blocked or stalled are
    /// those of every cut in force.
    fn inject_partitions(&mut self, partition_per_mille: u64, split_per_mille: u64, link_cut_per_mille: u64) {
        let nodes = self.nodes.len();
        let now = self.now;
        let before = self.cuts.len();
        self.cuts.retain(|cut| cut.until > now);
        let mut changed = self.cuts.len() != before;
        if self.rng.chance(partition_per_mille) {
            let a = self.rng.below(nodes as u64) as usize;
            let one_way = self.rng.chance(500);
            let mut links = Vec::new();
            for b in (0..nodes).filter(|b| *b != a) {
                links.push((b, a));
                if !one_way {
                    links.push((a, b));
                }
            }
            let until = now + self.rng.range(20, 300);
            let stall = self.rng.chance(self.faults.stall_per_mille);
            self.cuts.push(Cut { links, until, stall });
            changed = true;
        }
        if self.rng.chance(split_per_mille) {
            let sides = self.rng.range(2, 3);
            let side: Vec<u64> = (0..nodes).map(|_| self.rng.below(sides)).collect();
            let mut links = Vec::new();
            for a in 0..nodes {
                links.extend((0..nodes).filter(|b| side[*b] != side[a]).map(|b| (a, b)));
            }
            let until = now + self.rng.range(20, 300);
            let stall = self.rng.chance(self.faults.stall_per_mille);
            self.cuts.push(Cut { links, until, stall });
            changed = true;
        }
        if self.rng.chance(link_cut_per_mille) && nodes > 1 {
            let a = self.rng.below(nodes as u64) as usize;
            let b = (a + 1 + self.rng.below(nodes as u64 - 1) as usize) % nodes;
            let mut links = vec![(a, b)];
            if self.rng.chance(500) {
                links.push((b, a));
            }
            let until = now + self.rng.range(20, 600);
            let stall = self.rng.chance(self.faults.stall_per_mille);
            self.cuts.push(Cut { links, until, stall });
            changed = true;
        }
        if changed {
            let dropped = self.cuts.iter().filter(|cut| !cut.stall);
            self.network.blocked = dropped.flat_map(|cut| cut.links.iter().copied()).collect();
            self.network.stalled.clear();
            for cut in self.cuts.iter().filter(|cut| cut.stall) {
                for link in &cut.links {
                    let until = self.network.stalled.entry(*link).or_default();
                    *until = (*until).max(cut.until);
                }
            }
        }
    }

    /// Failed writes and syncs, disks that fill up and free up again.
    fn inject_disk_faults(&mut self) {
        let nodes = self.nodes.len() as u64;
        if self.rng.chance(self.faults.disk_fail_per_mille) {
            let index = self.rng.below(nodes) as usize;
            self.nodes[index].fail_next_write();
        }
        if self.rng.chance(self.faults.sync_fail_per_mille) {
            let index = self.rng.below(nodes) as usize;
            let disk = &self.nodes[index].disk;
            disk.set_faults(DiskFaults { sync_failures: disk.faults().sync_failures + 1, ..disk.faults() });
        }
        if self.rng.chance(self.faults.disk_full_per_mille) {
            let index = self.rng.below(nodes) as usize;
            let disk = &self.nodes[index].disk;
            let capacity = disk.used_bytes() + self.rng.below(DISK_FULL_ROOM_BYTES_MAX);
            disk.set_faults(DiskFaults { capacity_bytes: Some(capacity), ..disk.faults() });
            let until = self.now + self.rng.range(20, DISK_FULL_TICKS_MAX);
            self.disks_full.push((index, until));
        }
        let now = self.now;
        let (over, full): (Vec<_>, Vec<_>) = self.disks_full.drain(..).partition(|(_, until)| *until <= now);
        self.disks_full = full;
        for (index, _) in over {
            if !self.disks_full.iter().any(|(other, _)| *other == index) {
                let disk = &self.nodes[index].disk;
                disk.set_faults(DiskFaults { capacity_bytes: None, ..disk.faults() });
            }
        }
    }

    /// In a storm every disk is at its slowest; after it, back to normal.
    fn set_storm_latency(&mut self, storm: bool) {
        if storm == self.storming {
            return;
        }
        self.storming = storm;
        let max = self.faults.flush_latency_max_ticks.max(1);
        for node in &mut self.nodes {
            let slowest = if storm { STORM_FLUSH_TICKS_MAX.max(max) } else { self.rng.range(1, max) };
            node.flush_latency_ticks = (1, slowest);
        }
    }

    /// Arm a corrupt read for node `index`'s next start, if the seed says so.
    pub(super) fn arm_corrupt_read(&mut self, index: usize) {
        if !self.healed && self.rng.chance(self.faults.corrupt_read_per_mille) {
            let disk = &self.nodes[index].disk;
            disk.set_faults(DiskFaults { corrupt_next_read: true, ..disk.faults() });
        }
    }

    /// Heal the disks and the network: no fault stays armed, every disk has
    /// room again and flushes in one tick, no link is cut.
    pub(super) fn heal_disks_and_links(&mut self) {
        self.cuts.clear();
        self.network.blocked.clear();
        self.network.stalled.clear();
        self.disks_full.clear();
        for node in &mut self.nodes {
            node.disk.set_faults(DiskFaults::default());
            node.flush_latency_ticks = (1, 1);
        }
    }

    /// K4, for hand-written scenarios: node `index`'s links to `peer` (on
    /// every shard) are congested until tick `until`; each shard's driver
    /// reads it at its next turn's end.
    pub fn congest_links(&mut self, index: usize, peer: usize, until: u64) {
        for shard in 0..self.nodes[index].shard_count() {
            self.congested.retain(|entry| (entry.0, entry.1, entry.2) != (index, shard, peer));
            self.congested.push((index, shard, peer, until));
        }
    }

    /// K4: links whose congestion is over drain; at its turn's end the
    /// shard's driver tells the core, and the primaries on that shard send
    /// what they held back.
    pub(super) fn drain_congested_links(&mut self) {
        let now = self.now;
        let (due, pending): (Vec<_>, Vec<_>) = self.congested.drain(..).partition(|entry| entry.3 <= now);
        self.congested = pending;
        for (index, ..) in due {
            if self.nodes[index].is_up() {
                self.drain(index);
            }
        }
    }
}
