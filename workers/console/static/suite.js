// The live view of an evaluation suite: its report (GET /api/suites/{id}), refreshed every 2 s
// until the suite is done. Plain JavaScript; every value is shown with textContent (never HTML).
"use strict";

const $ = (id) => document.getElementById(id);
const suiteId = decodeURIComponent(location.pathname.split("/").pop());

function row(cells, head) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement(head ? "th" : "td");
    td.textContent = c === null || c === undefined ? "-" : String(c);
    tr.append(td);
  }
  return tr;
}

const pct = (x) => (typeof x === "number" ? (100 * x).toFixed(1) + "%" : "-");
const num = (x, d = 1) => (typeof x === "number" ? x.toFixed(d) : "-");

function render(r) {
  $("suite-title").textContent = `${r.suite_id} (${r.dataset})`;
  $("suite-progress").textContent =
    `${r.runs} of ${r.total} runs scored` + (r.done ? " - finished" : " - running");
  const names = Object.keys(r.variants);
  const k = names.length ? r.variants[names[0]].k : 1;
  const vt = $("variants");
  vt.replaceChildren(row(["variant", "runs", "pass@1", `pass^${k}`, "tokens per run",
    "cost USD per run", "p50 ms", "p95 ms"], true));
  for (const n of names) {
    const v = r.variants[n];
    vt.append(row([n, v.runs, pct(v.pass_at_1), pct(v.pass_hat_k), num(v.tokens, 0),
      num(v.cost_usd, 6), num(v.p50_ms, 0), num(v.p95_ms, 0)]));
  }
  const c = r.comparison;
  $("comparison").textContent = c
    ? `${c.candidate} against ${c.baseline} over ${c.cases} cases: pass@1 difference ` +
      `${pct(c.difference)}, ${pct(c.confidence)} interval [${pct(c.ci_low)}, ` +
      `${pct(c.ci_high)}], McNemar p = ${num(c.mcnemar_p, 3)}; tokens ` +
      `${num(c.delta_tokens, 0)}, cost ${num(c.delta_cost_usd, 6)} USD, p95 ` +
      `${num(c.delta_p95_ms, 0)} ms`
    : "one variant: nothing to compare";
  const ct = $("cases");
  ct.replaceChildren(row(["case", ...names], true));
  const ids = [...new Set(names.flatMap((n) => Object.keys(r.variants[n].cases || {})))].sort();
  for (const id of ids) {
    ct.append(row([id, ...names.map((n) => {
      const cs = (r.variants[n].cases || {})[id];
      if (!cs) return "-";
      const left = cs.left_recording || []; // a captured case: where runs left the recording
      return `${cs.passed}/${cs.runs}` + (left.length ? ` · ${left.join("; ")}` : "");
    })]));
  }
}

// The suite's own runs (its child workflows): listed here, not among people's runs.
async function loadRuns() {
  try {
    const q = new URLSearchParams({ parent: suiteId, limit: "200" });
    const resp = await fetch(`/api/runs?${q}`, { credentials: "same-origin" });
    if (!resp.ok) return;
    const { runs } = await resp.json();
    const t = $("suite-runs");
    t.replaceChildren(row(["run", "agent", "status", "tokens", "cost USD"], true));
    for (const r of runs) {
      const tr = row(["", r.agent, r.status, r.total_tokens, num(r.cost_usd, 6)]);
      const a = document.createElement("a");
      a.href = "/#run=" + encodeURIComponent(r.run_id);
      a.textContent = r.run_id;
      tr.firstChild.replaceChildren(a);
      t.append(tr);
    }
  } catch (e) { /* refreshed with the report */ }
}

async function refresh() {
  loadRuns();  // from the listing: shown even when no worker answers for the report
  try {
    const resp = await fetch(`/api/suites/${encodeURIComponent(suiteId)}`,
      { credentials: "same-origin" });
    const data = await resp.json().catch(() => ({ error: `HTTP ${resp.status}` }));
    if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
    $("error").textContent = "";
    render(data);
    if (!data.done) setTimeout(refresh, 2000);
  } catch (e) {
    $("error").textContent = String(e.message || e);
    setTimeout(refresh, 4000);
  }
}

refresh();
