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
//!   for it alone;
//! - before that, every panel's series since Prometheus started
//!   (`/api/v1/query_range`) are drawn as the dashboard lays them out
//!   (`dashboard_render`), and the page is checked: every panel's title
//!   once, a line in every timeseries panel, no `NaN`. With
//!   `COHORT_DASHBOARD_SCREENSHOT=<file.png>`, headless Chromium also
//!   screenshots the page there (docs/images/dashboard.png comes from it).
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
use std::time::{Duration, Instant, SystemTime};

use cohort_runtime::prelude::*;
use cohort_sim::host_package::{self, CHROMIUM, PROMETHEUS, Provided};
use dashboard_render::{Page, Series, Window};
use serde_json::Value;

mod dashboard_render;

/// How long Prometheus has to start answering.
const READY_WAIT_MAX: Duration = Duration::from_secs(60);

/// How long every panel's query (and every rule) has to get its data once
/// Prometheus scrapes: a few scrapes a second apart, with room for a
/// loaded machine.
const DATA_WAIT_MAX: Duration = Duration::from_secs(90);

/// What the dashboard's `$__rate_interval` stands for in these queries
/// (Grafana puts four scrape intervals or more there).
const RATE_INTERVAL: &str = "30s";

/// The step between the samples the dashboard's charts draw.
const CHART_STEP: Duration = Duration::from_secs(1);

/// With a screenshot asked for, how much history the charts show at least,
/// so that the lines have a shape (a plain run has 10–20 s).
const SCREENSHOT_HISTORY_MIN: Duration = Duration::from_secs(60);

/// Names the PNG file to screenshot the drawn dashboard into; a relative
/// path is taken from the workspace's root.
const SCREENSHOT_ENV: &str = "COHORT_DASHBOARD_SCREENSHOT";

/// How long Chromium has to take the screenshot.
const BROWSER_WAIT_MAX: Duration = Duration::from_secs(90);

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
    api(prometheus, "/api/v1/query", &[("query", expr)]).await
}

/// The `data.result` of a query API at `path` with `parameters` (empty on any error).
async fn api(prometheus: &Prometheus, path: &str, parameters: &[(&str, &str)]) -> Vec<Value> {
    let Ok(url) = reqwest::Url::parse_with_params(&prometheus.url(path), parameters) else {
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

/// Now, in Unix seconds.
fn unix_now_s() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |since| since.as_secs_f64())
}

/// Every panel's series over `window`, fetched as Grafana fetches them: a
/// range query per target, or an instant query at the window's end for a
/// target marked `instant`; named by the target's `legendFormat`. One list
/// per panel, in the dashboard's order (empty for a row).
async fn panel_series(prometheus: &Prometheus, dashboard: &Value, window: Window) -> Vec<Vec<Series>> {
    let (start, end, step) = (window.start_s.to_string(), window.end_s.to_string(), window.step_s.to_string());
    let mut data = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        let mut series = Vec::new();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default().replace("$__rate_interval", RATE_INTERVAL);
            let result = if target["instant"].as_bool() == Some(true) {
                api(prometheus, "/api/v1/query", &[("query", &expr), ("time", &end)]).await
            } else {
                let parameters = [("query", expr.as_str()), ("start", &start), ("end", &end), ("step", &step)];
                api(prometheus, "/api/v1/query_range", &parameters).await
            };
            series.extend(dashboard_render::series_of(&result, target["legendFormat"].as_str()));
        }
        data.push(series);
    }
    data
}

/// Draw the dashboard from what Prometheus holds since `ready_s` and check
/// the page's structure, fetching again while a panel still lacks a line
/// (a series may have one sample only just after the first scrapes). With
/// [`SCREENSHOT_ENV`] set, wait for [`SCREENSHOT_HISTORY_MIN`] of history
/// first and screenshot the page.
async fn draw_dashboard(prometheus: &Prometheus, dashboard: &Value, ready_s: f64) {
    let screenshot = std::env::var_os(SCREENSHOT_ENV).map(|path| workspace_dir().join(path));
    if screenshot.is_some() {
        let history = Duration::from_secs_f64((ready_s + SCREENSHOT_HISTORY_MIN.as_secs_f64() - unix_now_s()).max(0.0));
        actix_rt::time::sleep(history).await;
    }
    let deadline = Instant::now() + DATA_WAIT_MAX;
    let page = loop {
        let window = Window { start_s: ready_s.floor(), end_s: unix_now_s().floor(), step_s: CHART_STEP.as_secs_f64() };
        let page = dashboard_render::render(dashboard, &panel_series(prometheus, dashboard, window).await, window);
        let problems = dashboard_render::structural_problems(&page.html, dashboard);
        if problems.is_empty() {
            break page;
        }
        assert!(Instant::now() < deadline, "the drawn dashboard within {DATA_WAIT_MAX:?}: {problems:#?}");
        actix_rt::time::sleep(CHART_STEP).await;
    };
    if let Some(png) = screenshot {
        take_screenshot(page, png.clone()).await;
        let bytes = std::fs::read(&png).expect("the screenshot");
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG at {}", png.display());
        eprintln!("dashboard screenshot: {} ({} bytes)", png.display(), bytes.len());
    }
}

fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Screenshot `page` into `png` with headless Chromium (installed with apt
/// when it is missing and this runs as root), off the actors' thread,
/// killed if it outlives [`BROWSER_WAIT_MAX`].
async fn take_screenshot(page: Page, png: PathBuf) {
    if let Err(why) = host_package::ensure(&[CHROMIUM]) {
        panic!("{SCREENSHOT_ENV} asks for a screenshot: {why}");
    }
    let _ = std::fs::remove_file(&png);
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::Builder::new().prefix("cohort-dashboard-").tempdir().expect("a temp dir");
        let file = dir.path().join("dashboard.html");
        std::fs::write(&file, &page.html).expect("write the page");
        let arguments = [
            "--hide-scrollbars".to_string(),
            format!("--screenshot={}", png.display()),
            format!("--window-size={},{}", dashboard_render::PAGE_WIDTH_PX, page.height_px),
        ];
        let url = format!("file://{}", file.display());
        cohort_sim::browser::headless(&url, &arguments, &dir.path().join("profile"), BROWSER_WAIT_MAX);
    })
    .await
    .expect("the browser's thread");
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
    let ready_s = unix_now_s();

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
    draw_dashboard(&prometheus, &dashboard, ready_s).await;

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

/// O3's drawing of the dashboard on made-up series, so that it is checked
/// where Prometheus is missing too: every panel is drawn, a `NaN` sample or
/// a missing step breaks a line instead of showing, legends follow
/// `legendFormat`, and text from the data is escaped.
#[test]
fn o3_dashboard_drawing_shows_every_panel_and_escapes_data() {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring_dir().join("dashboard.json")).expect("dashboard"))
            .expect("the dashboard is JSON");
    let window = Window { start_s: 1_800_000_000.0, end_s: 1_800_000_060.0, step_s: 1.0 };
    let made_up = |node: u64| {
        let values: Vec<Value> = (0..=60_u32)
            .filter(|second| !(40..45).contains(second))
            .map(|second| {
                let value = if second == 30 { f64::NAN } else { f64::from(second).mul_add(0.1 * node as f64, 1.0) };
                serde_json::json!([window.start_s + f64::from(second), value.to_string()])
            })
            .collect();
        let labels = serde_json::json!({"instance": format!("127.0.0.1:900{node}"), "node": node.to_string(),
            "kind": "<b>hostile</b>", "__name__": "cohort_build_info"});
        serde_json::json!({"metric": labels, "values": values})
    };
    let data: Vec<Vec<Series>> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .map(|panel| {
            let targets = panel["targets"].as_array().into_iter().flatten();
            targets
                .flat_map(|target| {
                    dashboard_render::series_of(&[made_up(1), made_up(2)], target["legendFormat"].as_str())
                })
                .collect()
        })
        .collect();
    let page = dashboard_render::render(&dashboard, &data, window);
    let problems = dashboard_render::structural_problems(&page.html, &dashboard);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(page.html.contains("&lt;b&gt;hostile&lt;/b&gt;") && !page.html.contains("<b>hostile"), "escaped");
    assert!(page.html.contains("</span>node 2</li>") && page.html.contains("</span>127.0.0.1:9001 limit</li>"));
    assert!(!page.html.contains("<script") && !page.html.contains("http"), "self-contained");
    assert!(page.height_px > 2000, "{} px", page.height_px);

    let labels = [("instance".to_owned(), "a:1".to_owned())].into_iter().collect();
    assert_eq!(dashboard_render::legend_name(Some("{{ instance }} {{missing}}x"), &labels), "a:1 x");
    assert_eq!(dashboard_render::legend_name(Some("{{instance"), &labels), "{{instance");
    assert_eq!(dashboard_render::legend_name(None, &labels), "{instance=\"a:1\"}");
}
