//! The families computed when Prometheus scrapes rather than counted as
//! things happen: the process's CPU, memory, threads and file descriptors,
//! the free space of the data directory's filesystem, and what this node's
//! copy of the metadata says (epochs, frozen, groups and primaries per
//! node, groups without a primary) with whether the node holds a session.
//!
//! Why at scrape time: each is a reading of state that already exists (the
//! kernel's, the metadata copy the admin port renders `/status` from), so
//! reading it when asked costs nothing between scrapes and is never stale;
//! keeping gauges in step on every apply would put work on the data path.
//! The metadata families need the node's status board and data directory,
//! which exist only once the node has started: until
//! [`NodeMetrics::watch_node`](crate::NodeMetrics::watch_node) hands them
//! over, only the process families are exported.
//!
//! Label cardinality: `node` is one of the cluster's nodes, as the
//! metadata lists them (a handful, never a group or client).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cohort_core::metadata::{Metadata, primaries_per_node};
use cohort_messages::{GroupId, NodeId};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use crate::process_stats::{DiskSpace, ProcessStats};
use crate::status::StatusBoard;

/// What the metadata and disk families read, once the node has started.
#[derive(Debug)]
pub(crate) struct NodeSources {
    /// The node's status board: its agent's session and its metadata copy.
    pub(crate) board: Arc<StatusBoard>,
    /// The node's data directory (its filesystem's free space is exported).
    pub(crate) data_dir: PathBuf,
}

/// The collector registered once in the node's registry.
#[derive(Debug, Default)]
pub(crate) struct Scraped {
    pub(crate) sources: Arc<OnceLock<NodeSources>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: u64,
}

/// The metadata figures of one scrape, read under the metadata lock and
/// encoded after it is released.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct MetadataFigures {
    pub(crate) epoch: u64,
    pub(crate) config_epoch: u64,
    /// The epoch this node acked, as the metadata recorded it (0 before the
    /// node registered).
    pub(crate) acked_epoch: u64,
    pub(crate) frozen: bool,
    /// Live groups with a replica (member or learner) on each node; every
    /// node the metadata lists, at 0 if it hosts none.
    pub(crate) groups: BTreeMap<NodeId, u64>,
    /// Live groups each node leads, as the owner records say; every node
    /// the metadata lists, at 0 if it leads none.
    pub(crate) primaries: BTreeMap<NodeId, u64>,
    /// Live groups with no owner record.
    pub(crate) groups_without_primary: u64,
}

impl MetadataFigures {
    /// The figures of `metadata`, as node `node` reports them. The metadata
    /// group's own record is left out, as in `/status`.
    pub(crate) fn of(metadata: &Metadata, node: NodeId) -> MetadataFigures {
        let mut groups: BTreeMap<NodeId, u64> = metadata.nodes.keys().map(|node| (*node, 0)).collect();
        let mut primaries = groups.clone();
        let mut groups_without_primary = 0;
        for (id, record) in &metadata.groups {
            if *id == GroupId::METADATA || !record.live {
                continue;
            }
            for replica in record.members.iter().chain(&record.learners) {
                *groups.entry(*replica).or_default() += 1;
            }
            if record.owner.is_none() {
                groups_without_primary += 1;
            }
        }
        for (leader, count) in primaries_per_node(metadata) {
            primaries.insert(leader, count as u64);
        }
        MetadataFigures {
            epoch: metadata.epoch.0,
            config_epoch: metadata.config_epoch.0,
            acked_epoch: metadata.nodes.get(&node).map_or(0, |record| record.acked.0),
            frozen: metadata.frozen.is_some(),
            groups,
            primaries,
            groups_without_primary,
        }
    }
}

/// One gauge without labels.
fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<&Unit>, value: u64) -> std::fmt::Result {
    let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    gauge.encode(encoder.encode_descriptor(name, help, unit, gauge.metric_type())?)
}

/// One gauge with a series per node.
fn gauge_per_node(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: &BTreeMap<NodeId, u64>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, ConstGauge::new(0i64).metric_type())?;
    for (node, value) in values {
        let gauge = ConstGauge::new(i64::try_from(*value).unwrap_or(i64::MAX));
        let labels = NodeLabels { node: node.0 };
        gauge.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn encode_process(encoder: &mut DescriptorEncoder) -> std::fmt::Result {
    let stats = ProcessStats::read();
    if let Some(stat) = stats.stat {
        let cpu = ConstCounter::new(stat.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "CPU time this node's process has used, user and system together.",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        gauge(encoder, "process_threads", "Threads of this node's process.", None, stat.threads)?;
    }
    if let Some(bytes) = stats.resident_memory_bytes {
        let help = "Memory of this node's process that is in RAM now (resident set size).";
        gauge(encoder, "process_resident_memory", help, Some(&Unit::Bytes), bytes)?;
    }
    if let Some(fds) = stats.open_fds {
        gauge(encoder, "process_open_fds", "File descriptors this node's process has open.", None, fds)?;
    }
    if let Some(fds) = stats.max_fds {
        let help = "The most file descriptors this node's process may open (its soft limit).";
        gauge(encoder, "process_max_fds", help, None, fds)?;
    }
    Ok(())
}

fn encode_node(encoder: &mut DescriptorEncoder, sources: &NodeSources) -> std::fmt::Result {
    if let Some(space) = DiskSpace::of(&sources.data_dir) {
        let help = "Bytes this node may still write on the filesystem that holds its data directory.";
        gauge(encoder, "disk_free", help, Some(&Unit::Bytes), space.free_bytes)?;
        let help = "Size of the filesystem that holds this node's data directory.";
        gauge(encoder, "disk_size", help, Some(&Unit::Bytes), space.size_bytes)?;
    }
    let board = &sources.board;
    let held = board.agent().session.is_some();
    gauge(
        encoder,
        "session_held",
        "1 while this node holds a live session with the metadata, else 0.",
        None,
        held as u64,
    )?;
    let figures = board.metadata().with(|metadata| MetadataFigures::of(metadata, board.node()));
    let help = "Epoch of the last metadata command this node's copy of the metadata applied.";
    gauge(encoder, "metadata_epoch", help, None, figures.epoch)?;
    let help =
        "Epoch of the last change to nodes, sessions or groups in this node's copy: what every node must acknowledge.";
    gauge(encoder, "metadata_config_epoch", help, None, figures.config_epoch)?;
    let help = "Epoch this node last acknowledged applying, as the metadata recorded it.";
    gauge(encoder, "metadata_acked_epoch", help, None, figures.acked_epoch)?;
    let help = "1 while the metadata is frozen for an upgrade (operator changes are refused), else 0.";
    gauge(encoder, "metadata_frozen", help, None, figures.frozen as u64)?;
    let help = "Live groups with a replica on each node, as this node's copy of the metadata places them.";
    gauge_per_node(encoder, "metadata_groups", help, &figures.groups)?;
    let help = "Live groups each node is primary of, as their last ownership reports say.";
    gauge_per_node(encoder, "metadata_primaries", help, &figures.primaries)?;
    let help = "Live groups for which no node has reported being primary.";
    gauge(encoder, "metadata_groups_without_primary", help, None, figures.groups_without_primary)
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        encode_process(&mut encoder)?;
        match self.sources.get() {
            Some(sources) => encode_node(&mut encoder, sources),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use cohort_core::metadata::{GroupRecord, NodeRecord, Ownership};
    use std::collections::BTreeSet;

    use cohort_messages::replication::Replication;
    use cohort_messages::{Epoch, Incarnation, SessionId, View};

    use super::*;

    fn node(acked: u64, session: bool) -> NodeRecord {
        NodeRecord { address: String::new(), session: session.then_some(SessionId(1)), acked: Epoch(acked) }
    }

    fn group(members: &[u64], learners: &[u64], owner: Option<u64>, live: bool) -> GroupRecord {
        GroupRecord {
            kind: "default".into(),
            incarnation: Incarnation(1),
            members: members.iter().map(|id| NodeId(*id)).collect(),
            learners: learners.iter().map(|id| NodeId(*id)).collect(),
            replication: Replication::default(),
            caught_up: BTreeSet::new(),
            pending: None,
            live,
            owner: owner.map(|id| Ownership { node: NodeId(id), view: View(1), session: SessionId(1) }),
            owner_view_max: View(1),
            created: Incarnation(1),
            transfer: None,
        }
    }

    #[test]
    fn o2_metadata_figures_count_live_groups_per_node_and_those_without_a_primary() {
        let metadata = Metadata {
            epoch: Epoch(40),
            config_epoch: Epoch(31),
            nodes: [(NodeId(1), node(31, true)), (NodeId(2), node(29, true)), (NodeId(3), node(0, false))].into(),
            groups: [
                (GroupId::METADATA, group(&[1, 2, 3], &[], Some(1), true)),
                (GroupId(1), group(&[1, 2, 3], &[], Some(1), true)),
                (GroupId(2), group(&[1, 2], &[3], Some(2), true)),
                (GroupId(3), group(&[2, 3], &[], None, true)),
                (GroupId(4), group(&[1, 2, 3], &[], Some(1), false)),
            ]
            .into(),
            ..Metadata::default()
        };
        let figures = MetadataFigures::of(&metadata, NodeId(2));
        let per_node = |values: [u64; 3]| (1..=3).map(NodeId).zip(values).collect::<BTreeMap<_, _>>();
        assert_eq!(
            figures,
            MetadataFigures {
                epoch: 40,
                config_epoch: 31,
                acked_epoch: 29,
                frozen: false,
                groups: per_node([2, 3, 3]),
                primaries: per_node([1, 1, 0]),
                groups_without_primary: 1,
            }
        );
        assert_eq!(MetadataFigures::of(&metadata, NodeId(9)).acked_epoch, 0, "an unregistered node acked nothing");
    }
}
