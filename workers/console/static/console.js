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

async function loadRuns() {
  try {
    const { runs } = await call("GET", "/api/runs?limit=30");
    const ul = $("runs");
    ul.replaceChildren();
    for (const r of runs) {
      const li = el("li", r.run_id === current ? "current" : "");
      li.append(el("span", "id", r.run_id), el("span", "badge " + (r.agent_status || r.status),
        r.agent_status || r.status));
      li.title = `${r.agent || ""} started ${r.started_at || ""}`;
      li.onclick = () => { location.hash = "run=" + encodeURIComponent(r.run_id); };
      ul.append(li);
    }
  } catch (e) { /* the list refreshes again shortly */ }
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
    case "status": setStatus(ev.status); break;
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
      $("approvals").replaceChildren();
      tl.append(el("div", "step finished", `Run ${r.status}: ${r.stopped_reason || ""}`));
      break;
    }
  }
}

async function select(runId) {
  if (source) source.close();
  current = runId;
  step = null;
  $("empty").hidden = true;
  $("detail").hidden = false;
  $("run-id").textContent = runId;
  $("timeline").replaceChildren();
  $("approvals").replaceChildren();
  showError(null);
  setStatus("…");
  try {
    const st = await call("GET", `/runs/${encodeURIComponent(runId)}`);
    $("web-ui").href = st.web_ui;
  } catch (e) { showError(e); }
  source = new EventSource(`/runs/${encodeURIComponent(runId)}/events`);
  source.onmessage = (m) => onEvent(JSON.parse(m.data));
  source.addEventListener("end", () => { source.close(); loadRuns(); });
  source.addEventListener("error", (m) => {
    if (m.data) { showError(JSON.parse(m.data).error); source.close(); }
  });
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

$("interrupt").onclick = async () => {
  try { await call("POST", `/runs/${encodeURIComponent(current)}/interrupt`, {}); }
  catch (e) { showError(e); }
};

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
