// The run console: recent runs, one run's events live (Server-Sent Events), approvals.
// Plain JavaScript, no build step. Every value from a run is shown with textContent (never HTML).
"use strict";

const $ = (id) => document.getElementById(id);
// Who we are comes from the server (the authenticated identity), never from this page; the
// CSRF token it gives goes back on every state-changing request.
let session = { principal_id: "", csrf_token: "" };
const sessionReady = fetch("/api/session", { credentials: "same-origin" })
  .then((r) => r.json()).then((s) => { session = s; $("principal").textContent = s.principal_id; })
  .catch(() => {});

let source = null;   // the EventSource of the selected run
let current = null;  // the selected run id
let step = null;     // the element receiving the current model step's text
const toolCards = {};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function pretty(v) {
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
}

async function call(method, path, body) {
  await sessionReady;
  const r = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": session.csrf_token },
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(data.error || `HTTP ${r.status}`);
  return data;
}

function showError(e) { $("error").textContent = e ? String(e.message || e) : ""; }

// The list: what each run was asked, by whom, when, its agent, status and cost; filtered on the
// server (GET /api/runs?status=&agent=&principal=). Children of suites and runs are not listed here.
function short(text, n) {
  if (!text) return "";
  const t = text.replace(/\s+/g, " ").trim();
  return t.length <= n ? t : t.slice(0, n - 1) + "…";
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const today = new Date().toDateString() === d.toDateString();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
  return today ? time : d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + time;
}

function usd(x) { return typeof x === "number" ? "$" + x.toFixed(x && x < 0.01 ? 4 : 2) : ""; }

function filterQuery() {
  const q = new URLSearchParams({ limit: "30" });
  for (const [k, id] of [["status", "f-status"], ["agent", "f-agent"], ["principal", "f-principal"]]) {
    const v = $(id).value.trim();
    if (v) q.set(k, v);
  }
  return q.toString();
}

function remember(listId, values) {
  const dl = $(listId);
  const have = new Set([...dl.options].map((o) => o.value));
  for (const v of values) if (v && !have.has(v)) { dl.append(el("option", "", v)); have.add(v); }
}

let listing = 0;  // the newest list request: an older answer arriving late is dropped
async function loadRuns() {
  const mine = ++listing;
  try {
    const { runs } = await call("GET", "/api/runs?" + filterQuery());
    if (mine !== listing) return;
    const body = $("runs").tBodies[0];
    body.replaceChildren();
    for (const r of runs) {
      const tr = el("tr", r.run_id === current ? "current" : "");
      tr.dataset.runId = r.run_id;
      const req = el("td", "request", short(r.request, 70) || r.run_id);
      req.title = (r.request || "") + "\n" + r.run_id;
      if (!r.request) req.classList.add("id");
      const started = el("td", "when", when(r.started_at));
      started.title = r.started_at || "";
      const status = el("td");
      status.append(el("span", "badge " + r.status, r.status.replace(/_/g, " ")));
      tr.append(req, el("td", "agent", r.agent || ""), el("td", "who", r.principal_id || ""),
        started, status, el("td", "cost", usd(r.cost_usd)));
      tr.onclick = () => { location.hash = "run=" + encodeURIComponent(r.run_id); };
      body.append(tr);
    }
    if (!runs.length) {
      const tr = el("tr", "empty");
      const td = el("td", "", "no runs match");
      td.colSpan = 6;
      tr.append(td);
      body.append(tr);
    }
    remember("agents-seen", runs.map((r) => r.agent));
    remember("people-seen", runs.map((r) => r.principal_id));
  } catch (e) { /* the list refreshes again shortly */ }
}

for (const id of ["f-status", "f-agent", "f-principal"]) $(id).addEventListener("change", loadRuns);
$("filters").onsubmit = (e) => { e.preventDefault(); loadRuns(); };
$("f-mine").onclick = async () => {
  await sessionReady;
  const f = $("f-principal");
  f.value = f.value === session.principal_id ? "" : session.principal_id;
  loadRuns();
};

// What the run's status allows (the server says: GET /runs/{id} "controls"); nothing else shows.
let allowed = [];
function setControls(controls) {
  allowed = controls || [];
  $("interrupt").hidden = !allowed.includes("interrupt");
  $("pause").hidden = !allowed.includes("pause");
  $("resume").hidden = !allowed.includes("resume");
  $("message").hidden = !allowed.includes("message");
  $("approvals").hidden = !allowed.includes("decide");
}

function meta(page) {
  const dl = $("run-meta");
  dl.replaceChildren();
  const rows = [
    ["Request", page.input || ""],
    ["Agent", page.agent || ""],
    ["Person", page.principal_id ? `${page.principal_id}@${page.tenant_id || "default"}` : ""],
    ["Started", page.started_at ? new Date(page.started_at).toLocaleString() : ""],
    ["Cost", `${usd((page.usage || {}).cost_usd || 0)} · ${(page.usage || {}).total_tokens || 0} tokens`],
  ];
  for (const [k, v] of rows) {
    const row = el("div", "kv");
    row.append(el("dt", "", k), el("dd", "", v));
    dl.append(row);
  }
}

function showNote(text) {
  $("note").textContent = text || "";
  $("note").hidden = !text;
}

// A closed run's page, or an open one no worker answers for: read from its history.
function fromHistory(page) {
  const tl = $("timeline");
  tl.replaceChildren();
  for (const c of page.tool_calls || []) {
    const card = el("div", "tool" + (c.status !== "ok" ? " error" : ""));
    card.append(el("div", "",
      `tool ${c.name} (${c.id}) → ${c.status} · ${Math.round(c.duration_ms || 0)} ms` +
      (c.reason ? ` · ${c.reason}` : "")), el("pre", "", pretty(c.arguments)));
    tl.append(card);
  }
  for (const d of page.decisions || []) {
    tl.append(el("div", "meta", `${d.decision} by ${d.principal_id}: ${d.tool_call_id}`));
  }
  for (const ch of page.children || []) {
    const row = el("div", "meta child");
    const a = el("a", "", ch.run_id);
    a.href = "#run=" + encodeURIComponent(ch.run_id);
    row.append(el("span", "", `child run (${ch.agent || ""}): `), a, el("span", "", ` ${ch.status || ""}`));
    tl.append(row);
  }
  for (const act of page.pending_activities || []) {
    tl.append(el("div", "meta", `waiting on ${act.activity} (attempt ${act.attempt})`));
  }
  if (page.output) {
    const s = el("div", "step");
    s.append(el("div", "meta", `answer · turn ${page.turns || page.turn || ""}`), el("div", "text", page.output));
    tl.append(s);
  }
  if (page.closed) {
    const why = page.stopped_reason || page.error || "";
    tl.append(el("div", "step finished", `Run ${page.status}: ${why}`));
  }
}

let retry = null;  // re-reads an open run's page while no worker answers
async function loadPage(runId, first) {
  const page = await call("GET", `/runs/${encodeURIComponent(runId)}`);
  if (runId !== current) return;
  $("web-ui").href = page.web_ui;
  setStatus(page.status);
  meta(page);
  setControls(page.controls);
  showNote(page.note);
  if (page.source === "history") {
    fromHistory(page);
    if (!page.closed) retry = setTimeout(() => loadPage(runId, false).catch(showError), 5000);
    return;
  }
  if (first || !source) openStream(runId);
}

function openStream(runId) {
  if (source) source.close();
  $("timeline").replaceChildren();
  $("approvals").replaceChildren();
  step = null;
  source = new EventSource(`/runs/${encodeURIComponent(runId)}/events`);
  source.onmessage = (m) => onEvent(JSON.parse(m.data));
  source.addEventListener("end", () => { source.close(); loadRuns(); });
  source.addEventListener("error", (m) => {
    if (m.data) { showError(JSON.parse(m.data).error); source.close(); }
  });
}

function setStatus(status) {
  const b = $("run-status");
  b.textContent = status;
  b.className = "badge " + status;
}

function newStep(ev) {
  step = el("div", "step");
  step.append(el("div", "meta", `turn ${ev.turn} · ${ev.model || "model"}`), el("div", "text"));
  $("timeline").append(step);
  return step;
}

function approvalCard(ev) {
  const card = el("div", "approval");
  card.id = "approval-" + ev.tool_call_id;
  card.append(el("div", "", `Waiting for approval: ${ev.name} (${ev.tool_call_id})`),
    el("pre", "", pretty(ev.arguments)));
  const row = el("div", "row");
  const yes = el("button", "approve", "Approve");
  const no = el("button", "reject", "Reject");
  const decide = async (what) => {
    yes.disabled = no.disabled = true;
    try {
      await call("POST", `/runs/${encodeURIComponent(current)}/${what}`, {
        tool_call_id: ev.tool_call_id,
        reason: what === "reject" ? "rejected in the console" : undefined,
      });
      showError(null);
    } catch (e) { showError(e); yes.disabled = no.disabled = false; }
  };
  yes.onclick = () => decide("approve");
  no.onclick = () => decide("reject");
  row.append(yes, no);
  card.append(row);
  $("approvals").append(card);
}

// A client tool's call (client_tool_requested): the person gives its result (POST tool-result).
function clientToolCard(ev) {
  const card = el("div", "approval client-tool");
  card.id = "client-" + ev.tool_call_id;
  card.append(el("div", "", `Waiting for the client: ${ev.name} (${ev.tool_call_id})`),
    el("pre", "", pretty(ev.arguments)));
  const input = el("textarea", "");
  input.rows = 3;
  input.placeholder = "the result the model reads";
  const row = el("div", "row");
  const ok = el("button", "approve", "Send result");
  const bad = el("button", "reject", "Send as error");
  const send = async (isError) => {
    ok.disabled = bad.disabled = true;
    try {
      await call("POST", `/runs/${encodeURIComponent(current)}/tool-result`, {
        tool_call_id: ev.tool_call_id, content: input.value, is_error: isError,
      });
      showError(null);
    } catch (e) { showError(e); ok.disabled = bad.disabled = false; }
  };
  ok.onclick = () => send(false);
  bad.onclick = () => send(true);
  row.append(ok, bad);
  card.append(input, row);
  $("approvals").append(card);
}

function onEvent(ev) {
  const tl = $("timeline");
  switch (ev.type) {
    case "run_started":
      tl.append(el("div", "meta", `agent ${ev.agent}: ${ev.input}`));
      break;
    case "status": setStatus(ev.status); refreshSoon(); break;
    case "child_started": {
      const row = el("div", "meta child");
      const a = el("a", "", ev.child_run_id);
      a.href = "#run=" + encodeURIComponent(ev.child_run_id);
      row.append(el("span", "", `child run (${ev.agent || ""}): `), a);
      tl.append(row);
      break;
    }
    case "model_started": newStep(ev); break;
    case "model_retry":
      if (step) step.querySelector(".text").textContent = "";
      break;
    case "text_delta":
      (step || newStep(ev)).querySelector(".text").textContent += ev.delta;
      break;
    case "model_finished":
      if (step) {
        step.querySelector(".meta").textContent +=
          ` · ${(ev.usage && ev.usage.total_tokens) || 0} tokens`;
        if (!step.querySelector(".text").textContent) step.querySelector(".text").remove();
      }
      step = null;
      break;
    case "tool_started": {
      const card = el("div", "tool");
      card.append(el("div", "", `tool ${ev.name} (${ev.tool_call_id}) running…`),
        el("pre", "", pretty(ev.arguments)));
      toolCards[ev.tool_call_id] = card;
      tl.append(card);
      break;
    }
    case "tool_finished": {
      const waiting = $("client-" + ev.tool_call_id);
      if (waiting) waiting.remove();
      const card = toolCards[ev.tool_call_id] || tl.appendChild(el("div", "tool"));
      card.firstChild.textContent =
        `tool ${ev.name} (${ev.tool_call_id}) → ${ev.status} · ${Math.round(ev.duration_ms || 0)} ms`;
      if (ev.status !== "ok") card.classList.add("error");
      const shown = card.querySelector("pre.result");  // given live, then again after a reconnect
      if (shown) shown.remove();
      card.append(el("pre", "result", pretty(ev.result || "")));
      break;
    }
    case "approval_requested": approvalCard(ev); break;
    case "client_tool_requested": {
      const card = el("div", "tool");
      card.append(el("div", "", `client tool ${ev.name} (${ev.tool_call_id}) waiting…`),
        el("pre", "", pretty(ev.arguments)));
      toolCards[ev.tool_call_id] = card;
      tl.append(card);
      clientToolCard(ev);
      refreshSoon();  // a client tool's wait changes no status: re-read what the run allows
      break;
    }
    case "approval_decided": {
      const card = $("approval-" + ev.tool_call_id);
      if (card) card.remove();
      tl.append(el("div", "meta", `${ev.decision} by ${ev.principal_id}: ${ev.name} (${ev.tool_call_id})`));
      break;
    }
    case "run_finished": {
      const r = ev.result || {};
      setStatus(r.status);
      setControls([]);
      tl.append(el("div", "step finished", `Run ${r.status}: ${r.stopped_reason || ""}`));
      break;
    }
  }
}

async function select(runId) {
  if (source) { source.close(); source = null; }
  if (retry) { clearTimeout(retry); retry = null; }
  current = runId;
  step = null;
  $("empty").hidden = true;
  $("detail").hidden = false;
  $("run-id").textContent = runId;
  $("timeline").replaceChildren();
  $("approvals").replaceChildren();
  $("run-meta").replaceChildren();
  showNote(null);
  setControls([]);
  showError(null);
  setStatus("…");
  try { await loadPage(runId, true); } catch (e) { showError(e); }
  loadRuns();
}

$("start").onsubmit = async (e) => {
  e.preventDefault();
  try {
    const r = await call("POST", "/runs", {
      input: $("input").value, agent: $("agent").value,
    });
    $("input").value = "";
    location.hash = "run=" + encodeURIComponent(r.run_id);
  } catch (err) { showError(err); }
};

async function signal(what) {
  try {
    await call("POST", `/runs/${encodeURIComponent(current)}/${what}`, {});
    showError(null);
    setTimeout(() => refreshControls(current), 500);
  } catch (e) { showError(e); }
}
$("interrupt").onclick = () => signal("interrupt");
$("pause").onclick = () => signal("pause");
$("resume").onclick = () => signal("resume");

// Re-read what the run allows when its status changes (from the event stream), once per burst
// (a page opened late replays every status event at once; each read is a query).
let refreshTimer = null;
function refreshSoon() {
  if (refreshTimer) clearTimeout(refreshTimer);
  const runId = current;
  refreshTimer = setTimeout(() => { refreshTimer = null; refreshControls(runId); }, 300);
}

async function refreshControls(runId) {
  try {
    const page = await call("GET", `/runs/${encodeURIComponent(runId)}`);
    if (runId !== current) return;
    setControls(page.controls);
    meta(page);
    showNote(page.note);
  } catch (e) { /* the next status change tries again */ }
}

$("message").onsubmit = async (e) => {
  e.preventDefault();
  try {
    await call("POST", `/runs/${encodeURIComponent(current)}/messages`,
      { content: $("message-text").value });
    $("message-text").value = "";
  } catch (err) { showError(err); }
};

function fromHash() {
  const m = location.hash.match(/run=([^&]+)/);
  if (m && decodeURIComponent(m[1]) !== current) select(decodeURIComponent(m[1]));
}
window.addEventListener("hashchange", fromHash);
fromHash();
async function loadSuites() {
  try {
    const { suites } = await call("GET", "/api/suites");
    const ul = $("suites");
    ul.replaceChildren();
    for (const x of suites) {
      const li = el("li");
      const a = el("a", "id", x.suite_id);
      a.href = "/suites/" + encodeURIComponent(x.suite_id);
      li.append(a, el("span", "badge " + x.status, x.status));
      ul.append(li);
    }
  } catch (e) { /* refreshed again shortly */ }
}

async function loadMemory() {
  try {
    const { items, tenant_id } = await call("GET", "/api/memory");
    const ul = $("memory");
    ul.replaceChildren();
    for (const it of items) {
      const li = el("li", "memory-item");
      li.append(el("span", "text", it.text));
      const forget = el("button", "secondary", "forget");
      forget.title = `delete ${it.id} for good`;
      forget.onclick = async () => {
        try {
          await call("POST", `/api/memory/${encodeURIComponent(it.id)}/delete`, { tenant_id });
          loadMemory();
        } catch (e) { showError(e); }
      };
      li.append(forget);
      ul.append(li);
    }
    if (!items.length) ul.append(el("li", "empty", "nothing yet"));
  } catch (e) { /* refreshed again shortly */ }
}

loadRuns();
loadSuites();
loadMemory();
setInterval(loadMemory, 15000);
setInterval(loadRuns, 5000);
setInterval(loadSuites, 15000);
