//! Operator commands over a node's admin port (M3, M4, M5) and `cohort
//! admin`, against real nodes (real TCP, real files, real actors).
//!
//! The nodes carry operations out (learners catch up, member changes seal
//! and switch the group's incarnation): `m2_move_completes_on_a_running_cluster`
//! follows one to the end, and `m4_moved_replica_survives_a_restart` restarts
//! the node that gained the group at run time. The other tests hold an
//! operation at a step on purpose (a move's promotion waits for its learner
//! to catch up; a stopped node's learner never does) to look at it and
//! cancel it.
//!
//! Every node has an admin token (T4), which these tests present as an
//! operator would; `admin_port.rs` tests what happens without it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use cohort_runtime::admin::AdminToken;
use cohort_runtime::config::{ExpiredPolicyName, SessionConfig};
use cohort_runtime::node::PLACEMENTS_FILE;
use cohort_runtime::prelude::*;
use serde_json::Value;

/// The admin token of every node of these tests.
const TOKEN: &str = "admin-token-of-the-operator-tests";

fn token() -> AdminToken {
    AdminToken::new(TOKEN).expect("a valid token")
}

/// Four nodes; group 3 on nodes 1 and 2 only, so a move to node 4 and a
/// decommission of node 2 (to node 3) both have a plan.
fn start_cluster() -> LocalCluster {
    LocalCluster::builder(4)
        .group_kind("register", |_| Box::new(Register::default()))
        .group(GroupPlacement::new(GroupId(3), vec![NodeId(1), NodeId(2)]).kind("register"))
        .session_config(SessionConfig {
            session_timeout_ms: 3000,
            session_keepalive_interval_ms: 200,
            session_expired_policy: ExpiredPolicyName::Reconnect,
            session_reconnect_attempts: 3,
            session_reconnect_backoff_ms: 1000,
        })
        .admin_ports()
        .admin_token(token())
        .start()
        .expect("cluster starts")
}

fn admin(cluster: &LocalCluster, node: u64) -> SocketAddr {
    cluster.node(NodeId(node)).and_then(Node::admin_address).expect("an admin port")
}

/// One HTTP exchange with an admin port, as an operator with the token
/// sends it: the status code and the JSON body.
fn http(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_secs(2)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("a status code");
    (code, serde_json::from_str(body).unwrap_or(Value::String(body.to_string())))
}

/// `http` off the test's thread (the exchange blocks until the node answers).
async fn call(admin: SocketAddr, method: &'static str, path: String, body: String) -> (u16, Value) {
    tokio::task::spawn_blocking(move || http(admin, method, &path, &body)).await.expect("exchange")
}

fn status(admin: SocketAddr) -> Value {
    http(admin, "GET", "/status", "").1
}

async fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

/// Every node registered with a live session, and group 3 created.
async fn wait_ready(cluster: &LocalCluster) {
    let handles = cluster.handles();
    let ready = wait_until(Duration::from_secs(20), || {
        handles.iter().all(|handle| {
            let metadata = handle.metadata();
            metadata.nodes.len() == 4
                && metadata.nodes.values().all(|node| node.session.is_some())
                && metadata.groups.contains_key(&GroupId(3))
        })
    })
    .await;
    assert!(ready, "sessions and group 3 within 20 s: {}", handles[0].status());
}

#[actix_rt::test]
async fn m3_overlapping_operation_rejected_over_admin() {
    let mut cluster = start_cluster();
    wait_ready(&cluster).await;
    // Node 4 is down: the move waits at its promotion, where we look at it.
    cluster.stop_node(NodeId(4));
    // Started on node 3, which is not in group 3: any node takes commands.
    let (code, started) = call(
        admin(&cluster, 3),
        "POST",
        "/admin/operations".into(),
        r#"{"op":"move","group":3,"from":1,"to":4}"#.into(),
    )
    .await;
    assert_eq!(code, 200, "{started}");
    assert_eq!(started["result"], "started");
    let id = started["operation"].as_u64().expect("an operation id");
    // M4: the stored plan, first step done with the start.
    let plan: Vec<&str> =
        started["record"]["plan"].as_array().expect("a plan").iter().filter_map(|s| s["step"].as_str()).collect();
    assert_eq!(plan, ["add learner node:4", "promote node:4", "remove node:1"], "{started}");
    assert_eq!(started["record"]["done"], 1);

    // A decommission of node 2 touches group 3 too: refused, naming the move.
    let (code, refused) =
        call(admin(&cluster, 1), "POST", "/admin/operations".into(), r#"{"op":"decommission","node":2}"#.into()).await;
    assert_eq!(code, 409, "{refused}");
    let reason = refused["reason"].as_str().expect("a reason");
    assert!(reason.starts_with(&format!("group:3 is already in operation:{id} (Move")), "{reason}");

    // /status shows the move in flight, its plan and group 3's learner.
    let shown = status(admin(&cluster, 2));
    let operation = &shown["operations"][0];
    assert_eq!(operation["id"].as_u64(), Some(id), "{shown}");
    assert_eq!((operation["done"].as_u64(), operation["remaining"].as_u64()), (Some(1), Some(2)), "{shown}");
    assert_eq!(operation["cancelled"], false);
    let group = shown["metadata"]["groups"].as_array().and_then(|g| g.iter().find(|g| g["id"] == 3)).cloned();
    assert_eq!(group.map(|g| g["learners"].clone()), Some(serde_json::json!([4])), "{shown}");
}

#[actix_rt::test]
async fn m5_cancel_over_admin() {
    let mut cluster = start_cluster();
    wait_ready(&cluster).await;
    // Node 4 is down: its learner replica cannot catch up, so the join
    // waits at its promotion until the cancel reverts it.
    cluster.stop_node(NodeId(4));
    let port = admin(&cluster, 2);
    // Started and cancelled with the real `cohort admin` binary.
    let cohort = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_cohort")).args(&args).output().expect("run");
            let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
            (output.status.code(), text, String::from_utf8_lossy(&output.stderr).into_owned())
        })
    };
    let args = |rest: &str| -> Vec<String> {
        let mut args =
            vec!["admin".to_string(), "--admin".to_string(), port.to_string(), "--token".into(), TOKEN.into()];
        args.extend(rest.split(' ').map(String::from));
        args
    };
    let (code, line, stderr) = cohort(args("join --node 4 --groups 3")).await.expect("cohort admin");
    assert_eq!(code, Some(0), "{line} {stderr}");
    let id: u64 = line
        .strip_prefix("started operation:")
        .and_then(|rest| rest.split(':').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("not a start line: {line}"));
    assert_eq!(
        line,
        format!("started operation:{id}: join node:4 to group:3 (2 steps: add learner node:4, promote node:4)")
    );

    // The same join again is refused by the metadata (group 3 is in that
    // join already, M3): exit code 1 with the metadata's reason.
    let (code, _, stderr) = cohort(args("join --node 4 --groups 3")).await.expect("cohort admin");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&format!("refused: group:3 is already in operation:{id}")), "{stderr}");

    let (code, line, stderr) = cohort(args(&format!("cancel --operation {id} --json"))).await.expect("cohort admin");
    assert_eq!(code, Some(0), "{line} {stderr}");
    let cancelled: Value = serde_json::from_str(&line).expect("--json prints the answer");
    assert_eq!(cancelled["result"], "cancelled", "{cancelled}");

    // The revert (remove learner node:4) is driven by the metadata primary
    // once the group acked; until then /status shows it reverting.
    let reverted = wait_until(Duration::from_secs(15), || {
        let shown = status(port);
        match shown["operations"].as_array().and_then(|ops| ops.first()) {
            Some(operation) => {
                assert_eq!(operation["cancelled"], true, "{shown}");
                false
            }
            None => shown["operation_totals"]["reverted"] == 1,
        }
    })
    .await;
    let shown = status(port);
    assert!(reverted, "reverted within 15 s: {shown}");
    let group = shown["metadata"]["groups"].as_array().and_then(|g| g.iter().find(|g| g["id"] == 3)).cloned();
    assert_eq!(
        group.map(|g| (g["members"].clone(), g["learners"].clone())),
        Some((serde_json::json!([1, 2]), serde_json::json!([])))
    );

    // A finished operation cannot be cancelled: 409 with the metadata's reason.
    let (code, refused) = call(port, "POST", format!("/admin/operations/{id}/cancel"), String::new()).await;
    assert_eq!(code, 409, "{refused}");
    assert!(refused["reason"].as_str().is_some_and(|r| r.contains("is not in flight")), "{refused}");

    // `cohort status` prints the totals.
    let (code, text, stderr) = tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["status", "--admin", &port.to_string()])
            .env("COHORT_ADMIN_TOKEN", TOKEN)
            .output()
            .expect("run");
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned(), output.stderr)
    })
    .await
    .expect("cohort status");
    assert_eq!(code, Some(0), "{stderr:?}");
    assert!(text.contains("operations: 0 in flight, 0 completed, 1 reverted"), "{text}");
}

/// P4, as an operator sees it: `cohort status` against a real node shows a
/// group's learner in its own column, and the metadata group's voters and
/// learners in its first line. A move to a stopped node holds group 3 at
/// "add learner node:4" (the learner never catches up), so the learner
/// stays in the table while we look.
#[actix_rt::test]
async fn p4_cohort_status_shows_a_group_s_learner() {
    let mut cluster = start_cluster();
    wait_ready(&cluster).await;
    cluster.stop_node(NodeId(4));
    let (code, started) = call(
        admin(&cluster, 1),
        "POST",
        "/admin/operations".into(),
        r#"{"op":"move","group":3,"from":1,"to":4}"#.into(),
    )
    .await;
    assert_eq!(code, 200, "{started}");
    let port = admin(&cluster, 2);
    let cohort_status = move || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["status", "--admin", &port.to_string(), "--all-groups"])
            .env("COHORT_ADMIN_TOKEN", TOKEN)
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let (header, row) = loop {
        let text = tokio::task::spawn_blocking(cohort_status).await.expect("cohort status");
        // The groups table: its header, then one row per group.
        let mut groups = text.split_once("\ngroups\n").map(|(_, groups)| groups).unwrap_or_default().lines();
        let header = groups.next().map(str::to_string);
        let row = groups.find(|line| line.starts_with("3 ")).map(str::to_string);
        if let (Some(header), Some(row)) = (header, row)
            && row.contains("[4]")
        {
            assert!(text.starts_with("node 2 "), "{text}");
            assert!(text.contains("metadata members [1,2,3,4]  learners []"), "{text}");
            break (header, row);
        }
        assert!(Instant::now() < deadline, "group 3's learner node:4 within 10 s:\n{text}");
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    };
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(columns[..5], ["id", "members", "learners", "incarnation", "live"], "{header}");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..3], ["3", "[1,2]", "[4]"], "{header}\n{row}");
    // The table is the typed document the host reads.
    let status = cluster.handle(NodeId(2)).expect("node 2 runs").status();
    let group = status.metadata.groups.iter().find(|group| group.id == GroupId(3)).expect("group 3");
    assert_eq!(
        (group.members.as_slice(), group.learners.as_slice()),
        ([NodeId(1), NodeId(2)].as_slice(), [NodeId(4)].as_slice())
    );
}

#[actix_rt::test]
async fn operator_bad_input_gets_400_naming_the_field() {
    let cluster = LocalCluster::builder(1)
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", [GroupId(0)])
        .admin_ports()
        .admin_token(token())
        .start()
        .expect("cluster starts");
    let port = admin(&cluster, 1);
    for (body, field) in [
        ("not json", "body"),
        (r#"{"op":"move","group":3,"from":1}"#, "to"),
        (r#"{"op":"move","group":3,"from":2,"to":2}"#, "to"),
        (r#"{"op":"join","node":4,"groups":[1,1]}"#, "groups"),
        (r#"{"op":"decommission","node":0}"#, "node"),
        (r#"{"op":"decommission","node":2,"now":true}"#, "now"),
    ] {
        let (code, answer) = call(port, "POST", "/admin/operations".into(), body.into()).await;
        assert_eq!((code, answer["field"].as_str()), (400, Some(field)), "{body}: {answer}");
    }
    let (code, answer) = call(port, "POST", "/admin/operations/seven/cancel".into(), String::new()).await;
    assert_eq!((code, answer["field"].as_str()), (400, Some("operation")), "{answer}");
    let (code, _) = call(port, "GET", "/admin/operations".into(), String::new()).await;
    assert_eq!(code, 405);
    let (code, _) = call(port, "POST", "/admin/elsewhere".into(), String::new()).await;
    assert_eq!(code, 404);
    // Past the body bound: 413, and the node goes on answering.
    let mut stream = TcpStream::connect_timeout(&port, Duration::from_secs(2)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let head = format!(
        "POST /admin/operations HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: 204800\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert_eq!(http(port, "GET", "/health", "").0, 200);
}

/// M2–M4 and P4 end to end on real nodes: a move of group 3's replica from
/// node 1 to node 4 adds node 4 as a learner that catches up, promotes it
/// by sealing the group's incarnation and switching every member, then
/// removes node 1 the same way; the register's value survives it all and
/// the group takes writes on its new members.
#[actix_rt::test]
async fn m2_move_completes_on_a_running_cluster() {
    let cluster = start_cluster();
    wait_ready(&cluster).await;
    let client = cluster.client();
    client.write(GroupId(3), &b"before the move"[..]).await.expect("a write before the move");
    let (code, started) = call(
        admin(&cluster, 2),
        "POST",
        "/admin/operations".into(),
        r#"{"op":"move","group":3,"from":1,"to":4}"#.into(),
    )
    .await;
    assert_eq!(code, 200, "{started}");
    let port = admin(&cluster, 3);
    let moved = wait_until(Duration::from_secs(60), || {
        let shown = status(port);
        let group = shown["metadata"]["groups"].as_array().and_then(|g| g.iter().find(|g| g["id"] == 3)).cloned();
        shown["operation_totals"]["completed"] == 1
            && group.is_some_and(|g| g["members"] == serde_json::json!([2, 4]) && g["incarnation"] == 3)
    })
    .await;
    assert!(moved, "the move completed within 60 s: {}", status(port));
    let read = client.read(GroupId(3), Vec::new()).await.expect("a read after the move");
    assert_eq!(&read.result[..], b"before the move");
    client.write(GroupId(3), &b"after the move"[..]).await.expect("a write after the move");
    let read = client.read(GroupId(3), Vec::new()).await.expect("a read");
    assert_eq!(&read.result[..], b"after the move");
}

/// Start `op` over node `via`'s admin port and wait until `completed`
/// operations completed in total and group 3 has `members` at `incarnation`.
async fn run_operation(cluster: &LocalCluster, via: u64, op: &str, completed: u64, members: Value, incarnation: u64) {
    let (code, started) = call(admin(cluster, via), "POST", "/admin/operations".into(), op.into()).await;
    assert_eq!(code, 200, "{op}: {started}");
    let port = admin(cluster, via);
    let done = wait_until(Duration::from_secs(60), || {
        let shown = status(port);
        let group = shown["metadata"]["groups"].as_array().and_then(|g| g.iter().find(|g| g["id"] == 3)).cloned();
        shown["operation_totals"]["completed"] == completed
            && group.is_some_and(|g| g["members"] == members && g["incarnation"] == incarnation)
    })
    .await;
    assert!(done, "{op} completed within 60 s: {}", status(port));
}

/// The groups recorded in node `node`'s run-time placements file.
fn recorded_groups(cluster: &LocalCluster, node: u64) -> Vec<u64> {
    let path = cluster.data_dir().join(format!("node-{node}")).join(PLACEMENTS_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else { return Vec::new() };
    let content: Value = serde_json::from_str(&text).expect("the placements file is JSON");
    content["placements"].as_array().expect("a list").iter().filter_map(|p| p["group"].as_u64()).collect()
}

/// M4 and P4 across a restart: a replica the metadata placed on node 4 at
/// run time (a learner, promoted since) is hosted again after node 4
/// restarts, at the group's new incarnation, with its data; the group then
/// takes writes that need node 4 (members 2 and 4, both in the quorum), and
/// a further operation on the group completes.
#[actix_rt::test]
async fn m4_moved_replica_survives_a_restart() {
    let mut cluster = start_cluster();
    wait_ready(&cluster).await;
    let client = cluster.client();
    client.write(GroupId(3), &b"before the move"[..]).await.expect("a write before the move");
    let move_out = r#"{"op":"move","group":3,"from":1,"to":4}"#;
    run_operation(&cluster, 2, move_out, 1, serde_json::json!([2, 4]), 3).await;
    // Node 4 hosts group 3 only because the metadata placed it there.
    assert_eq!(recorded_groups(&cluster, 4), [3]);

    cluster.stop_node(NodeId(4));
    cluster.restart_node(NodeId(4)).expect("node 4 restarts from its data directory");
    let node4 = cluster.handle(NodeId(4)).expect("node 4 runs");
    assert!(node4.subscribe(GroupId(3)).await.is_some(), "node 4 hosts group 3 again");
    assert_eq!(node4.fatal(), None);
    let client = cluster.client();
    let read = client.read(GroupId(3), Vec::new()).await.expect("a read after the restart");
    assert_eq!(&read.result[..], b"before the move");
    // Members 2 and 4 with a majority of 2: this commits only with node 4's
    // replica at incarnation 3.
    client.write(GroupId(3), &b"after the restart"[..]).await.expect("a write after the restart");
    let caught_up = wait_until(Duration::from_secs(20), || {
        let metadata = node4.metadata();
        metadata.nodes.get(&NodeId(4)).is_some_and(|n| n.session.is_some() && n.acked == metadata.config_epoch)
    })
    .await;
    assert!(caught_up, "node 4 acks the config epoch: {}", node4.status());

    // Another operation on group 3 completes: node 1 gets it back.
    let move_back = r#"{"op":"move","group":3,"from":4,"to":1}"#;
    run_operation(&cluster, 3, move_back, 2, serde_json::json!([2, 1]), 5).await;
    let read = client.read(GroupId(3), Vec::new()).await.expect("a read after the move back");
    assert_eq!(&read.result[..], b"after the restart");
    let unloaded = wait_until(Duration::from_secs(20), || recorded_groups(&cluster, 4).is_empty()).await;
    assert!(unloaded, "node 4's record goes with its replica: {:?}", recorded_groups(&cluster, 4));
    assert_eq!(recorded_groups(&cluster, 1), [3], "node 1 hosts group 3 as placed at run time");
}
