//! T4 and T5 on a real node's admin port (real TCP on loopback, actix-web
//! serving): operator commands need the node's token and a JSON body, every
//! refusal is counted in `/metrics` by port and reason, `/status` hides
//! session ids and incarnations from callers without the token, `/metrics`
//! may be served on a listener of its own, and slow clients cannot stop the
//! port answering.
//!
//! No test asserts a speed: answers must arrive within generous bounds
//! ([`ANSWER_WAIT_MAX`]), which a stalled server would miss.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use cohort_runtime::admin::AdminToken;
use cohort_runtime::prelude::*;
use serde_json::Value;

const TOKEN: &str = "the-admin-token-of-node-one";

/// How long any answer of the admin port may take in these tests.
const ANSWER_WAIT_MAX: Duration = Duration::from_secs(5);

fn token() -> AdminToken {
    AdminToken::new(TOKEN).expect("a valid token")
}

/// One node with group 0, an admin port and, if given, an admin token.
fn start_node(token: Option<AdminToken>) -> LocalCluster {
    let mut builder = LocalCluster::builder(1)
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [GroupId(0)])
        .admin_ports();
    if let Some(token) = token {
        builder = builder.admin_token(token);
    }
    builder.start().expect("the node starts")
}

fn admin(cluster: &LocalCluster) -> SocketAddr {
    cluster.node(NodeId(1)).and_then(Node::admin_address).expect("an admin port")
}

/// An answer: status code, head and body.
struct Answer {
    code: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Send `request` as written and read the whole answer (the port closes
/// each connection after one answer).
fn raw(address: SocketAddr, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect_timeout(&address, ANSWER_WAIT_MAX).expect("connect");
    stream.set_read_timeout(Some(ANSWER_WAIT_MAX)).expect("timeout");
    stream.write_all(request).expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer within the bound");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("a status code");
    Answer { code, head: head.to_owned(), body: body.to_owned() }
}

/// A request with `headers` (each ending in CRLF) and `body`.
fn request(method: &str, path: &str, headers: &str, body: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

const JSON: &str = "Content-Type: application/json\r\n";

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

/// The value of `cohort_refusals_total{port="admin",reason=...}`.
fn refusals(address: SocketAddr, reason: &str) -> Option<u64> {
    let metrics = raw(address, &request("GET", "/metrics", "", ""));
    let series = format!("cohort_refusals_total{{port=\"admin\",reason=\"{reason}\"}} ");
    metrics.body.lines().find_map(|line| line.strip_prefix(&series)?.parse().ok())
}

/// A cancel of an operation that never ran: the metadata group refuses it
/// (409), so a 409 shows the command got past the port's checks.
const CANCEL: &str = "/admin/operations/5/cancel";

#[actix_rt::test]
async fn t4_post_without_token_is_refused_and_counted() {
    let cluster = start_node(Some(token()));
    let port = admin(&cluster);
    assert_eq!(refusals(port, "unauthenticated"), Some(0), "exported at zero");
    let body = r#"{"op":"decommission","node":1}"#;
    let answer = raw(port, &request("POST", "/admin/operations", JSON, body));
    assert_eq!(answer.code, 401, "{}", answer.body);
    assert_eq!(answer.json()["result"], "unauthenticated");
    assert!(answer.head.to_ascii_lowercase().contains("www-authenticate: bearer"), "{}", answer.head);
    // Another scheme is no token either.
    let answer = raw(port, &request("POST", CANCEL, &format!("Authorization: Basic dXNlcg==\r\n{JSON}"), "{}"));
    assert_eq!(answer.code, 401);
    assert_eq!(refusals(port, "unauthenticated"), Some(2));
    // Nothing was started.
    let status = raw(port, &request("GET", "/status", &bearer(TOKEN), ""));
    assert_eq!(status.json()["operations"], serde_json::json!([]), "{}", status.body);
}

#[actix_rt::test]
async fn t4_wrong_token_is_refused_and_counted() {
    let cluster = start_node(Some(token()));
    let port = admin(&cluster);
    for wrong in ["the-admin-token-of-node-onf", "the-admin-token-of-node-one-and-more", "x"] {
        let answer = raw(port, &request("POST", CANCEL, &format!("{}{JSON}", bearer(wrong)), "{}"));
        assert_eq!((answer.code, answer.json()["result"].clone()), (401, "token_mismatch".into()), "{wrong}");
    }
    // A wrong token is refused on /status too, rather than read as anonymous.
    let answer = raw(port, &request("GET", "/status", &bearer("not-the-token-at-all"), ""));
    assert_eq!(answer.code, 401);
    assert_eq!(refusals(port, "token_mismatch"), Some(4));
}

#[actix_rt::test]
async fn t4_post_without_json_content_type_gets_415() {
    let cluster = start_node(Some(token()));
    let port = admin(&cluster);
    let body = r#"{"op":"decommission","node":1}"#;
    for content_type in ["Content-Type: text/plain\r\n", "Content-Type: application/x-www-form-urlencoded\r\n", ""] {
        let answer =
            raw(port, &request("POST", "/admin/operations", &format!("{}{content_type}", bearer(TOKEN)), body));
        assert_eq!((answer.code, answer.json()["result"].clone()), (415, "content_type".into()), "{content_type:?}");
    }
    assert_eq!(refusals(port, "content_type"), Some(3));
}

#[actix_rt::test]
async fn t4_good_token_reaches_the_operator_endpoints() {
    let cluster = start_node(Some(token()));
    let port = admin(&cluster);
    let headers = format!("{}{JSON}", bearer(TOKEN));
    // Past every check of the port: the node parses the body (400 names the field)...
    let answer = raw(port, &request("POST", "/admin/operations", &headers, r#"{"op":"decommission","node":0}"#));
    assert_eq!((answer.code, answer.json()["field"].clone()), (400, "node".into()), "{}", answer.body);
    // ...and the metadata group decides (409: nothing to cancel).
    let answer = call(port, "POST", CANCEL, headers.clone(), "{}".into()).await;
    assert_eq!(answer.code, 409, "{}", answer.body);
    assert!(answer.json()["reason"].as_str().is_some_and(|r| r.contains("is not in flight")), "{}", answer.body);
    assert_eq!(refusals(port, "unauthenticated"), Some(0));
    assert_eq!(refusals(port, "bad_request"), Some(1), "the 400 is a counted refusal too");

    // `cohort admin`: the token from the environment, a missing one, a wrong one.
    let cancel = ["admin", "--admin", &port.to_string(), "cancel", "--operation", "5"].map(String::from).to_vec();
    let (code, _, stderr) = cohort(cancel.clone(), Some(TOKEN)).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("refused: operation:5 is not in flight"), "{stderr}");
    let (code, _, stderr) = cohort(cancel.clone(), None).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--token: missing"), "{stderr}");
    let (code, _, stderr) = cohort(cancel, Some("the-admin-token-of-node-two")).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("token_mismatch"), "{stderr}");
}

#[actix_rt::test]
async fn t4_status_redacts_session_ids_and_incarnations_without_the_token() {
    let cluster = start_node(Some(token()));
    let port = admin(&cluster);
    let deadline = Instant::now() + Duration::from_secs(20);
    let public = loop {
        let public = raw(port, &request("GET", "/status", "", "")).json();
        let group = &public["metadata"]["groups"][0];
        if !public["session"].is_null() && !public["metadata"]["nodes"][0]["session"].is_null() && !group.is_null() {
            break public;
        }
        assert!(Instant::now() < deadline, "a session and group 0 within 20 s: {public}");
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(public["redacted"], true, "{public}");
    assert_eq!(public["session"], "redacted", "{public}");
    let node = &public["metadata"]["nodes"][0];
    assert_eq!(node["session"], "redacted", "{public}");
    let group = &public["metadata"]["groups"][0];
    assert_eq!(group["incarnation"], "redacted", "{public}");
    assert!(group["owner"].is_null() || group["owner"]["session"] == "redacted", "{public}");
    assert!(!public.to_string().contains("\"session\":1"), "{public}");

    let full = raw(port, &request("GET", "/status", &bearer(TOKEN), "")).json();
    assert_eq!(full["redacted"], false, "{full}");
    assert!(full["session"].is_u64(), "{full}");
    assert!(full["metadata"]["groups"][0]["incarnation"].is_u64(), "{full}");

    // `cohort status` without the token says what is hidden.
    let args = ["status", "--admin", &port.to_string()].map(String::from).to_vec();
    let (code, text, stderr) = cohort(args, None).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(text.contains("session ids and incarnations are redacted"), "{text}");
}

#[actix_rt::test]
async fn t4_a_node_without_a_token_refuses_every_post() {
    let cluster = start_node(None);
    let port = admin(&cluster);
    let body = r#"{"op":"decommission","node":1}"#;
    for headers in [JSON.to_owned(), format!("{}{JSON}", bearer(TOKEN))] {
        let answer = raw(port, &request("POST", "/admin/operations", &headers, body));
        assert_eq!((answer.code, answer.json()["result"].clone()), (403, "token_unset".into()), "{headers:?}");
    }
    let answer = raw(port, &request("GET", "/status", &bearer(TOKEN), ""));
    assert_eq!(answer.code, 403, "a token is refused, not ignored");
    let answer = raw(port, &request("GET", "/status", "", ""));
    assert_eq!((answer.code, answer.json()["redacted"].clone()), (200, true.into()));
    assert_eq!(raw(port, &request("GET", "/health", "", "")).code, 200);
    assert_eq!(refusals(port, "token_unset"), Some(3));
}

#[actix_rt::test]
async fn t4_metrics_listener_serves_only_metrics_and_health() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let node = NodeBuilder::new(ClusterId(7), NodeId(1))
        .listen(loopback)
        .data_dir(dir.path())
        .insecure()
        .state_machine(|_| Box::new(Register::default()))
        .admin(loopback)
        .metrics_listen(loopback)
        .admin_token(token())
        .start()
        .expect("the node starts");
    let (control, metrics) = (node.admin_address().expect("admin"), node.metrics_address().expect("metrics"));
    assert_ne!(control, metrics);
    for port in [control, metrics] {
        assert_eq!(raw(port, &request("GET", "/health", "", "")).body, "ok\n");
        let scrape = raw(port, &request("GET", "/metrics", "", ""));
        assert!(scrape.code == 200 && scrape.body.ends_with("# EOF\n"), "{}", scrape.body);
    }
    assert_eq!(raw(control, &request("GET", "/status", "", "")).code, 200);
    assert_eq!(raw(metrics, &request("GET", "/status", &bearer(TOKEN), "")).code, 404);
    let cancel = raw(metrics, &request("POST", CANCEL, &format!("{}{JSON}", bearer(TOKEN)), "{}"));
    assert_eq!(cancel.code, 404, "no control plane on the metrics listener");
    node.stop();
    // Stopping the node closes both listeners.
    let deadline = Instant::now() + ANSWER_WAIT_MAX;
    while [control, metrics].iter().any(|port| TcpStream::connect_timeout(port, Duration::from_millis(200)).is_ok()) {
        assert!(Instant::now() < deadline, "the admin listeners close with the node");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 200 connections that each send one byte of a request head per second
/// (and reconnect when the port closes them, as an attacker would) do not
/// stop `/health` and `/metrics` from answering, on the control listener.
#[actix_rt::test]
async fn t4_t5_slow_clients_do_not_stop_health_and_metrics() {
    const SLOW_CONNECTIONS: usize = 200;
    const ATTACK: Duration = Duration::from_secs(12);
    let cluster = start_node(Some(token()));
    let port = admin(&cluster);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attacker = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || slowloris(port, SLOW_CONNECTIONS, &stop))
    };
    // Let the connections open and start trickling.
    actix_rt::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let mut probes = 0;
    while started.elapsed() < ATTACK {
        for path in ["/health", "/metrics"] {
            let answer = call(port, "GET", path, String::new(), String::new()).await;
            assert_eq!(answer.code, 200, "{path} during the attack: {}", answer.body);
            probes += 1;
        }
        actix_rt::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let opened =
        tokio::task::spawn_blocking(move || attacker.join().expect("the attacker thread")).await.expect("joined");
    assert!(opened >= SLOW_CONNECTIONS, "the attack held {SLOW_CONNECTIONS} connections ({opened} opened)");
    assert!(probes >= 4, "{probes} probes");
}

/// Keep `connections` connections trickling one byte of a request head per
/// second each until `stop`; a closed connection is replaced. Returns how
/// many connections were opened in all.
fn slowloris(address: SocketAddr, connections: usize, stop: &std::sync::atomic::AtomicBool) -> usize {
    const HEAD: &[u8] = b"GET /health HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let open = || {
        let stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
        stream.set_write_timeout(Some(Duration::from_millis(100))).ok()?;
        Some((stream, 0usize))
    };
    let mut opened = 0;
    let mut streams: Vec<Option<(TcpStream, usize)>> = (0..connections).map(|_| None).collect();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let round = Instant::now();
        for slot in &mut streams {
            let sent = match slot {
                Some((stream, at)) => {
                    let byte = HEAD[*at % HEAD.len()];
                    *at += 1;
                    stream.write_all(&[byte]).is_ok()
                }
                None => false,
            };
            if !sent {
                *slot = open();
                opened += usize::from(slot.is_some());
            }
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(round.elapsed()));
    }
    opened
}

/// [`raw`] off the test's thread: `headers` and `body` as in [`request`].
async fn call(address: SocketAddr, method: &'static str, path: &'static str, headers: String, body: String) -> Answer {
    tokio::task::spawn_blocking(move || raw(address, &request(method, path, &headers, &body))).await.expect("exchange")
}

/// Run the `cohort` binary with `token` in `COHORT_ADMIN_TOKEN` (or none):
/// exit code, stdout, stderr.
async fn cohort(args: Vec<String>, token: Option<&'static str>) -> (Option<i32>, String, String) {
    tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"));
        command.args(&args).env_remove("COHORT_ADMIN_TOKEN");
        if let Some(token) = token {
            command.env("COHORT_ADMIN_TOKEN", token);
        }
        let output = command.output().expect("cohort runs");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (output.status.code(), text(&output.stdout), text(&output.stderr))
    })
    .await
    .expect("cohort ran")
}
