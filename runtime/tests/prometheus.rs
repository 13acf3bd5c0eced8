//! O3: the shipped alert rules and dashboard (`examples/monitoring/`)
//! against a real Prometheus scraping a real three-node cluster.
//!
//! - every alert rule passes `promtool check rules`, and `promtool test
//!   rules alerts_test.yml` (which has a case for every alert) passes;
//! - a `prometheus` process of our own (a temp dir for its data and config,
//!   a free loopback port, killed when the test ends however it ends)
//!   scrapes every node's admin port each second and evaluates the rules:
//!   each rule evaluates without error against the live series;
//! - every query of every dashboard panel, sent to Prometheus's HTTP API,
//!   returns at least one series with a number while a client writes, no
//!   alert fires, and once a node is stopped `CohortNodeDown` is pending
//!   for it alone.
//!
//! Prometheus comes from Debian's `prometheus` package. When `prometheus`
//! or `promtool` is missing, a root user with apt gets it installed here
//! (as `.ci/run` does); anyone else gets the test skipped with a message
//! saying how to install it (`cohort_sim::host_package`). The package may start a system service on
//! port 9090: this test never talks to it, and stops it if it installed it.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cohort_runtime::prelude::*;
use cohort_sim::host_package::{self, PROMETHEUS, Provided};
use serde_json::Value;

/// How long Prometheus has to start answering.
const READY_WAIT_MAX: Duration = Duration::from_secs(60);

/// How long every panel's query (and every rule) has to get its data once
/// Prometheus scrapes: a few scrapes a second apart, with room for a
/// loaded machine.
const DATA_WAIT_MAX: Duration = Duration::from_secs(90);

/// What the dashboard's `$__rate_interval` stands for in these queries
/// (Grafana puts four scrape intervals or more there).
const RATE_INTERVAL: &str = "30s";

fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/monitoring")
}

/// `prometheus` and `promtool` on the PATH, installed with apt when they
/// are missing and this runs as root; otherwise why not.
fn ensure_prometheus() -> Result<(), host_package::Unavailable> {
    if host_package::ensure(&[PROMETHEUS])? == Provided::Installed {
        // The package's own service, if it started one, is not ours.
        let _ = Command::new("systemctl").args(["stop", "prometheus"]).stderr(Stdio::null()).status();
    }
    Ok(())
}

/// Run `promtool` with `arguments` in the monitoring directory; its output.
fn promtool(arguments: &[&str]) -> String {
    let out = Command::new("promtool").args(arguments).current_dir(monitoring_dir()).output().expect("promtool runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {arguments:?} failed:\n{text}");
    text
}

/// The names of the alerts in alerts.yml.
fn alert_names(rules: &str) -> Vec<String> {
    rules.lines().filter_map(|line| line.trim().strip_prefix("- alert: ")).map(|name| name.trim().to_owned()).collect()
}

/// A Prometheus server of this test's own, killed on drop.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Start one scraping `targets` every second, with the shipped rules.
    fn start(targets: &[SocketAddr]) -> Prometheus {
        let dir = tempfile::Builder::new().prefix("cohort-prometheus-").tempdir().expect("a temp dir");
        // A free loopback port: bound, read and released for Prometheus.
        let address = TcpListener::bind("127.0.0.1:0").and_then(|probe| probe.local_addr()).expect("a free port");
        let targets: Vec<String> = targets.iter().map(|target| format!("\"{target}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - \"{}\"\n\
             scrape_configs:\n  - job_name: cohort\n    static_configs:\n      - targets: [{}]\n",
            monitoring_dir().join("alerts.yml").display(),
            targets.join(", ")
        );
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write the config");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("a log file");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log twice"))
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        Prometheus { child, address, dir }
    }

    /// Its log so far, for a failure's message.
    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        text.get(start..).unwrap_or(&text).to_owned()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET url` (blocking, off the actors' thread): the status and the JSON body.
async fn get(url: String) -> Option<(u16, Value)> {
    tokio::task::spawn_blocking(move || {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().ok()?;
        let answer = client.get(url).send().ok()?;
        let status = answer.status().as_u16();
        let body = answer.text().ok()?;
        Some((status, serde_json::from_str(&body).unwrap_or(Value::Null)))
    })
    .await
    .ok()
    .flatten()
}

/// An instant query's result vector (empty on any error).
async fn query(prometheus: &Prometheus, expr: &str) -> Vec<Value> {
    let Ok(url) = reqwest::Url::parse_with_params(&prometheus.url("/api/v1/query"), [("query", expr)]) else {
        return Vec::new();
    };
    match get(url.to_string()).await {
        Some((200, body)) => body["data"]["result"].as_array().cloned().unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// True if some series of `result` has a finite number.
fn has_a_number(result: &[Value]) -> bool {
    result
        .iter()
        .any(|series| series["value"][1].as_str().and_then(|text| text.parse::<f64>().ok()).is_some_and(f64::is_finite))
}

/// Every query of every panel of the dashboard, with its panel's title.
fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has a query");
            let title = panel["title"].as_str().unwrap_or("?").to_owned();
            queries.push((title, expr.replace("$__rate_interval", RATE_INTERVAL)));
        }
    }
    queries
}

#[actix_rt::test]
async fn o3_alerts_and_dashboard_work_against_a_real_prometheus_and_cluster() {
    if let Err(why) = ensure_prometheus() {
        host_package::skip("o3_alerts_and_dashboard_work_against_a_real_prometheus_and_cluster", &why);
        return;
    }
    let rules = std::fs::read_to_string(monitoring_dir().join("alerts.yml")).expect("alerts.yml");
    let alerts = alert_names(&rules);
    assert!(alerts.len() >= 8, "{alerts:?}");
    let checked = promtool(&["check", "rules", "alerts.yml"]);
    assert!(checked.contains(&format!("SUCCESS: {} rules found", alerts.len())), "{checked}");
    let tests = std::fs::read_to_string(monitoring_dir().join("alerts_test.yml")).expect("alerts_test.yml");
    for alert in &alerts {
        assert!(tests.contains(&format!("alertname: {alert}\n")), "alerts_test.yml tests {alert}");
    }
    promtool(&["test", "rules", "alerts_test.yml"]);
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring_dir().join("dashboard.json")).expect("dashboard"))
            .expect("the dashboard is JSON");
    let queries = panel_queries(&dashboard);
    assert!(queries.len() >= 20, "{queries:?}");

    let mut cluster = LocalCluster::builder(3)
        .group_kind(GroupKind::default(), |_| Box::new(Register::default()))
        .groups(GroupKind::default(), [GroupId(1), GroupId(2), GroupId(3)])
        .client_ports()
        .admin_ports()
        .start()
        .expect("the cluster starts");
    assert!(cluster.wait_connected(Duration::from_secs(30)).await, "the nodes connect");
    // Writes over the client ports and through the nodes' handles (the
    // commit latency panel times the latter) until the test ends.
    let writing = Rc::new(AtomicBool::new(true));
    let network = cluster.network_client().expect("a network client");
    let embedded = cluster.client();
    let still = Rc::clone(&writing);
    actix_rt::spawn(async move {
        let mut index = 0u64;
        while still.load(Ordering::Relaxed) {
            let group = GroupId(1 + index % 3);
            let _ = network.write(group, format!("over the network {index}")).await;
            let _ = embedded.write(group, format!("embedded {index}")).await;
            index += 1;
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
    });

    let targets: Vec<SocketAddr> =
        (1..=3).map(|node| cluster.node(NodeId(node)).and_then(Node::admin_address).expect("an admin port")).collect();
    let prometheus = Prometheus::start(&targets);
    let deadline = Instant::now() + READY_WAIT_MAX;
    while get(prometheus.url("/-/ready")).await.is_none_or(|(status, _)| status != 200) {
        assert!(Instant::now() < deadline, "prometheus ready within {READY_WAIT_MAX:?}:\n{}", prometheus.log());
        actix_rt::time::sleep(Duration::from_millis(200)).await;
    }

    let deadline = Instant::now() + DATA_WAIT_MAX;
    let mut waiting: Vec<(String, String)> = vec![("every node up".into(), "up{job=\"cohort\"} == 1".into())];
    waiting.extend(queries);
    while !waiting.is_empty() {
        let mut still_waiting = Vec::new();
        for (title, expr) in waiting {
            let result = query(&prometheus, &expr).await;
            let complete = if title == "every node up" { result.len() == 3 } else { has_a_number(&result) };
            if !complete {
                still_waiting.push((title, expr));
            }
        }
        waiting = still_waiting;
        assert!(
            waiting.is_empty() || Instant::now() < deadline,
            "panels without data after {DATA_WAIT_MAX:?}: {waiting:#?}\n{}",
            prometheus.log()
        );
        if !waiting.is_empty() {
            actix_rt::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // Every rule evaluated against the live series, without error.
    loop {
        let rules = get(prometheus.url("/api/v1/rules")).await.map(|(_, body)| body).unwrap_or(Value::Null);
        let evaluated: Vec<(String, String, String)> = rules["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
            .map(|rule| {
                let text = |key: &str| rule[key].as_str().unwrap_or_default().to_owned();
                (text("name"), text("health"), text("lastError"))
            })
            .collect();
        let ok = evaluated.len() == alerts.len() && evaluated.iter().all(|(_, health, _)| health == "ok");
        if ok {
            break;
        }
        assert!(evaluated.iter().all(|(_, health, _)| health != "err"), "a rule failed to evaluate: {evaluated:#?}");
        assert!(Instant::now() < deadline, "rules evaluated within {DATA_WAIT_MAX:?}: {evaluated:#?}");
        actix_rt::time::sleep(Duration::from_millis(500)).await;
    }
    let firing = query(&prometheus, "ALERTS{alertstate=\"firing\"}").await;
    assert!(firing.is_empty(), "a healthy cluster fires no alert: {firing:#?}");

    // A stopped node: CohortNodeDown picks it out of the live series (it
    // waits a minute before firing, so pending is what this test sees).
    cluster.stop_node(NodeId(3));
    let down = format!("ALERTS{{alertname=\"CohortNodeDown\",alertstate=\"pending\",instance=\"{}\"}}", targets[2]);
    let deadline = Instant::now() + DATA_WAIT_MAX;
    while query(&prometheus, &down).await.len() != 1 {
        let alerts = query(&prometheus, "ALERTS").await;
        assert!(Instant::now() < deadline, "node 3 pending as down within {DATA_WAIT_MAX:?}: {alerts:#?}");
        actix_rt::time::sleep(Duration::from_millis(500)).await;
    }
    let pending = query(&prometheus, "ALERTS{alertname=\"CohortNodeDown\"}").await;
    assert_eq!(pending.len(), 1, "only the stopped node: {pending:#?}");
    writing.store(false, Ordering::Relaxed);
    drop(prometheus);
    cluster.stop();
}
