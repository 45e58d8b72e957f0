// gridml dashboard: plain JS + inline SVG, no external resources. Polls the API every 3 s.
"use strict";
const $ = (id) => document.getElementById(id);
const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#65a30d",
                 "#be185d"];
const W = 560, H = 300, M = { l: 56, r: 46, t: 14, b: 36 };
const state = { study: null, summary: null, trials: [], epochs: {}, selected: null,
                sort: { key: "number", dir: 1 }, token: sessionStorage.getItem("gridml-token") || "" };

async function api(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const reply = await fetch(path, { headers });
  if (reply.status === 401 || reply.status === 403) {
    $("token-box").hidden = false;
    throw new Error("this server needs a study token to read");
  }
  if (!reply.ok) throw new Error(path + ": HTTP " + reply.status);
  return reply.json();
}

// ---------- data ----------------------------------------------------------------------------
function searchCfg() { return (state.summary && state.summary.spec.search) || {}; }
function maximize() { return searchCfg().direction === "maximize"; }
function mean(xs) { const v = xs.filter((x) => x !== null && x !== undefined);
                    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null; }
function epochsOf(trial) { return state.epochs[String(trial.id)] || []; }
function derived(trial) {
  const eps = epochsOf(trial);
  return { time: mean(eps.map((e) => e.epoch_time)), wait: mean(eps.map((e) => e.input_wait_frac)) };
}
function hparamNames() {
  const space = searchCfg().space;
  if (space) return Object.keys(space);
  const names = new Set(); state.trials.forEach((t) => Object.keys(t.hparams).forEach((k) => names.add(k)));
  return [...names];
}
function bestId() { return state.summary && state.summary.best ? state.summary.best.id : null; }

// ---------- SVG helpers --------------------------------------------------------------------
function el(name, attrs, parent, text) {
  const node = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }
function extent(values) {
  const v = values.filter((x) => x !== null && Number.isFinite(x));
  if (!v.length) return [0, 1];
  let lo = Math.min(...v), hi = Math.max(...v);
  if (lo === hi) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
  return [lo, hi];
}
function scale([d0, d1], [r0, r1], log) {
  const f = log ? Math.log : (x) => x;
  return (x) => r0 + (f(x) - f(d0)) / (f(d1) - f(d0) || 1) * (r1 - r0);
}
function fmt(x) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(2) : x.toPrecision(4);
}
function axes(svg, xd, yd, xlabel, ylabel, integerX = true) {
  const x = scale(xd, [M.l, W - M.r]), y = scale(yd, [H - M.b, M.t]), seen = new Set();
  for (let i = 0; i <= 4; i++) {
    const yv = yd[0] + (yd[1] - yd[0]) * i / 4;
    let xv = xd[0] + (xd[1] - xd[0]) * i / 4;
    el("line", { x1: M.l, x2: W - M.r, y1: y(yv), y2: y(yv), class: "grid" }, svg);
    el("text", { x: M.l - 4, y: y(yv) + 4, "text-anchor": "end" }, svg, fmt(yv));
    if (integerX) xv = Math.round(xv);
    if (seen.has(xv) || xv < xd[0] || xv > xd[1]) continue;
    seen.add(xv);
    el("text", { x: x(xv), y: H - M.b + 14, "text-anchor": "middle" }, svg, fmt(xv));
  }
  el("line", { x1: M.l, x2: M.l, y1: M.t, y2: H - M.b, class: "axis" }, svg);
  el("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, class: "axis" }, svg);
  el("text", { x: (M.l + W - M.r) / 2, y: H - 4, "text-anchor": "middle" }, svg, xlabel);
  el("text", { x: 12, y: (M.t + H - M.b) / 2, "text-anchor": "middle",
               transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})` }, svg, ylabel);
  return { x, y };
}
function polyline(svg, points, attrs) {
  const ok = points.filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b));
  if (ok.length) el("polyline", { points: ok.map((p) => p.join(",")).join(" "), ...attrs }, svg);
}
function empty(svg, message) {
  clear(svg); el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, svg, message);
}

// ---------- table --------------------------------------------------------------------------
function columns() {
  const cols = [["number", "#", (t) => t.number], ["state", "state", (t) => t.state],
    ["objective", "objective", (t) => t.objective], ["epochs_done", "epochs", (t) => t.epochs_done],
    ["time", "s/epoch", (t) => derived(t).time], ["wait", "input wait", (t) => derived(t).wait]];
  hparamNames().forEach((name) => cols.push(["hp:" + name, name, (t) => t.hparams[name]]));
  cols.push(["last_heartbeat", "last heartbeat", (t) => t.last_heartbeat]);
  return cols;
}
function sortedTrials(cols) {
  const col = cols.find((c) => c[0] === state.sort.key) || cols[0];
  const dir = state.sort.dir;
  return [...state.trials].sort((a, b) => {
    const va = col[2](a), vb = col[2](b);
    if (va === null || va === undefined) return 1;
    if (vb === null || vb === undefined) return -1;
    return (va < vb ? -1 : va > vb ? 1 : 0) * dir;
  });
}
function renderTable() {
  const cols = columns(), head = $("trials").tHead, body = $("trials").tBodies[0];
  head.innerHTML = ""; body.innerHTML = "";
  const hr = head.insertRow();
  cols.forEach(([key, label]) => {
    const th = document.createElement("th");
    th.textContent = label; th.dataset.key = key;
    if (key === state.sort.key) th.className = state.sort.dir > 0 ? "sorted-asc" : "sorted-desc";
    th.onclick = () => { state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 }; render(); };
    hr.appendChild(th);
  });
  sortedTrials(cols).forEach((trial) => {
    const tr = body.insertRow();
    tr.dataset.trialId = trial.id;
    if (trial.id === state.selected) tr.classList.add("selected");
    if (trial.id === bestId()) tr.classList.add("best");
    tr.onclick = () => { state.selected = trial.id; render(); };
    cols.forEach(([key, , get]) => {
      const td = tr.insertCell(), v = get(trial);
      td.textContent = key === "last_heartbeat" && v ? new Date(v).toLocaleTimeString()
        : key === "wait" && v !== null ? (100 * v).toFixed(1) + "%" : fmt(v);
      if (key === "state") td.className = "state-" + v;
      if (key === "objective" && trial.state === "diverged") {
        td.textContent = "NaN"; td.className = "state-diverged";
        td.title = "diverged: an objective of the last epoch is not finite; never best";
      }
      if (key === "wait" && v > 0.2) { td.classList.add("input-bound"); td.title = "input-bound: > 20% of the epoch waiting for data"; }
    });
  });
}

// ---------- charts -------------------------------------------------------------------------
function renderObjective() {
  const svg = $("objective"); clear(svg);
  const done = state.trials.filter((t) => t.objective !== null && Number.isFinite(t.objective))
    .sort((a, b) => a.number - b.number);
  if (!done.length) return empty(svg, "no finished trial yet");
  const xd = extent(state.trials.map((t) => t.number)), yd = extent(done.map((t) => t.objective));
  const { x, y } = axes(svg, xd, yd, "trial number", searchCfg().objective || "objective");
  let best = null; const run = [];
  done.forEach((t) => {
    best = best === null ? t.objective : (maximize() ? Math.max : Math.min)(best, t.objective);
    run.push([x(t.number), y(best)]);
  });
  polyline(svg, run, { class: "best", "data-series": "running-best" });
  done.forEach((t) => {
    const c = el("circle", { cx: x(t.number), cy: y(t.objective), r: t.id === state.selected ? 6 : 4,
      fill: t.state === "pruned" ? "#a60" : "#2563eb", class: "trial-point", "data-trial-id": t.id }, svg);
    el("title", {}, c, `trial ${t.number}: ${fmt(t.objective)}`);
    c.onclick = () => { state.selected = t.id; render(); };
  });
}

function renderCurves() {
  const svg = $("curves"); clear(svg);
  const trial = state.trials.find((t) => t.id === state.selected);
  if (!trial) return empty(svg, "click a trial in the table");
  $("curves-title").firstChild.textContent = `Per-epoch curves of trial ${trial.number} `;
  $("curves-title").lastElementChild.textContent = "(click another row or point to change)";
  const eps = epochsOf(trial);
  if (!eps.length) return empty(svg, `trial ${trial.number} has no epoch yet`);
  const names = [...new Set(eps.flatMap((e) => Object.keys(e.metrics)))].sort();
  const values = eps.flatMap((e) => Object.values(e.metrics));
  const { x, y } = axes(svg, extent(eps.map((e) => e.epoch)), extent(values), "epoch", "metric");
  names.forEach((name, i) => {
    const color = PALETTE[i % PALETTE.length];
    polyline(svg, eps.map((e) => [x(e.epoch), y(e.metrics[name])]),
      { class: "curve", stroke: color, "data-metric": name });
    el("text", { x: W - M.r - 4, y: M.t + 12 + 13 * i, "text-anchor": "end", fill: color,
                 style: `fill:${color}` }, svg, name);
  });
}

function renderTiming() {
  const svg = $("timing"); clear(svg);
  const trial = state.trials.find((t) => t.id === state.selected);
  const eps = trial ? epochsOf(trial) : [];
  if (!eps.length) return empty(svg, trial ? "no epoch yet" : "click a trial in the table");
  const xd = [0.5, eps.length ? Math.max(...eps.map((e) => e.epoch)) + 0.5 : 1.5];
  const yd = [0, extent(eps.map((e) => e.epoch_time))[1]];
  const { x, y } = axes(svg, xd, yd, "epoch", "seconds per epoch");
  const bw = Math.max(4, (x(1.5) - x(0.5)) * 0.6), wy = scale([0, 1], [H - M.b, M.t]);
  eps.forEach((e) => {
    el("rect", { x: x(e.epoch) - bw / 2, y: y(e.epoch_time), width: bw, height: H - M.b - y(e.epoch_time),
                 fill: "#93c5fd", class: "epoch-time" }, svg);
  });
  polyline(svg, eps.map((e) => [x(e.epoch), wy(e.input_wait_frac)]),
    { class: "curve", stroke: "#dc2626", "data-series": "input-wait" });
  el("line", { x1: W - M.r, x2: W - M.r, y1: M.t, y2: H - M.b, class: "axis" }, svg);
  [0, 0.2, 0.5, 1].forEach((f) => el("text", { x: W - M.r + 4, y: wy(f) + 4 }, svg, (100 * f) + "%"));
  el("text", { x: W - M.r - 4, y: M.t + 12, "text-anchor": "end", style: "fill:#dc2626" }, svg, "input wait");
}

function axisScale(name, trials) {
  const dim = (searchCfg().space || {})[name] || {};
  const vals = trials.map((t) => t.hparams[name]);
  if (dim.type === "categorical" || vals.some((v) => typeof v !== "number")) {
    const choices = dim.choices || [...new Set(vals.map(String))];
    return { f: (v) => (choices.indexOf(v) + 0.5) / choices.length, ticks: choices.map((c, i) => [(i + 0.5) / choices.length, String(c)]) };
  }
  const d = dim.low !== undefined ? [dim.low, dim.high] : extent(vals);
  const s = scale(d, [0, 1], dim.log && d[0] > 0);
  return { f: (v) => s(v), ticks: [[0, fmt(d[0])], [1, fmt(d[1])]] };
}

function renderParallel() {
  const svg = $("parallel"); clear(svg);
  const trials = state.trials.filter((t) => t.objective !== null && Number.isFinite(t.objective));
  const names = hparamNames();
  if (!trials.length || !names.length) return empty(svg, "no finished trial yet");
  const dims = names.map((n) => ({ name: n, ...axisScale(n, trials) }));
  const od = extent(trials.map((t) => t.objective)), os = scale(od, [0, 1]);
  dims.push({ name: searchCfg().objective || "objective", f: os, ticks: [[0, fmt(od[0])], [1, fmt(od[1])]], objective: true });
  const xs = dims.map((_, i) => M.l + i * (W - M.l - M.r) / (dims.length - 1 || 1));
  const yy = (f) => H - M.b - f * (H - M.b - M.t);
  dims.forEach((d, i) => {
    el("line", { x1: xs[i], x2: xs[i], y1: M.t, y2: H - M.b, class: "axis" }, svg);
    el("text", { x: xs[i], y: H - M.b + 16, "text-anchor": "middle" }, svg, d.name);
    d.ticks.forEach(([f, label]) => el("text", { x: xs[i] + 3, y: yy(f) + 4 }, svg, label));
  });
  trials.forEach((t) => {
    const good = maximize() ? os(t.objective) : 1 - os(t.objective);
    const color = `hsl(${Math.round(120 * good)}, 70%, 42%)`;
    const pts = dims.map((d, i) => [xs[i], yy(d.objective ? d.f(t.objective) : d.f(t.hparams[d.name]))]);
    const line = el("polyline", { points: pts.map((p) => p.join(",")).join(" "), stroke: color,
      class: "pc-line" + (t.id === state.selected ? " selected" : ""), "data-trial-id": t.id }, svg);
    el("title", {}, line, `trial ${t.number}: ${fmt(t.objective)}`);
    line.onclick = () => { state.selected = t.id; render(); };
  });
}

// ---------- several objectives: the Pareto front, and the importance bars -----------------
function objectives() { return searchCfg().objectives || []; }
function feasible(t) { return !t.violations || t.violations.every((v) => v !== null && v <= 0); }
function renderPareto() {
  const svg = $("pareto"); clear(svg);
  const objs = objectives();
  if (objs.length < 2) return empty(svg, "one objective: see objective vs trial");
  const front = new Set((state.summary.pareto || []));
  const pts = state.trials.filter((t) => t.objectives && t.objectives.length >= 2
    && Number.isFinite(t.objectives[0]) && Number.isFinite(t.objectives[1]));
  if (!pts.length) return empty(svg, "no finished trial yet");
  const name = (o) => `${o.metric} (${o.direction === "maximize" ? "max" : "min"})`;
  const { x, y } = axes(svg, extent(pts.map((t) => t.objectives[0])),
    extent(pts.map((t) => t.objectives[1])), name(objs[0]), name(objs[1]), false);
  const onFront = pts.filter((t) => front.has(t.number))
    .sort((a, b) => a.objectives[0] - b.objectives[0]);
  polyline(svg, onFront.map((t) => [x(t.objectives[0]), y(t.objectives[1])]), { class: "front" });
  pts.forEach((t) => {
    const isFront = front.has(t.number);
    const cls = isFront ? "pareto-point" : (feasible(t) ? "mo-point" : "mo-point infeasible");
    const c = el("circle", { cx: x(t.objectives[0]), cy: y(t.objectives[1]),
      r: t.id === state.selected ? 7 : (isFront ? 5 : 4), class: cls, "data-trial": t.number }, svg);
    el("title", {}, c, `trial ${t.number}: ${objs.map((o, i) => `${o.metric} = ${fmt(t.objectives[i])}`)
      .join(", ")}${isFront ? " (Pareto front)" : ""}${feasible(t) ? "" : " (infeasible)"}`);
    c.onclick = () => { state.selected = t.id; render(); };
    if (isFront) el("text", { x: x(t.objectives[0]) + 7, y: y(t.objectives[1]) - 6,
      class: "pareto-label", "data-trial": t.number }, svg, `#${t.number}`);
  });
}

function renderImportance() {
  const svg = $("importance"); clear(svg);
  const shares = Object.entries(state.importance || {}).sort((a, b) => b[1] - a[1]);
  if (!shares.length) return empty(svg, "needs 5 finished trials with different objectives");
  const rowH = Math.min(36, (H - M.t - M.b) / shares.length), left = 150, width = W - left - 60;
  shares.forEach(([param, share], i) => {
    const top = M.t + i * rowH;
    el("text", { x: left - 6, y: top + rowH / 2 + 4, "text-anchor": "end" }, svg, param);
    const bar = el("rect", { x: left, y: top + 3, width: Math.max(1, share * width),
      height: rowH - 6, class: "importance-bar", "data-param": param, "data-share": share }, svg);
    el("title", {}, bar, `${param}: ${(100 * share).toFixed(1)}%`);
    el("text", { x: left + share * width + 4, y: top + rowH / 2 + 4 }, svg,
       `${(100 * share).toFixed(0)}%`);
  });
}

// ---------- the ROC curves of the best trials (their roc.json), rejection on a log scale ----
function renderRoc() {
  const svg = $("roc"); clear(svg);
  const got = state.roc || { trials: [], missing: [] };
  const curves = got.trials.map((t) => ({ t, pts: t.signal_efficiency
    .map((s, i) => [s, t.background_efficiency[i]]).filter(([s, b]) => s > 0 && b > 0)
    .map(([s, b]) => [s, 1 / b]) })).filter((c) => c.pts.length);
  if (!curves.length) {
    return empty(svg, got.missing.length ? "no roc.json among the best trials' outputs"
      : "no completed classifier trial yet (roc.json)");
  }
  const ys = curves.flatMap((c) => c.pts.map((p) => p[1]));
  const lo = Math.pow(10, Math.floor(Math.log10(Math.min(...ys))));
  const hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...ys) * 1.0001)));
  const x = scale([0, 1], [M.l, W - M.r]), y = scale([lo, hi], [H - M.b, M.t], true);
  for (let d = lo; d <= hi * 1.0001; d *= 10) {
    el("line", { x1: M.l, x2: W - M.r, y1: y(d), y2: y(d), class: "grid" }, svg);
    el("text", { x: M.l - 4, y: y(d) + 4, "text-anchor": "end" }, svg, fmt(d));
  }
  [0, 0.25, 0.5, 0.75, 1].forEach((v) =>
    el("text", { x: x(v), y: H - M.b + 14, "text-anchor": "middle" }, svg, fmt(v)));
  el("line", { x1: M.l, x2: M.l, y1: M.t, y2: H - M.b, class: "axis" }, svg);
  el("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, class: "axis" }, svg);
  el("text", { x: (M.l + W - M.r) / 2, y: H - 4, "text-anchor": "middle" }, svg, "signal efficiency");
  el("text", { x: 12, y: (M.t + H - M.b) / 2, "text-anchor": "middle",
               transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})` }, svg, "background rejection (log)");
  curves.forEach(({ t, pts }, i) => {
    const color = PALETTE[i % PALETTE.length];
    polyline(svg, pts.map(([s, r]) => [x(s), y(r)]), { class: "roc-curve" + (t.id === state.selected
      ? " selected" : ""), stroke: color, "data-trial": t.number, "data-trial-id": t.id });
    el("text", { x: W - M.r - 4, y: M.t + 12 + 13 * i, "text-anchor": "end", fill: color,
                 style: `fill:${color}`, class: "roc-label" }, svg,
       `#${t.number} ${searchCfg().objective || "objective"} ${fmt(t.objective)}, AUC ${fmt(t.auc)}`);
  });
}

function renderSummary() {
  const s = state.summary, box = $("summary");
  const counts = Object.entries(s.counts).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(", ");
  const best = objectives().length > 1
    ? `Pareto front: ${(s.pareto || []).length ? "trials " + s.pareto.join(", ") : "empty"}`
    : s.best ? `best: trial ${s.best.number}, ${searchCfg().objective || "objective"} = ${fmt(s.best.objective)}` : "no completed trial yet";
  box.textContent = `${s.name} (${s.state}): ${counts || "no trials"} · ${best} · ${searchCfg().algorithm || ""} ${searchCfg().direction || ""}`;
}

function render() {
  if (!state.summary) return;
  renderSummary(); renderTable(); renderObjective(); renderParallel(); renderCurves(); renderTiming();
  renderPareto(); renderImportance(); renderRoc();
}

// ---------- loading ------------------------------------------------------------------------
async function refresh() {
  if (!state.study) return;
  const s = encodeURIComponent(state.study);
  try {
    const [summary, page] = await Promise.all([api(`/api/v1/studies/${s}`),
      api(`/api/v1/studies/${s}/trials?limit=1000`)]);
    // the epochs of the trials shown (the same page) only when one has reported since the last poll
    const seen = page.trials.map((t) => `${t.id}:${t.epochs_done}`).join(",");
    const failed = [];  // a panel whose data fails stays empty and is named: the page still shows
    const panel = (path, empty) => api(path).catch((err) => {
      failed.push(String(err.message || err)); return empty; });
    const fresh = seen !== state.seen;
    if (fresh) {
      state.seen = seen;  // (a poll meanwhile does not ask again)
      state.epochs = await panel(`/api/v1/studies/${s}/epochs?limit=1000`, {});
    }
    Object.assign(state, { summary, trials: page.trials });
    render();
    if (fresh) {  // the importance (a forest fitted on the server) and the ROC overlay come
      await Promise.all([  // when they come, each into its own panel: the page does not wait
        panel(`/api/v1/studies/${s}/importance`, {}).then((v) => { state.importance = v; renderImportance(); }),
        panel(`/api/v1/studies/${s}/roc?n=5`, null).then((v) => { state.roc = v; renderRoc(); })]);
      if (failed.length) state.seen = null;  // asked again at the next poll
    }
    $("status").textContent = "updated " + new Date().toLocaleTimeString()
      + (failed.length ? "; not shown: " + failed.join("; ") : "");
  } catch (err) { $("status").textContent = String(err.message || err); }
}

async function loadStudies() {
  try {
    const studies = await api("/api/v1/studies"), select = $("study");
    select.innerHTML = "";
    studies.forEach((st) => { const o = document.createElement("option"); o.value = st.name; o.textContent = st.name; select.appendChild(o); });
    const wanted = new URLSearchParams(location.hash.slice(1)).get("study");
    const pick = studies.find((st) => st.name === wanted) || studies[studies.length - 1];
    if (!pick) { $("status").textContent = "no study yet"; return; }
    select.value = pick.name; choose(pick.name);
  } catch (err) { $("status").textContent = String(err.message || err); }
}

function choose(name) {
  if (name !== state.study) Object.assign(state, { study: name, selected: null, summary: null, seen: null,
                                                   epochs: {}, importance: {}, roc: null });
  history.replaceState(null, "", "#study=" + encodeURIComponent(name));
  refresh();
}

$("study").onchange = (e) => choose(e.target.value);
$("token-save").onclick = () => {
  state.token = $("token").value.trim(); sessionStorage.setItem("gridml-token", state.token); loadStudies();
};
loadStudies();
setInterval(() => { if (!document.hidden) refresh(); }, 3000);
