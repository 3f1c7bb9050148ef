// mqlab serve, runs page: every run under --runs, filtered on the server (/api/runs).
"use strict";

const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const form = $("filters");
const fileLink = (path, label) => (path ? `<a href="/files/${path.split("/").map(encodeURIComponent).join("/")}">${label}</a>` : "");

const fixed = {};  // filters the form has no field for (a matrix's runs: ?parent=DIR)
for (const [k, v] of new URLSearchParams(location.search)) {
  if (form.elements[k]) form.elements[k].dataset.want = v;
  else if (k === "parent" || k === "kind") fixed[k] = v;
}

function fillSelect(name, values) {
  const sel = form.elements[name];
  const current = sel.value || sel.dataset.want || "";
  sel.innerHTML = `<option value="">any</option>` + values.map((v) => `<option${v === current ? " selected" : ""}>${esc(v)}</option>`).join("");
  delete sel.dataset.want;
}

async function load() {
  const params = new URLSearchParams(fixed);
  for (const el of form.elements) {
    const v = el.value || el.dataset.want || "";
    if (v) params.set(el.name, v);
  }
  history.replaceState(null, "", params.toString() ? `/runs?${params}` : "/runs");
  try {
    const resp = await fetch(`/api/runs?${params}`);
    const data = await resp.json();
    $("root").textContent = data.root;
    $("error").textContent = data.error || "";
    $("error").classList.toggle("hidden", !data.error);
    for (const k of ["suite", "verdict", "client"]) fillSelect(k, data.facets[k]);
    for (const k of ["seed", "q"]) if (form.elements[k].dataset.want) { form.elements[k].value = form.elements[k].dataset.want; delete form.elements[k].dataset.want; }
    $("count").textContent = `${data.runs.length} of ${data.total} runs`;
    $("runs").innerHTML = `<tr><th>run</th><th>suite</th><th>seed</th><th>scale</th><th>client</th><th>verdict</th>
      <th>failing checks</th><th>faults</th><th>started</th><th>files</th></tr>` + data.runs.map((r) => `<tr class="v-${esc(r.verdict)}" data-run="${esc(r.id)}">
      <td>${r.live ? `<a href="/?run=${encodeURIComponent(r.id)}">${esc(r.id)}</a> (live)` : esc(r.id)}</td>
      <td>${esc(r.suite ?? (r.kind === "cluster" ? "cluster" : "-"))}</td><td class="num">${esc(r.seed ?? "-")}</td>
      <td class="num">${esc(r.time_scale ?? "-")}</td><td>${esc(r.client ?? (r.kind === "chaos" ? "mqlab" : "-"))}</td>
      <td class="verdict">${esc(r.verdict)}</td><td>${esc(r.failing_checks.join(", ") || r.error || "")}</td>
      <td class="num">${esc(r.faults ?? "-")}</td><td>${esc(r.started ?? "")}</td>
      <td>${[fileLink(r.files.report, "report"), fileLink(r.files.verdict, "verdict.json"), fileLink(r.files.run, "run.json")].filter(Boolean).join(" · ")}</td></tr>`).join("");
    $("collections").innerHTML = `<tr><th>dir</th><th>kind</th><th>runs</th><th>exit code</th><th>started</th><th>files</th></tr>` +
      (data.collections.length ? "" : `<tr><td colspan="6" class="muted">none under ${esc(data.root)}</td></tr>`) +
      data.collections.map((c) => `<tr data-collection="${esc(c.id)}"><td><a href="/runs?parent=${encodeURIComponent(c.id)}">${esc(c.id)}</a></td>
      <td>${esc(c.kind)}</td><td class="num">${c.runs}</td><td class="num">${esc(c.exit_code ?? "-")}</td><td>${esc(c.started ?? "")}</td>
      <td>${[fileLink(c.files.index, "index"), fileLink(c.files.matrix, "matrix.json"), fileLink(c.files.selftest, "selftest.json")].filter(Boolean).join(" · ")}</td></tr>`).join("");
  } catch (err) {
    $("error").textContent = `could not list the runs: ${err.message}`;
    $("error").classList.remove("hidden");
  }
}

form.addEventListener("input", () => load());
form.addEventListener("submit", (e) => { e.preventDefault(); load(); });
load();
