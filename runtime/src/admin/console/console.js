// The cohort console (O6): polls this node's GET /status and GET /metrics
// (both readable without a token) and draws them. Read-only: it sends no
// token and changes nothing.
//
// Every value from the cluster goes into the page as textContent or as an
// attribute value, never as markup. Elements carry data-* attributes with
// the numbers they show, so a test (runtime/tests/console.rs) can compare
// the page with /status.
"use strict";

// One poll every POLL_INTERVAL_MS; the charts keep SAMPLES_MAX samples
// (one per poll: five minutes).
const POLL_INTERVAL_MS = 3000;
const SAMPLES_MAX = 100;
// Rows of the placement map per page.
const PLACEMENT_PAGE_GROUPS = 50;
// Rows of the list of groups without a primary.
const ORPHANS_SHOWN_MAX = 200;

const state = {
  page: 0,
  onlyOrphans: false,
  status: null,
  version: null,
  samples: [], // {atMs, viewChanges, writes}
};

// An element with attributes and text.
function el(tag, attributes, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    node.setAttribute(name, String(value));
  }
  if (text !== undefined && text !== null) {
    node.textContent = String(text);
  }
  return node;
}

function svgEl(tag, attributes, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    node.setAttribute(name, String(value));
  }
  if (text !== undefined) {
    node.textContent = String(text);
  }
  return node;
}

function byId(id) {
  return document.getElementById(id);
}

function setText(id, text) {
  byId(id).textContent = String(text);
}

// --- /metrics -------------------------------------------------------------

// The sum of every sample of `family` whose labels contain `labels`
// (e.g. 'kind="write"'), in the OpenMetrics text; null if none.
function metricSum(text, family, labels) {
  let sum = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith(family) || line.startsWith("#")) {
      continue;
    }
    const rest = line.slice(family.length);
    if (rest[0] !== "{" && rest[0] !== " ") {
      continue; // another family sharing the prefix
    }
    if (labels && !rest.includes(labels)) {
      continue;
    }
    const value = Number(rest.slice(rest.lastIndexOf(" ") + 1));
    if (Number.isFinite(value)) {
      sum = (sum || 0) + value;
    }
  }
  return sum;
}

// The version label of cohort_build_info, or null.
function buildVersion(text) {
  const line = text.split("\n").find((l) => l.startsWith("cohort_build_info{"));
  const match = line && /version="([^"]*)"/.exec(line);
  return match ? match[1] : null;
}

function addSample(metrics) {
  const viewChanges = metricSum(metrics, "cohort_view_changes_started_total", "");
  const writes = metricSum(metrics, "cohort_client_requests_total", 'kind="write"');
  state.samples.push({ atMs: Date.now(), viewChanges, writes });
  while (state.samples.length > SAMPLES_MAX) {
    state.samples.shift();
  }
}

// --- charts ---------------------------------------------------------------

// Per-second rates between consecutive samples of `field` (a counter that
// went down, a restarted node, counts as zero).
function rates(field) {
  const out = [];
  for (let i = 1; i < state.samples.length; i++) {
    const before = state.samples[i - 1];
    const after = state.samples[i];
    const seconds = (after.atMs - before.atMs) / 1000;
    if (before[field] === null || after[field] === null || seconds <= 0) {
      continue;
    }
    out.push({ atMs: after.atMs, rate: Math.max(0, after[field] - before[field]) / seconds });
  }
  return out;
}

function drawChart(svg, field) {
  const width = 560;
  const height = 120;
  const left = 48;
  const bottom = 18;
  const points = rates(field);
  svg.replaceChildren();
  svg.setAttribute("data-samples", state.samples.length);
  const latest = state.samples[state.samples.length - 1];
  svg.setAttribute("data-total", latest && latest[field] !== null ? latest[field] : "");
  const top = Math.max(1, ...points.map((p) => p.rate));
  const spanMs = POLL_INTERVAL_MS * (SAMPLES_MAX - 1);
  const nowMs = state.samples.length ? state.samples[state.samples.length - 1].atMs : Date.now();
  const x = (atMs) => left + ((width - left - 4) * (spanMs - (nowMs - atMs))) / spanMs;
  const y = (rate) => height - bottom - ((height - bottom - 8) * rate) / top;
  svg.append(svgEl("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom }));
  svg.append(svgEl("line", { class: "axis", x1: left, y1: 4, x2: left, y2: height - bottom }));
  svg.append(svgEl("text", { x: 2, y: 14 }, top.toFixed(top < 10 ? 1 : 0)));
  svg.append(svgEl("text", { x: 2, y: height - bottom }, "0"));
  svg.append(svgEl("text", { x: left, y: height - 4 }, Math.round(spanMs / 60000) + " min ago"));
  svg.append(svgEl("text", { x: width - 28, y: height - 4 }, "now"));
  if (points.length === 0) {
    svg.append(svgEl("text", { x: left + 10, y: 40 }, "collecting samples…"));
    svg.setAttribute("data-last-rate", "");
    return;
  }
  const line = points.map((p) => x(p.atMs).toFixed(1) + "," + y(p.rate).toFixed(1)).join(" ");
  svg.append(svgEl("polyline", { class: "line", points: line }));
  const last = points[points.length - 1].rate;
  svg.setAttribute("data-last-rate", last.toFixed(3));
}

// --- /status --------------------------------------------------------------

function isOrphan(group) {
  return group.live && !group.owner;
}

// Node ids: the registered nodes, then any other member or learner, sorted.
function nodeIds(status) {
  const ids = new Set(status.metadata.nodes.map((n) => n.id));
  for (const group of status.metadata.groups) {
    group.members.forEach((id) => ids.add(id));
    group.learners.forEach((id) => ids.add(id));
  }
  return [...ids].sort((a, b) => a - b);
}

function upWord(up) {
  if (up === true) return ["up", "up"];
  if (up === false) return ["DOWN", "down"];
  return ["unknown", "unknown"];
}

function renderNodes(status) {
  const body = byId("nodes").tBodies[0];
  const hosted = new Map();
  for (const group of status.metadata.groups) {
    for (const id of group.members.concat(group.learners)) {
      hosted.set(id, (hosted.get(id) || 0) + 1);
    }
  }
  const rows = status.metadata.nodes
    .slice()
    .sort((a, b) => a.id - b.id)
    .map((node) => {
      const primaries = status.metadata.primaries_per_node[String(node.id)] || 0;
      const groups = hosted.get(node.id) || 0;
      const [word, css] = upWord(node.up);
      const row = el("tr", {
        "data-node": node.id,
        "data-up": node.up === null || node.up === undefined ? "unknown" : String(node.up),
        "data-session": String(node.session !== null && node.session !== undefined),
        "data-groups": groups,
        "data-primaries": primaries,
      });
      const self = node.id === status.node ? " (this node)" : "";
      row.append(
        el("td", {}, "node " + node.id + self),
        el("td", { class: css }, word),
        el("td", {}, node.address),
        el("td", {}, node.session === null || node.session === undefined ? "none" : node.session),
        el("td", { class: "number" }, node.acked_epoch),
        el("td", {}, node.id === status.node && state.version ? state.version : "–"),
        el("td", { class: "number" }, groups),
        el("td", { class: "number" }, primaries),
      );
      return row;
    });
  body.replaceChildren(...rows);
  const up = status.metadata.nodes.filter((n) => n.up === true).length;
  setText("nodes-up", up + " of " + status.metadata.nodes.length);
}

function renderOrphans(orphans) {
  const items = orphans.slice(0, ORPHANS_SHOWN_MAX).map((g) => el("li", { "data-orphan": g.id }, "group " + g.id + " (" + g.kind + ")"));
  if (orphans.length > ORPHANS_SHOWN_MAX) {
    items.push(el("li", {}, "… and " + (orphans.length - ORPHANS_SHOWN_MAX) + " more (see the placement map's filter)"));
  }
  byId("orphans").replaceChildren(...items);
  byId("orphans-none").hidden = orphans.length > 0;
}

function renderOperations(status) {
  const rows = status.operations.map((op) => {
    const next = op.plan.find((step) => !step.done);
    const text = op.text + (op.cancelled ? " (cancelled, reverting)" : "");
    const row = el("tr", { "data-operation": op.id, "data-done": op.done, "data-remaining": op.remaining });
    row.append(
      el("td", { class: "number" }, op.id),
      el("td", {}, text),
      el("td", { class: "number" }, op.done + " of " + (op.done + op.remaining)),
      el("td", {}, next ? "group " + next.group + ": " + next.step : "–"),
      el("td", {}, op.waiting_for || "–"),
    );
    return row;
  });
  byId("operations").tBodies[0].replaceChildren(...rows);
  byId("operations").hidden = rows.length === 0;
  byId("operations-none").hidden = rows.length > 0;
}

function renderPlacement(status) {
  const ids = nodeIds(status);
  const groups = status.metadata.groups
    .filter((g) => !state.onlyOrphans || isOrphan(g))
    .sort((a, b) => a.id - b.id);
  const pages = Math.max(1, Math.ceil(groups.length / PLACEMENT_PAGE_GROUPS));
  state.page = Math.min(state.page, pages - 1);
  const shown = groups.slice(state.page * PLACEMENT_PAGE_GROUPS, (state.page + 1) * PLACEMENT_PAGE_GROUPS);
  const table = byId("placement");
  table.setAttribute("data-page", state.page);
  table.setAttribute("data-pages", pages);
  table.setAttribute("data-rows", shown.length);
  const head = el("tr");
  head.append(el("th", {}, "group"), el("th", {}, "kind"));
  ids.forEach((id) => head.append(el("th", {}, "node " + id)));
  table.tHead.replaceChildren(head);
  const rows = shown.map((group) => {
    const owner = group.owner ? group.owner.node : null;
    const row = el("tr", {
      "data-group": group.id,
      "data-owner": owner === null ? "none" : owner,
      class: isOrphan(group) ? "orphaned" : "",
    });
    row.append(el("td", { class: "group" }, group.id + (group.live ? "" : " (deleting)")), el("td", {}, group.kind));
    for (const id of ids) {
      let role = "";
      if (owner === id) role = "primary";
      else if (group.members.includes(id)) role = "voter";
      else if (group.learners.includes(id)) role = "learner";
      const cell = el("td", { "data-cell-node": id, "data-role": role });
      if (role) {
        cell.append(el("span", { class: "cell " + role }, role[0].toUpperCase()));
      }
      row.append(cell);
    }
    return row;
  });
  table.tBodies[0].replaceChildren(...rows);
  setText("page", "page " + (state.page + 1) + " of " + pages + " (" + groups.length + " groups)");
  byId("page-previous").disabled = state.page === 0;
  byId("page-next").disabled = state.page >= pages - 1;
}

function render() {
  const status = state.status;
  if (!status) return;
  const groups = status.metadata.groups;
  const orphans = groups.filter(isOrphan).sort((a, b) => a.id - b.id);
  const body = document.body;
  body.setAttribute("data-this-node", status.node);
  body.setAttribute("data-epoch", status.metadata.epoch);
  body.setAttribute("data-groups-total", groups.length);
  body.setAttribute("data-orphans", orphans.length);
  body.setAttribute("data-operations", status.operations.length);
  setText("this-node", "node " + status.node + (status.metadata_primary ? " (metadata primary)" : "") + (status.stopped ? " — stopped: " + status.stopped : ""));
  setText("groups-total", groups.length);
  setText("groups-orphaned", orphans.length);
  setText("operations-count", status.operations.length);
  setText("epoch", status.metadata.epoch);
  const frozen = status.metadata.frozen;
  setText("frozen", frozen ? "since epoch " + frozen.since_epoch + " by node " + frozen.by : "no");
  renderNodes(status);
  renderOrphans(orphans);
  renderOperations(status);
  renderPlacement(status);
}

// --- polling --------------------------------------------------------------

async function fetchText(path) {
  const answer = await fetch(path, { cache: "no-store", credentials: "omit" });
  if (!answer.ok) {
    throw new Error(path + ": HTTP " + answer.status);
  }
  return answer.text();
}

async function poll() {
  try {
    const [statusText, metrics] = await Promise.all([fetchText("/status"), fetchText("/metrics")]);
    state.status = JSON.parse(statusText);
    state.version = buildVersion(metrics);
    addSample(metrics);
    render();
    drawChart(byId("chart-view-changes"), "viewChanges");
    drawChart(byId("chart-writes"), "writes");
    setText("problem", "");
    setText("refreshed", "updated " + new Date().toLocaleTimeString());
    document.body.setAttribute("data-loaded", "true");
  } catch (error) {
    setText("problem", "cannot reach the node: " + error.message);
  }
}

function start() {
  byId("page-previous").addEventListener("click", () => {
    state.page = Math.max(0, state.page - 1);
    render();
  });
  byId("page-next").addEventListener("click", () => {
    state.page += 1;
    render();
  });
  byId("only-orphans").addEventListener("change", (event) => {
    state.onlyOrphans = event.target.checked;
    state.page = 0;
    render();
  });
  poll();
  setInterval(poll, POLL_INTERVAL_MS);
}

document.addEventListener("DOMContentLoaded", start);
