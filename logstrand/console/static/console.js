// The logstrand console: a page over the HTTP admin API (/openapi.json).
// Plain JavaScript, no build step; charts by uPlot (vendored, see VENDORED.md).
"use strict";

const POLL_MS = 2000;
const CHART_POINTS = 150;   // five minutes at one sample every two seconds
const TAIL_ROWS = 500;      // rows the live tail keeps on the page

const $ = (sel, root = document) => root.querySelector(sel);
const main = $("#main");
let pageTimers = [];        // cleared when the page changes
let pageStreams = [];

// -- the API -------------------------------------------------------------------

function token() { return localStorage.getItem("logstrand.token") || ""; }

async function api(path, options = {}) {
  const headers = { "accept": "application/json" };
  if (token()) headers["authorization"] = "Bearer " + token();
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  let doc = null;
  try { doc = await res.json(); } catch (e) { doc = null; }
  if (!res.ok) {
    const message = (doc && doc.error) || res.status + " " + res.statusText;
    const err = new Error(message);
    err.status = res.status;
    throw err;
  }
  return doc;
}

function showError(err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = (err.status ? err.status + ": " : "") + err.message;
}

// -- small helpers -------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function num(n) { return n === null || n === undefined ? "-" : Number(n).toLocaleString("en"); }

function when(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "-"; }

function duration(ms) {
  if (ms === null || ms === undefined) return "forever";
  const s = ms / 1000;
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

function shown(v) {
  if (v === null || v === undefined) return el("span", { class: "muted" }, "null");
  let text = v.json !== undefined ? JSON.stringify(v.json)
    : v.text !== undefined ? v.text : "0x" + v.hex;
  if (v.truncated) text += " … (" + num(v.size) + " bytes)";
  return el("pre", {}, text);
}

function stateClass(state) { return (state || "").replace(" ", "-"); }

function confirmAction(title, body) {
  const dialog = $("#confirm");
  $("#confirm-title").textContent = title;
  const box = $("#confirm-body");
  box.replaceChildren(body);
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

function chart(title, series, width = 560) {
  const holder = el("div", { class: "chart" });
  const data = [[], ...series.map(() => [])];
  const plot = new uPlot({
    title, width, height: 200,
    scales: { x: { time: true } },
    series: [{}, ...series.map((s, i) => ({ label: s, stroke: ["#2457c5", "#1f8a4c", "#b26a00", "#8e24aa"][i % 4], width: 2 }))],
    axes: [{}, { size: 60 }],
  }, data, holder);
  return {
    node: holder,
    push(t, values) {
      data[0].push(t);
      values.forEach((v, i) => data[i + 1].push(v));
      if (data[0].length > CHART_POINTS) data.forEach((col) => col.shift());
      plot.setData(data);
    },
  };
}

function every(ms, fn) {
  fn();
  pageTimers.push(setInterval(fn, ms));
}

// -- pages ---------------------------------------------------------------------

async function overview() {
  // Until the first status comes (a node may take a while under load, and
  // a screenshot is taken at load), the page says what it is waiting for
  // rather than showing an empty page.
  const cards = el("div", { class: "cards", id: "nodes" },
    el("p", { class: "muted loading" }, "Loading the nodes…"));
  const rates = chart("records / s", ["appended", "read"]);
  const summary = el("p", { class: "muted", id: "summary" }, "Asking the cluster for its status…");
  const rebuilding = el("div", { id: "rebuilding" });
  main.replaceChildren(
    el("h2", {}, "Cluster"), summary, cards,
    el("div", { class: "charts" }, rates.node), rebuilding);
  let last = null;
  every(POLL_MS, async () => {
    let doc;
    try { doc = await api("/api/status"); showError(null); } catch (e) { showError(e); return; }
    summary.textContent = doc.nodes.length + " nodes, " + num(doc.logs) + " logs in " +
      num(doc.log_ranges) + " ranges; epoch store " + doc.epoch_store;
    cards.replaceChildren(...doc.nodes.map((n) => nodeCard(n, doc)));
    const now = Date.now() / 1000;
    const sum = (k) => doc.nodes.reduce((a, n) => a + ((n.counters && n.counters[k]) || 0), 0);
    const totals = { a: sum("append_records"), r: sum("read_records") };
    if (last) {
      const dt = now - last.t;
      rates.push(now, [Math.max(0, (totals.a - last.a) / dt), Math.max(0, (totals.r - last.r) / dt)]);
    }
    last = { t: now, ...totals };
    rebuilding.replaceChildren(...rebuildingView(doc));
  });
}

function nodeCard(n, doc) {
  const row = (k, v) => [el("dt", {}, k), el("dd", {}, v)];
  const drained = (doc.drained || []).includes(n.node_id);
  const actions = el("div", { class: "toolbar" },
    n.storage_state === "FULLY_AUTHORITATIVE" && !drained
      ? el("button", { class: "drain", onclick: () => drainNode(n.node_id) }, "Drain…") : null,
    drained
      ? el("button", { class: "undrain", onclick: () => undrainNode(n.node_id) }, "Undrain…") : null);
  return el("div", { class: "card " + stateClass(n.state), "data-node": n.node_id },
    el("h4", {}, "node " + n.node_id, el("span", { class: "state " + stateClass(n.state) }, n.state)),
    el("dl", {},
      row("address", n.address), row("location", n.location || "-"),
      row("storage", n.storage_state || "-"),
      row("sequences", n.sequencing.length + " logs"),
      row("partitions", num(n.partitions)), row("disk", bytes(n.disk_bytes)),
      row("free", bytes(n.free_bytes)),
      row("write amp", n.write_amplification === null ? "-" : n.write_amplification),
      row("uptime", n.uptime_s === null ? "-" : duration(n.uptime_s * 1000))),
    actions);
}

function rebuildingView(doc) {
  const run = doc.rebuilding;
  if (!run) return [el("h3", {}, "Rebuilding"), el("p", { class: "muted" }, "No rebuilding under way.")];
  const done = run.donors_done, total = run.donors.length;
  const elapsed = Date.now() - (run.started_ms || Date.now());
  const eta = done > 0 && done < total ? Math.round(elapsed * (total - done) / done / 1000) + " s" : "-";
  return [
    el("h3", {}, "Rebuilding"),
    el("div", { class: "kv", id: "rebuild-run" },
      el("dt", {}, "nodes"), el("dd", {}, run.nodes.map((n) => n + " (" + (run.modes[n] || "?") + ")").join(", ")),
      el("dt", {}, "donors"), el("dd", {},
        el("div", { class: "progress" }, el("div", { style: "width:" + (100 * done / Math.max(1, total)) + "%" })),
        done + " of " + total + " done, ETA " + eta),
      el("dt", {}, "re-created"), el("dd", {}, num(run.records) + " records, " + bytes(run.bytes))),
  ];
}

async function drainNode(node) {
  try {
    const dry = await api("/api/nodes/" + node + "/drain", { method: "POST", body: { dry_run: true } });
    const ok = await confirmAction("Drain node " + node + "?", el("div", {},
      el("p", {}, "Its copies move to other nodes while it keeps serving reads."),
      el("pre", {}, JSON.stringify(dry, null, 1))));
    if (!ok) return;
    await api("/api/nodes/" + node + "/drain", { method: "POST", body: { dry_run: false } });
    showError(null);
  } catch (e) { showError(e); }
}

async function undrainNode(node) {
  try {
    await api("/api/nodes/" + node + "/undrain", { method: "POST", body: { dry_run: true } });
    if (!(await confirmAction("Undrain node " + node + "?", el("p", {}, "It returns to service.")))) return;
    await api("/api/nodes/" + node + "/undrain", { method: "POST", body: { dry_run: false } });
    showError(null);
  } catch (e) { showError(e); }
}

async function logs(params) {
  const q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  const limit = 100;
  const search = el("input", { type: "search", id: "log-search", value: q, placeholder: "id, 100..200 or name" });
  const go = () => { location.hash = "#/logs?q=" + encodeURIComponent(search.value) + "&offset=0"; };
  search.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
  main.replaceChildren(el("h2", {}, "Logs"),
    el("div", { class: "toolbar" }, search, el("button", { class: "primary", onclick: go }, "Search")),
    el("p", { class: "muted" }, "Loading…"));
  let page;
  try { page = await api("/api/logs?q=" + encodeURIComponent(q) + "&offset=" + offset + "&limit=" + limit); showError(null); }
  catch (e) { showError(e); return; }
  const nav = (o) => "#/logs?q=" + encodeURIComponent(q) + "&offset=" + o;
  const pager = el("div", { class: "toolbar" },
    el("span", { class: "muted", id: "log-count" },
      page.total ? (offset + 1) + "–" + (offset + page.logs.length) + " of " + num(page.total) : "no logs"),
    offset > 0 ? el("a", { href: nav(Math.max(0, offset - limit)) }, "← previous") : null,
    offset + limit < page.total ? el("a", { href: nav(offset + limit), id: "next-page" }, "next →") : null);
  const rows = page.logs.map((l) => el("tr", {},
    el("td", {}, el("a", { href: "#/logs/" + l.log_id }, l.log_id)),
    el("td", {}, l.range.name || "-"),
    el("td", {}, l.range.first + ".." + l.range.last),
    el("td", { class: "num" }, l.range.replication_factor),
    el("td", {}, l.range.cleanup_policy),
    el("td", {}, duration(l.range.retention_ms)),
    el("td", {}, l.range.compression)));
  let ranges = { ranges: [] };
  try { ranges = await api("/api/ranges"); } catch (e) { showError(e); }
  const rangeRows = ranges.ranges.map((r) => el("tr", {},
    el("td", {}, r.name ? el("a", { href: "#/logs?q=" + encodeURIComponent(r.name) }, r.name) : "-"),
    el("td", {}, el("a", { href: "#/logs?q=" + r.first + ".." + r.last }, r.first + ".." + r.last)),
    el("td", { class: "num" }, num(r.last - r.first + 1)),
    el("td", { class: "num" }, r.replication_factor), el("td", {}, r.cleanup_policy),
    el("td", {}, duration(r.retention_ms)), el("td", {}, r.compression)));
  main.replaceChildren(main.firstChild,
    el("h3", {}, "Ranges"),
    el("div", { class: "scroll" }, el("table", { id: "range-table" },
      el("thead", {}, el("tr", {}, ...["name", "logs", "count", "R", "cleanup", "retention", "compression"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rangeRows))),
    el("h3", {}, "Logs"), main.children[1], pager,
    el("table", { id: "log-table" },
      el("thead", {}, el("tr", {}, ...["log", "name", "range", "R", "cleanup", "retention", "compression"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
}

async function logPage(id) {
  main.replaceChildren(el("h2", {}, "Log " + id), el("p", { class: "muted" }, "Loading…"));
  let info;
  try { info = await api("/api/logs/" + id); showError(null); } catch (e) { showError(e); main.lastChild.textContent = ""; return; }
  const kv = (pairs) => el("dl", { class: "kv", id: "log-info" }, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const tailBody = el("tbody", { id: "tail-rows" });
  const tailNote = el("span", { class: "muted", id: "tail-note" }, "not following");
  const dot = el("span", { class: "live-dot" });
  let source = null;
  const toggle = el("button", { class: "primary", id: "tail-toggle" }, "Follow live");
  toggle.addEventListener("click", () => {
    if (source) { source.close(); source = null; dot.className = "live-dot"; toggle.textContent = "Follow live"; tailNote.textContent = "stopped"; return; }
    source = followTail(id, tailBody, tailNote);
    pageStreams.push(source);
    dot.className = "live-dot on";
    toggle.textContent = "Stop";
  });
  const recordsBox = el("div", { id: "records" });
  const start = el("input", { id: "records-start", value: "tail", size: 18, title: "oldest, tail, time:MS or an LSN" });
  const load = async () => {
    try {
      const page = await api("/api/logs/" + id + "/records?limit=100&start=" + encodeURIComponent(start.value));
      recordsBox.replaceChildren(el("div", { class: "scroll" }, recordsTable(page.items)), el("p", { class: "muted" },
        page.at_tail ? "at the tail (" + page.tail_text + ")" : "next page starts at " + page.next_text));
      showError(null);
    } catch (e) { showError(e); }
  };
  main.replaceChildren(
    el("h2", {}, "Log " + id + (info.range.name ? " (" + info.range.name + ")" : "")),
    kv([
      ["head (trim point)", info.head_text], ["tail", info.tail_text],
      ["epoch", info.epoch + " (last clean " + info.last_clean_epoch + ")"],
      ["sequencer", info.sequencer_node === null ? "-" : "node " + info.sequencer_node],
      ["nodeset", info.nodeset.join(" ")],
      ["replication", info.replication_factor + " across " + info.replicate_across],
      ["retention", duration(info.retention_ms)], ["cleanup", info.cleanup_policy],
      ["records", "~" + num(info.records_approx)], ["bytes", "~" + bytes(info.bytes_approx)],
      ["oldest / newest", when(info.oldest_timestamp_ms) + " / " + when(info.newest_timestamp_ms)],
      ["placement history", info.epochs.map((e) => "from epoch " + e.since + ": " + e.nodeset.join(" ")).join("; ")],
      ...(info.compaction ? [["compaction", "clean point " + info.compaction.clean_point + ", dirty " +
        Math.round(100 * info.compaction.dirty_ratio) + "% (cleans above " +
        Math.round(100 * info.compaction.min_cleanable_ratio) + "%), " + info.compaction.passes + " passes"]] : []),
      ...(info.tier ? [["tiered", "up to " + info.tier.tiered_point + " in " + info.tier.objects +
        " objects, " + bytes(info.tier.tiered_bytes) + " (" + num(info.tier.tiered_records) +
        " records), after " + duration(info.tier.tier_after_ms)]] : []),
    ]),
    el("h3", {}, "Live tail"),
    el("div", { class: "toolbar" }, toggle, dot, tailNote),
    el("div", { class: "scroll" },
      el("table", {}, el("thead", {}, el("tr", {}, ...["LSN", "time", "key", "payload"].map((h) => el("th", {}, h)))), tailBody)),
    el("h3", {}, "Records"),
    el("div", { class: "toolbar" }, "from", start, el("button", { onclick: load }, "Show")),
    recordsBox,
    el("h3", {}, "Trim"),
    trimForm(id));
  load();
}

function recordRow(r) {
  if (r.gap) return el("tr", { class: "gap" }, el("td", {}, r.lo_text + " – " + r.hi_text), el("td", { colspan: 3 }, r.gap));
  return el("tr", { "data-lsn": r.lsn_text },
    el("td", {}, r.lsn_text), el("td", {}, when(r.timestamp)),
    el("td", {}, shown(r.key)), el("td", {}, shown(r.payload)));
}

function recordsTable(items) {
  return el("table", { id: "records-table" },
    el("thead", {}, el("tr", {}, ...["LSN", "time", "key", "payload"].map((h) => el("th", {}, h)))),
    el("tbody", {}, items.map(recordRow)));
}

function followTail(id, body, note) {
  const url = "/api/logs/" + id + "/tail" + (token() ? "?token=" + encodeURIComponent(token()) : "");
  const source = new EventSource(url);
  let seen = 0;
  source.onmessage = (m) => {
    const ev = JSON.parse(m.data);
    if (ev.type === "start") { note.textContent = "following from " + ev.from_text; return; }
    if (ev.type === "error") { note.textContent = "error: " + ev.error; source.close(); return; }
    if (ev.type !== "records") return;
    const frag = document.createDocumentFragment();
    for (let i = ev.records.length - 1; i >= 0; i--) frag.append(recordRow(ev.records[i]));
    body.prepend(frag);
    while (body.rows.length > TAIL_ROWS) body.deleteRow(body.rows.length - 1);
    seen += ev.arrived;
    note.textContent = num(seen) + " records arrived" +
      (ev.skipped ? "; sampling: " + num(ev.skipped) + " of the last " + num(ev.arrived) + " not shown" : "");
    note.className = ev.skipped ? "notice" : "muted";
  };
  source.onerror = () => { note.textContent = "connection lost; retrying"; };
  return source;
}

function trimForm(id) {
  const to = el("input", { id: "trim-to", placeholder: "LSN (e1n5)", size: 14 });
  const older = el("input", { id: "trim-older", placeholder: "or older than (7d)", size: 14 });
  const run = async () => {
    const body = to.value ? { to: to.value } : { older_than: older.value };
    try {
      const dry = await api("/api/logs/" + id + "/trim", { method: "POST", body: { ...body, dry_run: true } });
      const ok = await confirmAction("Trim log " + id + "?", el("div", {},
        el("p", {}, "The head moves from " + dry.head_before_text + " to " + dry.head_text + ": about " +
          num(dry.records_approx) + " records (" + bytes(dry.bytes_approx) + ") go for good.")));
      if (!ok) return;
      await api("/api/logs/" + id + "/trim", { method: "POST", body: { ...body, dry_run: false } });
      showError(null);
      route();
    } catch (e) { showError(e); }
  };
  return el("div", { class: "toolbar" }, to, older, el("button", { class: "danger", id: "trim-button", onclick: run }, "Trim…"));
}

async function groups() {
  main.replaceChildren(el("h2", {}, "Consumer groups"), el("p", { class: "muted" }, "Loading…"));
  let doc;
  try { doc = await api("/api/groups"); showError(null); } catch (e) { showError(e); return; }
  const rows = doc.groups.map((g) => el("tr", {},
    el("td", {}, el("a", { href: "#/groups/" + encodeURIComponent(g.group) }, g.group)),
    el("td", { class: "num" }, num(g.logs)), el("td", { class: "num" }, num(g.lag_records)),
    el("td", { class: "num" }, num(g.behind_logs))));
  main.replaceChildren(main.firstChild, doc.groups.length
    ? el("table", { id: "group-table" },
      el("thead", {}, el("tr", {}, el("th", {}, "group"), el("th", { class: "num" }, "logs"),
        el("th", { class: "num" }, "lag (records)"), el("th", { class: "num" }, "logs behind"))),
      el("tbody", {}, rows))
    : el("p", { class: "muted" }, "No consumer group has committed a position."));
}

async function groupPage(name) {
  const lagChart = chart("lag (records)", ["lag"]);
  const table = el("div", { id: "group-logs" });
  const members = el("div", { id: "group-members" });
  main.replaceChildren(el("h2", {}, "Group " + name), el("div", { class: "charts" }, lagChart.node), table,
    el("h3", {}, "Members"), members);
  every(POLL_MS, async () => {
    let doc;
    try { doc = await api("/api/groups/" + encodeURIComponent(name)); showError(null); } catch (e) { showError(e); return; }
    lagChart.push(Date.now() / 1000, [doc.lag_records]);
    table.replaceChildren(el("p", { id: "group-lag" }, "lag: " + num(doc.lag_records) + " records"),
      el("table", {}, el("thead", {}, el("tr", {}, ...["log", "committed", "tail", "lag (records)", "lag (age)", ""].map((h) => el("th", {}, h)))),
        el("tbody", {}, doc.logs.map((l) => el("tr", { "data-log": l.log_id },
          el("td", {}, el("a", { href: "#/logs/" + l.log_id }, l.log_id)),
          el("td", {}, l.committed_text || "-"), el("td", {}, l.tail_text),
          el("td", { class: "num" }, num(l.lag_records)), el("td", { class: "num" }, duration(l.lag_ms)),
          el("td", {}, el("button", { class: "reset", onclick: () => resetGroup(name, l.log_id) }, "Reset…")))))));
    const m = doc.membership;
    members.replaceChildren(m ? el("pre", {}, JSON.stringify(m, null, 1)) : el("p", { class: "muted" }, "Positions only (no membership)."));
  });
}

async function resetGroup(group, log) {
  const how = prompt("Reset " + group + " on log " + log + " to: earliest, latest, an LSN (e1n5) or time:MS", "earliest");
  if (!how) return;
  const body = { log };
  if (how === "earliest" || how === "latest") body.how = how;
  else if (how.startsWith("time:")) { body.how = "time"; body.value = Number(how.slice(5)); }
  else { body.how = "lsn"; body.value = how; }
  try {
    const dry = await api("/api/groups/" + encodeURIComponent(group) + "/reset", { method: "POST", body: { ...body, dry_run: true } });
    const ok = await confirmAction("Reset " + group + " on log " + log + "?", el("p", {},
      "Its position moves from " + (dry.committed_before_text || "none") + " to " + dry.committed_text + "."));
    if (!ok) return;
    await api("/api/groups/" + encodeURIComponent(group) + "/reset", { method: "POST", body: { ...body, dry_run: false } });
    showError(null);
  } catch (e) { showError(e); }
}

// -- transactions --------------------------------------------------------------

async function transactions() {
  const body = el("div", { id: "txn-list" }, el("p", { class: "muted" }, "Loading…"));
  main.replaceChildren(el("h2", {}, "Transactions"), body);
  every(POLL_MS, async () => {
    let doc;
    try { doc = await api("/api/transactions"); showError(null); } catch (e) { showError(e); return; }
    const rows = doc.transactions.map((t) => el("tr", { "data-txn": t.id, class: t.open ? "open" : "" },
      el("td", {}, t.id), el("td", { class: "num" }, num(t.producer_id)), el("td", { class: "num" }, num(t.epoch)),
      el("td", { class: "state " + stateClass(t.state) }, t.state),
      el("td", {}, t.logs.map((l) => el("a", { href: "#/logs/" + l }, String(l) + " "))),
      el("td", {}, t.groups.map((g) => el("a", { href: "#/groups/" + encodeURIComponent(g) }, g + " "))),
      el("td", {}, t.open ? el("button", { class: "danger abort", onclick: () => abortTxn(t.id) }, "Abort…") : "")));
    body.replaceChildren(el("p", { id: "txn-counts" }, num(doc.open) + " open of " + num(doc.total) + " transactional ids"),
      doc.transactions.length
        ? el("table", { id: "txn-table" },
          el("thead", {}, el("tr", {}, ...["transactional id", "producer", "epoch", "state", "logs", "groups", ""].map((h) => el("th", {}, h)))),
          el("tbody", {}, rows))
        : el("p", { class: "muted" }, "No transactional id has begun a transaction."));
  });
}

async function abortTxn(id) {
  const path = "/api/transactions/" + encodeURIComponent(id) + "/abort";
  try {
    const dry = await api(path, { method: "POST", body: { dry_run: true } });
    const ok = await confirmAction("Abort the transaction of " + id + "?", el("p", {},
      "It is " + dry.state_before + " in logs " + (dry.logs.join(", ") || "-") + ". Its producer is fenced, " +
      "and committed readers never see its records."));
    if (!ok) return;
    await api(path, { method: "POST", body: { dry_run: false } });
    showError(null);
    route();
  } catch (e) { showError(e); }
}

// -- routing -------------------------------------------------------------------

function route() {
  pageTimers.forEach(clearInterval);
  pageTimers = [];
  pageStreams.forEach((s) => s.close());
  pageStreams = [];
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  document.querySelectorAll("header nav a").forEach((a) =>
    a.classList.toggle("active", a.dataset.nav === (parts[0] || "overview")));
  if (parts[0] === "logs" && parts[1]) return logPage(parts[1]);
  if (parts[0] === "logs") return logs(params);
  if (parts[0] === "groups" && parts[1]) return groupPage(decodeURIComponent(parts[1]));
  if (parts[0] === "groups") return groups();
  if (parts[0] === "transactions") return transactions();
  return overview();
}

const tokenBox = $("#token");
tokenBox.value = token();
tokenBox.addEventListener("change", () => { localStorage.setItem("logstrand.token", tokenBox.value); route(); });
window.addEventListener("hashchange", route);
route();
