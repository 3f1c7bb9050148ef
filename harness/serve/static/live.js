// mqlab serve, live page: polls /api/live every second and redraws. Plain DOM, no build step.
"use strict";

const POLL_MS = 1000;          // one request at a time: the next is scheduled when this one ends
const CLUSTERS_EVERY = 5;      // the cluster picker is refreshed every this many polls
const TIMELINE_MIN_MS = 30000; // the timeline shows at least the last 30 s

const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const num = (v) => (v === null || v === undefined ? "-" : Number(v).toLocaleString("en-US"));
const rate = (v) => (v === null || v === undefined ? "-" : `${Number(v).toLocaleString("en-US")}/s`);
const clock = (ms) => new Date(ms).toISOString().slice(11, 19);

let run = new URLSearchParams(location.search).get("run");
let seq = 0;

function show(id, text) {
  const el = $(id);
  el.textContent = text || "";
  el.classList.toggle("hidden", !text);
}

async function refreshClusters() {
  const resp = await fetch("/api/clusters");
  const data = await resp.json();
  const options = [];
  if (data.run_dir) options.push({id: "", label: `--run-dir ${data.run_dir.run_dir}`});
  for (const r of data.live) options.push({id: r.id, label: r.id + (r.suite ? ` (${r.suite} seed ${r.seed})` : "")});
  if (run === null && options.length) run = options[0].id;
  if (run !== null && !options.some((o) => o.id === run)) options.push({id: run, label: `${run || "--run-dir"} (not running)`});
  $("cluster-pick").innerHTML = options.map((o) => `<option value="${esc(o.id)}"${o.id === run ? " selected" : ""}>${esc(o.label)}</option>`).join("");
  if (!options.length) show("cluster-error", `no live cluster under ${data.runs_root}: start one with \`mqlab up\` or \`mqlab chaos run SUITE\`, or pass --run-dir`);
}

$("cluster-pick").addEventListener("change", (e) => {
  run = e.target.value;
  history.replaceState(null, "", run ? `/?run=${encodeURIComponent(run)}` : "/");
});

function stateBadge(state) {
  return `<span class="badge state-${esc(state)}">${esc(state)}</span>`;
}

function nodeName(snap, clientId) {
  if (!clientId) return "-";
  const node = snap.clients[clientId];
  return node ? `<span title="${esc(clientId)}">${esc(node)}</span>` : esc(clientId);
}

function renderNodes(snap) {
  const rows = snap.processes.map((p) => {
    const role = p.role === "broker" ? `broker ${p.broker_role || ""}` : p.role;
    const answered = p.answered === false ? ` <span class="bad">not answering (${esc(p.answer)})</span>` : "";
    const fault = p.fault && p.fault !== p.state ? ` <span class="badge fault">${esc(p.fault)}</span>` : "";
    return `<tr data-node="${esc(p.id)}" data-state="${esc(p.state)}" data-role="${esc(role)}" data-fault="${esc(p.fault || "")}">
      <td>${esc(p.id)}</td><td class="role">${esc(role)}</td><td class="state">${stateBadge(p.state)}${fault}${answered}</td>
      <td class="num">${esc(p.pid ?? "-")}</td><td>${esc(p.addr)}</td></tr>`;
  });
  $("nodes").innerHTML = `<tr><th>node</th><th>role</th><th>state</th><th>pid</th><th>address</th></tr>${rows.join("")}`;
}

function renderBrokers(snap) {
  const a = snap.admin;
  const ns = a.namesrv;
  $("namesrv-state").innerHTML = ns ? (ns.ok ? `name server ${esc(ns.addr)} answers` : `<span class="bad">${esc(ns.error)}</span>`) : "";
  const rows = (a.brokers || []).map((b) => `<tr data-broker="${esc(b.broker_name)}/${b.broker_id}" data-answered="${b.ok}">
    <td>${esc(b.broker_name)}/${b.broker_id}</td><td>${b.ok ? esc(b.role) : `<span class="bad">${esc(b.code)}</span>`}</td>
    <td class="num">${num(b.max_phys_offset)}</td><td class="num">${num(b.slave_lag_bytes)}</td>
    <td class="num">${b.disk_used_ratio === undefined ? "-" : (100 * b.disk_used_ratio).toFixed(1) + "%"}</td>
    <td>${b.writes_refused && b.role !== "SLAVE" ? `<span class="bad">${esc(b.writes_refused_reason)}</span>` : ""}${b.ok ? "" : esc(b.remark)}</td></tr>`);
  $("brokers").innerHTML = `<tr><th>broker</th><th>role</th><th>max phys offset</th><th>slave lag B</th><th>disk</th><th></th></tr>${rows.join("")}`;
}

function renderTopics(snap) {
  const topics = snap.admin.topics || [];
  $("topics").innerHTML = topics.length ? topics.map((t) => {
    const route = t.route.map((r) => `${esc(r.broker_name)}: ${r.read_queue_nums}r/${r.write_queue_nums}w perm ${r.perm}` +
      ` (${Object.entries(r.brokers).map(([id, addr]) => `${id === "0" ? "master" : "slave " + esc(id)} ${esc(addr)}`).join(", ")})`).join("; ");
    const unanswered = t.brokers.filter((b) => !b.answered).map((b) => `${b.broker_name}/${b.broker_id}`);
    const queues = t.queues.map((q) => `<tr><td>${esc(q.broker_name)}</td><td class="num">${q.queue_id}</td>
      <td class="num">${num(q.min_offset)}</td><td class="num">${num(q.max_offset)}</td><td class="num">${rate(q.send_rate)}</td>
      <td class="muted">${q.answered_by === null ? "no answer" : q.answered_by === 0 ? "master" : "slave " + q.answered_by}</td></tr>`).join("");
    return `<div class="topic" data-topic="${esc(t.topic)}"><h3>${esc(t.topic)} <span class="muted">sent ${rate(t.send_rate)}</span></h3>
      <div class="muted">route: ${route || "none"}</div>
      ${t.error ? `<div class="bad">${esc(t.error)}</div>` : ""}
      ${unanswered.length ? `<div class="bad">not answering: ${esc(unanswered.join(", "))}</div>` : ""}
      <table><tr><th>broker</th><th>queue</th><th>min offset</th><th>max offset</th><th>sent</th><th>from</th></tr>${queues}</table></div>`;
  }).join("") : `<span class="muted">${snap.admin.collected_wall_ms ? "no topics" : "waiting for the first answer"}</span>`;
}

function renderGroups(snap) {
  const groups = snap.admin.groups || [];
  $("groups").innerHTML = groups.length ? groups.map((g) => {
    const missing = g.missing_brokers.map((b) => `${b.broker_name}/${b.broker_id} (${b.code})`);
    const rows = g.queues.map((q) => `<tr data-queue="${esc(q.topic)}/${esc(q.broker_name)}/${q.queue_id}" data-lag="${q.lag ?? ""}">
      <td>${esc(q.topic)}</td><td>${esc(q.broker_name)}</td><td class="num">${q.queue_id}</td>
      <td class="num">${num(q.broker_offset)}</td><td class="num">${num(q.consumer_offset)}</td>
      <td class="num lag">${num(q.lag)}</td><td class="num">${rate(q.deliver_rate)}</td>
      <td>${nodeName(snap, q.last_puller_client_id)}</td>
      <td>${q.lock_holder_client_id ? nodeName(snap, q.lock_holder_client_id) + ` <span class="muted">${(q.lock_lease_left_ms / 1000).toFixed(1)} s</span>` : "-"}</td></tr>`).join("");
    return `<div class="group" data-group="${esc(g.group)}"><h3>${esc(g.group)} <span class="muted">${esc(g.consume_type || "")} ·
      ${num(g.online_clients)} online · lag ${num(g.lag_total)} · delivered ${rate(g.deliver_rate)}</span></h3>
      ${g.error ? `<div class="bad">${esc(g.error)}</div>` : ""}
      ${missing.length ? `<div class="bad">not answering: ${esc(missing.join(", "))}</div>` : ""}
      <table><tr><th>topic</th><th>broker</th><th>queue</th><th>broker offset</th><th>consumer offset</th><th>lag</th>
      <th>delivered</th><th>owner (last puller)</th><th>orderly lock</th></tr>${rows}</table></div>`;
  }).join("") : `<span class="muted">${snap.admin.collected_wall_ms ? "no consumer groups" : "waiting for the first answer"}</span>`;
}

function renderFaults(snap) {
  const f = snap.faults;
  $("fault-count").textContent = `${f.active.length} active, ${f.windows.length} in all`;
  $("active-faults").innerHTML = f.active.length ? `<table><tr><th>fault</th><th>targets</th><th>state</th><th>for</th><th>detail</th></tr>` +
    f.active.map((w) => `<tr class="active-fault" data-fault-id="${esc(w.fault_id)}" data-op="${esc(w.op)}" data-targets="${esc(w.targets.join(","))}">
      <td>${esc(w.op)} <span class="muted">${esc(w.fault_id)}</span></td><td>${esc(w.targets.join(", "))}</td><td>${esc(w.state)}</td>
      <td class="num">${((snap.now_wall_ms - w.start_wall_ms) / 1000).toFixed(1)} s</td><td class="muted">${esc(w.detail)}</td></tr>`).join("") + "</table>"
    : `<span class="muted">no active fault</span>`;
  const links = Object.entries(f.cut_links);
  $("cut-links").innerHTML = links.length ? "links cut: " + links.map(([l, mode]) => `<span class="badge fault" data-link="${esc(l)}" data-mode="${esc(mode)}">${esc(l)} ${esc(mode)}</span>`).join("") : "";
  const windows = f.windows;
  const end = snap.now_wall_ms;
  const start = Math.min(end - TIMELINE_MIN_MS, ...windows.map((w) => w.start_wall_ms));
  const span = Math.max(1, end - start);
  const pct = (ms) => `${(100 * (ms - start) / span).toFixed(2)}%`;
  const rows = windows.map((w) => {
    const stop = w.end_wall_ms ?? end;
    const cls = w.open ? "open" : (w.state === "failed" ? "failed" : "");
    const title = `${w.op} ${w.targets.join(",")} ${clock(w.start_wall_ms)}–${w.end_wall_ms ? clock(w.end_wall_ms) : "now"}: ${w.detail}${w.error ? " (" + w.error + ")" : ""}`;
    return `<div class="tl-row" data-fault-id="${esc(w.fault_id)}" data-open="${w.open}"><span class="tl-label">${esc(w.op)} ${esc(w.targets.join(","))}</span>
      <div class="tl-track"><div class="tl-bar ${cls}" title="${esc(title)}" style="left:${pct(w.start_wall_ms)};width:calc(${pct(stop)} - ${pct(w.start_wall_ms)})"></div></div></div>`;
  });
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((x) => `<span style="left:${100 * x}%">${clock(start + x * span)}</span>`).join("");
  $("timeline").innerHTML = rows.join("") + `<div class="tl-axis">${ticks}</div>`;
}

function render(snap) {
  show("cluster-error", snap.cluster_error);
  const info = snap.run_info;
  $("run-info").textContent = (info && info.suite ? `${info.suite} seed ${info.seed} · ` : "") + `time scale ${snap.time_scale ?? "?"}`;
  renderNodes(snap);
  renderFaults(snap);
  renderBrokers(snap);
  renderTopics(snap);
  renderGroups(snap);
  const a = snap.admin;
  $("admin-age").textContent = a.collected_wall_ms
    ? `cluster answers from ${clock(a.collected_wall_ms)} (${((snap.now_wall_ms - a.collected_wall_ms) / 1000).toFixed(1)} s old, took ${a.took_ms} ms)${a.error ? " · " + a.error : ""}`
    : (a.error || "");
}

async function poll() {
  try {
    if (seq % CLUSTERS_EVERY === 0 || run === null) await refreshClusters();
    if (run !== null) {
      const resp = await fetch(`/api/live?run=${encodeURIComponent(run)}`);
      const snap = await resp.json();
      if (!resp.ok) throw new Error(snap.error || `HTTP ${resp.status}`);
      render(snap);
      show("fetch-error", "");
    }
    seq += 1;
    const stamp = $("last-update");
    stamp.dataset.seq = String(seq);
    stamp.dataset.ms = String(Date.now());
    stamp.textContent = `updated ${clock(Date.now())}`;
  } catch (err) {
    show("fetch-error", `could not update: ${err.message}; retrying every ${POLL_MS / 1000} s`);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
