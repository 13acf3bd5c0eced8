//! O4: the `cohort` binary as an operator runs it, against a `LocalCluster`
//! whose nodes serve their client ports over mTLS and their admin ports
//! with a token: a client profile that is the only configuration the
//! commands get, the precedence of flags and environment over it,
//! `cohort groups list|describe` with filters and paging, `cohort status`
//! with its summary and a stopped node shown down, idempotent
//! freeze/unfreeze, one exit code per outcome and one JSON error shape for
//! every command, and the shell completions.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cohort_runtime::admin::AdminToken;
use cohort_runtime::prelude::*;
use cohort_sim::host_package::{self, FISH, ZSH};
use serde_json::Value;

/// Groups 0..GROUPS on every node.
const GROUPS: u64 = 12;

/// The nodes' admin token.
const TOKEN: &str = "admin-token-of-the-cli-profile-tests";

/// The environment variables that could leak an operator's own settings
/// into a test: each command gets only what the test gives it.
const CLEARED: [&str; 7] = [
    "COHORT_PROFILE",
    "COHORT_PROFILE_FILE",
    "COHORT_ADMIN",
    "COHORT_CLUSTER",
    "COHORT_ADMIN_TOKEN",
    "XDG_CONFIG_HOME",
    "HOME",
];

fn cluster() -> LocalCluster {
    LocalCluster::builder(3)
        .client_ports()
        .admin_ports()
        .admin_token(AdminToken::new(TOKEN).expect("a valid token"))
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", (0..GROUPS).map(GroupId))
        .start()
        .expect("cluster starts")
}

fn admin(cluster: &LocalCluster, node: u64) -> SocketAddr {
    cluster.node(NodeId(node)).and_then(Node::admin_address).expect("an admin port")
}

/// A port where nothing listens.
fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).expect("a free port")
}

/// What one `cohort` run gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Stdout as one JSON object.
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|_| panic!("one JSON object: {}{}", self.stdout, self.stderr))
    }

    fn text(&self) -> String {
        format!("exit {:?}\nstdout:\n{}\nstderr:\n{}", self.code, self.stdout, self.stderr)
    }
}

/// Run the `cohort` binary with `args` and only the environment `env` of
/// the [`CLEARED`] variables, off the test's thread (the nodes' actors share it).
async fn cohort(args: &[&str], env: &[(&str, String)]) -> Run {
    let args: Vec<String> = args.iter().map(ToString::to_string).collect();
    let env: Vec<(String, String)> = env.iter().map(|(key, value)| (key.to_string(), value.clone())).collect();
    let output = actix_rt::task::spawn_blocking(move || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cohort"));
        for key in CLEARED {
            command.env_remove(key);
        }
        command.args(&args).envs(env).output().expect("cohort runs")
    })
    .await
    .expect("the command's thread");
    let Output { status, stdout, stderr } = output;
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A profile file in `dir` whose profile `test` (the default) has everything
/// a command needs: every client port, a closed admin port before node 1's
/// (the first that answers is used), the certificates, the cluster id and a
/// token file.
fn write_profiles(dir: &Path, cluster: &LocalCluster) -> PathBuf {
    let clients: Vec<String> = cluster.client_addresses().iter().map(|address| format!("\"{address}\"")).collect();
    let certs = cluster.certs().client.ca.parent().expect("the certificates directory").to_path_buf();
    std::fs::write(dir.join("test.token"), format!("{TOKEN}\n")).expect("token file");
    let text = format!(
        "default = \"test\"\n\n[profile.test]\ncluster = [{}]\nadmin = \"{},{}\"\ncerts = {:?}\nclient = \"local\"\n\
         cluster_id = \"{:x}\"\ntoken_file = \"test.token\"\n\n[profile.other]\nadmin = \"{}\"\n",
        clients.join(", "),
        closed_port(),
        admin(cluster, 1),
        certs.display().to_string(),
        cohort_runtime::local::LOCAL_CLUSTER_ID.0,
        closed_port(),
    );
    let path = dir.join("profiles.toml");
    std::fs::write(&path, text).expect("profile file");
    path
}

/// Every node has a session and every group a primary, as node 1 sees it.
async fn wait_ready(cluster: &LocalCluster) {
    let handle = cluster.handle(NodeId(1)).expect("node 1");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = handle.status();
        let sessions = status.metadata.nodes.len() == 3 && status.metadata.nodes.iter().all(|n| n.session.is_some());
        let owned = status.metadata.groups.len() == GROUPS as usize
            && status.metadata.groups.iter().all(|group| group.owner.is_some());
        if sessions && owned {
            return;
        }
        assert!(Instant::now() < deadline, "sessions and primaries within 30 s: {status}");
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_rt::test]
async fn o4_a_profile_is_all_the_configuration_every_command_needs() {
    let cluster = cluster();
    wait_ready(&cluster).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let profiles = write_profiles(dir.path(), &cluster);
    let env = [("COHORT_PROFILE_FILE", profiles.display().to_string())];

    // Data commands: the cluster, certificates and cluster id from the profile.
    let write = cohort(&["write", "--group", "3", "--value", "from the profile"], &env).await;
    assert_eq!(write.code, Some(0), "{}", write.text());
    let read = cohort(&["read", "--group", "3", "--json"], &env).await;
    assert_eq!((read.code, read.json()["value"].as_str()), (Some(0), Some("from the profile")), "{}", read.text());

    // Status: the admin list (the closed port is skipped) and the token.
    let status = cohort(&["status"], &env).await;
    assert_eq!(status.code, Some(0), "{}", status.text());
    assert!(
        status.stdout.contains(&format!("groups: {GROUPS} ({GROUPS} live), 0 without a primary")),
        "{}",
        status.text()
    );
    assert!(!status.stdout.contains("redacted"), "the profile's token is presented: {}", status.text());
    let node_row = |line: &&str| line.split_whitespace().next().is_some_and(|id| id.parse::<u64>().is_ok());
    let up = status.stdout.lines().filter(node_row).filter(|line| line.split_whitespace().nth(1) == Some("up")).count();
    assert_eq!(up, 3, "three nodes up: {}", status.text());

    // Precedence: the environment beats the profile, the flag beats both.
    let mut env_admin = env.to_vec();
    env_admin.push(("COHORT_ADMIN", closed_port().to_string()));
    let unreachable = cohort(&["status"], &env_admin).await;
    assert_eq!(unreachable.code, Some(4), "COHORT_ADMIN over the profile's admin: {}", unreachable.text());
    let flag = cohort(&["status", "--admin", &admin(&cluster, 2).to_string()], &env_admin).await;
    assert_eq!(flag.code, Some(0), "--admin over COHORT_ADMIN: {}", flag.text());
    assert!(flag.stdout.starts_with("node 2 "), "{}", flag.text());
    let other = cohort(&["--profile", "other", "status"], &env).await;
    assert_eq!(other.code, Some(4), "--profile names another profile: {}", other.text());
    let mut env_profile = env.to_vec();
    env_profile.push(("COHORT_PROFILE", "other".into()));
    assert_eq!(cohort(&["status"], &env_profile).await.code, Some(4), "COHORT_PROFILE names it too");

    // A profile that does not exist, and a typo in the file: usage errors
    // that say what the file has and which keys are valid.
    let missing = cohort(&["status", "--profile", "prod"], &env).await;
    assert_eq!(missing.code, Some(2), "{}", missing.text());
    assert!(
        missing.stderr.contains("no profile \"prod\"") && missing.stderr.contains("other, test"),
        "{}",
        missing.text()
    );
    let typo = dir.path().join("typo.toml");
    std::fs::write(&typo, "[profile.default]\nadmn = \"7301\"\n").expect("write");
    let typo_env = [("COHORT_PROFILE_FILE", typo.display().to_string())];
    let refused = cohort(&["status", "--json"], &typo_env).await;
    assert_eq!(refused.code, Some(2), "{}", refused.text());
    let error = refused.json();
    let message = error["error"].as_str().unwrap_or_default();
    assert!(message.contains("admn") && message.contains("`admin`") && message.contains("`token_file`"), "{error}");
    assert_eq!((error["result"].as_str(), error["exit_code"].as_u64()), (Some("usage"), Some(2)));

    // No profile file at all: a command without an address says where to give one.
    let none = cohort(&["groups", "list"], &[("HOME", dir.path().join("nowhere").display().to_string())]).await;
    assert_eq!(none.code, Some(2), "{}", none.text());
    assert!(none.stderr.contains("--admin: missing") && none.stderr.contains("COHORT_ADMIN"), "{}", none.text());
}

#[actix_rt::test]
async fn o4_groups_list_filters_and_pages_and_describe_shows_one_group() {
    let cluster = cluster();
    wait_ready(&cluster).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("COHORT_PROFILE_FILE", write_profiles(dir.path(), &cluster).display().to_string())];

    // Every group once, a page of 5 at a time, in id order.
    let mut seen = Vec::new();
    let mut after: Option<u64> = None;
    let mut pages = 0;
    loop {
        let mut args = vec!["groups", "list", "--limit", "5", "--json"];
        let after_text = after.map(|after| after.to_string());
        if let Some(after) = &after_text {
            args.extend(["--after", after]);
        }
        let run = cohort(&args, &env).await;
        assert_eq!(run.code, Some(0), "{}", run.text());
        let page = run.json();
        assert_eq!(page["matched"].as_u64(), Some(GROUPS), "{page}");
        seen.extend(page["groups"].as_array().expect("groups").iter().filter_map(|group| group["id"].as_u64()));
        pages += 1;
        match page["next_after"].as_u64() {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!((seen, pages), ((0..GROUPS).collect::<Vec<_>>(), 3));

    // Filters: every group listed passes them, as the same answer shows it,
    // and each node's primaries and backups make up all the groups.
    let mut total = 0;
    for node in 1..=3u64 {
        let id = node.to_string();
        let primary = cohort(&["groups", "list", "--node", &id, "--role", "primary", "--json"], &env).await;
        let backup = cohort(&["groups", "list", "--node", &id, "--role", "backup", "--json"], &env).await;
        let (primary, backup) = (primary.json(), backup.json());
        for group in primary["groups"].as_array().expect("groups") {
            assert_eq!(group["owner"]["node"].as_u64(), Some(node), "{primary}");
        }
        for group in backup["groups"].as_array().expect("groups") {
            assert_ne!(group["owner"]["node"].as_u64(), Some(node), "{backup}");
            assert!(group["members"].as_array().is_some_and(|m| m.contains(&node.into())), "{backup}");
        }
        let both = primary["matched"].as_u64().unwrap_or(0) + backup["matched"].as_u64().unwrap_or(0);
        assert_eq!(both, GROUPS, "node {node} is a voter of every group: {primary} {backup}");
        total += primary["matched"].as_u64().unwrap_or(0);
        eprintln!("o4: node {node} leads {} groups", primary["matched"]);
    }
    assert!(total > 0, "someone leads");
    let kind = cohort(&["groups", "list", "--kind", "register"], &env).await;
    assert_eq!(kind.code, Some(0), "{}", kind.text());
    assert!(
        kind.stdout.contains(&format!("\n{GROUPS} of {GROUPS} matching groups (node 1 at epoch ")),
        "{}",
        kind.text()
    );
    assert_eq!(kind.stdout.lines().count(), GROUPS as usize + 2, "header, rows, count: {}", kind.text());
    let none = cohort(&["groups", "list", "--kind", "nope", "--json"], &env).await;
    assert_eq!((none.code, none.json()["matched"].as_u64()), (Some(0), Some(0)), "{}", none.text());
    let without = cohort(&["groups", "list", "--without-primary", "--json"], &env).await;
    assert_eq!(without.json()["matched"].as_u64(), Some(0), "every group has a primary: {}", without.text());

    // Describe: the primary, every replica up; an unknown group exits 1.
    let described = cohort(&["groups", "describe", "--group", "group:3", "--json"], &env).await;
    assert_eq!(described.code, Some(0), "{}", described.text());
    let document = described.json();
    assert_eq!(document["group"]["id"].as_u64(), Some(3), "{document}");
    let replicas = document["replicas"].as_array().expect("replicas");
    assert_eq!(replicas.len(), 3, "{document}");
    assert_eq!(replicas.iter().filter(|r| r["role"] == "primary").count(), 1, "{document}");
    assert!(replicas.iter().all(|r| r["up"] == true), "{document}");
    let text = cohort(&["groups", "describe", "--group", "3"], &env).await;
    assert!(
        text.stdout.starts_with("group:3 (node 1 at epoch ") && text.stdout.contains("  replicas"),
        "{}",
        text.text()
    );
    let unknown = cohort(&["groups", "describe", "--group", "999", "--json"], &env).await;
    assert_eq!(unknown.code, Some(1), "{}", unknown.text());
    let error = unknown.json();
    assert_eq!((error["result"].as_str(), error["exit_code"].as_u64()), (Some("failed"), Some(1)), "{error}");
    assert!(error["error"].as_str().is_some_and(|e| e.contains("no group:999")), "{error}");
}

/// Asserts `run` failed with `code`, and, run with `--json`, printed one
/// JSON object on stdout whose `result` is `word` and `exit_code` is `code`.
fn assert_json_error(run: &Run, code: i32, word: &str) -> Value {
    assert_eq!(run.code, Some(code), "{}", run.text());
    let error = run.json();
    assert_eq!(error["result"].as_str(), Some(word), "{}", run.text());
    assert_eq!(error["exit_code"].as_i64(), Some(i64::from(code)), "{}", run.text());
    assert!(error["error"].as_str().is_some_and(|text| !text.is_empty()), "{}", run.text());
    assert!(run.stderr.is_empty(), "with --json the error is on stdout only: {}", run.text());
    error
}

#[actix_rt::test]
async fn o4_freeze_and_unfreeze_are_idempotent_and_every_exit_code_is_as_documented() {
    let cluster = cluster();
    wait_ready(&cluster).await;
    let admin_1 = admin(&cluster, 1).to_string();
    let token = [("COHORT_ADMIN_TOKEN", TOKEN.to_string())];

    // 0: done, and done again: a repeat says it already was.
    let first = cohort(&["admin", "freeze", "--admin", &admin_1], &token).await;
    assert_eq!(first.code, Some(0), "{}", first.text());
    assert!(first.stdout.contains("is frozen since epoch"), "{}", first.text());
    let again = cohort(&["--admin", &admin_1, "admin", "freeze"], &token).await;
    assert_eq!(again.code, Some(0), "{}", again.text());
    assert!(again.stdout.contains("was already frozen since epoch"), "{}", again.text());
    let json = cohort(&["admin", "freeze", "--json", "--admin", &admin(&cluster, 2).to_string()], &token).await;
    assert_eq!(json.code, Some(0), "{}", json.text());
    assert_eq!((json.json()["result"].as_str(), json.json()["already"].as_bool()), (Some("frozen"), Some(true)));
    let thaw = cohort(&["admin", "unfreeze", "--admin", &admin_1], &token).await;
    assert_eq!(thaw.code, Some(0), "{}", thaw.text());
    assert!(thaw.stdout.contains("no longer frozen"), "{}", thaw.text());
    let thaw_again = cohort(&["admin", "unfreeze", "--admin", &admin_1], &token).await;
    assert_eq!(thaw_again.code, Some(0), "{}", thaw_again.text());
    assert!(thaw_again.stdout.contains("was not frozen; nothing changed"), "{}", thaw_again.text());

    // 1: the metadata refused; the JSON error keeps the port's own fields.
    let exists = [
        "admin",
        "create-group",
        "--group",
        "3",
        "--kind",
        "register",
        "--members",
        "1,2,3",
        "--json",
        "--admin",
        &admin_1,
    ];
    let error = assert_json_error(&cohort(&exists, &token).await, 1, "refused");
    assert!(error["reason"].as_str().is_some_and(|reason| reason.contains("group:3 exists")), "{error}");
    // 2: usage, from clap, from the CLI's own checks and from the node.
    assert_json_error(&cohort(&["admin", "move", "--group", "x", "--json"], &token).await, 2, "usage");
    let no_token = cohort(&["admin", "freeze", "--admin", &admin_1, "--json"], &[]).await;
    assert!(assert_json_error(&no_token, 2, "usage")["error"].as_str().unwrap_or_default().contains("--token"));
    let wrong =
        cohort(&["admin", "freeze", "--admin", &admin_1, "--json", "--token", "not-the-token-of-the-node"], &[]).await;
    assert_json_error(&wrong, 2, "token_mismatch");
    let no_json = cohort(&["certs", "client", "--dir", "/nonexistent", "--name", "x", "--json"], &[]).await;
    assert_json_error(&no_json, 2, "usage");
    // 4: nothing listens at any address given; nothing was sent.
    let closed = format!("{},{}", closed_port(), closed_port());
    for args in [
        &["status", "--json", "--admin", &closed][..],
        &["groups", "list", "--json", "--admin", &closed][..],
        &["groups", "describe", "--group", "1", "--json", "--admin", &closed][..],
        &["admin", "freeze", "--json", "--admin", &closed][..],
    ] {
        let run = cohort(args, &token).await;
        let error = assert_json_error(&run, 4, "unreachable");
        assert!(error["error"].as_str().is_some_and(|text| text.contains("any of ")), "{error}");
        let text = cohort(&args.iter().copied().filter(|arg| *arg != "--json").collect::<Vec<_>>(), &token).await;
        assert_eq!(text.code, Some(4), "{}", text.text());
        assert!(
            text.stdout.is_empty() && text.stderr.contains("cannot reach"),
            "without --json, stderr: {}",
            text.text()
        );
    }
    // The data commands speak the same shape: 1 for a read that found no
    // node in time, 2 for a missing cluster list.
    let certs = cluster.certs().client.ca.parent().expect("certs").display().to_string();
    let id = format!("{:x}", cohort_runtime::local::LOCAL_CLUSTER_ID.0);
    let tls = ["--certs", &certs, "--client", "local", "--cluster-id", &id, "--timeout-secs", "1"];
    let nowhere = closed_port().to_string();
    let read = [&["read", "--group", "0", "--json", "--cluster", &nowhere][..], &tls[..]].concat();
    assert_json_error(&cohort(&read, &[]).await, 1, "failed");
    let write = [&["write", "--group", "0", "--value", "v", "--json"][..], &tls[..]].concat();
    let missing = assert_json_error(&cohort(&write, &[]).await, 2, "usage");
    assert!(missing["error"].as_str().is_some_and(|text| text.contains("COHORT_CLUSTER")), "{missing}");
    let mut cluster_env = token.to_vec();
    cluster_env.push((
        "COHORT_CLUSTER",
        cluster.client_addresses().iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
    ));
    let through_env =
        cohort(&[&["write", "--group", "0", "--value", "v", "--json"][..], &tls[..2 * 3]].concat(), &cluster_env).await;
    assert_eq!(through_env.code, Some(0), "COHORT_CLUSTER gives the client ports: {}", through_env.text());
}

/// A stopped node reads DOWN in `cohort status` as soon as the answering
/// node's links to it drop, without waiting for its session to expire;
/// `groups list --primary-down` finds the groups it led until they fail
/// over. How long each took is printed, not asserted.
#[actix_rt::test]
async fn o4_status_shows_a_stopped_node_down_and_filters_by_group() {
    let mut cluster = cluster();
    wait_ready(&cluster).await;
    let token = [("COHORT_ADMIN_TOKEN", TOKEN.to_string())];
    let admin_1 = admin(&cluster, 1).to_string();
    let rows = cohort(&["status", "--admin", &admin_1, "--group", "2,group:5"], &token).await;
    assert_eq!(rows.code, Some(0), "{}", rows.text());
    let groups = rows.stdout.split_once("\ngroups\n").map(|(_, rows)| rows).unwrap_or_default();
    let ids: Vec<&str> = groups
        .lines()
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ids, ["2", "5"], "{}", rows.text());
    let filtered = cohort(&["status", "--admin", &admin_1, "--group", "5", "--json"], &token).await;
    let document = filtered.json();
    assert_eq!(document["metadata"]["groups"].as_array().map(Vec::len), Some(1), "{document}");
    assert_eq!(document["metadata"]["nodes"].as_array().map(Vec::len), Some(3), "{document}");

    let stopped = Instant::now();
    cluster.stop_node(NodeId(3));
    let deadline = Instant::now() + Duration::from_secs(30);
    let (down_after, session_then) = loop {
        let run = cohort(&["status", "--admin", &admin_1, "--json"], &token).await;
        assert_eq!(run.code, Some(0), "{}", run.text());
        let status = run.json();
        let node_3 =
            status["metadata"]["nodes"].as_array().and_then(|nodes| nodes.iter().find(|n| n["id"] == 3).cloned());
        let node_3 = node_3.expect("node 3 stays registered");
        if node_3["up"] == false {
            break (stopped.elapsed(), !node_3["session"].is_null());
        }
        assert!(Instant::now() < deadline, "node 3 DOWN within 30 s: {status}");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("o4: node 3 read DOWN {down_after:?} after it stopped (its session still recorded then: {session_then})");
    let text = cohort(&["status", "--admin", &admin_1], &token).await;
    let row = text.stdout.lines().find(|line| line.starts_with("3 ")).unwrap_or_default().to_string();
    assert_eq!(row.split_whitespace().nth(1), Some("DOWN"), "{}", text.text());
    let led = cohort(&["groups", "list", "--admin", &admin_1, "--primary-down", "--json"], &token).await;
    assert_eq!(led.code, Some(0), "{}", led.text());
    for group in led.json()["groups"].as_array().expect("groups") {
        assert_eq!(group["owner"]["node"], 3, "{}", led.text());
    }
    eprintln!("o4: {} groups still named node 3 their primary then", led.json()["matched"]);
}

#[test]
fn o4_completion_scripts_load_in_their_shells() {
    for shell in ["bash", "zsh", "fish"] {
        let output = Command::new(env!("CARGO_BIN_EXE_cohort")).args(["completions", shell]).output().expect("runs");
        assert!(output.status.success(), "{shell}: {}", String::from_utf8_lossy(&output.stderr));
        let script = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(script.contains("groups") && script.contains("all-groups"), "{shell}: {script}");
        // bash is everywhere; zsh and fish are installed when root can, else not loaded.
        let package = match shell {
            "zsh" => Some(ZSH),
            "fish" => Some(FISH),
            _ => None,
        };
        if let Some(Err(why)) = package.map(|package| host_package::ensure(&[package])) {
            host_package::skip(
                &format!("o4_completion_scripts_load_in_their_shells (loading the {shell} script)"),
                &why,
            );
            continue;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("cohort-completion");
        std::fs::write(&file, &script).expect("write");
        let check = match shell {
            "bash" => format!("source {} && complete -p cohort", file.display()),
            "zsh" => format!("autoload -U compinit && compinit -u && source {} && echo loaded", file.display()),
            _ => format!("source {} && complete -c cohort | head -1", file.display()),
        };
        let loaded = Command::new(shell).args(["-c", &check]).output().expect("the shell runs");
        assert!(
            loaded.status.success(),
            "{shell} loads the script: {}{}",
            String::from_utf8_lossy(&loaded.stdout),
            String::from_utf8_lossy(&loaded.stderr)
        );
    }
    let unknown = Command::new(env!("CARGO_BIN_EXE_cohort")).args(["completions", "tcsh"]).output().expect("runs");
    assert_eq!(unknown.status.code(), Some(2), "an unknown shell is a usage error");
}
