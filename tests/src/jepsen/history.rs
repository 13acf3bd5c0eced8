//! The run's history: every client operation as Jepsen records it, an
//! invocation and then one completion (`ok`, `fail` or `info`), with times
//! from one monotonic clock, and every delete and re-creation of a group
//! (H3) on the same clock. The checker, the report and the picture all
//! read this one record, so they cannot disagree about what happened.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The run's monotonic clock: nanoseconds since the workload started.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        Clock { start: Instant::now() }
    }

    /// Nanoseconds since the start.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` after the start.
    pub fn at(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }
}

/// Seconds, for reports, from clock nanoseconds.
pub fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// What an operation asked for. Values are unique per run; 0 is the
/// register's initial (empty) value and is never written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Read the key's register.
    Read,
    /// Write `value` to the key's register.
    Write {
        /// The unique value written.
        value: u64,
    },
}

/// How an operation completed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Completion {
    /// Done: a read's value, or the value a write replaced.
    Ok {
        /// The value read, or replaced.
        value: u64,
    },
    /// Definitely did not take effect.
    Fail {
        /// Why.
        reason: String,
    },
    /// Outcome unknown (no definite answer before the client gave up).
    Info {
        /// Why.
        reason: String,
    },
}

/// One operation: its invocation and its completion.
#[derive(Clone, Debug, Serialize)]
pub struct OpRecord {
    /// The logical client (Jepsen's process) that ran it.
    pub process: usize,
    /// The key (= group id).
    pub key: u64,
    /// What it asked for.
    pub kind: OpKind,
    /// When it was invoked (clock ns).
    pub invoke_ns: u64,
    /// When it completed, or when the client gave up on it (clock ns).
    pub complete_ns: u64,
    /// How it completed.
    pub completion: Completion,
    /// The node (1-based) that gave the definite answer, if any.
    pub node: Option<usize>,
}

impl OpRecord {
    /// True if it completed `ok`.
    pub fn is_ok(&self) -> bool {
        matches!(self.completion, Completion::Ok { .. })
    }

    /// True if it completed `info`.
    pub fn is_info(&self) -> bool {
        matches!(self.completion, Completion::Info { .. })
    }

    /// True if it completed `fail`.
    pub fn is_fail(&self) -> bool {
        matches!(self.completion, Completion::Fail { .. })
    }

    /// The value written, for a write.
    pub fn written(&self) -> Option<u64> {
        match self.kind {
            OpKind::Write { value } => Some(value),
            OpKind::Read => None,
        }
    }

    /// The value an `ok` completion carries.
    pub fn ok_value(&self) -> Option<u64> {
        match self.completion {
            Completion::Ok { value } => Some(value),
            _ => None,
        }
    }

    /// Latency, in seconds.
    pub fn latency_s(&self) -> f64 {
        seconds(self.complete_ns.saturating_sub(self.invoke_ns))
    }
}

/// H3: one delete of a group and its creation again under the same id,
/// by the operator of [`crate::jepsen::lifecycle`]. Between `invoke_ns`
/// and `complete_ns` the group's old life ends and its new one starts
/// empty; the checker takes the pair as one operation that empties the
/// register at some point in that interval.
#[derive(Clone, Debug, Serialize)]
pub struct Recreation {
    /// The group (= key).
    pub key: u64,
    /// The first delete was sent (clock ns).
    pub invoke_ns: u64,
    /// The metadata recorded the delete (clock ns), if it did.
    pub deleted_ns: Option<u64>,
    /// The first create was sent (clock ns), if one was.
    pub create_invoke_ns: Option<u64>,
    /// The metadata recorded the creation, or the operator gave up (clock ns).
    pub complete_ns: u64,
    /// The new life's incarnation, once the creation is recorded; `None`:
    /// the operator gave up (whether the group was deleted or created is
    /// then unknown: the checker lets the re-creation happen at any time
    /// after `invoke_ns`, or never).
    pub incarnation: Option<u64>,
    /// `cohort admin` commands sent (deletes and creates).
    pub commands: u32,
    /// What went wrong on the way, if anything (the last refusal or timeout).
    pub detail: Option<String>,
}

impl Recreation {
    /// True if the new life's creation is known to be recorded.
    pub fn is_done(&self) -> bool {
        self.incarnation.is_some()
    }
}

/// The shared history the client threads append to.
#[derive(Debug, Default)]
pub struct History {
    ops: Mutex<Vec<OpRecord>>,
    recreations: Mutex<Vec<Recreation>>,
}

impl History {
    /// Append one completed operation.
    pub fn push(&self, op: OpRecord) {
        debug_assert!(op.complete_ns >= op.invoke_ns, "an op completes after its invocation");
        self.ops.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(op);
    }

    /// Every operation so far, in invocation order.
    pub fn snapshot(&self) -> Vec<OpRecord> {
        let mut ops = self.ops.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        ops.sort_by_key(|op| (op.invoke_ns, op.process));
        ops
    }

    /// Append one finished re-creation.
    pub fn push_recreation(&self, recreation: Recreation) {
        debug_assert!(recreation.complete_ns >= recreation.invoke_ns, "a re-creation ends after it starts");
        self.recreations.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(recreation);
    }

    /// Every re-creation so far, in invocation order.
    pub fn recreations(&self) -> Vec<Recreation> {
        let mut recreations = self.recreations.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        recreations.sort_by_key(|recreation| recreation.invoke_ns);
        recreations
    }
}

/// The process number of the operator's delete/re-create pairs in the
/// event lines (the clients are numbered from 0).
pub const OPERATOR_PROCESS: &str = "operator";

/// The history as Jepsen's event lines: one JSON object per invocation and
/// per completion, in time order (`{"type":"invoke","process":0,...}`). A
/// re-creation is `f` `recreate` of process `operator`, its completion
/// `ok` with the new incarnation as its value, or `info`.
pub fn jepsen_lines(ops: &[OpRecord], recreations: &[Recreation]) -> String {
    let mut events: Vec<(u64, u8, serde_json::Value)> = Vec::with_capacity(ops.len() * 2 + recreations.len() * 2);
    for recreation in recreations {
        events.push((
            recreation.invoke_ns,
            0,
            serde_json::json!({"type": "invoke", "process": OPERATOR_PROCESS, "key": recreation.key,
                "f": "recreate", "value": null, "time": recreation.invoke_ns}),
        ));
        let kind = if recreation.is_done() { "ok" } else { "info" };
        events.push((
            recreation.complete_ns,
            1,
            serde_json::json!({"type": kind, "process": OPERATOR_PROCESS, "key": recreation.key,
                "f": "recreate", "value": recreation.incarnation, "time": recreation.complete_ns,
                "deleted": recreation.deleted_ns, "create_invoked": recreation.create_invoke_ns,
                "error": recreation.detail}),
        ));
    }
    for op in ops {
        let (f, value) = match op.kind {
            OpKind::Read => ("read", serde_json::Value::Null),
            OpKind::Write { value } => ("write", value.into()),
        };
        events.push((
            op.invoke_ns,
            0,
            serde_json::json!({"type": "invoke", "process": op.process, "key": op.key, "f": f,
                "value": value, "time": op.invoke_ns}),
        ));
        let (kind, value, reason) = match &op.completion {
            Completion::Ok { value } => ("ok", serde_json::Value::from(*value), None),
            Completion::Fail { reason } => ("fail", serde_json::Value::Null, Some(reason.clone())),
            Completion::Info { reason } => ("info", serde_json::Value::Null, Some(reason.clone())),
        };
        events.push((
            op.complete_ns,
            1,
            serde_json::json!({"type": kind, "process": op.process, "key": op.key, "f": f,
                "value": value, "written": op.written(), "time": op.complete_ns, "node": op.node,
                "error": reason}),
        ));
    }
    events.sort_by_key(|(time, order, _)| (*time, *order));
    let mut text = String::new();
    for (_, _, event) in events {
        text.push_str(&event.to_string());
        text.push('\n');
    }
    text
}
