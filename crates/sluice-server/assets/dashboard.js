// The live dashboard: polls /ui/status (the samples of /metrics as JSON) every
// second, turns counters into rates, and draws two minutes of each series as a
// small SVG chart. No library: a few cards and paths.
(function () {
  "use strict";
  const KEEP = 60;
  // The admin token, when the gateway wants one: /ui/dashboard#token=...
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token") || sessionStorage.getItem("sluice-admin-token");
  if (fragment.get("token")) {
    sessionStorage.setItem("sluice-admin-token", token);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const headers = token ? { authorization: "Bearer " + token } : {};
  const MiB = 1024 * 1024;
  let previous = null;

  function sum(samples, name, match) {
    let total = 0;
    for (const s of samples) {
      if (s.name !== name) continue;
      if (match && !Object.entries(match).every(([k, v]) => s.labels[k] === v)) continue;
      total += s.value;
    }
    return total;
  }

  // [label, unit text, value(now, before, seconds)]
  const series = [
    ["uploads in flight", "", (n) => sum(n, "sluice_uploads_in_flight")],
    ["completions/s", "/s", (n, b, dt) => (sum(n, "sluice_uploads_completed_total") - sum(b, "sluice_uploads_completed_total")) / dt],
    ["MiB/s in", " MiB/s", (n, b, dt) => (sum(n, "sluice_received_bytes_total") - sum(b, "sluice_received_bytes_total")) / dt / MiB],
    ["MiB/s out", " MiB/s", (n, b, dt) => (sum(n, "sluice_sent_bytes_total") - sum(b, "sluice_sent_bytes_total")) / dt / MiB],
    ["store request latency (mean)", " ms", (n, b) => {
      const count = sum(n, "sluice_store_request_duration_seconds_count") - sum(b, "sluice_store_request_duration_seconds_count");
      const secs = sum(n, "sluice_store_request_duration_seconds_sum") - sum(b, "sluice_store_request_duration_seconds_sum");
      return count > 0 ? (secs / count) * 1000 : 0;
    }],
    ["store requests/s", "/s", (n, b, dt) => (sum(n, "sluice_store_requests_total") - sum(b, "sluice_store_requests_total")) / dt],
    ["retries/s", "/s", (n, b, dt) => (sum(n, "sluice_store_retries_total") - sum(b, "sluice_store_retries_total")) / dt],
    ["throttled answers/s", "/s", (n, b, dt) => (sum(n, "sluice_store_throttled_total") - sum(b, "sluice_store_throttled_total")) / dt],
    ["memory budget in use", " %", (n) => {
      const budget = sum(n, "sluice_memory_budget_bytes");
      return budget > 0 ? (100 * sum(n, "sluice_memory_budget_in_use_bytes")) / budget : 0;
    }],
    ["admission queue", "", (n) => sum(n, "sluice_admission_queue_length")],
    ["open connections", "", (n) => sum(n, "sluice_connections_open")],
    ["store down", "", (n) => sum(n, "sluice_store_down")],
  ];
  const history = series.map(() => []);
  const cards = document.getElementById("cards");
  const views = series.map(([label]) => {
    const card = document.createElement("div");
    card.className = "card";
    card.innerHTML = '<div class="label"></div><div class="value">–</div>' +
      '<svg class="chart" viewBox="0 0 240 48" preserveAspectRatio="none"><path class="area"/><path class="line"/></svg>';
    card.querySelector(".label").textContent = label;
    cards.appendChild(card);
    return card;
  });

  function format(value, unit) {
    const text = Math.abs(value) >= 100 || Number.isInteger(value) ? value.toFixed(0) : value.toFixed(value < 1 ? 3 : 1);
    return text + unit;
  }

  function draw(card, points) {
    const max = Math.max(1e-9, ...points);
    const step = 240 / (KEEP - 1);
    const start = KEEP - points.length;
    const xy = points.map((v, i) => [(start + i) * step, 46 - (v / max) * 44]);
    const line = xy.map(([x, y], i) => (i ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1)).join(" ");
    card.querySelector("path.line").setAttribute("d", line);
    if (xy.length) {
      card.querySelector("path.area").setAttribute("d", line + " L" + xy[xy.length - 1][0].toFixed(1) + " 48 L" + xy[0][0].toFixed(1) + " 48 Z");
    }
  }

  function prefixes(samples) {
    const rows = new Map();
    for (const s of samples) {
      if (s.name !== "sluice_store_concurrency_limit" && s.name !== "sluice_store_rate_limit") continue;
      const prefix = s.labels.prefix || "(all)";
      const row = rows.get(prefix) || {};
      row[s.name] = s.value;
      rows.set(prefix, row);
    }
    const body = document.querySelector("#prefixes tbody");
    body.replaceChildren();
    if (rows.size === 0) {
      const cell = body.insertRow().insertCell();
      cell.colSpan = 3;
      cell.className = "note";
      cell.textContent = "No prefix is throttled or busy at the store now.";
    }
    for (const [prefix, row] of [...rows].sort()) {
      const tr = body.insertRow();
      tr.insertCell().textContent = prefix;
      tr.insertCell().textContent = row.sluice_store_concurrency_limit ?? "–";
      const rate = row.sluice_store_rate_limit;
      tr.insertCell().textContent = rate === undefined || rate === 0 ? "unpaced" : rate.toFixed(1);
    }
  }

  async function tick() {
    try {
      const answer = await fetch("/ui/status", { cache: "no-store", headers });
      if (answer.status === 401) throw new Error("this gateway wants its admin token: open /ui/dashboard#token=TOKEN");
      if (!answer.ok) throw new Error("status " + answer.status);
      const now = await answer.json();
      if (previous) {
        const dt = Math.max(0.001, (now.time_ms - previous.time_ms) / 1000);
        series.forEach(([, unit, value], i) => {
          const v = value(now.samples, previous.samples, dt);
          history[i].push(Math.max(0, v));
          if (history[i].length > KEEP) history[i].shift();
          views[i].querySelector(".value").textContent = format(v, unit);
          draw(views[i], history[i]);
        });
      }
      prefixes(now.samples);
      previous = now;
      document.getElementById("status").textContent = "live · " + new Date(now.time_ms).toLocaleTimeString();
    } catch (error) {
      document.getElementById("status").textContent = "cannot reach the gateway (" + error.message + ")";
    }
  }
  tick();
  setInterval(tick, 1000);
})();
