//! `cohort status`: a node's `/status` as text tables, or as served.
//!
//! Without the node's admin token the node redacts session ids and
//! incarnations (T4); the tables then show `redacted` and say how to see
//! them.

use serde_json::Value;

use super::http::{Call, exchange};

/// `cohort status --admin HOST:PORT [--token T]`: fetch `/status` from a
/// node's admin port and render it as text (or return the JSON as served).
/// The error says which address could not be reached or what came back
/// instead.
pub fn status_command(admin: &str, token: Option<&str>, json: bool) -> Result<String, String> {
    let answer = exchange(admin, Call::Get, "/status", token, std::time::Duration::from_secs(3))
        .map_err(|error| error.to_string())?;
    if answer.code != 200 {
        let line = answer.line;
        let detail = serde_json::from_str::<Value>(&answer.body)
            .ok()
            .and_then(|body| body["error"].as_str().map(|error| format!(": {error}")))
            .unwrap_or_else(|| " (an older cohort, or not a cohort node?)".into());
        return Err(format!("{admin} answered {line:?} to GET /status{detail}"));
    }
    let status: Value =
        serde_json::from_str(&answer.body).map_err(|error| format!("{admin}: /status is not JSON: {error}"))?;
    if json {
        return Ok(status.to_string());
    }
    Ok(render(&status))
}

/// The text tables of `cohort status`.
fn render(status: &Value) -> String {
    use std::fmt::Write as _;
    let text = |value: &Value| match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {}  session {}  metadata members {}  metadata primary here: {}  epoch {}",
        text(&status["node"]),
        text(&status["session"]),
        text(&status["metadata_members"]),
        text(&status["metadata_primary"]),
        text(&status["metadata"]["epoch"]),
    );
    if !status["stopped"].is_null() {
        let _ = writeln!(out, "STOPPED: {}", text(&status["stopped"]));
    }
    let frozen = &status["metadata"]["frozen"];
    if !frozen.is_null() {
        let _ = writeln!(
            out,
            "FROZEN since epoch {} (asked by node:{}): operator changes are refused until `cohort admin unfreeze`",
            text(&frozen["since_epoch"]),
            text(&frozen["by"])
        );
    }
    if let Some(primaries) = status["metadata"]["primaries_per_node"].as_object().filter(|map| !map.is_empty()) {
        let counts: Vec<String> = primaries.iter().map(|(node, count)| format!("node:{node} {count}")).collect();
        let _ = writeln!(out, "primaries per node: {}", counts.join(", "));
    }
    let _ = writeln!(out, "\nnodes\n{:<6} {:<24} {:<8} acked epoch", "id", "address", "session");
    for node in status["metadata"]["nodes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<6} {:<24} {:<8} {}",
            text(&node["id"]),
            text(&node["address"]),
            text(&node["session"]),
            text(&node["acked_epoch"])
        );
    }
    let _ = writeln!(
        out,
        "\ngroups\n{:<22} {:<16} {:<12} {:<12} {:<5} owner (node, view)",
        "id", "members", "candidates", "incarnation", "live"
    );
    for group in status["metadata"]["groups"].as_array().into_iter().flatten() {
        let owner = &group["owner"];
        let owner = if owner.is_null() {
            "-".to_string()
        } else {
            format!("node {} view {}", text(&owner["node"]), text(&owner["view"]))
        };
        let _ = writeln!(
            out,
            "{:<22} {:<16} {:<12} {:<12} {:<5} {}",
            text(&group["id"]),
            text(&group["members"]),
            text(&group["candidates"]),
            text(&group["incarnation"]),
            text(&group["live"]),
            owner
        );
    }
    let operations = status["operations"].as_array().map_or(0, Vec::len);
    let totals = &status["operation_totals"];
    let _ = writeln!(
        out,
        "\noperations: {operations} in flight, {} completed, {} reverted",
        text(&totals["completed"]),
        text(&totals["reverted"])
    );
    for operation in status["operations"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "{}", operation_text(operation));
    }
    if status["redacted"] == true {
        let _ = writeln!(
            out,
            "\nsession ids and incarnations are redacted: pass the node's admin token (--token or COHORT_ADMIN_TOKEN)"
        );
    }
    out
}

/// An in-flight operation of `/status` in words: its id and spec, then each
/// step marked done (`[x]`) or not (`[ ]`), and what the next one waits for.
pub(crate) fn operation_text(operation: &Value) -> String {
    use std::fmt::Write as _;
    let state = if operation["cancelled"] == true { "cancelled, reverting" } else { "in flight" };
    let mut out = format!(
        "operation:{}: {} ({state}; {} done, {} remaining)",
        operation["id"],
        operation["text"].as_str().unwrap_or("?"),
        operation["done"],
        operation["remaining"]
    );
    let steps = operation["plan"].as_array().cloned().unwrap_or_default();
    let groups: std::collections::BTreeSet<String> = steps.iter().map(|step| step["group"].to_string()).collect();
    for step in &steps {
        let mark = if step["done"] == true { "[x]" } else { "[ ]" };
        let group = if groups.len() > 1 { format!("group:{}: ", step["group"]) } else { String::new() };
        let _ = write!(out, "\n  {mark} {group}{}", step["step"].as_str().unwrap_or("?"));
    }
    if let Some(waiting) = operation["waiting_for"].as_str() {
        let _ = write!(out, "\n  next step waits: {waiting}");
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::render;

    #[test]
    fn a_frozen_metadata_and_the_primaries_per_node_are_shown() {
        let status = json!({
            "node": 1, "session": 3, "metadata_members": [1, 2, 3], "metadata_primary": true, "stopped": null,
            "metadata": {
                "epoch": 52, "frozen": { "since_epoch": 47, "by": 2 },
                "primaries_per_node": { "1": 334, "2": 333, "3": 333 }, "nodes": [], "groups": [],
            },
            "operations": [], "operation_totals": { "completed": 0, "reverted": 0 }, "redacted": false,
        });
        let text = render(&status);
        assert!(text.contains("FROZEN since epoch 47 (asked by node:2)"), "{text}");
        assert!(text.contains("primaries per node: node:1 334, node:2 333, node:3 333"), "{text}");
        let mut thawed = status.clone();
        thawed["metadata"]["frozen"] = serde_json::Value::Null;
        assert!(!render(&thawed).contains("FROZEN"));
    }
}
