//! O2 on real nodes: what `/metrics` serves over the admin port, read as a
//! scraper reads it (plain HTTP on loopback, the OpenMetrics text).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use cohort_runtime::prelude::*;

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
