//! O6: the web console in a real browser against a real three-node
//! cluster (real TCP with mTLS between the nodes, real files, real actors).
//!
//! Headless Chromium (Debian's `chromium` package) loads `/console` from
//! node 1's admin port without a token, runs the page's script (which
//! polls `/status` and `/metrics`) and dumps the DOM. The test reads the
//! `data-*` attributes the page puts on what it shows and compares them
//! with the `/status` document it fetches itself, before and after the
//! dump (a dump taken while the document changed is taken again): each
//! node's up/down, session, groups and primaries; the groups without a
//! primary; every row and cell of the placement map; the operations in
//! flight; the charts' samples. It does so with every node up, after node
//! 3 is stopped (the page must show it down), and with a move to node 3 in
//! flight. One group's kind name is markup, which the page must show as
//! text.
//!
//! Without the token the page is served, but nothing under `/admin/` is
//! reachable, and the page's files carry a Content-Security-Policy that
//! allows nothing inline and nothing from elsewhere.
//!
//! When `chromium` is missing, a root user with apt gets it installed here
//! (as `.ci/run` does); anyone else gets the test skipped with a message
//! saying how to install it (`cohort_sim::host_package`).
//!
//! `COHORT_CONSOLE_SCREENSHOT=path` also saves a 1280×900 screenshot there
//! (docs/images/console.png is made this way).

use std::collections::HashMap;

use cohort_sim::host_package;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use cohort_runtime::admin::AdminToken;
use cohort_runtime::config::{ExpiredPolicyName, SessionConfig};
use cohort_runtime::prelude::*;
use serde_json::Value;

/// Groups 0..GROUPS on every node.
const GROUPS: u64 = 12;

/// A group on nodes 1 and 2 only, which the test moves to node 3 once node
/// 3 is stopped: the move holds at its promotion (the learner never catches
/// up), so the page has an operation in flight and a learner to show.
const MOVED: GroupId = GroupId(GROUPS);

/// A group kind whose name is markup: the page must show it as text.
const HOSTILE_KIND: &str = "<img src=x id=injected onerror=alert(1)><b>kind</b>";

/// A group of [`HOSTILE_KIND`] on every node.
const HOSTILE: GroupId = GroupId(GROUPS + 1);

/// Every group of the cluster.
const GROUPS_TOTAL: usize = GROUPS as usize + 2;

/// The nodes' admin token (the console never sends it).
const TOKEN: &str = "admin-token-of-the-console-tests";

/// How long the browser runs the page's script, in its virtual time: long
/// enough for three polls (one every 3 s), so the charts have rates.
const VIRTUAL_TIME_BUDGET_MS: u64 = 7000;

/// How long one browser run may take in real time before it is killed.
const BROWSER_WAIT_MAX: Duration = Duration::from_secs(90);

/// How many times a dump is taken again because `/status` changed meanwhile.
const DUMP_ATTEMPTS_MAX: usize = 8;

fn cluster() -> LocalCluster {
    LocalCluster::builder(3)
        .client_ports()
        .admin_ports()
        .admin_token(AdminToken::new(TOKEN).expect("a valid token"))
        .session_config(SessionConfig {
            session_timeout_ms: 3000,
            session_keepalive_interval_ms: 200,
            session_expired_policy: ExpiredPolicyName::Reconnect,
            session_reconnect_attempts: 3,
            session_reconnect_backoff_ms: 1000,
        })
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", (0..GROUPS).map(GroupId))
        .group(GroupPlacement::new(MOVED, vec![NodeId(1), NodeId(2)]).kind("register"))
        .group_kind(HOSTILE_KIND, |_| Box::new(Register::default()))
        .group(GroupPlacement::new(HOSTILE, vec![NodeId(1), NodeId(2), NodeId(3)]).kind(HOSTILE_KIND))
        .start()
        .expect("cluster starts")
}

fn admin(cluster: &LocalCluster, node: u64) -> SocketAddr {
    cluster.node(NodeId(node)).and_then(Node::admin_address).expect("an admin port")
}

/// What one HTTP exchange gave.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

/// `method url` without a token, off the actors' thread.
async fn http(method: reqwest::Method, url: String) -> Answer {
    tokio::task::spawn_blocking(move || {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().expect("a client");
        let answer = client.request(method, &url).send().unwrap_or_else(|error| panic!("{url}: {error}"));
        let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
        Answer { status, headers, body: answer.text().expect("a body") }
    })
    .await
    .expect("the request's thread")
}

/// `POST path` with `body` to `admin` as an operator (with the token).
async fn operator_post(admin: SocketAddr, path: &str, body: String) -> (u16, Value) {
    let url = format!("http://{admin}{path}");
    tokio::task::spawn_blocking(move || {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().expect("a client");
        let answer = client
            .post(&url)
            .bearer_auth(TOKEN)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .unwrap_or_else(|error| panic!("{url}: {error}"));
        let status = answer.status().as_u16();
        (status, serde_json::from_str(&answer.text().expect("a body")).unwrap_or(Value::Null))
    })
    .await
    .expect("the request's thread")
}

/// The `/status` document an anonymous caller gets, as the page does.
async fn status(admin: SocketAddr) -> Value {
    let answer = http(reqwest::Method::GET, format!("http://{admin}/status")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    serde_json::from_str(&answer.body).expect("/status is JSON")
}

/// Every node has a session and every group a primary, as `admin` sees it.
async fn wait_ready(admin: SocketAddr, nodes: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = status(admin).await;
        let listed = |key: &str| status["metadata"][key].as_array().cloned().unwrap_or_default();
        let sessions = listed("nodes").len() == nodes && listed("nodes").iter().all(|n| !n["session"].is_null());
        let owned = listed("groups").len() == GROUPS_TOTAL && listed("groups").iter().all(|g| !g["owner"].is_null());
        if sessions && owned {
            return;
        }
        assert!(Instant::now() < deadline, "sessions and primaries within 30 s: {status}");
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run headless Chromium on `url` with `arguments`, off the actors'
/// thread, killed if it outlives [`BROWSER_WAIT_MAX`]: its stdout.
async fn chromium(url: String, mut arguments: Vec<String>) -> String {
    arguments.push(format!("--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}"));
    tokio::task::spawn_blocking(move || {
        let profile = tempfile::tempdir().expect("a browser profile dir");
        cohort_sim::browser::headless(&url, &arguments, profile.path(), BROWSER_WAIT_MAX)
    })
    .await
    .expect("the browser's thread")
}

/// The attributes of every start tag in `dom` that has `attribute`.
/// Chromium serializes attribute values in double quotes.
fn tags_with(dom: &str, attribute: &str) -> Vec<HashMap<String, String>> {
    let needle = format!(" {attribute}=\"");
    dom.split('<')
        .filter_map(|piece| piece.split_once('>').map(|(tag, _)| tag))
        .filter(|tag| tag.contains(&needle))
        .map(attributes)
        .collect()
}

/// `name="value"` pairs of one start tag's text (after its `<`).
fn attributes(tag: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = tag;
    while let Some(equals) = rest.find("=\"") {
        let name = rest[..equals].rsplit(' ').next().unwrap_or_default().to_owned();
        let after = &rest[equals + 2..];
        let Some(end) = after.find('"') else { break };
        out.insert(name, after[..end].replace("&amp;", "&"));
        rest = &after[end + 1..];
    }
    out
}

/// The one tag with `attribute="value"`.
fn tag(dom: &str, attribute: &str, value: &str) -> HashMap<String, String> {
    let mut found: Vec<_> = tags_with(dom, attribute).into_iter().filter(|tag| tag[attribute] == value).collect();
    assert_eq!(found.len(), 1, "one tag with {attribute}={value:?}");
    found.remove(0)
}

fn u64_of(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("a number: {value}"))
}

/// What the page shows that `/status` does not say.
#[derive(Default)]
struct Differences(Vec<String>);

impl Differences {
    /// Note `what` if the page shows `shown` where `/status` says `expected`.
    fn check(&mut self, what: String, shown: Option<&String>, expected: String) {
        if shown != Some(&expected) {
            self.0.push(format!("{what}: the page shows {shown:?}, /status says {expected:?}"));
        }
    }
}

/// Where the page, as dumped in `dom`, differs from `status`; empty if nowhere.
fn differences(dom: &str, status: &Value) -> Vec<String> {
    let mut out = Differences::default();
    let body = tag(dom, "id", "console");
    let metadata = &status["metadata"];
    let nodes = metadata["nodes"].as_array().expect("nodes");
    let groups = metadata["groups"].as_array().expect("groups");
    let orphans: Vec<u64> =
        groups.iter().filter(|g| g["live"] == true && g["owner"].is_null()).map(|g| u64_of(&g["id"])).collect();
    out.check("loaded".into(), body.get("data-loaded"), "true".into());
    out.check("this node".into(), body.get("data-this-node"), status["node"].to_string());
    out.check("epoch".into(), body.get("data-epoch"), metadata["epoch"].to_string());
    out.check("groups".into(), body.get("data-groups-total"), groups.len().to_string());
    out.check("groups without a primary".into(), body.get("data-orphans"), orphans.len().to_string());
    out.check(
        "operations".into(),
        body.get("data-operations"),
        status["operations"].as_array().map_or(0, Vec::len).to_string(),
    );

    // Nodes: up/down, session, groups hosted, primaries led.
    let rows = tags_with(dom, "data-node");
    out.check("node rows".into(), Some(&rows.len().to_string()), nodes.len().to_string());
    for node in nodes {
        let id = u64_of(&node["id"]);
        let Some(row) = rows.iter().find(|row| row["data-node"] == id.to_string()) else {
            out.0.push(format!("node {id}: no row"));
            continue;
        };
        let up = match &node["up"] {
            Value::Bool(up) => up.to_string(),
            _ => "unknown".into(),
        };
        out.check(format!("node {id} up"), row.get("data-up"), up);
        out.check(format!("node {id} session"), row.get("data-session"), (!node["session"].is_null()).to_string());
        let primaries = metadata["primaries_per_node"][id.to_string()].as_u64().unwrap_or(0);
        out.check(format!("node {id} primaries"), row.get("data-primaries"), primaries.to_string());
        let hosts = |group: &&Value| {
            let has = |key: &str| group[key].as_array().is_some_and(|ids| ids.iter().any(|n| u64_of(n) == id));
            has("members") || has("learners")
        };
        out.check(format!("node {id} groups"), row.get("data-groups"), groups.iter().filter(hosts).count().to_string());
    }

    // Groups without a primary, listed.
    let mut listed: Vec<u64> =
        tags_with(dom, "data-orphan").iter().filter_map(|tag| tag["data-orphan"].parse().ok()).collect();
    listed.sort_unstable();
    out.check("listed without a primary".into(), Some(&format!("{listed:?}")), format!("{orphans:?}"));

    // The placement map: one row per group (all fit on the first page), each
    // node's cell saying its role.
    let placement = tag(dom, "id", "placement");
    out.check("placement rows".into(), placement.get("data-rows"), groups.len().to_string());
    let group_rows = tags_with(dom, "data-group");
    let cells = tags_with(dom, "data-cell-node");
    out.check("placement cells".into(), Some(&cells.len().to_string()), (groups.len() * nodes.len()).to_string());
    for group in groups {
        let id = u64_of(&group["id"]);
        let owner = group["owner"]["node"].as_u64();
        let Some(row) = group_rows.iter().find(|row| row["data-group"] == id.to_string()) else {
            out.0.push(format!("group {id}: no placement row"));
            continue;
        };
        out.check(format!("group {id} owner"), row.get("data-owner"), owner.map_or("none".into(), |n| n.to_string()));
    }
    // Cells in document order: row by row, node by node (sorted ids).
    let mut node_ids: Vec<u64> = nodes.iter().map(|n| u64_of(&n["id"])).collect();
    node_ids.sort_unstable();
    let mut sorted: Vec<&Value> = groups.iter().collect();
    sorted.sort_by_key(|g| u64_of(&g["id"]));
    let expected_roles: Vec<String> = sorted
        .iter()
        .flat_map(|group| {
            node_ids.iter().map(move |id| {
                let has = |key: &str| group[key].as_array().is_some_and(|ids| ids.iter().any(|n| u64_of(n) == *id));
                if group["owner"]["node"].as_u64() == Some(*id) {
                    format!("{id}:primary")
                } else if has("members") {
                    format!("{id}:voter")
                } else if has("learners") {
                    format!("{id}:learner")
                } else {
                    format!("{id}:")
                }
            })
        })
        .collect();
    let shown_roles: Vec<String> =
        cells.iter().map(|cell| format!("{}:{}", cell["data-cell-node"], cell["data-role"])).collect();
    out.check("placement roles".into(), Some(&shown_roles.join(" ")), expected_roles.join(" "));

    // Operations in flight, by id.
    let mut operations: Vec<String> =
        tags_with(dom, "data-operation").iter().map(|t| t["data-operation"].clone()).collect();
    operations.sort();
    let mut expected: Vec<String> =
        status["operations"].as_array().into_iter().flatten().map(|op| op["id"].to_string()).collect();
    expected.sort();
    out.check("operations in flight".into(), Some(&operations.join(",")), expected.join(","));
    out.0
}

/// Load the console from `admin` until a dump is taken while `/status`
/// stays the same, and compare the two; the DOM it compared.
async fn console_matches_status(admin: SocketAddr) -> String {
    for _ in 0..DUMP_ATTEMPTS_MAX {
        let before = status(admin).await;
        let dom = chromium(format!("http://{admin}/console"), vec!["--dump-dom".into()]).await;
        let after = status(admin).await;
        if before != after {
            continue;
        }
        let differences = differences(&dom, &after);
        assert!(differences.is_empty(), "the console differs from /status:\n{}\n\n{dom}", differences.join("\n"));
        return dom;
    }
    panic!("/status changed during each of {DUMP_ATTEMPTS_MAX} dumps");
}

/// The sum of every sample of `family` with `labels` in a `/metrics` text.
fn metric_sum(metrics: &str, family: &str, labels: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(&format!("{family}{{")) && line.contains(labels))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The charts have samples (at least two polls, so a rate is drawn), and
/// each one's last sample is its counter as `/metrics` had it: `before`
/// the dump at least, `after` it at most.
fn assert_charts(dom: &str, before: &str, after: &str) {
    let charts = [
        ("view-changes", "cohort_view_changes_started_total", ""),
        ("writes", "cohort_client_requests_total", "kind=\"write\""),
    ];
    for (chart, family, labels) in charts {
        let svg = tag(dom, "data-chart", chart);
        let samples: usize = svg["data-samples"].parse().expect("a sample count");
        assert!(samples >= 2, "{chart}: {samples} samples in {VIRTUAL_TIME_BUDGET_MS} ms of virtual time");
        assert!(!svg["data-last-rate"].is_empty(), "{chart}: a rate is drawn");
        let total: f64 = svg["data-total"].parse().expect("a counter value");
        let (low, high) = (metric_sum(before, family, labels), metric_sum(after, family, labels));
        assert!(low <= total && total <= high, "{chart}: the page sampled {total}, /metrics said {low} then {high}");
    }
}

#[actix_rt::test]
async fn o6_console_in_a_real_browser_shows_what_status_says() {
    if let Err(why) = host_package::ensure(&[host_package::CHROMIUM]) {
        host_package::skip("o6_console_in_a_real_browser_shows_what_status_says", &why);
        return;
    }
    let mut cluster = cluster();
    let node_1 = admin(&cluster, 1);
    wait_ready(node_1, 3).await;
    let client = cluster.network_client().expect("a network client");
    for index in 0..GROUPS {
        client.write(GroupId(index), format!("write {index}")).await.expect("a write");
    }

    // Served without a token, with a policy that keeps the page to itself;
    // no other method, and nothing under /admin/ without the token.
    let page = http(reqwest::Method::GET, format!("http://{node_1}/console")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let policy = page.headers.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(policy.contains("script-src 'self'") && policy.contains("connect-src 'self'"), "{policy}");
    assert_eq!(page.headers.get("x-content-type-options").and_then(|v| v.to_str().ok()), Some("nosniff"));
    let script = http(reqwest::Method::GET, format!("http://{node_1}/console/console.js")).await;
    assert_eq!(script.status, 200);
    assert_eq!(http(reqwest::Method::POST, format!("http://{node_1}/console")).await.status, 405);
    let anonymous = http(reqwest::Method::POST, format!("http://{node_1}/admin/operations")).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);

    // Every node up.
    let metrics = format!("http://{node_1}/metrics");
    let before = http(reqwest::Method::GET, metrics.clone()).await.body;
    let dom = console_matches_status(node_1).await;
    let after = http(reqwest::Method::GET, metrics).await.body;
    assert!(
        metric_sum(&before, "cohort_client_requests_total", "kind=\"write\"") >= 1.0,
        "node 1 leads some groups: {before}"
    );
    assert_charts(&dom, &before, &after);
    assert_eq!(tag(&dom, "data-node", "3")["data-up"], "true");
    // A kind name that is markup is shown as text: escaped in the dump, no
    // element made of it.
    assert!(dom.contains("&lt;img src=x id=injected"), "the hostile kind shown as text");
    assert!(!dom.contains("<img") && !dom.contains("id=\"injected\"") && !dom.contains("<b>"), "no markup from data");
    if let Some(path) = std::env::var_os("COHORT_CONSOLE_SCREENSHOT") {
        let path = Path::new(&path).to_path_buf();
        let arguments = vec![format!("--screenshot={}", path.display()), "--window-size=1280,900".into()];
        // A client writes while the page samples, so the chart has a line.
        let writing = std::rc::Rc::new(std::cell::Cell::new(true));
        let writer = actix_rt::spawn({
            let (client, writing) = (client.clone(), writing.clone());
            async move {
                let mut index = 0_u64;
                while writing.get() {
                    let _ = client.write(GroupId(index % GROUPS), format!("screenshot {index}")).await;
                    index += 1;
                }
            }
        });
        chromium(format!("http://{node_1}/console"), arguments).await;
        writing.set(false);
        writer.await.expect("the writer");
        let png = std::fs::read(&path).expect("the screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG at {}", path.display());
    }

    // Node 3 stopped: shown down as soon as node 1's links to it drop.
    cluster.stop_node(NodeId(3));
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(node_1).await["metadata"]["nodes"]
        .as_array()
        .is_none_or(|nodes| !nodes.iter().any(|n| n["id"] == 3 && n["up"] == false))
    {
        assert!(Instant::now() < deadline, "node 3 down in node 1's /status within 30 s");
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let dom = console_matches_status(node_1).await;
    assert_eq!(tag(&dom, "data-node", "3")["data-up"], "false");

    // An operation in flight: the move of MOVED to the stopped node 3 adds
    // it as a learner and waits for it to catch up, which it never does.
    let (code, started) =
        operator_post(node_1, "/admin/operations", format!(r#"{{"op":"move","group":{},"from":2,"to":3}}"#, MOVED.0))
            .await;
    assert_eq!((code, started["result"].as_str()), (200, Some("started")), "{started}");
    let dom = console_matches_status(node_1).await;
    let operation = started["operation"].to_string();
    assert_eq!(tag(&dom, "data-operation", &operation)["data-remaining"], "2", "promote and remove remain");
    let moved = MOVED.0.to_string();
    let owner = tag(&dom, "data-group", &moved)["data-owner"].clone();
    assert!(owner == "1" || owner == "2", "{MOVED} keeps its primary on node 1 or 2, shown {owner}");
    assert!(dom.contains("data-cell-node=\"3\" data-role=\"learner\""), "node 3 shown as {MOVED}'s learner");
    cluster.stop();
}
