//! O2 on real nodes: what `/metrics` serves over the admin port, read as a
//! scraper reads it (plain HTTP on loopback, the OpenMetrics text), while
//! a client writes over TLS to the client ports.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use cohort_runtime::admin::AdminToken;
use cohort_runtime::prelude::*;

/// The admin token of the cluster that is frozen and unfrozen.
const TOKEN: &str = "admin-token-of-the-metrics-test";

/// How long the cluster has to reach a state the test waits for (sessions
/// opened, acks recorded, a freeze applied everywhere).
const SETTLE_WAIT_MAX: Duration = Duration::from_secs(30);

/// How long one scrape may take.
const SCRAPE_WAIT_MAX: Duration = Duration::from_secs(5);

/// The body of `GET /metrics` on `address`.
fn scrape(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect_timeout(&address, SCRAPE_WAIT_MAX).expect("connect");
    stream.set_read_timeout(Some(SCRAPE_WAIT_MAX)).expect("timeout");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    body.to_owned()
}

/// `POST path` with the operator's token; the status code.
fn post(address: SocketAddr, path: &str) -> u16 {
    let mut stream = TcpStream::connect_timeout(&address, SCRAPE_WAIT_MAX).expect("connect");
    stream.set_read_timeout(Some(SETTLE_WAIT_MAX)).expect("timeout");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    answer.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("a status code")
}

/// The value of the sample whose name and labels are exactly `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn admin(cluster: &LocalCluster, node: u64) -> SocketAddr {
    cluster.node(NodeId(node)).and_then(Node::admin_address).expect("an admin port")
}

#[actix_rt::test]
async fn o2_group_kind_label_is_the_plain_kind_name() {
    // Groups of `NodeBuilder::state_machine` are of the kind `default`.
    let cluster = LocalCluster::builder(1)
        .group_kind(GroupKind::default(), |_| Box::new(Register::default()))
        .groups(GroupKind::default(), [GroupId(0)])
        .group_kind("ledger", |_| Box::new(Register::default()))
        .groups("ledger", [GroupId(1)])
        .admin_ports()
        .start()
        .expect("the node starts");
    let client = cluster.client();
    client.write(GroupId(0), "a").await.expect("a write to the default kind");
    client.write(GroupId(1), "b").await.expect("a write to the ledger kind");
    let text = scrape(admin(&cluster, 1));
    assert!(sample(&text, "cohort_ops_applied_total{kind=\"default\"}").is_some_and(|ops| ops >= 1.0), "{text}");
    assert!(sample(&text, "cohort_ops_applied_total{kind=\"ledger\"}").is_some_and(|ops| ops >= 1.0), "{text}");
    assert!(
        text.lines()
            .any(|line| line.starts_with("cohort_apply_latency_seconds_bucket{") && line.contains("kind=\"default\"")),
        "{text}"
    );
    assert!(!text.contains("\\\""), "no label value carries quotes:\n{text}");
}

/// Scrape every node until `check` holds for all of them; the last texts.
async fn settle(cluster: &LocalCluster, what: &str, check: impl Fn(&str) -> bool) -> Vec<String> {
    let deadline = Instant::now() + SETTLE_WAIT_MAX;
    loop {
        let texts: Vec<String> = (1..=3).map(|node| scrape(admin(cluster, node))).collect();
        if texts.iter().all(|text| check(text)) {
            return texts;
        }
        assert!(Instant::now() < deadline, "{what} within {SETTLE_WAIT_MAX:?}:\n{}", texts.join("\n----\n"));
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every family `text` declares has a row in docs/metrics.md, under the
/// name its samples carry (a counter's with `_total`).
fn documented(text: &str) {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).expect("the doc");
    let missing: Vec<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|declaration| {
            let (name, kind) = declaration.split_once(' ')?;
            let sampled = if kind == "counter" { format!("{name}_total") } else { name.to_owned() };
            (!doc.contains(&format!("| `{sampled}` |"))).then_some(sampled)
        })
        .collect();
    assert!(missing.is_empty(), "families without a row in docs/metrics.md: {missing:?}");
}

fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("{series} missing:\n{text}"))
}

#[actix_rt::test]
async fn o2_a_real_cluster_exports_process_build_metadata_disk_and_client_families() {
    let cluster = LocalCluster::builder(3)
        .group_kind(GroupKind::default(), |_| Box::new(Register::default()))
        .groups(GroupKind::default(), [GroupId(1), GroupId(2)])
        .client_ports()
        .admin_ports()
        .admin_token(AdminToken::new(TOKEN).expect("a valid token"))
        .start()
        .expect("the cluster starts");
    let client = cluster.network_client().expect("a network client");
    for (index, group) in [GroupId(1), GroupId(2), GroupId(1)].into_iter().enumerate() {
        client.write(group, format!("write {index}")).await.expect("a write over the client port");
    }
    // The client port refuses the metadata group at once, as `forbidden`.
    assert!(client.write(GroupId::METADATA, "nope").await.is_err(), "the metadata group is not a client's");

    // Every node registered and acked the latest change (so the apply-lag
    // alert stays quiet on a cluster that keeps up), both groups have a primary.
    let placed = |text: &str| {
        sample(text, "cohort_metadata_acked_epoch").is_some_and(|acked| acked >= 1.0)
            && sample(text, "cohort_metadata_acked_epoch") == sample(text, "cohort_metadata_config_epoch")
            && sample(text, "cohort_session_held") == Some(1.0)
            && sample(text, "cohort_metadata_groups_without_primary") == Some(0.0)
            && (1..=3).all(|node| sample(text, &format!("cohort_metadata_groups{{node=\"{node}\"}}")) == Some(2.0))
    };
    let texts = settle(&cluster, "sessions, acks and primaries", placed).await;
    let mut writes = 0.0;
    let mut forbidden = 0.0;
    for text in &texts {
        assert!(value(text, "cohort_process_cpu_seconds_total") > 0.0, "{text}");
        assert!(value(text, "cohort_process_resident_memory_bytes") > 1e6, "{text}");
        assert!(value(text, "cohort_process_open_fds") >= 10.0, "sockets and segment files: {text}");
        assert!(value(text, "cohort_process_threads") >= 3.0, "shards, storage, admin: {text}");
        assert!(text.contains("# TYPE cohort_build_info gauge\n"), "{text}");
        let build = text.lines().find(|line| line.starts_with("cohort_build_info{")).expect("build info");
        assert!(build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))), "{build}");
        assert!(build.contains("revision=\"") && build.ends_with(" 1"), "{build}");
        let epoch = value(text, "cohort_metadata_epoch");
        let config_epoch = value(text, "cohort_metadata_config_epoch");
        assert!(epoch >= config_epoch && config_epoch >= value(text, "cohort_metadata_acked_epoch"), "{text}");
        assert_eq!(value(text, "cohort_metadata_frozen"), 0.0);
        let primaries: f64 =
            (1..=3).map(|node| value(text, &format!("cohort_metadata_primaries{{node=\"{node}\"}}"))).sum();
        assert_eq!(primaries, 2.0, "each group has one primary: {text}");
        assert!(value(text, "cohort_wal_size_bytes{shard=\"0\"}") > 0.0, "{text}");
        let free = value(text, "cohort_disk_free_bytes");
        assert!(free > 0.0 && free <= value(text, "cohort_disk_size_bytes"), "{text}");
        writes += value(text, "cohort_client_requests_total{kind=\"write\"}");
        forbidden += value(text, "cohort_client_errors_total{kind=\"forbidden\"}");
        assert_eq!(sample(text, "cohort_client_errors_total{kind=\"busy\"}"), Some(0.0), "every kind from zero");
    }
    assert!(writes >= 3.0, "three writes reached the client ports: {writes}");
    documented(&texts[0]);
    assert!(forbidden >= 1.0, "the refused write is counted by its kind: {forbidden}");

    // A freeze shows on every node, and so does its end.
    assert_eq!(post(admin(&cluster, 2), "/admin/freeze"), 200);
    settle(&cluster, "the freeze", |text| sample(text, "cohort_metadata_frozen") == Some(1.0)).await;
    assert_eq!(post(admin(&cluster, 3), "/admin/unfreeze"), 200);
    settle(&cluster, "the unfreeze", |text| sample(text, "cohort_metadata_frozen") == Some(0.0)).await;
    settle(&cluster, "every node acks the unfreeze", |text| {
        sample(text, "cohort_metadata_acked_epoch") == sample(text, "cohort_metadata_config_epoch")
    })
    .await;
}
