/* The LLM tab of the Locust web UI, drawn by capacity-plugins (webui/routes.py injects this file).
 *
 * Locust's React app renders an extended tab only as a table. This script puts, above that table
 * in the LLM tab's panel: the answer forming (a provisional knee and capacity so far, then the plain
 * answer and the report link), charts per step (throughput against the level, TTFT / ITL / E2E with
 * the SLO limits) and over time with step bands (requests/s and errors, tokens/s, GPU / KV cache
 * and the server queue), the per-step table (validity and SLO judgement), the telemetry readings
 * (marked simulated when they are) and the swarm's health. Data: ./llm/live, every 2 s while the
 * tab is shown. Every URL is relative to the page, so a --web-base-path or a proxy's prefix works.
 * If anything here fails, the stock table stays as it was.
 */
(function () {
  "use strict";
  if (window.capacityLLM) return;
  const PAGE = new URL(".", window.location.href); // the UI's base (…/ under any prefix)
  const LIVE_URL = new URL("llm/live", PAGE).href;
  const ECHARTS_URL = new URL("llm/static/echarts.min.js", PAGE).href;
  const REPORT_URL = new URL("llm/report.html", PAGE).href;
  const POLL_MS = 2000;
  const ROOT_ID = "capacity-llm";
  const COLORS = {p50: "#2e7d32", p95: "#ef6c00", p99: "#c62828", itl: "#6a1b9a", tpot: "#00838f",
    e2e: "#1565c0", rps: "#1565c0", err: "#c62828", tok: "#00838f", gpu: "#6d4c41", kv: "#7b1fa2",
    waiting: "#ef6c00", running: "#2e7d32", slo: "#d32f2f", cap: "#2e7d32", knee: "#8e24aa",
    invalid: "#9e9e9e", band: ["rgba(21,101,192,0.07)", "rgba(21,101,192,0.16)"]};
  const JUDGE = {pass: "#2e7d32", fail: "#c62828", uncertain: "#ef6c00"};

  const state = {root: null, charts: {}, last: null, loading: null, timer: null, error: null};
  window.capacityLLM = state; // for tests and for whoever debugs the tab

  // -- small helpers ---------------------------------------------------------------------------------
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null) continue;
      if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
    }
    for (const c of children) if (c != null) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  const fmt = (v, d) => (v == null || !isFinite(v) ? "" : Number(v).toFixed(d));
  function ms(v) { return v == null ? "" : v < 10 ? v.toFixed(2) : v < 1000 ? v.toFixed(1) : v.toFixed(0); }
  const pct = (v) => (v == null ? "" : (100 * v).toFixed(1) + " %");
  const levelText = (s) => `${s.level} ${s.unit}`;
  function stepName(s) { return `step ${s.index + 1} (${levelText(s)})`; }

  function onLLMTab() {
    const sel = document.querySelector('[role="tab"][aria-selected="true"]');
    if (sel) return sel.textContent.trim() === "LLM";
    return new URLSearchParams(window.location.search).get("tab") === "llm";
  }

  function loadECharts() {
    if (window.echarts) return Promise.resolve(window.echarts);
    if (!state.loading) {
      state.loading = new Promise((resolve, reject) => {
        const s = document.createElement("script");
        s.src = ECHARTS_URL;
        s.onload = () => resolve(window.echarts);
        s.onerror = () => reject(new Error("could not load " + ECHARTS_URL));
        document.head.appendChild(s);
      });
    }
    return state.loading;
  }

  // -- the panel ---------------------------------------------------------------------------------------
  const CHARTS = [
    ["throughput", "Throughput per step (req/s against the level)"],
    ["ttft", "TTFT per step (ms)"],
    ["itl", "ITL / TPOT p95 per step (ms)"],
    ["e2e", "E2E p95 per step (ms)"],
    ["rate", "Requests/s and errors/s over time"],
    ["tokens", "Output tokens/s over time"],
    ["gpu", "GPU utilisation and KV cache over time (%)"],
    ["queue", "Server queue over time (requests)"],
  ];

  function buildRoot() {
    const css = `
      #${ROOT_ID} { font-family: inherit; margin: 8px 0 16px; }
      #${ROOT_ID} .cap-answer { border: 1px solid rgba(128,128,128,.35); border-radius: 6px; padding: 10px 14px;
        margin-bottom: 12px; font-size: 15px; line-height: 1.45; }
      #${ROOT_ID} .cap-answer.final { border-color: #2e7d32; border-width: 2px; }
      #${ROOT_ID} .cap-prov { color: #ef6c00; font-weight: 600; }
      #${ROOT_ID} .cap-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 10px; }
      #${ROOT_ID} .cap-chart { border: 1px solid rgba(128,128,128,.25); border-radius: 6px; padding: 4px; }
      #${ROOT_ID} .cap-chart > div.cap-canvas { height: 250px; }
      #${ROOT_ID} h3 { font-size: 15px; margin: 16px 0 6px; }
      #${ROOT_ID} table { border-collapse: collapse; font-size: 13px; width: 100%; }
      #${ROOT_ID} th, #${ROOT_ID} td { border-bottom: 1px solid rgba(128,128,128,.25); padding: 4px 8px; text-align: right; white-space: nowrap; }
      #${ROOT_ID} th:first-child, #${ROOT_ID} td:first-child { text-align: left; }
      #${ROOT_ID} td.cap-text { text-align: left; white-space: normal; }
      #${ROOT_ID} tr[data-state="running"] { font-style: italic; }
      #${ROOT_ID} .cap-badge { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; font-weight: 600;
        color: #fff; cursor: help; }
      #${ROOT_ID} .cap-sim { background: #7b1fa2; color: #fff; border-radius: 4px; padding: 0 5px; font-size: 11px; margin-left: 4px; }
      #${ROOT_ID} .cap-muted { opacity: .7; font-size: 13px; }
      #${ROOT_ID} .cap-tel span.cap-reading { margin-right: 18px; }
    `;
    const root = h("div", {id: ROOT_ID});
    root.append(h("style", {}, css));
    root.append(h("div", {class: "cap-answer", "data-part": "answer"}, "Waiting for the first step…"));
    root.append(h("div", {class: "cap-tel cap-muted", "data-part": "telemetry"}));
    const grid = h("div", {class: "cap-grid"});
    for (const [key, title] of CHARTS) {
      grid.append(h("div", {class: "cap-chart", "data-chart-box": key},
        h("div", {class: "cap-canvas", "data-chart": key, "aria-label": title})));
    }
    root.append(grid);
    root.append(h("h3", {}, "Steps"));
    root.append(h("div", {"data-part": "steps"}));
    root.append(h("h3", {}, "Swarm health"));
    root.append(h("div", {"data-part": "swarm"}));
    root.append(h("h3", {}, "Cumulative since the start (all steps together)"));
    return root;
  }

  function place() {
    if (!onLLMTab()) {
      if (state.root && state.root.isConnected) state.root.remove();
      return false;
    }
    if (!state.root) state.root = buildRoot();
    const table = document.querySelector("table:not(.cap-table)");
    const anchor = table ? (table.closest(".MuiTableContainer-root, .MuiPaper-root") || table) : null;
    if (anchor && anchor.parentNode) {
      if (anchor.previousSibling !== state.root) anchor.parentNode.insertBefore(state.root, anchor);
    } else if (!state.root.isConnected) {
      const main = document.querySelector("main") || document.getElementById("root") || document.body;
      main.append(state.root);
    }
    return true;
  }

  // -- charts ------------------------------------------------------------------------------------------
  function textColor() {
    const c = getComputedStyle(document.body).color;
    return c || "#333";
  }

  function chart(key) {
    const el = state.root.querySelector(`[data-chart="${key}"]`);
    let c = state.charts[key];
    if (c && c.getDom() !== el) { c.dispose(); c = null; }
    if (!c) {
      c = window.echarts.init(el, null, {renderer: "canvas"});
      state.charts[key] = c;
    }
    return c;
  }

  function base(title, extra) {
    const color = textColor();
    return Object.assign({
      animation: false,
      title: {text: title, left: 8, top: 4, textStyle: {fontSize: 13, fontWeight: 600, color}},
      legend: {top: 22, left: 8, textStyle: {color, fontSize: 11}},
      grid: {left: 56, right: 24, top: 56, bottom: 36},
      tooltip: {trigger: "axis", confine: true},
      textStyle: {color},
    }, extra || {});
  }

  function sloLine(value, label) {
    return {yAxis: value, name: label, lineStyle: {color: COLORS.slo, type: "dashed", width: 2},
      label: {formatter: label, position: "insideEndTop", color: COLORS.slo, fontWeight: 600}};
  }

  function perStepChart(key, title, doc, series, sloLines) {
    const finished = doc.steps.filter((s) => s.state === "finished").sort((a, b) => a.level - b.level);
    const running = doc.steps.filter((s) => s.state === "running");
    const unit = (doc.steps[0] || {}).unit || "users";
    const out = [];
    const sorted = series.slice().sort((a, b) => (a.z || 0) - (b.z || 0));
    for (const sr of sorted) {
      out.push({
        id: sr.id, name: sr.name, type: "line", z: 2 + (sr.z || 0), symbolSize: 8, color: sr.color,
        lineStyle: {width: sr.width || 2},
        data: finished.map((s) => ({value: [s.level, sr.value(s)], step: s.index,
          itemStyle: sr.itemColor ? {color: sr.itemColor(s)} : (s.valid ? undefined : {color: COLORS.invalid}),
          symbol: s.valid ? "circle" : "emptyCircle"})),
        markLine: sr.markLine,
      });
      if (running.length && !sr.noRunning) {
        out.push({id: sr.id + "-running", name: sr.name, type: "scatter", z: 1, symbol: "emptyCircle", symbolSize: 10,
          color: sr.color, data: running.map((s) => ({value: [s.level, sr.value(s)], step: s.index}))});
      }
    }
    if (out.length && sloLines && sloLines.length) {
      out[0].markLine = {silent: true, symbol: "none", data: sloLines};
    }
    const opt = base(title, {
      // levels usually double (1, 2, 4, 8 …): a log-2 axis spaces them evenly
      xAxis: Object.assign({name: unit === "rps" ? "offered req/s" : "users", nameLocation: "middle", nameGap: 24,
        splitLine: {show: false}}, logAxis(doc) ? {type: "log", logBase: 2} : {type: "value", scale: true}),
      yAxis: {type: "value", scale: false, splitLine: {lineStyle: {opacity: 0.3}}},
      tooltip: {trigger: "item", confine: true, formatter: (p) => {
        const s = doc.steps.find((x) => x.index === (p.data && p.data.step));
        if (!s) return p.seriesName;
        const why = s.invalid.length ? "<br>INVALID: " + s.invalid.map((i) => `${i.label} (${i.reason})`).join("; ") : "";
        return `${stepName(s)} — ${s.state}<br>${p.seriesName}: ${fmt(p.value[1], 1)}${why}`;
      }},
      series: out,
    });
    chart(key).setOption(opt, {notMerge: true});
  }

  function logAxis(doc) {
    const levels = doc.steps.map((s) => s.level);
    return levels.length > 1 && levels.every((v) => v > 0) && Math.max(...levels) / Math.min(...levels) >= 4;
  }

  function bands(doc) {
    const data = [];
    for (const s of doc.steps) {
      const end = s.drain_end_unix || Math.max(s.end_unix, doc.unix);
      data.push([{name: `S${s.index + 1}: ${s.level}${s.unit === "rps" ? " rps" : "u"}`,
        xAxis: s.start_unix * 1000, step: s.index, itemStyle: {color: COLORS.band[s.index % 2]}},
      {xAxis: Math.min(end, doc.unix) * 1000}]);
    }
    return {silent: true, label: {position: "insideTop", fontSize: 10, color: textColor()}, data};
  }

  function timeChart(key, title, doc, series, yName) {
    const t0 = doc.steps.length ? doc.steps[0].start_unix * 1000 : null;
    const out = series.map((sr, i) => ({
      id: sr.id, name: sr.name, type: "line", showSymbol: false, color: sr.color, lineStyle: {width: 2},
      data: sr.points, markArea: i === 0 ? bands(doc) : undefined,
    }));
    if (!out.length) out.push({id: "none", type: "line", data: [], markArea: bands(doc)});
    chart(key).setOption(base(title, {
      xAxis: {type: "time", min: t0 || undefined, splitLine: {show: false}},
      yAxis: {type: "value", name: yName || "", splitLine: {lineStyle: {opacity: 0.3}}},
      series: out,
    }), {notMerge: true});
  }

  function drawCharts(doc) {
    const slo = doc.slo || {};
    const att = slo.attainment != null ? `P${Math.round(slo.attainment * 100)}` : "p95";
    // throughput against the level, with the capacity so far and the knee once known
    const marks = [];
    const a = doc.answer && doc.answer.answer ? doc.answer : null;
    if (a) { // the analysis has spoken: its knee and capacity, not the provisional ones
      if (a.capacity_rps != null) {
        marks.push({yAxis: a.capacity_rps, name: "capacity", lineStyle: {color: COLORS.cap, type: "solid", width: 2},
          label: {formatter: `capacity ${fmt(a.capacity_rps, 1)} req/s per node (report)`, position: "insideEndTop",
            color: COLORS.cap, fontWeight: 600}});
      }
      if (a.knee != null) {
        marks.push({xAxis: a.knee, name: "knee", lineStyle: {color: COLORS.knee, type: "solid", width: 2},
          label: {formatter: `knee ${a.knee} ${a.knee_unit} (report)`, color: COLORS.knee, fontWeight: 600}});
      }
    } else if (doc.capacity) {
      marks.push({yAxis: doc.capacity.rps, name: "capacity",
        lineStyle: {color: COLORS.cap, type: "dashed", width: 2},
        label: {formatter: `capacity so far ${fmt(doc.capacity.rps, 1)} req/s (provisional)`, position: "insideEndTop",
          color: COLORS.cap, fontWeight: 600}});
    }
    if (!a && doc.knee) {
      marks.push({xAxis: doc.knee.level, name: "knee", lineStyle: {color: COLORS.knee, type: "dotted", width: 2},
        label: {formatter: `knee ≈ ${doc.knee.level} (provisional)`, color: COLORS.knee, fontWeight: 600}});
    }
    const throughput = [{id: "achieved", name: "achieved req/s", color: COLORS.rps, value: (s) => s.achieved_rps, z: 1}];
    if (doc.steps.length && doc.steps[0].unit === "rps") { // open loop: where achieved falls below offered
      throughput.push({id: "offered", name: "offered req/s", color: COLORS.invalid, z: 0, noRunning: true,
        value: (s) => (s.offered_rps != null ? s.offered_rps : s.target_rps)});
    }
    perStepChart("throughput", CHARTS[0][1], doc, throughput, marks);
    perStepChart("ttft", CHARTS[1][1], doc, [
      {id: "ttft_p50", name: "TTFT p50", color: COLORS.p50, value: (s) => s.ttft_ms_p50, z: 0},
      {id: "ttft_p95", name: "TTFT p95", color: COLORS.p95, value: (s) => s.ttft_ms_p95, z: 1, width: 3,
        itemColor: (s) => (s.slo && s.slo.judgement ? JUDGE[s.slo.judgement] : COLORS.p95)},
    ], slo.ttft_p95_ms ? [sloLine(slo.ttft_p95_ms, `SLO TTFT ${att} ≤ ${slo.ttft_p95_ms} ms`)] : []);
    const itlLines = [];
    if (slo.itl_p95_ms) itlLines.push(sloLine(slo.itl_p95_ms, `SLO ITL ${att} ≤ ${slo.itl_p95_ms} ms`));
    if (slo.tpot_p95_ms) itlLines.push(sloLine(slo.tpot_p95_ms, `SLO TPOT ${att} ≤ ${slo.tpot_p95_ms} ms`));
    perStepChart("itl", CHARTS[2][1], doc, [
      {id: "tpot_p95", name: "TPOT p95", color: COLORS.tpot, value: (s) => s.tpot_ms_p95, z: 0},
      {id: "itl_p95", name: "ITL p95", color: COLORS.itl, value: (s) => s.itl_ms_p95, z: 1},
    ], itlLines);
    perStepChart("e2e", CHARTS[3][1], doc, [
      {id: "e2e_p95", name: "E2E p95", color: COLORS.e2e, value: (s) => s.e2e_ms_p95},
    ], slo.e2e_p95_ms ? [sloLine(slo.e2e_p95_ms, `SLO E2E ${att} ≤ ${slo.e2e_p95_ms} ms`)] : []);

    const pts = (doc.history && doc.history.points) || [];
    const bucket = (doc.history && doc.history.bucket_s) || 2;
    const at = (p) => p.start_unix * 1000 + bucket * 500;
    timeChart("rate", CHARTS[4][1], doc, [
      {id: "rps", name: "requests/s", color: COLORS.rps, points: pts.map((p) => [at(p), p.rps])},
      {id: "errors", name: "errors/s", color: COLORS.err, points: pts.map((p) => [at(p), p.failures / bucket])},
    ]);
    timeChart("tokens", CHARTS[5][1], doc, [
      {id: "tokens", name: "output tokens/s", color: COLORS.tok, points: pts.map((p) => [at(p), p.output_tokens_per_s])},
    ]);
    const tel = doc.telemetry_history || [];
    const sim = doc.simulated ? " (simulated)" : "";
    const tAt = (r) => r.unix * 1000;
    timeChart("gpu", CHARTS[6][1] + sim, doc, [
      {id: "gpu_util", name: "GPU util %" + sim, color: COLORS.gpu,
        points: tel.filter((r) => r.gpu_util_pct != null).map((r) => [tAt(r), r.gpu_util_pct])},
      {id: "kv_cache", name: "KV cache %" + sim, color: COLORS.kv,
        points: tel.filter((r) => r.kv_cache_usage != null).map((r) => [tAt(r), 100 * r.kv_cache_usage])},
    ]);
    timeChart("queue", CHARTS[7][1] + sim, doc, [
      {id: "waiting", name: "waiting" + sim, color: COLORS.waiting,
        points: tel.filter((r) => r.server_waiting != null).map((r) => [tAt(r), r.server_waiting])},
      {id: "running", name: "running" + sim, color: COLORS.running,
        points: tel.filter((r) => r.server_running != null).map((r) => [tAt(r), r.server_running])},
    ]);
  }

  // -- the answer, the tables ------------------------------------------------------------------------------
  function drawAnswer(doc) {
    const box = state.root.querySelector('[data-part="answer"]');
    box.replaceChildren();
    box.classList.remove("final");
    const a = doc.answer;
    if (a && a.answer) {
      box.classList.add("final");
      box.append(h("div", {"data-answer": "final"}, h("b", {}, "Answer: "), a.answer));
      box.append(h("div", {}, h("a", {href: REPORT_URL, target: "_blank", "data-link": "report"},
        a.report ? "Open the analysis report" : "Analysis report (being written…)")));
      return;
    }
    if (a && a.pending) {
      box.append(h("div", {"data-answer": "pending"}, "The test ended and is being analysed — the answer appears here in a few seconds."));
    }
    const finished = doc.steps.filter((s) => s.state === "finished");
    const planned = doc.planned != null ? ` of ${doc.planned}` : "";
    const parts = [h("span", {class: "cap-prov"}, "Provisional"),
      ` (updated as steps finish; ${finished.length}${planned} steps done): `];
    if (doc.knee) parts.push(`knee ≈ ${doc.knee.level} ${doc.knee.unit} — ${doc.knee.reason}. `);
    else if (finished.length >= 2) parts.push("no knee yet: throughput is still rising. ");
    else parts.push("no knee yet (fewer than two finished valid steps). ");
    if (doc.capacity) {
      parts.push(`Capacity so far: ${fmt(doc.capacity.rps, 1)} req/s at ${doc.capacity.level} ${doc.capacity.unit}`
        + " (the best valid step within the SLO).");
    } else if (doc.slo) {
      parts.push("No valid step within the SLO yet.");
    }
    const invalid = finished.filter((s) => !s.valid);
    if (invalid.length) parts.push(` ${invalid.length} invalid step(s): ` + invalid.map((s) => `${stepName(s)}: ${s.invalid.map((i) => i.label).join(", ")}`).join("; ") + ".");
    box.append(h("div", {"data-answer": "provisional"}, ...parts));
    for (const note of doc.notes || []) box.append(h("div", {class: "cap-muted"}, "Note: " + note));
  }

  function drawTelemetry(doc) {
    const t = doc.telemetry || {};
    const el = state.root.querySelector('[data-part="telemetry"]');
    el.replaceChildren();
    const sim = () => (doc.simulated ? h("span", {class: "cap-sim", "data-simulated": "true", title: "read from the embedded simulator: not a real GPU or server"}, "simulated") : null);
    const items = [
      ["GPU util", t.gpu_util_pct != null ? fmt(t.gpu_util_pct, 0) + " %" : null],
      ["VRAM", t.vram_used_bytes != null ? (t.vram_used_bytes / 2 ** 30).toFixed(1) + (t.vram_total_bytes ? ` / ${(t.vram_total_bytes / 2 ** 30).toFixed(0)}` : "") + " GiB" : null],
      ["Server queue", t.server_waiting != null ? fmt(t.server_waiting, 0) : null],
      ["KV cache", t.kv_cache_usage != null ? pct(t.kv_cache_usage) : null],
    ].filter(([, v]) => v != null);
    if (!items.length) { el.append("No server or GPU telemetry (the scenario's telemetry section scrapes it)."); return; }
    for (const [k, v] of items) el.append(h("span", {class: "cap-reading", "data-reading": k}, `${k}: ${v}`, sim()));
  }

  function sloCell(s) {
    const j = s.slo;
    if (!j) return h("td", {class: "cap-text"}, "no SLO");
    if (!j.judgement) return h("td", {class: "cap-text"}, "—");
    const lines = j.limits.map((l) => `${l.name} ≤ ${l.limit_ms} ms: ${pct(l.share)} of ${l.n} [${pct(l.share_lo)}–${pct(l.share_hi)}] → ${l.judgement}`);
    if (j.error_rate) lines.push(`errors ${pct(j.error_rate.value)} (limit ${pct(j.error_rate.limit)}) → ${j.error_rate.judgement}`);
    const key = j.limiting && j.limits.find((l) => l.key === j.limiting);
    const shown = key || j.limits[0];
    const detail = shown ? ` ${shown.name} ${pct(shown.share)} [${pct(shown.share_lo)}–${pct(shown.share_hi)}] ≤ ${shown.limit_ms} ms` : (j.limiting ? ` ${j.limiting}` : "");
    const label = (s.state === "running" ? "so far: " : "") + j.judgement;
    return h("td", {class: "cap-text", "data-slo": j.judgement},
      h("span", {class: "cap-badge", style: `background:${JUDGE[j.judgement] || "#777"}`, title: lines.join("\n")}, label), detail);
  }

  function validityCell(s) {
    if (s.state === "running") {
      const so = s.invalid.length ? s.invalid.map((i) => i.label).join(", ") : "so far valid";
      return h("td", {class: "cap-text", "data-valid": "running"}, h("span", {title: s.invalid.map((i) => i.reason).join("\n") || "the step is still running"}, so));
    }
    if (s.valid) return h("td", {class: "cap-text", "data-valid": "true"}, h("span", {class: "cap-badge", style: "background:#2e7d32", title: "nothing against this step (provisional: the analysis has the last word)"}, "valid"));
    return h("td", {class: "cap-text", "data-valid": "false"}, ...s.invalid.map((i) =>
      h("span", {class: "cap-badge", style: "background:#757575;margin-right:4px", "data-invalid": i.kind, title: i.reason}, i.label)));
  }

  function drawSteps(doc) {
    const el = state.root.querySelector('[data-part="steps"]');
    if (!doc.steps.length) { el.replaceChildren(h("div", {class: "cap-muted"}, doc.planned == null ? "No scenario: a plain run has no steps (the charts over time still draw)." : "No step has started yet.")); return; }
    const head = ["Step", "Level", "State", "Requests", "Req/s", "Tok/s", "TTFT p50", "TTFT p95", "ITL p95", "TPOT p95", "E2E p95", "Errors", "Validity", "SLO (share within the limit [interval])"];
    const table = h("table", {class: "cap-table", "data-table": "steps"});
    table.append(h("thead", {}, h("tr", {}, ...head.map((t) => h("th", {}, t)))));
    const body = h("tbody");
    for (const s of doc.steps) {
      body.append(h("tr", {"data-step": s.index, "data-state": s.state},
        h("td", {}, `${s.index + 1}${doc.planned != null ? "/" + doc.planned : ""}`),
        h("td", {}, levelText(s)),
        h("td", {}, s.state === "running" ? `running (${s.phase || ""})` : "finished"),
        h("td", {}, s.requests),
        h("td", {}, s.achieved_rps != null ? fmt(s.achieved_rps, 2) + (s.achieved_rps_half_width ? ` ±${fmt(s.achieved_rps_half_width, 2)}` : "") : ""),
        h("td", {}, fmt(s.output_tokens_per_s, 1)),
        h("td", {}, ms(s.ttft_ms_p50)), h("td", {}, ms(s.ttft_ms_p95)), h("td", {}, ms(s.itl_ms_p95)),
        h("td", {}, ms(s.tpot_ms_p95)), h("td", {}, ms(s.e2e_ms_p95)),
        h("td", {}, s.errors ? `${s.errors} (${pct(s.error_rate)})` : "0"),
        validityCell(s), sloCell(s)));
    }
    table.append(body);
    el.replaceChildren(table);
  }

  function drawSwarm(doc) {
    const el = state.root.querySelector('[data-part="swarm"]');
    const sw = doc.swarm || {processes: []};
    const summary = sw.mode === "distributed"
      ? `${sw.connected} worker(s) connected · ${sw.lost.length} lost · ${sw.late} late · ${sw.silent} silent`
      : "local runner (one process generates the load)";
    const table = h("table", {class: "cap-table", "data-table": "swarm"});
    table.append(h("thead", {}, h("tr", {}, ...["Process", "Health", "Users", "CPU", "Loop lag p99 / max (10 s)", "In flight", "Last report", "Records produced / received"].map((t) => h("th", {}, t)))));
    const body = h("tbody");
    for (const p of sw.processes) {
      const color = {ok: "#2e7d32", connected: "#2e7d32", late: "#ef6c00", silent: "#c62828", lost: "#c62828"}[p.health] || "#777";
      body.append(h("tr", {"data-process": p.process, "data-health": p.health},
        h("td", {}, p.process),
        h("td", {}, h("span", {class: "cap-badge", style: `background:${color}`}, p.health)),
        h("td", {}, p.users != null ? p.users : ""),
        h("td", {}, p.cpu_pct != null ? fmt(p.cpu_pct, 0) + " %" : ""),
        h("td", {}, p.loop_lag_p99_ms != null ? `${ms(p.loop_lag_p99_ms)} / ${ms(p.loop_lag_max_ms)} ms` : ""),
        h("td", {}, p.in_flight != null ? p.in_flight : ""),
        h("td", {}, p.age_s != null ? `${fmt(p.age_s, 1)} s ago` : ""),
        h("td", {}, p.produced != null || p.received != null ? `${p.produced ?? "?"} / ${p.received ?? "?"}` : "")));
    }
    for (const l of sw.lost || []) {
      if (sw.processes.some((p) => p.worker === l.worker)) continue;
      body.append(h("tr", {"data-process": `worker-${l.worker}`, "data-health": "lost"}, h("td", {}, `worker-${l.worker}`),
        h("td", {}, h("span", {class: "cap-badge", style: "background:#c62828", title: l.reason}, "lost")), h("td", {}), h("td", {}),
        h("td", {}), h("td", {}), h("td", {}), h("td", {})));
    }
    table.append(body);
    el.replaceChildren(h("div", {class: "cap-muted", "data-swarm": sw.mode}, summary), table);
  }

  // -- the loop --------------------------------------------------------------------------------------------
  async function refresh() {
    if (!place()) return;
    let doc;
    try {
      const r = await fetch(LIVE_URL, {credentials: "same-origin", cache: "no-store"});
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      doc = await r.json();
    } catch (e) {
      state.error = String(e);
      return; // the server is gone (the test ended) or busy: try again at the next tick
    }
    state.last = doc;
    drawAnswer(doc);
    drawTelemetry(doc);
    drawSteps(doc);
    drawSwarm(doc);
    await loadECharts();
    if (!place()) return;
    drawCharts(doc);
    for (const c of Object.values(state.charts)) c.resize();
    state.drawn = (state.drawn || 0) + 1;
    state.drawnDoc = doc; // what the charts and tables on screen show (tests compare them)
  }

  function tick() {
    refresh().catch((e) => { state.error = String(e); console.error("capacity LLM tab:", e); });
  }

  function start() {
    tick();
    state.timer = setInterval(tick, POLL_MS);
    // Draw at once when someone opens the tab, not at the next tick.
    document.addEventListener("click", () => setTimeout(() => { if (onLLMTab() && !(state.root && state.root.isConnected)) tick(); }, 50), true);
    window.addEventListener("resize", () => { for (const c of Object.values(state.charts)) c.resize(); });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
