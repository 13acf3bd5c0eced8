//! The spans of a shard's message flows, and the trace context of each write
//! that is in flight on this shard (see `docs/tracing.md`).
//!
//! The core is sans-IO and knows nothing of tracing, so the shard actor
//! reports what passes through it: a submit, each inbound message, and each
//! command the core emits. This module turns those into spans and remembers,
//! per op in flight, the context its children and its outgoing messages
//! need:
//!
//! - on the **primary**, `write` opens when the shard takes the submit (a
//!   child of the caller's `submit` span) and is filed under `(group, op)`
//!   when the op is appended. Each Prepare to a backup gets a `send_prepare`
//!   child, whose context goes in that frame's header. `commit` and `apply`
//!   open when the state machine applies the op, and `reply` when the answer
//!   goes back; `write` closes with the reply.
//! - on a **backup**, `prepare` (a child of the primary's `send_prepare`,
//!   from the header) opens when the Prepare arrives and closes when a
//!   PrepareOk covering it leaves. That PrepareOk gets a `send_prepare_ok`
//!   child, whose context goes in its header, so the primary's `prepare_ok`
//!   span lands in the same trace. `commit` and `apply` follow when the
//!   backup learns the commit point.
//!
//! An entry leaves the map once its op is committed on this node and its
//! span has closed (replied, or acknowledged), or when the group's role
//! changes (a view change keeps no in-flight op of the old view). The maps
//! are bounded ([`TRACED_OPS_MAX`], [`TRACED_SUBMITS_MAX`]).
//!
//! # Cost when tracing is off
//!
//! Every span here is made with the `tracing` macros, which return a
//! disabled span after one cached check of the callsite when no subscriber
//! wants its level. Nothing is filed for a disabled span, so the maps stay
//! empty, every lookup returns at an `is_empty` check, and the outgoing
//! context is [`TraceContext::NONE`]: no allocation and no hashing per
//! message.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use cohort_core::Role;
use cohort_messages::{
    ClientId, GroupId, LogEntry, Message, NodeId, Op, Request, RequestKind, RequestNumber, TraceContext, View,
};
use tracing::{Span, debug_span, info_span};

use crate::trace_context::{add_link, context_of, set_local_parent, set_remote_parent};

/// Ops in flight whose trace context one shard remembers. Past it the entry
/// with the lowest `(group, op)` is forgotten (its later spans are not
/// made), so a group that stopped committing cannot keep new writes from
/// being traced.
pub(crate) const TRACED_OPS_MAX: usize = 4096;

/// Submits waiting for their op number. Past it a submit is not traced;
/// entries whose caller gave up are dropped about once a second.
pub(crate) const TRACED_SUBMITS_MAX: usize = 4096;

/// Links from one `send_prepare_ok` to the other writes its PrepareOk
/// acknowledges (newest first); a backup catching up acknowledges many ops
/// at once, and a span with thousands of links helps nobody.
pub(crate) const ACK_LINKS_MAX: usize = 16;

/// What the shard remembers of one traced op.
struct OpTrace {
    /// The op's span here while it is open: the primary's `write` until the
    /// reply, a backup's `prepare` until its PrepareOk.
    span: Option<Span>,
    /// That span's context, for children made after it closed.
    context: TraceContext,
    /// `commit`, open from the apply to the core's `Committed`.
    commit: Option<Span>,
    /// The core reported the op committed here.
    committed: bool,
}

impl OpTrace {
    fn done(&self) -> bool {
        self.committed && self.span.is_none()
    }
}

#[derive(Default)]
struct Entries {
    /// Primary: submits whose op is not assigned yet, by (group, client,
    /// request), with the tick they came in.
    submitted: HashMap<(GroupId, ClientId, RequestNumber), (Span, u64)>,
    /// Ops in flight on this shard, by (group, op).
    ops: BTreeMap<(GroupId, Op), OpTrace>,
}

/// One shard's spans and in-flight trace contexts. Shared (`Arc`) by the
/// shard actor and its groups' state machine wrappers: on the shard's
/// thread, and on its apply worker for a group applied there (D2). The
/// lock is held for a map update, never across an apply.
pub(crate) struct ShardTraces {
    node: NodeId,
    entries: Mutex<Entries>,
}

impl ShardTraces {
    /// The traces of a shard of `node`.
    pub(crate) fn new(node: NodeId) -> ShardTraces {
        ShardTraces { node, entries: Mutex::new(Entries::default()) }
    }

    /// The entries, locked. A panic while they were held leaves them as
    /// they were: traces are best effort, never a reason to stop.
    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard took a submit whose caller's span is `parent` at tick
    /// `now`: open `write`.
    pub(crate) fn on_submit(&self, client: ClientId, request: RequestNumber, group: GroupId, parent: &Span, now: u64) {
        let span = info_span!(
            parent: parent,
            "write",
            cohort.node = self.node.0,
            cohort.group = group.0,
            cohort.client = client.0,
            cohort.request = request.0,
            cohort.op = tracing::field::Empty,
        );
        if span.is_disabled() {
            return;
        }
        let mut entries = self.entries();
        if entries.submitted.len() < TRACED_SUBMITS_MAX {
            entries.submitted.insert((group, client, request), (span, now));
        }
    }

    /// Forget submits that came in before tick `tick` and got no answer
    /// (their caller gave up long ago).
    pub(crate) fn forget_submits_before(&self, tick: u64) {
        let mut entries = self.entries();
        if !entries.submitted.is_empty() {
            entries.submitted.retain(|_, (_, since)| *since >= tick);
        }
    }

    /// The handling span of an inbound single-group message, to be entered
    /// while the core handles it. A Prepare's span is filed as its op's
    /// span on this backup.
    pub(crate) fn on_message(&self, from: NodeId, message: &Message, trace: TraceContext) -> Span {
        let (node, peer) = (self.node.0, from.0);
        let span = match message {
            Message::Prepare(prepare) => {
                let (group, op) = (prepare.group, prepare.entry.op);
                let span = info_span!(
                    parent: None,
                    "prepare",
                    otel.kind = "consumer",
                    cohort.node = node,
                    cohort.peer = peer,
                    cohort.group = group.0,
                    cohort.op = op.0,
                    cohort.view = prepare.view.0,
                );
                set_remote_parent(&span, trace);
                self.file(group, op, &span);
                return span;
            }
            Message::PrepareOk(ok) => info_span!(
                parent: None,
                "prepare_ok",
                otel.kind = "consumer",
                cohort.node = node,
                cohort.peer = peer,
                cohort.group = ok.group.0,
                cohort.op = ok.op.0,
            ),
            Message::StartViewChange(_) | Message::DoViewChange(_) | Message::StartView(_) => info_span!(
                parent: None,
                "view_change_message",
                otel.kind = "consumer",
                cohort.node = node,
                cohort.peer = peer,
                cohort.message = message.command().name(),
                cohort.group = message.group().map(|group| group.0),
            ),
            Message::SessionOpen(_)
            | Message::SessionOpened(_)
            | Message::SessionKeepalive(_)
            | Message::SessionExpired(_) => info_span!(
                parent: None,
                "session_message",
                otel.kind = "consumer",
                cohort.node = node,
                cohort.peer = peer,
                cohort.message = message.command().name(),
            ),
            _ => debug_span!(
                parent: None,
                "message",
                otel.kind = "consumer",
                cohort.node = node,
                cohort.peer = peer,
                cohort.message = message.command().name(),
                cohort.group = message.group().map(|group| group.0),
            ),
        };
        set_remote_parent(&span, trace);
        span
    }

    /// The handling span of a heartbeat batch (Commit or CommitReply
    /// entries of this shard), at debug level.
    pub(crate) fn on_batch(&self, from: NodeId, replies: bool, entries: usize) -> Span {
        let (node, peer) = (self.node.0, from.0);
        if replies {
            debug_span!(parent: None, "commit_reply_batch", cohort.node = node, cohort.peer = peer, cohort.entries = entries)
        } else {
            debug_span!(parent: None, "commit_batch", cohort.node = node, cohort.peer = peer, cohort.entries = entries)
        }
    }

    /// A heartbeat batch leaves for `to` (debug level, no trace context).
    pub(crate) fn on_send_batch(&self, to: NodeId, replies: bool, entries: usize) {
        let (node, peer) = (self.node.0, to.0);
        let _span = if replies {
            debug_span!(
                parent: None,
                "send_commit_reply_batch",
                otel.kind = "producer",
                cohort.node = node,
                cohort.peer = peer,
                cohort.entries = entries,
            )
        } else {
            debug_span!(
                parent: None,
                "send_commit_batch",
                otel.kind = "producer",
                cohort.node = node,
                cohort.peer = peer,
                cohort.entries = entries,
            )
        };
    }

    /// The core appended `entry`: on the primary, the op's number is now
    /// known, so its `write` span is filed under `(group, op)`.
    pub(crate) fn on_append(&self, group: GroupId, entry: &LogEntry) {
        let mut entries = self.entries();
        if entries.submitted.is_empty() {
            return;
        }
        let Some((span, _)) = entries.submitted.remove(&(group, entry.client, entry.request)) else { return };
        span.record("cohort.op", entry.op.0);
        drop(entries);
        self.file(group, entry.op, &span);
    }

    /// The context to put in the header of `message` to `to`: a Prepare or
    /// PrepareOk of a traced op gets a `send_*` span, whose context it is.
    /// A PrepareOk also closes the `prepare` spans of the ops it covers.
    pub(crate) fn on_send(&self, to: NodeId, message: &Message) -> TraceContext {
        let mut entries = self.entries();
        if entries.ops.is_empty() {
            return TraceContext::NONE;
        }
        match message {
            Message::Prepare(prepare) => {
                let (group, op) = (prepare.group, prepare.entry.op);
                let Some(entry) = entries.ops.get(&(group, op)) else { return TraceContext::NONE };
                let span = info_span!(
                    parent: None,
                    "send_prepare",
                    otel.kind = "producer",
                    cohort.node = self.node.0,
                    cohort.peer = to.0,
                    cohort.group = group.0,
                    cohort.op = op.0,
                );
                set_local_parent(&span, entry.context);
                context_of(&span)
            }
            Message::PrepareOk(ok) => {
                // The newest op it covers whose `prepare` is still open names
                // the trace; every op it covers is acknowledged, and the
                // others whose `prepare` was open are linked (an ack covers
                // several writes, each maybe of another trace).
                let mut acknowledged: Vec<TraceContext> = Vec::new();
                let mut finished = Vec::new();
                for (&key, entry) in entries.ops.range_mut((ok.group, Op(0))..=(ok.group, ok.op)) {
                    if entry.span.take().is_some() {
                        acknowledged.push(entry.context);
                    }
                    if entry.done() {
                        finished.push(key);
                    }
                }
                for key in finished {
                    entries.ops.remove(&key);
                }
                let Some(parent) = acknowledged.pop() else { return TraceContext::NONE };
                let span = info_span!(
                    parent: None,
                    "send_prepare_ok",
                    otel.kind = "producer",
                    cohort.node = self.node.0,
                    cohort.peer = to.0,
                    cohort.group = ok.group.0,
                    cohort.op = ok.op.0,
                );
                set_local_parent(&span, parent);
                for other in acknowledged.iter().rev().take(ACK_LINKS_MAX) {
                    add_link(&span, *other);
                }
                context_of(&span)
            }
            _ => TraceContext::NONE,
        }
    }

    /// The core answered a client (`op` 0 for reads, errors and redirects):
    /// a `reply` span, and the primary's `write` closes.
    pub(crate) fn on_answer(
        &self,
        group: GroupId,
        client: ClientId,
        request: RequestNumber,
        op: Op,
        outcome: &'static str,
    ) {
        let mut entries = self.entries();
        if entries.submitted.is_empty() && entries.ops.is_empty() {
            return;
        }
        let parent = match entries.submitted.remove(&(group, client, request)) {
            Some((span, _)) => context_of(&span),
            None => match entries.ops.get_mut(&(group, op)) {
                Some(entry) => {
                    entry.span = None;
                    entry.context
                }
                None => return,
            },
        };
        if entries.ops.get(&(group, op)).is_some_and(OpTrace::done) {
            entries.ops.remove(&(group, op));
        }
        let span = info_span!(
            parent: None,
            "reply",
            cohort.node = self.node.0,
            cohort.group = group.0,
            cohort.op = op.0,
            cohort.outcome = outcome,
        );
        set_local_parent(&span, parent);
    }

    /// The state machine applies `op` of `group`: `commit` opens (until
    /// [`ShardTraces::on_committed`]) and the returned `apply` span is to be
    /// entered around the state machine's call. Disabled for untraced ops.
    pub(crate) fn on_apply(&self, group: GroupId, op: Op) -> Span {
        let mut entries = self.entries();
        if entries.ops.is_empty() {
            return Span::none();
        }
        let Some(entry) = entries.ops.get_mut(&(group, op)) else { return Span::none() };
        let (node, group, op) = (self.node.0, group.0, op.0);
        let commit = info_span!(parent: None, "commit", cohort.node = node, cohort.group = group, cohort.op = op);
        set_local_parent(&commit, entry.context);
        let apply = info_span!(parent: &commit, "apply", cohort.node = node, cohort.group = group, cohort.op = op);
        entry.commit = Some(commit);
        apply
    }

    /// Ops up to `op` of `group` are committed here: their `commit` spans
    /// close, and entries whose own span closed too leave.
    pub(crate) fn on_committed(&self, group: GroupId, op: Op) {
        let mut entries = self.entries();
        if entries.ops.is_empty() {
            return;
        }
        let mut finished = Vec::new();
        for (&key, entry) in entries.ops.range_mut((group, Op(0))..=(group, op)) {
            entry.commit = None;
            entry.committed = true;
            if entry.done() {
                finished.push(key);
            }
        }
        for key in finished {
            entries.ops.remove(&key);
        }
    }

    /// `group`'s replica changed role (a view change): an instant
    /// `role_changed` span, and the group's in-flight entries leave.
    pub(crate) fn on_role_changed(&self, group: GroupId, view: View, role: Role) {
        let _span = info_span!(
            parent: None,
            "role_changed",
            cohort.node = self.node.0,
            cohort.group = group.0,
            cohort.view = view.0,
            cohort.role = role_name(role),
        );
        let mut entries = self.entries();
        if entries.ops.is_empty() {
            return;
        }
        let keys: Vec<_> = entries.ops.range((group, Op(0))..=(group, Op(u64::MAX))).map(|(key, _)| *key).collect();
        for key in keys {
            entries.ops.remove(&key);
        }
    }

    /// Remember `span` as the span of `op` of `group` (if enabled and not
    /// already filed: a re-sent Prepare keeps the first).
    fn file(&self, group: GroupId, op: Op, span: &Span) {
        let context = context_of(span);
        if !context.is_some() {
            return;
        }
        let mut entries = self.entries();
        if entries.ops.contains_key(&(group, op)) {
            return;
        }
        if entries.ops.len() >= TRACED_OPS_MAX {
            entries.ops.pop_first();
        }
        entries.ops.insert((group, op), OpTrace { span: Some(span.clone()), context, commit: None, committed: false });
    }

    /// Ops whose context this shard remembers (for tests and bounds checks).
    #[cfg(test)]
    fn ops_in_flight(&self) -> usize {
        self.entries().ops.len()
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Primary => "primary",
        Role::Backup => "backup",
        Role::ViewChange => "view_change",
        Role::Learner => "learner",
    }
}

/// The span of one submit on the node that takes it (`NodeHandle::submit_as` in cohort-runtime):
/// the root of a write's trace, or a child of the caller's current span, so
/// a host that traces its own request continues that trace.
pub fn submit_span(node: NodeId, request: &Request) -> Span {
    info_span!(
        "submit",
        cohort.node = node.0,
        cohort.group = request.group.0,
        cohort.client = request.client.0,
        cohort.request = request.request.0,
        cohort.kind = request_kind_name(request.kind),
    )
}

/// The span of one Request frame on the client port: a child of the
/// client's span if its frame header carried a trace context.
pub fn client_request_span(node: NodeId, request: &Request, trace: TraceContext) -> Span {
    let span = info_span!(
        parent: None,
        "client_request",
        otel.kind = "server",
        cohort.node = node.0,
        cohort.group = request.group.0,
        cohort.client = request.client.0,
        cohort.request = request.request.0,
        cohort.kind = request_kind_name(request.kind),
    );
    set_remote_parent(&span, trace);
    span
}

fn request_kind_name(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Read => "read",
        RequestKind::Write => "write",
        RequestKind::WriteBatch => "write_batch",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use cohort_messages::{Incarnation, MemberIndex, Prepare, PrepareOk};
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Keeps every exported span.
    #[derive(Clone, Debug, Default)]
    struct Recorder(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Recorder {
        fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
            self.0.lock().expect("recorder").extend(batch);
            std::future::ready(Ok(()))
        }
    }

    /// Run `f` under a subscriber that exports to memory; the spans it ended.
    fn traced<T>(f: impl FnOnce() -> T) -> (T, Vec<SpanData>) {
        let recorder = Recorder::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(recorder.clone()).build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let result = tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
        let spans = recorder.0.lock().expect("recorder").clone();
        (result, spans)
    }

    fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
        spans.iter().filter(|span| span.name == name).collect()
    }

    const PRIMARY: NodeId = NodeId(1);
    const BACKUP: NodeId = NodeId(2);

    fn entry(op: u64, client: u128) -> LogEntry {
        LogEntry {
            op: Op(op),
            view: View(0),
            client: ClientId(client),
            request: RequestNumber(1),
            operation: Bytes::from_static(b"x"),
        }
    }

    fn prepare(group: u64, op: u64) -> Message {
        Message::Prepare(Prepare {
            group: GroupId(group),
            incarnation: Incarnation(1),
            view: View(0),
            commit: Op(0),
            replica: MemberIndex(0),
            entry: entry(op, u128::from(op)),
        })
    }

    fn prepare_ok(group: u64, op: u64) -> Message {
        Message::PrepareOk(PrepareOk {
            group: GroupId(group),
            incarnation: Incarnation(1),
            view: View(0),
            op: Op(op),
            replica: MemberIndex(1),
        })
    }

    /// The primary's side of one write of `group` at `op`.
    fn primary_write(traces: &ShardTraces, group: GroupId, op: Op) -> TraceContext {
        let submit = info_span!("submit");
        traces.on_submit(ClientId(7), RequestNumber(1), group, &submit, 0);
        traces.on_append(group, &entry(op.0, 7));
        let sent = traces.on_send(BACKUP, &prepare(group.0, op.0));
        drop(traces.on_apply(group, op));
        traces.on_answer(group, ClientId(7), RequestNumber(1), op, "ok");
        traces.on_committed(group, op);
        sent
    }

    #[test]
    fn off_files_nothing_and_sends_no_context() {
        let traces = ShardTraces::new(PRIMARY);
        assert_eq!(primary_write(&traces, GroupId(1), Op(1)), TraceContext::NONE);
        // (Whether the span is disabled depends on the other tests' scoped
        // subscribers, which make callsites "sometimes" interesting; either
        // way there is no OpenTelemetry context, so nothing is filed.)
        drop(traces.on_message(PRIMARY, &prepare(1, 2), TraceContext::NONE));
        assert_eq!(traces.on_send(PRIMARY, &prepare_ok(1, 2)), TraceContext::NONE);
        assert_eq!(traces.ops_in_flight(), 0);
        assert!(traces.entries().submitted.is_empty());
    }

    #[test]
    fn a_primary_write_is_one_trace_and_leaves_no_entry() {
        let traces = ShardTraces::new(PRIMARY);
        let (sent, spans) = traced(|| {
            let sent = primary_write(&traces, GroupId(1), Op(1));
            assert_eq!(traces.ops_in_flight(), 0, "reply and commit remove the entry");
            sent
        });
        assert!(sent.is_some(), "the Prepare carries a context");
        let submit = named(&spans, "submit")[0];
        let trace_id = submit.span_context.trace_id();
        assert!(spans.iter().all(|span| span.span_context.trace_id() == trace_id), "one trace");
        let write = named(&spans, "write")[0];
        assert_eq!(write.parent_span_id, submit.span_context.span_id());
        let send = named(&spans, "send_prepare")[0];
        assert_eq!(send.parent_span_id, write.span_context.span_id());
        assert_eq!(sent.span_id, send.span_context.span_id().to_bytes(), "the header names send_prepare");
        let commit = named(&spans, "commit")[0];
        assert_eq!(commit.parent_span_id, write.span_context.span_id());
        assert_eq!(named(&spans, "apply")[0].parent_span_id, commit.span_context.span_id());
        assert_eq!(named(&spans, "reply")[0].parent_span_id, write.span_context.span_id());
    }

    #[test]
    fn a_backup_acks_under_the_newest_write_and_links_the_others() {
        let traces = ShardTraces::new(BACKUP);
        let first = TraceContext { trace_id: [1; 16], span_id: [1; 8], flags: 1 };
        let second = TraceContext { trace_id: [2; 16], span_id: [2; 8], flags: 1 };
        let (ack, spans) = traced(|| {
            drop(traces.on_message(PRIMARY, &prepare(1, 1), first));
            drop(traces.on_message(PRIMARY, &prepare(1, 2), second));
            assert_eq!(traces.ops_in_flight(), 2);
            let ack = traces.on_send(PRIMARY, &prepare_ok(1, 2));
            assert_eq!(traces.ops_in_flight(), 2, "acked but not committed yet");
            drop(traces.on_apply(GroupId(1), Op(1)));
            drop(traces.on_apply(GroupId(1), Op(2)));
            traces.on_committed(GroupId(1), Op(2));
            assert_eq!(traces.ops_in_flight(), 0, "acked and committed: gone");
            ack
        });
        assert_eq!(ack.trace_id, [2; 16], "the ack continues the newest write's trace");
        let prepares = named(&spans, "prepare");
        assert_eq!(prepares.len(), 2);
        assert_eq!(prepares[0].parent_span_id.to_bytes(), [1; 8], "the header's span is the parent");
        let send_ok = named(&spans, "send_prepare_ok")[0];
        assert_eq!(send_ok.links.len(), 1, "the older write it also acknowledges is linked");
        assert_eq!(send_ok.links[0].span_context.trace_id().to_bytes(), [1; 16]);
        assert_eq!(named(&spans, "commit").len(), 2, "each write commits in its own trace");
    }

    #[test]
    fn a_role_change_forgets_the_group_and_the_map_is_bounded() {
        let traces = ShardTraces::new(BACKUP);
        let header = TraceContext { trace_id: [3; 16], span_id: [3; 8], flags: 1 };
        traced(|| {
            for op in 1..=3 {
                drop(traces.on_message(PRIMARY, &prepare(1, op), header));
                drop(traces.on_message(PRIMARY, &prepare(2, op), header));
            }
            assert_eq!(traces.ops_in_flight(), 6);
            traces.on_role_changed(GroupId(1), View(1), Role::ViewChange);
            assert_eq!(traces.ops_in_flight(), 3, "group 2 keeps its entries");
            for op in 4..=(TRACED_OPS_MAX as u64 + 10) {
                drop(traces.on_message(PRIMARY, &prepare(3, op), header));
            }
            assert_eq!(traces.ops_in_flight(), TRACED_OPS_MAX);
            let newest = traces.on_send(PRIMARY, &prepare_ok(3, TRACED_OPS_MAX as u64 + 10));
            assert!(newest.is_some(), "the newest writes are the ones kept");
        });
    }
}
