//! One client write is one trace across three nodes (O: tracing).
//!
//! An in-process OTLP/HTTP receiver stands in for Jaeger (which cannot run on
//! this machine): a few dozen lines of tokio that accept `POST /v1/traces`
//! and decode each `ExportTraceServiceRequest` with opentelemetry-proto. The
//! three nodes run in this process over loopback TCP and share the global
//! tracer provider, so every span names its node in `cohort.node`. This file
//! is its own test binary because the subscriber it installs is global.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cohort_runtime::config::{ClusterConfig, TelemetryConfig};
use cohort_runtime::prelude::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLUSTER: ClusterId = ClusterId(0xC0_4087_7ACE);
const GROUP: GroupId = GroupId(0);

/// One received span, with what the assertions need.
#[derive(Clone, Debug)]
struct Received {
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    name: String,
    start_ns: u64,
    attributes: HashMap<String, String>,
    links: usize,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    fn node(&self) -> u64 {
        self.attribute("cohort.node").and_then(|node| node.parse().ok()).unwrap_or(0)
    }
}

fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(text)) => text.clone(),
        Some(Value::IntValue(int)) => int.to_string(),
        Some(Value::BoolValue(flag)) => flag.to_string(),
        Some(Value::DoubleValue(double)) => double.to_string(),
        other => format!("{other:?}"),
    }
}

fn collect(request: ExportTraceServiceRequest, into: &Mutex<Vec<Received>>) {
    let mut received = into.lock().expect("receiver lock");
    for resource_spans in request.resource_spans {
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                let attributes = span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text_of(kv.value.as_ref().and_then(|v| v.value.as_ref()))))
                    .collect();
                received.push(Received {
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                    parent_span_id: span.parent_span_id,
                    name: span.name,
                    start_ns: span.start_time_unix_nano,
                    attributes,
                    links: span.links.len(),
                });
            }
        }
    }
}

/// Start the OTLP/HTTP receiver on its own thread and runtime; returns its
/// address and what it has received.
fn start_receiver() -> (SocketAddr, Arc<Mutex<Vec<Received>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
    listener.set_nonblocking(true).expect("nonblocking");
    let address = listener.local_addr().expect("address");
    let spans = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&spans);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                tokio::spawn(serve_connection(stream, Arc::clone(&sink)));
            }
        });
    });
    (address, spans)
}

/// HTTP/1.1 with keep-alive: `POST /v1/traces` with a Content-Length body
/// (what the blocking reqwest client sends), answered `200` with an empty
/// `ExportTraceServiceResponse`.
async fn serve_connection(mut stream: tokio::net::TcpStream, sink: Arc<Mutex<Vec<Received>>>) {
    let mut buffer = Vec::new();
    loop {
        let head_end = loop {
            if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
        let request_line = head.lines().next().unwrap_or_default().to_owned();
        let length: usize = head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse().ok())
            .unwrap_or(0);
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        }
        let body: Vec<u8> = buffer.drain(..head_end + length).skip(head_end).collect();
        let status = if request_line.starts_with("POST /v1/traces ") {
            match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    collect(request, &sink);
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            }
        } else {
            "404 Not Found"
        };
        let response =
            format!("HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn start_node(index: usize, addresses: &[SocketAddr], dir: &std::path::Path) -> Node {
    let node = NodeId(index as u64 + 1);
    let timing = ClusterConfig {
        tick: Duration::from_millis(50),
        commit_broadcast_interval: Duration::from_millis(250),
        commit_heartbeat_timeout: Duration::from_secs(2),
        commit_idle_heartbeat_interval: Duration::from_millis(500),
        commit_idle_heartbeat_timeout: Duration::from_secs(2),
        view_change_timeout: Duration::from_millis(500),
        repair_timeout: Duration::from_millis(100),
        commit_quiesce_timeout: None,
    };
    let certs = dir.join("certs");
    if !certs.join(cohort_runtime::tls::CA_CERT_FILE).exists() {
        cohort_runtime::tls::local_cluster(&certs, (1..=3).map(NodeId)).expect("throwaway certificates");
    }
    let mut builder = NodeBuilder::new(CLUSTER, node)
        .tls(cohort_runtime::tls::node_files(&certs, node))
        .cluster_config(timing)
        .listen(addresses[index])
        .data_dir(dir.join(format!("node-{}", node.0)))
        .state_machine(|_| Box::new(Register::default()))
        .group(GroupPlacement::new(GROUP, vec![NodeId(1), NodeId(2), NodeId(3)]));
    for (peer, address) in addresses.iter().enumerate() {
        if peer != index {
            builder = builder.peer(NodeId(peer as u64 + 1), *address);
        }
    }
    builder.start().expect("node starts")
}

/// Wait until `events` reports ops up to `op` committed.
async fn committed(events: &mut tokio::sync::mpsc::Receiver<GroupEvent>, op: Op) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, events.recv()).await {
        if matches!(event, GroupEvent::Committed { op: at, .. } if at >= op) {
            return true;
        }
    }
    false
}

/// Run the cluster, submit one write to the primary, and wait until every
/// node applied it. Returns the op.
fn run_cluster_and_write(dir: &std::path::Path) -> Op {
    let system = actix_rt::System::new();
    system.block_on(async {
        let addresses: Vec<SocketAddr> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect::<Vec<_>>()
            .iter()
            .map(|listener| listener.local_addr().expect("address"))
            .collect();
        let nodes: Vec<Node> = (0..3).map(|i| start_node(i, &addresses, dir)).collect();
        let handles: Vec<NodeHandle> = nodes.iter().map(Node::handle).collect();
        // Node 1 is the view-0 primary of the group: wait until it acts as one.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !handles[0].report().await.primaries.contains(&GROUP) || handles.iter().any(|h| h.connected_peers() < 2) {
            assert!(std::time::Instant::now() < deadline, "node 1 never became the primary");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut backups = Vec::new();
        for handle in &handles[1..] {
            backups.push(handle.subscribe(GROUP).await.expect("a backup of the group"));
        }
        let committed_op = handles[0]
            .submit(GROUP, RequestKind::Write, Bytes::from_static(b"traced"), Duration::from_secs(10))
            .await
            .expect("the write commits")
            .op;
        for events in &mut backups {
            assert!(committed(events, committed_op).await, "every backup applies the write");
        }
        // Let the last spans end (the handlers that applied it return).
        tokio::time::sleep(Duration::from_millis(200)).await;
        for node in nodes {
            node.stop();
        }
        committed_op
    })
}

/// The span of `trace` named `name` on `node` (with `peer`, if given); fails
/// with the whole trace printed if there is not exactly one.
fn one<'a>(trace: &'a [Received], name: &str, node: u64, peer: Option<u64>) -> &'a Received {
    let found: Vec<&Received> = trace
        .iter()
        .filter(|span| span.name == name && span.node() == node)
        .filter(|span| peer.is_none_or(|peer| span.attribute("cohort.peer") == Some(peer.to_string().as_str())))
        .collect();
    assert_eq!(found.len(), 1, "{name} on node {node} (peer {peer:?}): {found:#?}\nin trace:\n{}", draw(trace));
    found[0]
}

/// The trace as an indented tree, for failure messages and the log.
fn draw(trace: &[Received]) -> String {
    fn walk(trace: &[Received], parent: &[u8], depth: usize, out: &mut String) {
        let mut children: Vec<&Received> = trace.iter().filter(|span| span.parent_span_id == parent).collect();
        children.sort_by_key(|span| span.start_ns);
        for span in children {
            let peer = span.attribute("cohort.peer").map(|peer| format!(" peer={peer}")).unwrap_or_default();
            let links = if span.links > 0 { format!(" links={}", span.links) } else { String::new() };
            out.push_str(&format!("{}{} [node {}{peer}{links}]\n", "  ".repeat(depth), span.name, span.node()));
            walk(trace, &span.span_id, depth + 1, out);
        }
    }
    let mut out = String::new();
    walk(trace, &[], 0, &mut out);
    out
}

#[test]
fn one_write_is_one_trace_across_three_nodes() {
    let (receiver, spans) = start_receiver();
    let config =
        TelemetryConfig { otlp_endpoint: Some(format!("http://{receiver}/v1/traces")), ..TelemetryConfig::default() };
    let guard = cohort_runtime::otlp::init_tracing(&config, None).expect("export starts").expect("export is on");
    let dir = std::env::temp_dir().join(format!("cohort-tracing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let op = run_cluster_and_write(&dir);
    guard.shutdown().expect("the last batch is sent");
    let _ = std::fs::remove_dir_all(&dir);

    let received = spans.lock().expect("receiver lock").clone();
    for span in &received {
        assert!(
            !["h2", "hyper", "reqwest", "opentelemetry"].iter().any(|noisy| span.name.contains(noisy)),
            "the exporter's own spans are filtered: {span:?}"
        );
        assert!(span.node() != 0, "every span names its node: {span:?}");
    }
    // `submit` registers its one-shot client first (H5: request 1, a trace
    // of its own); the write is request 2.
    let submits: Vec<&Received> =
        received.iter().filter(|span| span.name == "submit" && span.attribute("cohort.request") == Some("2")).collect();
    assert_eq!(submits.len(), 1, "one submit of the write: {submits:#?}");
    let submit = submits[0];
    let trace: Vec<Received> = received.iter().filter(|span| span.trace_id == submit.trace_id).cloned().collect();
    println!("the write's trace ({} spans):\n{}", trace.len(), draw(&trace));
    let mut others: Vec<&str> =
        received.iter().filter(|span| span.trace_id != submit.trace_id).map(|span| span.name.as_str()).collect();
    others.sort_unstable();
    others.dedup();
    println!("other traces' spans: {others:?}");

    // One trace, with spans from all three nodes.
    let mut nodes: Vec<u64> = trace.iter().map(Received::node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    assert_eq!(nodes, vec![1, 2, 3], "spans from every node:\n{}", draw(&trace));
    // Every parent is in the trace; only the submit is a root.
    for span in &trace {
        if span.span_id == submit.span_id {
            assert!(span.parent_span_id.is_empty(), "submit is the root");
        } else {
            assert!(
                trace.iter().any(|parent| parent.span_id == span.parent_span_id),
                "{} on node {} has its parent in the trace:\n{}",
                span.name,
                span.node(),
                draw(&trace)
            );
        }
    }
    // The primary's side.
    let write = one(&trace, "write", 1, None);
    assert_eq!(write.parent_span_id, submit.span_id, "write is the submit's child");
    assert_eq!(write.attribute("cohort.op"), Some(op.0.to_string().as_str()), "write names its op");
    let commit = one(&trace, "commit", 1, None);
    assert_eq!(commit.parent_span_id, write.span_id, "the primary's commit is the write's child");
    assert_eq!(one(&trace, "apply", 1, None).parent_span_id, commit.span_id, "apply is the commit's child");
    let reply = one(&trace, "reply", 1, None);
    assert_eq!(reply.parent_span_id, write.span_id, "reply is the write's child");
    assert_eq!(reply.attribute("cohort.outcome"), Some("ok"));
    // Each backup's side, and the ack back at the primary.
    for backup in [2, 3] {
        let send = one(&trace, "send_prepare", 1, Some(backup));
        assert_eq!(send.parent_span_id, write.span_id, "send_prepare to {backup} is the write's child");
        let prepare = one(&trace, "prepare", backup, Some(1));
        assert_eq!(prepare.parent_span_id, send.span_id, "node {backup}'s prepare continues the header's context");
        let ack = one(&trace, "send_prepare_ok", backup, Some(1));
        assert_eq!(ack.parent_span_id, prepare.span_id, "node {backup}'s ack is its prepare's child");
        let acked = one(&trace, "prepare_ok", 1, Some(backup));
        assert_eq!(acked.parent_span_id, ack.span_id, "the primary's prepare_ok from {backup} continues the ack");
        let backup_commit = one(&trace, "commit", backup, None);
        assert_eq!(backup_commit.parent_span_id, prepare.span_id, "node {backup} commits under its prepare");
        assert_eq!(one(&trace, "apply", backup, None).parent_span_id, backup_commit.span_id);
    }
}
