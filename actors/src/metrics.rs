//! The node's Prometheus metrics: one registry that every actor of the node
//! writes to and the admin server encodes on each scrape.
//!
//! The core does no I/O and knows nothing of Prometheus: each shard keeps its
//! counters as plain totals ([`ShardMetrics`]) and its heartbeat states as a
//! count of groups ([`HeartbeatGauges`]); a peer link keeps its rejected input
//! as [`RejectCounters`]. This module turns those snapshots into exported
//! families, and adds what only the runtime sees: frames dropped on a full
//! mailbox or a missing link, connected peers, and commit latency.
//!
//! # Why snapshots become deltas
//!
//! The core's counters are totals since *that core* started, while an exported
//! counter must never go backwards for as long as the process lives (a scrape
//! that saw 10 must never later see 7). So [`NodeMetrics`] remembers the last
//! snapshot it applied per shard (and per reject source) and adds only the
//! difference to a [`Counter`]:
//!
//! - applying the same snapshot twice adds nothing, so callers may publish
//!   whenever they like (every tick, or on a timer);
//! - a snapshot in which any counter went *down* means the source was
//!   re-created (a supervisor restarted the shard, a link reconnected with new
//!   counters): the whole snapshot is then counted as new, as the source
//!   started again from zero.
//!
//! A `ConstCounter` collector that re-exports the latest snapshot would be
//! simpler, but it would export the source's reset as a counter reset of the
//! whole node and lose what the old source had counted; the delta approach
//! keeps node totals exact across restarts.
//!
//! # Label cardinality
//!
//! Every label has a bounded set of values: `shard` is below the configured
//! shard count, `state` and `reason` are enums, `level` has three values and
//! `kind` comes from the `kind()` of the wire crate's error types (static
//! strings). No label carries a group id, peer address or other value that
//! grows with traffic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use cohort_core::{HeartbeatGauges, ShardMetrics};
use cohort_messages::{RejectCounters, ReplyError, RequestKind};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::scraped::{NodeSources, Scraped};
use crate::status::StatusBoard;

/// Prefix of every family this node exports.
pub(crate) const METRIC_PREFIX: &str = "cohort";

/// The version `cohort_build_info` reports: the workspace's.
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git revision `cohort_build_info` reports: the commit the node was
/// built from, `COHORT_GIT_REVISION` if the builder set it, or `unknown`
/// (see `actors/build.rs`).
pub const BUILD_REVISION: &str = env!("COHORT_GIT_REVISION");

/// What a client asked of the client port beyond a request's kind (read,
/// write, batch of writes): the last `kind` of `cohort_client_requests_total`.
const ROUTE_QUERY_KIND: &str = "route_query";

/// Upper bounds (seconds) of the commit latency histogram's buckets, in a
/// 1-2-5 series from 100 µs (a loopback round trip plus one group-committed
/// `fdatasync`) to 10 s (several view changes in a row). The overflow bucket
/// `+Inf` is implicit.
pub(crate) const COMMIT_LATENCY_BUCKETS_SECONDS: [f64; 16] =
    [0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// Upper bounds (seconds) of the apply latency histogram's buckets: one
/// state machine `apply` call, in a 1-2-5 series from 1 µs (a register
/// write) to 1 s (a state machine that does I/O, which it should not).
pub(crate) const APPLY_LATENCY_BUCKETS_SECONDS: [f64; 19] = [
    0.000001, 0.000002, 0.000005, 0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
    0.05, 0.1, 0.2, 0.5, 1.0,
];

/// How many counters a [`ShardMetrics`] holds; one exported family each.
const SHARD_COUNTER_COUNT: usize = 36;

/// Name (without prefix and without the `_total` the encoder appends) and help
/// of each exported shard counter, in the order of [`shard_counter_values`].
const SHARD_COUNTER_SPECS: [(&str, &str); SHARD_COUNTER_COUNT] = [
    ("commit_batches_sent", "Commit batch frames sent to peers"),
    ("commit_entries_sent", "Commit entries sent to peers, in those frames"),
    ("commit_batches_received", "Commit batch frames received from peers"),
    ("commit_entries_received", "Commit entries received, good and bad"),
    ("commit_entries_rejected", "Commit entries rejected alone as bad (the rest of their batch was used)"),
    ("reply_batches_sent", "CommitReply batch frames sent"),
    ("reply_entries_sent", "CommitReply entries sent"),
    ("reply_batches_received", "CommitReply batch frames received"),
    ("reply_entries_received", "CommitReply entries received, good and bad"),
    ("reply_entries_rejected", "CommitReply entries rejected alone as bad"),
    ("commit_batches_unconnected", "Commit batches handed to a peer link that was not connected"),
    ("primaries_started", "Views in which a member of the shard became primary"),
    ("view_changes_started", "View changes started by members of the shard"),
    ("prepares_held_back", "Prepares not sent to a peer whose link was congested (sent again once it drains)"),
    (
        "primary_transfers_started",
        "Directed view changes a primary of the shard started to hand its group to a chosen member",
    ),
    (
        "pair_heartbeats_sent",
        "Shard-pair heartbeats sent, each standing in for the Commits of every group quiesced for its peer",
    ),
    ("pair_replies_sent", "Shard-pair heartbeat replies sent"),
    ("quiesced", "Group members quiesced (a primary's group for one peer, once the peer accepted)"),
    ("quiet_woken", "Quiesced group members woken, on either end"),
    ("quiet_mismatches", "Shard-pair digests that did not match (every group quiesced between the pair woke)"),
    (
        "start_views_withheld",
        "StartViews not sent in answer to a member's election message, one having gone to it within a repair timeout",
    ),
    (
        "recoveries_founded",
        "Members created without data that started their group as new: every voter answered that it holds nothing (H1)",
    ),
    (
        "recoveries_done",
        "Members created without data that took their primary's log before voting or acknowledging anything (H1)",
    ),
    (
        "checkpoints_failed",
        "Checkpoints a state machine that keeps its state on disk failed to take; the group's log stays until one succeeds (D1)",
    ),
    (
        "state_transfer_failures",
        "Streamed state transfers a state machine failed to export, stage or install; each starts again (D3)",
    ),
    ("state_chunks_sent", "State transfer chunks sent to lagging members (D3)"),
    ("state_chunk_bytes_sent", "Bytes of state transfer chunks sent to lagging members (D3)"),
    (
        "state_chunk_bytes_resent",
        "Bytes of streamed state chunks sent again, below what their stream had already sent (D3)",
    ),
    (
        "state_chunk_bytes_taken",
        "Bytes of state transfer chunks this node's replicas took, each byte of a transfer once (D3)",
    ),
    ("state_streams_opened", "Streams of a checkpoint opened to serve state transfers (D3)"),
    ("state_streams_installed", "Streamed state transfers installed by this node's replicas (D3)"),
    (
        "backlog_bytes_served",
        "Bytes of operations primaries sent lagging members from the entries their snapshots dropped, instead of a state transfer (D1)",
    ),
    ("apply_runs_lent", "Runs of committed ops lent with their state machine to the shard's apply worker (D2)"),
    (
        "state_chunks_lent",
        "Chunks of streamed state transfers lent with their state machine to the shard's apply worker to be staged (D3)",
    ),
    (
        "apply_runs_unknown",
        "Runs that came back from the apply worker for no run the shard lent; the state machine is dropped (D2)",
    ),
    (
        "requests_waited_for_state",
        "Reads and writes that waited for their group's state machine to come back from the apply worker (D2)",
    ),
];

/// The counters of `metrics` in the order of [`SHARD_COUNTER_SPECS`].
///
/// The destructuring names every field, so a counter added to
/// [`ShardMetrics`] does not compile until it is exported here too.
fn shard_counter_values(metrics: &ShardMetrics) -> [u64; SHARD_COUNTER_COUNT] {
    let ShardMetrics {
        commit_batches_sent,
        commit_entries_sent,
        commit_batches_received,
        commit_entries_received,
        commit_entries_rejected,
        reply_batches_sent,
        reply_entries_sent,
        reply_batches_received,
        reply_entries_received,
        reply_entries_rejected,
        commit_batches_unconnected,
        primaries_started,
        view_changes_started,
        prepares_held_back,
        primary_transfers_started,
        pair_heartbeats_sent,
        pair_replies_sent,
        quiesced,
        quiet_woken,
        quiet_mismatches,
        start_views_withheld,
        recoveries_founded,
        recoveries_done,
        checkpoints_failed,
        state_transfer_failures,
        state_chunks_sent,
        state_chunk_bytes_sent,
        state_chunk_bytes_resent,
        state_chunk_bytes_taken,
        state_streams_opened,
        state_streams_installed,
        backlog_bytes_served,
        apply_runs_lent,
        state_chunks_lent,
        apply_runs_unknown,
        requests_waited_for_state,
    } = *metrics;
    [
        commit_batches_sent,
        commit_entries_sent,
        commit_batches_received,
        commit_entries_received,
        commit_entries_rejected,
        reply_batches_sent,
        reply_entries_sent,
        reply_batches_received,
        reply_entries_received,
        reply_entries_rejected,
        commit_batches_unconnected,
        primaries_started,
        view_changes_started,
        prepares_held_back,
        primary_transfers_started,
        pair_heartbeats_sent,
        pair_replies_sent,
        quiesced,
        quiet_woken,
        quiet_mismatches,
        start_views_withheld,
        recoveries_founded,
        recoveries_done,
        checkpoints_failed,
        state_transfer_failures,
        state_chunks_sent,
        state_chunk_bytes_sent,
        state_chunk_bytes_resent,
        state_chunk_bytes_taken,
        state_streams_opened,
        state_streams_installed,
        backlog_bytes_served,
        apply_runs_lent,
        state_chunks_lent,
        apply_runs_unknown,
        requests_waited_for_state,
    ]
}

/// A group's heartbeat state, as the `state` label of `cohort_groups` (R32).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum GroupState {
    /// Primary of a group with writes in flight.
    Busy,
    /// Primary of a group with nothing in flight.
    Idle,
    /// Backup following a primary.
    Backup,
    /// Member in a view change.
    ViewChange,
}

impl GroupState {
    /// Every state, so a shard's gauges are all written on each update.
    pub(crate) const ALL: [GroupState; 4] =
        [GroupState::Busy, GroupState::Idle, GroupState::Backup, GroupState::ViewChange];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            GroupState::Busy => "busy",
            GroupState::Idle => "idle",
            GroupState::Backup => "backup",
            GroupState::ViewChange => "view_change",
        }
    }

    fn count(self, gauges: &HeartbeatGauges) -> u64 {
        match self {
            GroupState::Busy => gauges.busy,
            GroupState::Idle => gauges.idle,
            GroupState::Backup => gauges.backup,
            GroupState::ViewChange => gauges.view_change,
        }
    }
}

impl EncodeLabelValue for GroupState {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// Why the runtime dropped a frame or message instead of delivering it: the
/// `reason` label of `cohort_frames_dropped_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum DropReason {
    /// `try_send` found the receiving actor's bounded mailbox full.
    MailboxFull,
    /// `try_send` found the receiving actor stopped (its mailbox closed).
    MailboxClosed,
    /// The frame was for a peer whose link is not connected.
    PeerDisconnected,
}

/// Which queue dropped: the `mailbox` label of `cohort_frames_dropped_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mailbox {
    /// A shard actor's mailbox (input from peers or clients).
    Shard,
    /// A per-peer outbox, or the queue between a shard and its outbox.
    Outbox,
    /// A peer link's queue of bytes to write.
    PeerLink,
    /// The metadata agent's mailbox.
    Agent,
    /// A host's custom group actor's mailbox.
    Custom,
}

impl Mailbox {
    /// Every mailbox; each (mailbox, reason) is exported from the start, at zero.
    pub const ALL: [Mailbox; 5] = [Mailbox::Shard, Mailbox::Outbox, Mailbox::PeerLink, Mailbox::Agent, Mailbox::Custom];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mailbox::Shard => "shard",
            Mailbox::Outbox => "outbox",
            Mailbox::PeerLink => "peer_link",
            Mailbox::Agent => "agent",
            Mailbox::Custom => "custom",
        }
    }
}

impl EncodeLabelValue for Mailbox {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// What a sync made durable: the `kind` label of `cohort_syncs_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum SyncKind {
    /// A write-ahead log flush (`fdatasync` of the records it wrote).
    Log,
    /// A new log segment's header (rotation).
    Segment,
    /// The superblock file.
    Superblock,
    /// A snapshot file.
    Snapshot,
    /// A directory (after creating, renaming or removing files in it).
    Directory,
    /// The run-time placements file.
    Placements,
}

impl SyncKind {
    /// Every kind; each is exported from the start, at zero.
    pub const ALL: [SyncKind; 6] = [
        SyncKind::Log,
        SyncKind::Segment,
        SyncKind::Superblock,
        SyncKind::Snapshot,
        SyncKind::Directory,
        SyncKind::Placements,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncKind::Log => "log",
            SyncKind::Segment => "segment",
            SyncKind::Superblock => "superblock",
            SyncKind::Snapshot => "snapshot",
            SyncKind::Directory => "directory",
            SyncKind::Placements => "placements",
        }
    }
}

impl EncodeLabelValue for SyncKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// Which port: the `port` label of `cohort_socket_writes_total` and
/// `cohort_refusals_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Port {
    /// A connection to a peer node.
    Peer,
    /// A client connection on the client port.
    Client,
    /// The admin (HTTP) port.
    Admin,
}

impl Port {
    /// Every port; each is exported from the start, at zero.
    pub const ALL: [Port; 3] = [Port::Peer, Port::Client, Port::Admin];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Port::Peer => "peer",
            Port::Client => "client",
            Port::Admin => "admin",
        }
    }
}

impl EncodeLabelValue for Port {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// What happened to a peer link's outbound connection: the `event` label of
/// `cohort_peer_link_events_total` (F1).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum LinkEvent {
    /// A dial and its greeting succeeded.
    Connected,
    /// A dial failed or did not finish within the connect timeout.
    DialFailed,
    /// A connection made no progress for the stall timeout and was replaced.
    Stalled,
    /// A connection failed (write error, reset, or the peer closed it).
    Closed,
}

impl LinkEvent {
    /// Every event; each is exported from the start, at zero.
    pub const ALL: [LinkEvent; 4] =
        [LinkEvent::Connected, LinkEvent::DialFailed, LinkEvent::Stalled, LinkEvent::Closed];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkEvent::Connected => "connected",
            LinkEvent::DialFailed => "dial_failed",
            LinkEvent::Stalled => "stalled",
            LinkEvent::Closed => "closed",
        }
    }
}

impl EncodeLabelValue for LinkEvent {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// H4: which budget stopped a client connection from reading requests: the
/// `budget` label of `cohort_client_reads_paused_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum AnswerBudget {
    /// The connection's own answers filled `[client] answer_bytes_max`.
    Connection,
    /// Every connection's answers together filled `[client] answer_bytes_node_max`.
    Node,
}

impl AnswerBudget {
    /// Every budget; each is exported from the start, at zero.
    pub const ALL: [AnswerBudget; 2] = [AnswerBudget::Connection, AnswerBudget::Node];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerBudget::Connection => "connection",
            AnswerBudget::Node => "node",
        }
    }
}

impl EncodeLabelValue for AnswerBudget {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// H4: the bytes of answers the client port holds for clients, as
/// [`NodeMetrics::client_answer_bytes`] reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientAnswerBytes {
    /// Queued now, every connection together.
    pub queued_bytes: u64,
    /// The most ever queued at once, every connection together.
    pub queued_peak_bytes: u64,
    /// The most one connection ever had queued at once.
    pub connection_peak_bytes: u64,
}

impl DropReason {
    /// Every reason; each is exported from the start, at zero.
    pub const ALL: [DropReason; 3] = [DropReason::MailboxFull, DropReason::MailboxClosed, DropReason::PeerDisconnected];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::MailboxFull => "mailbox_full",
            DropReason::MailboxClosed => "mailbox_closed",
            DropReason::PeerDisconnected => "peer_disconnected",
        }
    }
}

impl EncodeLabelValue for DropReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// Which decoding step rejected input: the `level` label of
/// `cohort_frames_rejected_total`, one per map of [`RejectCounters`]. It keeps
/// a frame kind and a body kind apart even if they ever share a name.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RejectLevel {
    /// The whole frame was dropped (header, checksum, size, revision).
    Frame,
    /// The frame was sound but its body was dropped.
    Body,
    /// One entry of a batch was rejected; the rest of the batch was used.
    Entry,
}

impl RejectLevel {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RejectLevel::Frame => "frame",
            RejectLevel::Body => "body",
            RejectLevel::Entry => "entry",
        }
    }
}

impl EncodeLabelValue for RejectLevel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: usize,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    shard: usize,
    state: GroupState,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    level: RejectLevel,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

fn apply_latency_histogram() -> Histogram {
    Histogram::new(APPLY_LATENCY_BUCKETS_SECONDS)
}

/// The series of one group kind, taken once per group (when its state
/// machine is made) so that each apply only touches atomics: no label
/// lookup, no lock, no allocation.
#[derive(Clone, Debug)]
pub struct GroupKindMetrics {
    ops_applied: Counter,
    apply_latency: Histogram,
}

impl GroupKindMetrics {
    /// Count one op applied by a state machine of this kind, which took `latency`.
    pub fn observe_apply(&self, latency: Duration) {
        self.ops_applied.inc();
        self.apply_latency.observe(latency.as_secs_f64());
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    mailbox: Mailbox,
    reason: DropReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncLabels {
    kind: SyncKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLabels {
    port: Port,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    port: Port,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    revision: &'static str,
}

/// The `kind` label of the client port's request and error counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientKindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    budget: AnswerBudget,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkEventLabels {
    event: LinkEvent,
}

/// A [`RejectCounters`] flattened to one total per `(level, kind)`.
type RejectTotals = BTreeMap<(RejectLevel, &'static str), u64>;

fn reject_totals(counters: &RejectCounters) -> RejectTotals {
    let RejectCounters { frames, bodies, entries } = counters;
    let levels = [(RejectLevel::Frame, frames), (RejectLevel::Body, bodies), (RejectLevel::Entry, entries)];
    levels.into_iter().flat_map(|(level, map)| map.iter().map(move |(&kind, &count)| ((level, kind), count))).collect()
}

/// Z3: what the metadata agent read of the shards on a due scan: the
/// `kind` label of `cohort_agent_scans_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ScanKind {
    /// Each shard's count of role and hosting changes only (O(shards)).
    Changes,
    /// The shards' sum of hashes of their records (O(groups), no allocation).
    Fingerprint,
    /// Every hosted record, and the agent's passes over them (O(groups)).
    Full,
}

impl ScanKind {
    /// Every kind; each is exported from the start, at zero.
    pub const ALL: [ScanKind; 3] = [ScanKind::Changes, ScanKind::Fingerprint, ScanKind::Full];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ScanKind::Changes => "changes",
            ScanKind::Fingerprint => "fingerprint",
            ScanKind::Full => "full",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScanLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionLabels {
    event: &'static str,
}

/// The session events exported, in the order of [`session_counts`].
const SESSION_EVENTS: [&str; 7] =
    ["opened", "expired", "report_accepted", "report_refused", "expiry_proposed", "group_unloaded", "frame_refused"];

fn session_counts(counters: &cohort_core::metadata::AgentCounters) -> [u64; 7] {
    let cohort_core::metadata::AgentCounters {
        sessions_opened,
        sessions_expired,
        reports_accepted,
        reports_refused,
        expiries_proposed,
        groups_unloaded,
        frames_refused,
    } = *counters;
    [
        sessions_opened,
        sessions_expired,
        reports_accepted,
        reports_refused,
        expiries_proposed,
        groups_unloaded,
        frames_refused,
    ]
}

/// The last snapshot applied from each source, to turn the next into deltas.
#[derive(Debug, Default)]
struct Applied {
    sessions: [u64; 7],
    shards: BTreeMap<usize, [u64; SHARD_COUNTER_COUNT]>,
    rejects: BTreeMap<usize, RejectTotals>,
    core_refusals: BTreeMap<usize, [u64; cohort_core::Refusal::ALL.len()]>,
}

/// The counts to add when `now` follows `last`: the differences, or all of
/// `now` when a counter went down (the source restarted from zero).
fn shard_deltas(last: &[u64; SHARD_COUNTER_COUNT], now: &[u64; SHARD_COUNTER_COUNT]) -> [u64; SHARD_COUNTER_COUNT] {
    let restarted = last.iter().zip(now).any(|(last, now)| now < last);
    let mut deltas = *now;
    if !restarted {
        for (delta, last) in deltas.iter_mut().zip(last) {
            *delta -= last;
        }
    }
    deltas
}

/// [`shard_deltas`] for reject totals; a kind that disappeared also means
/// the source restarted.
fn reject_deltas(last: &RejectTotals, now: &RejectTotals) -> RejectTotals {
    let restarted = last.iter().any(|(key, &last)| now.get(key).is_none_or(|&now| now < last));
    now.iter()
        .map(|(&key, &now)| {
            let last = if restarted { 0 } else { last.get(&key).copied().unwrap_or(0) };
            (key, now - last)
        })
        .filter(|&(_, delta)| delta > 0)
        .collect()
}

/// A gauge value from a count; counts beyond `i64::MAX` cannot occur in
/// practice, and saturate rather than wrap if they do.
fn gauge_value(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Every metric of one node, in one Prometheus registry.
///
/// Shared by the node's actors through an `Arc`: every method takes `&self`
/// and is safe to call from any thread. Updating is cheap (atomics, plus one
/// short lock for snapshot bookkeeping); [`NodeMetrics::encode`] walks the
/// registry and is meant for scrapes, not the data path.
///
/// Who calls what:
/// - each shard actor, on a timer or before a scrape: [`NodeMetrics::update_shard`]
///   with `Shard::metrics()` and `Shard::heartbeat_gauges()`, and
///   [`NodeMetrics::update_core_refusals`] with `Shard::refused()`;
/// - each peer link, after decoding: [`NodeMetrics::record_rejected`] with its
///   [`RejectCounters`], and [`NodeMetrics::set_peers_connected`] (or the
///   supervisor, which sees all links);
/// - any sender whose `try_send` failed or whose link was down:
///   [`NodeMetrics::add_dropped`];
/// - the client path, when a submitted op's reply arrives:
///   [`NodeMetrics::observe_commit_latency`]; the client port, for each
///   request and each error answer: [`NodeMetrics::inc_client_request`],
///   [`NodeMetrics::inc_client_error`];
/// - each storage worker, after a batch of jobs: [`NodeMetrics::add_syncs`]
///   and [`NodeMetrics::set_wal_size_bytes`]; after its recovery:
///   [`NodeMetrics::add_wal_losses`];
/// - the node, once started: [`NodeMetrics::watch_node`], after which each
///   scrape also reads the process, the disk and the metadata copy
///   (`scraped.rs`).
#[derive(Debug)]
pub struct NodeMetrics {
    registry: Registry,
    shard_counters: [Family<ShardLabels, Counter>; SHARD_COUNTER_COUNT],
    groups: Family<GroupLabels, Gauge>,
    group_actors: Family<ShardLabels, Gauge>,
    frames_rejected: Family<RejectLabels, Counter>,
    frames_dropped: Family<DropLabels, Counter>,
    syncs: Family<SyncLabels, Counter>,
    socket_writes: Family<PortLabels, Counter>,
    peer_bytes_sent: Family<PeerLabels, Counter>,
    link_events: Family<LinkEventLabels, Counter>,
    refusals: Family<RefusalLabels, Counter>,
    client_answers_queued: Gauge,
    client_answers_queued_peak: Gauge,
    client_connection_answers_queued_peak: Gauge,
    client_reads_paused: Family<BudgetLabels, Counter>,
    client_requests: Family<ClientKindLabels, Counter>,
    client_errors: Family<ClientKindLabels, Counter>,
    client_redirects: Counter,
    wal_size: Family<ShardLabels, Gauge>,
    wal_losses: Family<ShardLabels, Counter>,
    node_sources: Arc<OnceLock<NodeSources>>,
    flushes: Counter,
    view_change_messages_sent: Counter,
    view_change_frames_sent: Counter,
    ticks_late: Counter,
    peers_connected: Gauge,
    commit_latency: Histogram,
    ops_applied: Family<KindLabels, Counter>,
    apply_latency: Family<KindLabels, Histogram, fn() -> Histogram>,
    session_events: Family<SessionLabels, Counter>,
    agent_scans: Family<ScanLabels, Counter>,
    applied: Mutex<Applied>,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    /// A registry with every family registered and nothing counted yet. The
    /// labelled families get their series on first use (see `docs/metrics.md`);
    /// every [`DropReason`] is exported at zero from the start.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(METRIC_PREFIX);
        let shard_counters: [Family<ShardLabels, Counter>; SHARD_COUNTER_COUNT] =
            std::array::from_fn(|_| Family::default());
        for ((name, help), family) in SHARD_COUNTER_SPECS.iter().zip(&shard_counters) {
            registry.register(*name, *help, family.clone());
        }
        let groups = Family::<GroupLabels, Gauge>::default();
        registry.register(
            "groups",
            "Groups of the shard in each heartbeat state: busy or idle primary, backup, view change",
            groups.clone(),
        );
        let group_actors = Family::<ShardLabels, Gauge>::default();
        registry.register(
            "group_actors",
            "Group actors alive on the shard (started when first needed, retired when idle)",
            group_actors.clone(),
        );
        let frames_rejected = Family::<RejectLabels, Counter>::default();
        registry.register(
            "frames_rejected",
            "Input from peers rejected while decoding, by level (frame, body, entry) and kind",
            frames_rejected.clone(),
        );
        let frames_dropped = Family::<DropLabels, Counter>::default();
        registry.register(
            "frames_dropped",
            "Frames and messages the runtime dropped, by mailbox and reason",
            frames_dropped.clone(),
        );
        for mailbox in Mailbox::ALL {
            for reason in DropReason::ALL {
                // Creating the series is the point: every pair is exported from the start, at zero.
                let _series = frames_dropped.get_or_create(&DropLabels { mailbox, reason });
            }
        }
        let syncs = Family::<SyncLabels, Counter>::default();
        registry.register(
            "syncs",
            "Disk syncs (fdatasync or fsync) of the node, by what they made durable",
            syncs.clone(),
        );
        for kind in SyncKind::ALL {
            let _series = syncs.get_or_create(&SyncLabels { kind });
        }
        let flushes = Counter::default();
        registry.register(
            "wal_flushes",
            "Write-ahead log flushes that wrote anything (one sync each)",
            flushes.clone(),
        );
        let view_change_messages_sent = Counter::default();
        registry.register(
            "view_change_messages_sent",
            "View-change messages (StartViewChange, DoViewChange, StartView) sent to peers",
            view_change_messages_sent.clone(),
        );
        let view_change_frames_sent = Counter::default();
        registry.register(
            "view_change_frames_sent",
            "Frames that carried view-change messages (one ViewChangeBatch carries a run of them)",
            view_change_frames_sent.clone(),
        );
        let ticks_late = Counter::default();
        registry.register(
            "ticks_late",
            "Ticks a shard ran after their time, in order, because its thread was busy past them",
            ticks_late.clone(),
        );
        let socket_writes = Family::<PortLabels, Counter>::default();
        registry.register("socket_writes", "Write calls on sockets, by port", socket_writes.clone());
        for port in Port::ALL {
            let _series = socket_writes.get_or_create(&PortLabels { port });
        }
        let peer_bytes_sent = Family::<PeerLabels, Counter>::default();
        registry.register(
            "peer_bytes_sent",
            "Frame bytes written to each peer node's connections (before TLS), by peer node id",
            peer_bytes_sent.clone(),
        );
        let link_events = Family::<LinkEventLabels, Counter>::default();
        registry.register(
            "peer_link_events",
            "Outbound peer connections made, dials failed, connections replaced for a stall, and connections lost",
            link_events.clone(),
        );
        for event in LinkEvent::ALL {
            let _series = link_events.get_or_create(&LinkEventLabels { event });
        }
        let refusals = Family::<RefusalLabels, Counter>::default();
        registry.register(
            "refusals",
            "Connections and requests refused, by port and reason (see docs/security.md)",
            refusals.clone(),
        );
        let client_answers_queued = Gauge::default();
        registry.register_with_unit(
            "client_answers_queued",
            "Bytes of answers the client port holds for clients, encoded and not yet written, every connection together",
            Unit::Bytes,
            client_answers_queued.clone(),
        );
        let client_answers_queued_peak = Gauge::default();
        registry.register_with_unit(
            "client_answers_queued_peak",
            "The most bytes of answers the client port held at once since the node started, every connection together",
            Unit::Bytes,
            client_answers_queued_peak.clone(),
        );
        let client_connection_answers_queued_peak = Gauge::default();
        registry.register_with_unit(
            "client_connection_answers_queued_peak",
            "The most bytes of answers one client connection held at once since the node started",
            Unit::Bytes,
            client_connection_answers_queued_peak.clone(),
        );
        let client_reads_paused = Family::<BudgetLabels, Counter>::default();
        registry.register(
            "client_reads_paused",
            "Times a client connection stopped reading requests because answers filled its budget or the node's",
            client_reads_paused.clone(),
        );
        for budget in AnswerBudget::ALL {
            let _series = client_reads_paused.get_or_create(&BudgetLabels { budget });
        }
        let client_requests = Family::<ClientKindLabels, Counter>::default();
        registry.register(
            "client_requests",
            "Requests clients sent to the client port, by kind: read, write, route_query (a question for groups' primaries)",
            client_requests.clone(),
        );
        for kind in RequestKind::ALL.map(RequestKind::name).into_iter().chain([ROUTE_QUERY_KIND]) {
            let _series = client_requests.get_or_create(&ClientKindLabels { kind });
        }
        let client_errors = Family::<ClientKindLabels, Counter>::default();
        registry.register(
            "client_errors",
            "Error answers the client port sent to clients, by kind (busy, view_change, unknown_group, rejected, ...)",
            client_errors.clone(),
        );
        for code in ReplyError::ALL {
            let _series = client_errors.get_or_create(&ClientKindLabels { kind: code.name() });
        }
        let client_redirects = Counter::default();
        registry.register(
            "client_redirects",
            "Client requests answered with a redirect to the group's primary on another node",
            client_redirects.clone(),
        );
        let wal_size = Family::<ShardLabels, Gauge>::default();
        registry.register_with_unit(
            "wal_size",
            "Bytes the shard's write-ahead log segment files take on disk (snapshots not included)",
            Unit::Bytes,
            wal_size.clone(),
        );
        let wal_losses = Family::<ShardLabels, Counter>::default();
        registry.register(
            "wal_losses",
            "Recoveries of the shard's write-ahead log that found records missing after they had been synced \
             (H2): every group of the shard then recovers from its peers",
            wal_losses.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; its labels say which version and git revision this node runs",
            build_info.clone(),
        );
        build_info.get_or_create(&BuildLabels { version: BUILD_VERSION, revision: BUILD_REVISION }).set(1);
        let scraped = Scraped::default();
        let node_sources = Arc::clone(&scraped.sources);
        registry.register_collector(Box::new(scraped));
        let peers_connected = Gauge::default();
        registry.register("peers_connected", "Peer nodes with a connected, handshaken link", peers_connected.clone());
        let commit_latency = Histogram::new(COMMIT_LATENCY_BUCKETS_SECONDS);
        registry.register_with_unit(
            "commit_latency",
            "Time from a client op's submit to its reply",
            Unit::Seconds,
            commit_latency.clone(),
        );
        let ops_applied = Family::<KindLabels, Counter>::default();
        registry.register(
            "ops_applied",
            "Ops applied to state machines on this node, by group kind",
            ops_applied.clone(),
        );
        let apply_latency: Family<KindLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(apply_latency_histogram);
        registry.register_with_unit(
            "apply_latency",
            "Time one state machine apply call took, by group kind",
            Unit::Seconds,
            apply_latency.clone(),
        );
        let session_events = Family::<SessionLabels, Counter>::default();
        registry.register(
            "session_events",
            "What this node's metadata agent did: sessions opened and expired, ownership reports accepted and refused, expiries proposed (as metadata primary), groups unloaded",
            session_events.clone(),
        );
        for event in SESSION_EVENTS {
            let _series = session_events.get_or_create(&SessionLabels { event });
        }
        let agent_scans = Family::<ScanLabels, Counter>::default();
        registry.register(
            "agent_scans",
            "What the metadata agent read of the shards on each due scan, by kind: changes (counts only), fingerprint (a hash pass over every group), full (every record and the agent's passes)",
            agent_scans.clone(),
        );
        for kind in ScanKind::ALL {
            let _series = agent_scans.get_or_create(&ScanLabels { kind: kind.as_str() });
        }
        NodeMetrics {
            registry,
            session_events,
            agent_scans,
            shard_counters,
            groups,
            group_actors,
            frames_rejected,
            frames_dropped,
            syncs,
            socket_writes,
            peer_bytes_sent,
            link_events,
            refusals,
            client_answers_queued,
            client_answers_queued_peak,
            client_connection_answers_queued_peak,
            client_reads_paused,
            client_requests,
            client_errors,
            client_redirects,
            wal_size,
            wal_losses,
            node_sources,
            flushes,
            view_change_messages_sent,
            view_change_frames_sent,
            ticks_late,
            peers_connected,
            commit_latency,
            ops_applied,
            apply_latency,
            applied: Mutex::default(),
        }
    }

    /// Publish shard `shard`'s current counters and heartbeat gauges.
    ///
    /// `metrics` are the core's totals; only what changed since the last
    /// snapshot of this shard is added (see the module doc), so calling this
    /// twice with the same snapshot changes nothing.
    pub fn update_shard(&self, shard: usize, metrics: &ShardMetrics, gauges: &HeartbeatGauges) {
        let now = shard_counter_values(metrics);
        // Held to the end, so that the updates of one shard apply in order.
        let mut applied = self.applied();
        let last = applied.shards.entry(shard).or_insert([0; SHARD_COUNTER_COUNT]);
        let deltas = shard_deltas(last, &now);
        *last = now;
        let labels = ShardLabels { shard };
        for (family, delta) in self.shard_counters.iter().zip(deltas) {
            // Created even at zero so that every shard's series exists from its first update.
            family.get_or_create(&labels).inc_by(delta);
        }
        for state in GroupState::ALL {
            self.groups.get_or_create(&GroupLabels { shard, state }).set(gauge_value(state.count(gauges)));
        }
    }

    /// The shard counter `name` (a [`ShardMetrics`] field's name), summed
    /// over this node's shards as last published; `None` for no such
    /// counter.
    pub fn shard_counter(&self, name: &str) -> Option<u64> {
        let index = SHARD_COUNTER_SPECS.iter().position(|(counter, _)| *counter == name)?;
        Some(self.applied().shards.values().map(|values| values[index]).sum())
    }

    /// Publish the rejected-input totals of one source, typically a peer
    /// link, which decodes and validates what arrives. `source` names the
    /// owner of `counters` (the peer's node id, for instance); distinct owners
    /// need distinct ids. Like [`NodeMetrics::update_shard`], only the change
    /// since that source's last snapshot is added.
    pub fn record_rejected(&self, source: usize, counters: &RejectCounters) {
        let now = reject_totals(counters);
        let mut applied = self.applied();
        let last = applied.rejects.entry(source).or_default();
        let deltas = reject_deltas(last, &now);
        *last = now;
        for ((level, kind), delta) in deltas {
            self.frames_rejected.get_or_create(&RejectLabels { level, kind }).inc_by(delta);
        }
    }

    /// T5: forget what was kept about `source` (a connection that closed),
    /// so per-connection state does not outlive the connection. Its counts
    /// stay in the totals.
    pub fn forget_rejected(&self, source: usize) {
        self.applied().rejects.remove(&source);
    }

    /// Sources whose reject counts are kept (one per open connection that
    /// rejected something).
    pub fn rejected_sources(&self) -> usize {
        self.applied().rejects.len()
    }

    /// Count `count` frames or messages `mailbox` dropped for `reason`.
    pub fn add_dropped(&self, mailbox: Mailbox, reason: DropReason, count: u64) {
        self.frames_dropped.get_or_create(&DropLabels { mailbox, reason }).inc_by(count);
    }

    /// Frames and messages dropped so far, in every mailbox and for every reason.
    pub fn dropped_total(&self) -> u64 {
        let mut total = 0;
        for mailbox in Mailbox::ALL {
            for reason in DropReason::ALL {
                total += self.frames_dropped.get_or_create(&DropLabels { mailbox, reason }).get();
            }
        }
        total
    }

    /// Frames and messages `mailbox` dropped for `reason` so far.
    pub fn dropped(&self, mailbox: Mailbox, reason: DropReason) -> u64 {
        self.frames_dropped.get_or_create(&DropLabels { mailbox, reason }).get()
    }

    /// Count `count` flushes of the write-ahead log that wrote anything.
    pub fn add_flushes(&self, count: u64) {
        if count > 0 {
            self.flushes.inc_by(count);
        }
    }

    /// Count view-change messages sent to peers and the frames they took (Z4).
    pub fn add_view_changes_sent(&self, messages: u64, frames: u64) {
        if messages > 0 {
            self.view_change_messages_sent.inc_by(messages);
            self.view_change_frames_sent.inc_by(frames);
        }
    }

    /// View-change messages sent to peers so far, and the frames they took.
    pub fn view_changes_sent(&self) -> (u64, u64) {
        (self.view_change_messages_sent.get(), self.view_change_frames_sent.get())
    }

    /// Count ticks a shard ran late, to catch up with the clock.
    pub fn add_ticks_late(&self, ticks: u64) {
        if ticks > 0 {
            self.ticks_late.inc_by(ticks);
        }
    }

    /// Ticks run late so far, by every shard of the node.
    pub fn ticks_late(&self) -> u64 {
        self.ticks_late.get()
    }

    /// Flushes of the write-ahead log so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.get()
    }

    /// Count `count` syncs of `kind`.
    pub fn add_syncs(&self, kind: SyncKind, count: u64) {
        if count > 0 {
            self.syncs.get_or_create(&SyncLabels { kind }).inc_by(count);
        }
    }

    /// Syncs of `kind` so far.
    pub fn syncs(&self, kind: SyncKind) -> u64 {
        self.syncs.get_or_create(&SyncLabels { kind }).get()
    }

    /// Z3: `bytes` of frames written to peer node `peer`.
    pub fn add_peer_bytes_sent(&self, peer: cohort_messages::NodeId, bytes: usize) {
        self.peer_bytes_sent.get_or_create(&PeerLabels { peer: peer.0 }).inc_by(bytes as u64);
    }

    /// Count one read of the shards by the metadata agent (Z3).
    pub fn inc_agent_scans(&self, kind: ScanKind) {
        self.agent_scans.get_or_create(&ScanLabels { kind: kind.as_str() }).inc();
    }

    /// Count one write call on a socket of `port`.
    pub fn inc_socket_writes(&self, port: Port) {
        self.socket_writes.get_or_create(&PortLabels { port }).inc();
    }

    /// Write calls on sockets of `port` so far.
    pub fn socket_writes(&self, port: Port) -> u64 {
        self.socket_writes.get_or_create(&PortLabels { port }).get()
    }

    /// Count one refusal on `port` for `reason` (a short snake_case word, the
    /// label value; the reasons of each port are listed in docs/security.md).
    pub fn inc_refused(&self, port: Port, reason: &'static str) {
        self.refusals.get_or_create(&RefusalLabels { port, reason }).inc();
    }

    /// T5: publish shard `shard`'s core refusals (peer messages its
    /// replicas refused, by `cohort_core::Refusal`) as
    /// `cohort_refusals_total{port="peer",reason}`. Like
    /// [`NodeMetrics::update_shard`], only the change since that shard's
    /// last snapshot is added (all of it after a restart from zero).
    pub fn update_core_refusals(&self, shard: usize, refusals: &cohort_core::Refusals) {
        let now = refusals.by_reason();
        let mut applied = self.applied();
        let last = applied.core_refusals.entry(shard).or_insert([0; cohort_core::Refusal::ALL.len()]);
        let restarted = now.iter().zip(last.iter()).any(|((_, count), last)| count < last);
        for (index, (reason, count)) in now.into_iter().enumerate() {
            let delta = if restarted { count } else { count - last[index] };
            last[index] = count;
            if delta > 0 {
                self.refusals.get_or_create(&RefusalLabels { port: Port::Peer, reason: reason.name() }).inc_by(delta);
            }
        }
    }

    /// Refusals on `port` for `reason` so far.
    pub fn refused(&self, port: Port, reason: &'static str) -> u64 {
        self.refusals.get_or_create(&RefusalLabels { port, reason }).get()
    }

    /// H4: `bytes` of answers were queued on a client connection, which now
    /// holds `connection_bytes` (those included). Raises the peaks.
    pub fn add_client_answer_bytes(&self, bytes: usize, connection_bytes: usize) {
        debug_assert!(bytes <= connection_bytes, "the connection holds what it just queued");
        let bytes = gauge_value(u64::try_from(bytes).unwrap_or(u64::MAX));
        let queued = self.client_answers_queued.inc_by(bytes).saturating_add(bytes);
        self.client_answers_queued_peak.inner().fetch_max(queued, std::sync::atomic::Ordering::Relaxed);
        let connection = gauge_value(u64::try_from(connection_bytes).unwrap_or(u64::MAX));
        self.client_connection_answers_queued_peak.inner().fetch_max(connection, std::sync::atomic::Ordering::Relaxed);
    }

    /// H4: `bytes` of answers queued earlier were written, or dropped with
    /// their connection.
    pub fn sub_client_answer_bytes(&self, bytes: usize) {
        let bytes = gauge_value(u64::try_from(bytes).unwrap_or(u64::MAX));
        let before = self.client_answers_queued.dec_by(bytes);
        debug_assert!(before >= bytes, "H4: {bytes} answer bytes released of {before} queued");
    }

    /// H4: what the client port holds of answers now, and the peaks.
    pub fn client_answer_bytes(&self) -> ClientAnswerBytes {
        let value = |gauge: &Gauge| u64::try_from(gauge.get()).unwrap_or(0);
        ClientAnswerBytes {
            queued_bytes: value(&self.client_answers_queued),
            queued_peak_bytes: value(&self.client_answers_queued_peak),
            connection_peak_bytes: value(&self.client_connection_answers_queued_peak),
        }
    }

    /// H4: count one time a client connection stopped reading for `budget`.
    pub fn inc_client_reads_paused(&self, budget: AnswerBudget) {
        self.client_reads_paused.get_or_create(&BudgetLabels { budget }).inc();
    }

    /// H4: times client connections stopped reading for `budget` so far.
    pub fn client_reads_paused(&self, budget: AnswerBudget) -> u64 {
        self.client_reads_paused.get_or_create(&BudgetLabels { budget }).get()
    }

    /// Count one request a client sent to the client port.
    pub fn inc_client_request(&self, kind: RequestKind) {
        self.client_requests.get_or_create(&ClientKindLabels { kind: kind.name() }).inc();
    }

    /// Count one route query a client sent to the client port.
    pub fn inc_client_route_query(&self) {
        self.client_requests.get_or_create(&ClientKindLabels { kind: ROUTE_QUERY_KIND }).inc();
    }

    /// Requests of `kind` clients sent to the client port so far.
    pub fn client_requests(&self, kind: RequestKind) -> u64 {
        self.client_requests.get_or_create(&ClientKindLabels { kind: kind.name() }).get()
    }

    /// Count one error answer the client port sent.
    pub fn inc_client_error(&self, code: ReplyError) {
        self.client_errors.get_or_create(&ClientKindLabels { kind: code.name() }).inc();
    }

    /// Error answers of `code` the client port sent so far.
    pub fn client_errors(&self, code: ReplyError) -> u64 {
        self.client_errors.get_or_create(&ClientKindLabels { kind: code.name() }).get()
    }

    /// Count one redirect the client port sent.
    pub fn inc_client_redirect(&self) {
        self.client_redirects.inc();
    }

    /// Set the bytes shard `shard`'s write-ahead log takes on disk now.
    pub fn set_wal_size_bytes(&self, shard: usize, bytes: u64) {
        self.wal_size.get_or_create(&ShardLabels { shard }).set(gauge_value(bytes));
    }

    /// H2: shard `shard`'s recovery found synced records lost `count`
    /// times (0 or 1; called after every recovery, so the series exists).
    pub fn add_wal_losses(&self, shard: usize, count: u64) {
        self.wal_losses.get_or_create(&ShardLabels { shard }).inc_by(count);
    }

    /// How many recoveries of shard `shard` found synced records lost.
    pub fn wal_losses(&self, shard: usize) -> u64 {
        self.wal_losses.get_or_create(&ShardLabels { shard }).get()
    }

    /// The bytes shard `shard`'s write-ahead log took on disk at its last publish.
    pub fn wal_size_bytes(&self, shard: usize) -> u64 {
        u64::try_from(self.wal_size.get_or_create(&ShardLabels { shard }).get()).unwrap_or(0)
    }

    /// Export, on each scrape from now on, what the node's status board
    /// says (its session, and its copy of the metadata: epochs, frozen,
    /// groups and primaries per node) and the free space of the filesystem
    /// holding `data_dir`. Called once, when the node has started; a later
    /// call changes nothing (one registry serves one node).
    pub fn watch_node(&self, board: Arc<StatusBoard>, data_dir: PathBuf) {
        let first = self.node_sources.set(NodeSources { board, data_dir }).is_ok();
        debug_assert!(first, "a node's metrics watch one node");
    }

    /// Count one `event` of a peer link.
    pub fn inc_link_event(&self, event: LinkEvent) {
        self.link_events.get_or_create(&LinkEventLabels { event }).inc();
    }

    /// `event`s of peer links so far.
    pub fn link_events(&self, event: LinkEvent) -> u64 {
        self.link_events.get_or_create(&LinkEventLabels { event }).get()
    }

    /// Set how many group actors are alive on `shard` now (Z1).
    pub fn set_group_actors(&self, shard: usize, actors: usize) {
        self.group_actors
            .get_or_create(&ShardLabels { shard })
            .set(gauge_value(u64::try_from(actors).unwrap_or(u64::MAX)));
    }

    /// Group actors alive on `shard` at its last count.
    pub fn group_actors(&self, shard: usize) -> u64 {
        u64::try_from(self.group_actors.get_or_create(&ShardLabels { shard }).get()).unwrap_or(0)
    }

    /// Set how many peer nodes are connected now.
    pub fn set_peers_connected(&self, peers: usize) {
        self.peers_connected.set(gauge_value(u64::try_from(peers).unwrap_or(u64::MAX)));
    }

    /// Publish the metadata agent's counters (only what grew since the last call is added).
    pub fn set_sessions(&self, counters: &cohort_core::metadata::AgentCounters) {
        let counts = session_counts(counters);
        let mut applied = self.applied();
        for (index, event) in SESSION_EVENTS.iter().enumerate() {
            let delta = counts[index].saturating_sub(applied.sessions[index]);
            if delta > 0 {
                self.session_events.get_or_create(&SessionLabels { event }).inc_by(delta);
            }
        }
        applied.sessions = counts;
    }

    /// Record one op's time from submit to reply.
    pub fn observe_commit_latency(&self, latency: Duration) {
        self.commit_latency.observe(latency.as_secs_f64());
    }

    /// The series of group kind `kind` (created at zero on first use). The
    /// set of kinds is the host's registered kinds, so the label stays
    /// bounded; groups of no named kind are of the kind `default`.
    pub fn group_kind(&self, kind: &str) -> GroupKindMetrics {
        let labels = KindLabels { kind: kind.to_owned() };
        GroupKindMetrics {
            ops_applied: self.ops_applied.get_or_create(&labels).clone(),
            apply_latency: self.apply_latency.get_or_create(&labels).clone(),
        }
    }

    /// Every family in the OpenMetrics text format (ends with `# EOF`), which
    /// Prometheus scrapes as [`OPENMETRICS_CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("counters, gauges and classic histograms always encode into a String");
        text
    }

    /// The bookkeeping lock. A panic while it was held cannot leave it
    /// half-written in a way that matters more than a skipped delta, so a
    /// poisoned lock is used as is rather than spreading the panic.
    fn applied(&self) -> MutexGuard<'_, Applied> {
        self.applied.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `Content-Type` of [`NodeMetrics::encode`]'s text.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<NodeMetrics>();
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line `series` (name and labels, exactly as
    /// encoded), if present.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn shard_metrics(base: u64) -> ShardMetrics {
        let mut metrics = ShardMetrics::default();
        let fields = [
            &mut metrics.commit_batches_sent,
            &mut metrics.commit_entries_sent,
            &mut metrics.commit_batches_received,
            &mut metrics.commit_entries_received,
            &mut metrics.commit_entries_rejected,
            &mut metrics.reply_batches_sent,
            &mut metrics.reply_entries_sent,
            &mut metrics.reply_batches_received,
            &mut metrics.reply_entries_received,
            &mut metrics.reply_entries_rejected,
            &mut metrics.commit_batches_unconnected,
            &mut metrics.primaries_started,
            &mut metrics.view_changes_started,
            &mut metrics.prepares_held_back,
            &mut metrics.primary_transfers_started,
            &mut metrics.pair_heartbeats_sent,
            &mut metrics.pair_replies_sent,
            &mut metrics.quiesced,
            &mut metrics.quiet_woken,
            &mut metrics.quiet_mismatches,
            &mut metrics.start_views_withheld,
            &mut metrics.recoveries_founded,
            &mut metrics.recoveries_done,
            &mut metrics.checkpoints_failed,
            &mut metrics.state_transfer_failures,
            &mut metrics.state_chunks_sent,
            &mut metrics.state_chunk_bytes_sent,
            &mut metrics.state_chunk_bytes_resent,
            &mut metrics.state_chunk_bytes_taken,
            &mut metrics.state_streams_opened,
            &mut metrics.state_streams_installed,
            &mut metrics.backlog_bytes_served,
            &mut metrics.apply_runs_lent,
            &mut metrics.state_chunks_lent,
            &mut metrics.apply_runs_unknown,
            &mut metrics.requests_waited_for_state,
        ];
        for (index, field) in fields.into_iter().enumerate() {
            *field = base + index as u64;
        }
        metrics
    }

    fn series(name: &str, shard: usize) -> String {
        format!("cohort_{name}_total{{shard=\"{shard}\"}}")
    }

    #[test]
    fn t5_core_refusals_are_published_under_the_peer_port_by_reason() {
        let metrics = NodeMetrics::new();
        let mut refusals = cohort_core::Refusals::default();
        refusals.count(cohort_core::Refusal::ViewJump);
        metrics.update_core_refusals(0, &refusals);
        metrics.update_core_refusals(0, &refusals);
        refusals.count(cohort_core::Refusal::ViewJump);
        refusals.count(cohort_core::Refusal::NotTheMember);
        metrics.update_core_refusals(0, &refusals);
        metrics.update_core_refusals(1, &refusals);
        assert_eq!(metrics.refused(Port::Peer, "view_jump"), 4, "deltas per shard, then both shards");
        assert_eq!(metrics.refused(Port::Peer, "not_the_member"), 2);
        let text = metrics.encode();
        assert!(text.contains("cohort_refusals_total{port=\"peer\",reason=\"view_jump\"} 4"), "{text}");
    }

    #[test]
    fn h4_answer_bytes_gauges_follow_queue_and_release_and_keep_their_peaks() {
        let metrics = NodeMetrics::new();
        let text = metrics.encode();
        for budget in AnswerBudget::ALL {
            let line = format!("cohort_client_reads_paused_total{{budget=\"{}\"}}", budget.as_str());
            assert_eq!(sample(&text, &line), Some(0.0), "{line}");
        }
        assert_eq!(sample(&text, "cohort_client_answers_queued_bytes"), Some(0.0), "{text}");
        metrics.add_client_answer_bytes(100, 100);
        metrics.add_client_answer_bytes(50, 50);
        metrics.add_client_answer_bytes(30, 130);
        metrics.sub_client_answer_bytes(130);
        metrics.inc_client_reads_paused(AnswerBudget::Node);
        let bytes = metrics.client_answer_bytes();
        assert_eq!(bytes, ClientAnswerBytes { queued_bytes: 50, queued_peak_bytes: 180, connection_peak_bytes: 130 });
        assert_eq!(metrics.client_reads_paused(AnswerBudget::Node), 1);
        assert_eq!(metrics.client_reads_paused(AnswerBudget::Connection), 0);
        let text = metrics.encode();
        assert_eq!(sample(&text, "cohort_client_answers_queued_bytes"), Some(50.0), "{text}");
        assert_eq!(sample(&text, "cohort_client_answers_queued_peak_bytes"), Some(180.0), "{text}");
        assert_eq!(sample(&text, "cohort_client_connection_answers_queued_peak_bytes"), Some(130.0), "{text}");
        assert_eq!(sample(&text, "cohort_client_reads_paused_total{budget=\"node\"}"), Some(1.0), "{text}");
    }

    #[test]
    fn a_fresh_registry_exports_the_families_it_can_start_at_zero() {
        let text = NodeMetrics::new().encode();
        for absent in ["cohort_commit_batches_sent", "cohort_groups", "cohort_frames_rejected"] {
            // A labelled family appears with its first series (a shard's first update, a first rejection).
            assert!(!text.contains(&format!("# TYPE {absent} ")), "{absent}:\n{text}");
        }
        for declaration in [
            "# TYPE cohort_frames_dropped counter\n",
            "# TYPE cohort_peers_connected gauge\n",
            "# TYPE cohort_commit_latency_seconds histogram\n",
            "# UNIT cohort_commit_latency_seconds seconds\n",
        ] {
            assert!(text.contains(declaration), "{declaration:?} missing:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        for mailbox in Mailbox::ALL {
            for reason in DropReason::ALL {
                let (mailbox, reason) = (mailbox.as_str(), reason.as_str());
                let line = format!("cohort_frames_dropped_total{{mailbox=\"{mailbox}\",reason=\"{reason}\"}}");
                assert_eq!(sample(&text, &line), Some(0.0), "{line}");
            }
        }
        for kind in SyncKind::ALL {
            let line = format!("cohort_syncs_total{{kind=\"{}\"}}", kind.as_str());
            assert_eq!(sample(&text, &line), Some(0.0), "{line}");
        }
        for port in Port::ALL {
            let line = format!("cohort_socket_writes_total{{port=\"{}\"}}", port.as_str());
            assert_eq!(sample(&text, &line), Some(0.0), "{line}");
        }
        assert_eq!(sample(&text, "cohort_wal_flushes_total"), Some(0.0));
        assert_eq!(sample(&text, "cohort_peers_connected"), Some(0.0));
        assert_eq!(sample(&text, "cohort_commit_latency_seconds_count"), Some(0.0));
    }

    #[test]
    fn after_updates_every_family_is_declared() {
        let metrics = NodeMetrics::new();
        metrics.update_shard(0, &ShardMetrics::default(), &HeartbeatGauges::default());
        let mut counters = RejectCounters::default();
        counters.frames.insert("truncated", 1);
        metrics.record_rejected(0, &counters);
        let text = metrics.encode();
        for (name, help) in SHARD_COUNTER_SPECS {
            assert!(text.contains(&format!("# HELP cohort_{name} {help}.\n")), "{name} help missing:\n{text}");
            assert_eq!(sample(&text, &series(name, 0)), Some(0.0), "{name}");
            assert!(text.contains(&format!("# TYPE cohort_{name} counter\n")), "{name} type missing:\n{text}");
        }
        for declaration in [
            "# TYPE cohort_groups gauge\n",
            "# TYPE cohort_frames_rejected counter\n",
            "# TYPE cohort_frames_dropped counter\n",
            "# TYPE cohort_peers_connected gauge\n",
            "# TYPE cohort_commit_latency_seconds histogram\n",
        ] {
            assert!(text.contains(declaration), "{declaration:?} missing:\n{text}");
        }
    }

    #[test]
    fn shard_counters_mirror_every_field_per_shard() {
        let metrics = NodeMetrics::new();
        metrics.update_shard(0, &shard_metrics(100), &HeartbeatGauges::default());
        metrics.update_shard(3, &shard_metrics(200), &HeartbeatGauges::default());
        let text = metrics.encode();
        for (index, (name, _)) in SHARD_COUNTER_SPECS.iter().enumerate() {
            assert_eq!(sample(&text, &series(name, 0)), Some(100.0 + index as f64), "{name}");
            assert_eq!(sample(&text, &series(name, 3)), Some(200.0 + index as f64), "{name}");
        }
        assert_eq!(sample(&text, &series("commit_batches_sent", 1)), None);
    }

    #[test]
    fn the_same_snapshot_twice_counts_once_and_growth_adds_the_difference() {
        let metrics = NodeMetrics::new();
        let gauges = HeartbeatGauges::default();
        metrics.update_shard(1, &shard_metrics(10), &gauges);
        metrics.update_shard(1, &shard_metrics(10), &gauges);
        let text = metrics.encode();
        assert_eq!(sample(&text, &series("commit_batches_sent", 1)), Some(10.0));
        assert_eq!(sample(&text, &series("view_changes_started", 1)), Some(22.0));

        metrics.update_shard(1, &shard_metrics(15), &gauges);
        let text = metrics.encode();
        assert_eq!(sample(&text, &series("commit_batches_sent", 1)), Some(15.0));
        assert_eq!(sample(&text, &series("view_changes_started", 1)), Some(27.0));
    }

    #[test]
    fn a_restarted_shard_keeps_node_counters_growing() {
        let metrics = NodeMetrics::new();
        let gauges = HeartbeatGauges::default();
        metrics.update_shard(0, &shard_metrics(10), &gauges);
        // The core was re-created and counted from zero again: 3 new batches.
        let restarted = ShardMetrics { commit_batches_sent: 3, ..ShardMetrics::default() };
        metrics.update_shard(0, &restarted, &gauges);
        let text = metrics.encode();
        assert_eq!(sample(&text, &series("commit_batches_sent", 0)), Some(13.0));
        assert_eq!(sample(&text, &series("commit_entries_sent", 0)), Some(11.0));
        // And the restarted core's later snapshots are deltas again.
        metrics.update_shard(0, &ShardMetrics { commit_batches_sent: 5, ..ShardMetrics::default() }, &gauges);
        assert_eq!(sample(&metrics.encode(), &series("commit_batches_sent", 0)), Some(15.0));
    }

    #[test]
    fn group_gauges_follow_the_latest_snapshot() {
        let metrics = NodeMetrics::new();
        let first = HeartbeatGauges { busy: 5, idle: 6, backup: 7, view_change: 8 };
        metrics.update_shard(2, &ShardMetrics::default(), &first);
        let text = metrics.encode();
        for (state, value) in [("busy", 5.0), ("idle", 6.0), ("backup", 7.0), ("view_change", 8.0)] {
            let line = format!("cohort_groups{{shard=\"2\",state=\"{state}\"}}");
            assert_eq!(sample(&text, &line), Some(value), "{line}");
        }
        let second = HeartbeatGauges { busy: 1, idle: 0, backup: 20, view_change: 0 };
        metrics.update_shard(2, &ShardMetrics::default(), &second);
        let text = metrics.encode();
        assert_eq!(sample(&text, "cohort_groups{shard=\"2\",state=\"busy\"}"), Some(1.0));
        assert_eq!(sample(&text, "cohort_groups{shard=\"2\",state=\"idle\"}"), Some(0.0));
        assert_eq!(sample(&text, "cohort_groups{shard=\"2\",state=\"backup\"}"), Some(20.0));
    }

    #[test]
    fn rejected_input_is_counted_by_level_and_kind_per_source() {
        let metrics = NodeMetrics::new();
        let mut counters = RejectCounters::default();
        counters.frames.insert("header_checksum", 2);
        counters.bodies.insert("codec", 1);
        counters.entries.insert("reserved bytes are not zero", 4);
        metrics.record_rejected(7, &counters);
        metrics.record_rejected(7, &counters);
        metrics.record_rejected(8, &counters);
        let text = metrics.encode();
        let frame = "cohort_frames_rejected_total{level=\"frame\",kind=\"header_checksum\"}";
        let body = "cohort_frames_rejected_total{level=\"body\",kind=\"codec\"}";
        let entry = "cohort_frames_rejected_total{level=\"entry\",kind=\"reserved bytes are not zero\"}";
        assert_eq!(sample(&text, frame), Some(4.0));
        assert_eq!(sample(&text, body), Some(2.0));
        assert_eq!(sample(&text, entry), Some(8.0));

        counters.frames.insert("header_checksum", 3);
        metrics.record_rejected(7, &counters);
        assert_eq!(sample(&metrics.encode(), frame), Some(5.0));

        // Source 8 reconnected with fresh counters: its new count is all new.
        let mut fresh = RejectCounters::default();
        fresh.frames.insert("revision", 1);
        metrics.record_rejected(8, &fresh);
        let text = metrics.encode();
        assert_eq!(sample(&text, frame), Some(5.0));
        assert_eq!(sample(&text, "cohort_frames_rejected_total{level=\"frame\",kind=\"revision\"}"), Some(1.0));
    }

    #[test]
    fn drops_peers_and_latency_are_exported() {
        let metrics = NodeMetrics::new();
        metrics.add_dropped(Mailbox::Outbox, DropReason::MailboxFull, 2);
        metrics.add_dropped(Mailbox::PeerLink, DropReason::PeerDisconnected, 1);
        metrics.add_syncs(SyncKind::Log, 3);
        metrics.inc_socket_writes(Port::Peer);
        metrics.set_peers_connected(2);
        metrics.observe_commit_latency(Duration::from_micros(300));
        metrics.observe_commit_latency(Duration::from_millis(30));
        metrics.observe_commit_latency(Duration::from_secs(60));
        let text = metrics.encode();
        let dropped = |mailbox: &str, reason: &str| {
            sample(&text, &format!("cohort_frames_dropped_total{{mailbox=\"{mailbox}\",reason=\"{reason}\"}}"))
        };
        assert_eq!(dropped("outbox", "mailbox_full"), Some(2.0));
        assert_eq!(dropped("outbox", "mailbox_closed"), Some(0.0));
        assert_eq!(dropped("peer_link", "peer_disconnected"), Some(1.0));
        assert_eq!(metrics.dropped_total(), 3);
        assert_eq!(sample(&text, "cohort_syncs_total{kind=\"log\"}"), Some(3.0));
        assert_eq!(sample(&text, "cohort_syncs_total{kind=\"superblock\"}"), Some(0.0));
        assert_eq!(sample(&text, "cohort_socket_writes_total{port=\"peer\"}"), Some(1.0));
        assert_eq!(sample(&text, "cohort_peers_connected"), Some(2.0));
        assert_eq!(sample(&text, "cohort_commit_latency_seconds_count"), Some(3.0));
        assert_eq!(sample(&text, "cohort_commit_latency_seconds_bucket{le=\"0.0002\"}"), Some(0.0));
        assert_eq!(sample(&text, "cohort_commit_latency_seconds_bucket{le=\"0.0005\"}"), Some(1.0));
        assert_eq!(sample(&text, "cohort_commit_latency_seconds_bucket{le=\"0.05\"}"), Some(2.0));
        assert_eq!(sample(&text, "cohort_commit_latency_seconds_bucket{le=\"10.0\"}"), Some(2.0));
        assert_eq!(sample(&text, "cohort_commit_latency_seconds_bucket{le=\"+Inf\"}"), Some(3.0));
        let sum = sample(&text, "cohort_commit_latency_seconds_sum").expect("sum line");
        assert!((sum - 60.0303).abs() < 1e-9, "{sum}");
        metrics.set_peers_connected(0);
        assert_eq!(sample(&metrics.encode(), "cohort_peers_connected"), Some(0.0));
    }

    #[test]
    fn apply_latency_and_applied_ops_are_exported_per_group_kind() {
        let metrics = NodeMetrics::new();
        let default = metrics.group_kind("default");
        let ledger = metrics.group_kind("ledger");
        default.observe_apply(Duration::from_micros(3));
        default.observe_apply(Duration::from_millis(3));
        ledger.observe_apply(Duration::from_secs(2));
        // A second handle to the same kind shares its series.
        metrics.group_kind("ledger").observe_apply(Duration::from_nanos(500));
        let text = metrics.encode();
        assert!(text.contains("# TYPE cohort_apply_latency_seconds histogram\n"), "{text}");
        assert_eq!(sample(&text, "cohort_ops_applied_total{kind=\"default\"}"), Some(2.0));
        assert_eq!(sample(&text, "cohort_ops_applied_total{kind=\"ledger\"}"), Some(2.0));
        let bucket =
            |kind: &str, le: &str| format!("cohort_apply_latency_seconds_bucket{{le=\"{le}\",kind=\"{kind}\"}}");
        assert_eq!(sample(&text, &bucket("default", "0.000005")), Some(1.0), "{text}");
        assert_eq!(sample(&text, &bucket("default", "0.005")), Some(2.0), "{text}");
        assert_eq!(sample(&text, &bucket("ledger", "0.000001")), Some(1.0), "{text}");
        assert_eq!(sample(&text, &bucket("ledger", "1.0")), Some(1.0), "{text}");
        assert_eq!(sample(&text, &bucket("ledger", "+Inf")), Some(2.0), "{text}");
    }

    /// True if `word` reads like a requirement id (`R19`, `S1-S4`, `H4:`).
    fn is_requirement_id(word: &str) -> bool {
        let mut chars = word.chars();
        chars.next().is_some_and(|first| first.is_ascii_uppercase())
            && chars.next().is_some_and(|second| second.is_ascii_digit())
    }

    #[test]
    fn o2_help_texts_are_plain_words() {
        let metrics = NodeMetrics::new();
        metrics.update_shard(0, &ShardMetrics::default(), &HeartbeatGauges::default());
        let mut counters = RejectCounters::default();
        counters.frames.insert("truncated", 1);
        metrics.record_rejected(0, &counters);
        metrics.group_kind("default");
        metrics.set_wal_size_bytes(0, 4096);
        let text = metrics.encode();
        let helps: Vec<&str> = text.lines().filter_map(|line| line.strip_prefix("# HELP ")).collect();
        let types = text.lines().filter(|line| line.starts_with("# TYPE ")).count();
        assert_eq!(helps.len(), types, "every family has a help text:\n{text}");
        assert!(helps.len() >= 40, "{}", helps.len());
        for help in helps {
            let (name, words) = help.split_once(' ').expect("a help text after the name");
            let first = words.split([' ', ',', ':']).next().unwrap_or_default();
            assert!(!is_requirement_id(first), "{name}: {words:?} starts with a requirement id");
            assert!(words.chars().next().is_some_and(|first| first.is_ascii_uppercase() || first.is_ascii_digit()));
            assert!(words.ends_with('.'), "{name}: {words:?}");
        }
    }

    #[test]
    fn o2_build_info_is_one_series_at_one_with_version_and_revision() {
        let text = NodeMetrics::new().encode();
        let line = format!("cohort_build_info{{version=\"{BUILD_VERSION}\",revision=\"{BUILD_REVISION}\"}}");
        assert_eq!(sample(&text, &line), Some(1.0), "{text}");
        assert!(!BUILD_REVISION.is_empty() && BUILD_REVISION.chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn o2_client_requests_and_errors_are_counted_by_kind_from_zero() {
        let metrics = NodeMetrics::new();
        let text = metrics.encode();
        for kind in ["read", "write", "route_query"] {
            assert_eq!(sample(&text, &format!("cohort_client_requests_total{{kind=\"{kind}\"}}")), Some(0.0));
        }
        for code in ReplyError::ALL {
            let line = format!("cohort_client_errors_total{{kind=\"{}\"}}", code.name());
            assert_eq!(sample(&text, &line), Some(0.0), "{line}");
        }
        metrics.inc_client_request(RequestKind::Write);
        metrics.inc_client_request(RequestKind::Write);
        metrics.inc_client_route_query();
        metrics.inc_client_error(ReplyError::UnknownGroup);
        metrics.inc_client_redirect();
        let text = metrics.encode();
        assert_eq!(sample(&text, "cohort_client_requests_total{kind=\"write\"}"), Some(2.0));
        assert_eq!(sample(&text, "cohort_client_requests_total{kind=\"route_query\"}"), Some(1.0));
        assert_eq!(sample(&text, "cohort_client_errors_total{kind=\"unknown_group\"}"), Some(1.0));
        assert_eq!(sample(&text, "cohort_client_redirects_total"), Some(1.0));
        assert_eq!((metrics.client_requests(RequestKind::Read), metrics.client_errors(ReplyError::Busy)), (0, 0));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn o2_process_families_are_read_on_each_scrape() {
        let text = NodeMetrics::new().encode();
        for family in [
            "cohort_process_cpu_seconds_total",
            "cohort_process_resident_memory_bytes",
            "cohort_process_open_fds",
            "cohort_process_threads",
        ] {
            assert!(sample(&text, family).is_some(), "{family}:\n{text}");
        }
        assert!(text.contains("# TYPE cohort_process_cpu_seconds counter\n"), "{text}");
        assert!(!text.contains("cohort_metadata_epoch"), "no node watched yet");
    }

    #[test]
    fn deltas_never_go_negative() {
        let last = [5; SHARD_COUNTER_COUNT];
        let mut now = [9; SHARD_COUNTER_COUNT];
        assert_eq!(shard_deltas(&last, &now), [4; SHARD_COUNTER_COUNT]);
        now[4] = 1;
        assert_eq!(shard_deltas(&last, &now), now);

        let last: RejectTotals = [((RejectLevel::Frame, "truncated"), 3)].into();
        let gone: RejectTotals = [((RejectLevel::Body, "codec"), 1)].into();
        assert_eq!(reject_deltas(&last, &gone), gone);
        let same = last.clone();
        assert!(reject_deltas(&last, &same).is_empty());
    }

    #[test]
    fn metrics_can_be_shared_across_threads() {
        let metrics = std::sync::Arc::new(NodeMetrics::new());
        let threads: Vec<_> = (0..4)
            .map(|shard| {
                let metrics = std::sync::Arc::clone(&metrics);
                std::thread::spawn(move || {
                    for step in 1..=100 {
                        let snapshot = ShardMetrics { commit_batches_sent: step, ..ShardMetrics::default() };
                        metrics.update_shard(shard, &snapshot, &HeartbeatGauges::default());
                        metrics.add_dropped(Mailbox::Shard, DropReason::MailboxFull, 1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("no panic");
        }
        let text = metrics.encode();
        for shard in 0..4 {
            assert_eq!(sample(&text, &series("commit_batches_sent", shard)), Some(100.0));
        }
        assert_eq!(
            sample(&text, "cohort_frames_dropped_total{mailbox=\"shard\",reason=\"mailbox_full\"}"),
            Some(400.0)
        );
    }
}
