// corecast /ui: polls GET /stats (at most once a second, one request in flight) and tails one
// stream over its SSE endpoint. Plain JavaScript, no dependencies; served from the binary.
"use strict";

const POLL_MS = 1000;          // /stats: one request per second at most
const SPARK_SAMPLES = 300;     // 5 minutes of 1 s samples
const TAIL_ROWS_MAX = 100;     // rows kept in the tail table
const TAIL_RENDER_MS = 100;    // the tail's DOM is updated at most this often
const REOPEN_MS = 1000;        // wait before re-creating an EventSource that gave up

const $ = (id) => document.getElementById(id);
const streams = new Map();     // name -> { tr, cells, samples, prev }
const tail = {
  name: null, where: "", columns: null, es: null, last: 0, paused: false,
  opens: 0, dups: 0, gaps: 0, pending: [], timer: null, reopen: null, gen: 0,
};

// ---- formatting ----
function fmtInt(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function fmtBytes(b) {
  if (b === null || b === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : String(b)) + " " + u[i];
}
function fmtDuration(s) {
  s = Math.floor(s || 0);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m ${s % 60}s`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}
function fmtRate(r) { return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2); }
function fmtCell(v) {
  if (v === null || v === undefined) return "null";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---- /stats ----
async function poll() {
  const started = performance.now();
  try {
    const r = await fetch("/stats", { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) {
      const hint = r.status === 401 ? " (sign in)" : r.status === 403 ? " (needs stats.read)" : "";
      throw new Error(`/stats: HTTP ${r.status}${hint}`);
    }
    render(await r.json());
    setStatus(true, "live");
  } catch (e) {
    setStatus(false, "disconnected: " + e.message);
  }
  setTimeout(poll, Math.max(0, POLL_MS - (performance.now() - started)));
}

function setStatus(ok, text) {
  const s = $("p-status");
  s.dataset.ok = String(ok);
  s.textContent = text;
}

function render(st) {
  $("p-version").textContent = st.version || "–";
  $("p-uptime").textContent = st.uptime_s !== undefined ? fmtDuration(st.uptime_s) : "–";
  $("p-driver").textContent = st.driver;
  $("p-cores").textContent = st.cores !== undefined ? `${st.cores} (of ${st.cpus} CPUs)` : "–";
  $("p-connections").textContent = fmtInt(st.connections);
  const refusals = Object.entries(st.refusals || {}).filter(([, n]) => n > 0);
  $("p-refusals").textContent = refusals.length ? refusals.map(([c, n]) => `${c}: ${n}`).join(", ") : "none";
  const seen = new Set();
  for (const s of st.streams) {
    seen.add(s.name);
    renderStream(s, st.served_at);
  }
  for (const [name, row] of streams) {
    if (!seen.has(name)) { row.tr.remove(); streams.delete(name); }
  }
  syncSelect();
}

const STREAM_CELLS = ["rate", "end", "earliest", "hot", "sealed", "published", "subscribers", "publishers", "lag", "dropped"];

function renderStream(s, servedAt) {
  let row = streams.get(s.name);
  if (!row) {
    const tr = el("tr");
    tr.dataset.stream = s.name;
    tr.appendChild(el("td", "name", s.name));
    const cells = {};
    for (const c of STREAM_CELLS) {
      const td = el("td", c === "rate" ? "" : "n");
      td.dataset.col = c;
      tr.appendChild(td);
      cells[c] = td;
    }
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 150 24");
    svg.setAttribute("preserveAspectRatio", "none");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    svg.appendChild(line);
    const rate = el("span", "rate", "–");
    cells.rate.append(svg, rate);
    tr.addEventListener("click", () => { $("tail-stream").value = s.name; startTail(); });
    $("streams").tBodies[0].appendChild(tr);
    row = { tr, cells, svg, line, rate, samples: [], prev: null };
    streams.set(s.name, row);
  }
  // rows/s from the rows_in counter between two answers (a restart resets it: count from 0)
  if (row.prev && servedAt > row.prev.at) {
    const d = s.rows_in >= row.prev.rows ? s.rows_in - row.prev.rows : s.rows_in;
    row.samples.push(d / (servedAt - row.prev.at));
    if (row.samples.length > SPARK_SAMPLES) row.samples.shift();
  }
  row.prev = { rows: s.rows_in, at: servedAt };
  drawSpark(row);
  const c = row.cells;
  const t = s.tiers;
  c.end.textContent = s.durable ? fmtInt(s.end_offset) : "live only";
  c.earliest.textContent = s.durable ? fmtInt(s.earliest_offset ?? (t && t.earliest_offset)) : "–";
  c.hot.textContent = t ? `${fmtInt(t.hot.rows)} · ${fmtBytes(t.hot.bytes)}` : "–";
  c.sealed.textContent = t ? `${fmtInt(t.sealed.rows)} · ${fmtBytes(t.sealed.bytes)}` +
    (t.seal_lag && t.seal_lag.rows ? ` (lag ${fmtInt(t.seal_lag.rows)})` : "") : "–";
  c.published.textContent = t && t.published ? `${fmtInt(t.published.rows)}` +
    (t.published.lag && t.published.lag.rows ? ` (lag ${fmtInt(t.published.lag.rows)})` : "") : "–";
  const by = s.subscribers_by_transport || { websocket: s.subscribers, sse: 0, pull: 0 };
  c.subscribers.textContent = `${by.websocket} / ${by.sse} / ${by.pull}`;
  c.publishers.textContent = fmtInt(s.publishers);
  c.lag.textContent = fmtInt(s.subscriber_lag_rows ?? 0);
  c.dropped.textContent = `${fmtInt(s.dropped_slow)} / ${fmtInt(s.dropped_slow_sse ?? 0)}`;
  row.tr.classList.toggle("selected", s.name === tail.name);
}

function drawSpark(row) {
  const v = row.samples;
  const max = v.reduce((a, b) => Math.max(a, b), 0);
  const step = 150 / (SPARK_SAMPLES - 1);
  const x0 = 150 - (v.length - 1) * step;
  const pts = v.map((r, i) => `${(x0 + i * step).toFixed(1)},${(23 - (max > 0 ? 22 * r / max : 0)).toFixed(1)}`);
  row.line.setAttribute("points", pts.join(" "));
  row.svg.dataset.max = String(max);
  row.svg.dataset.last = String(v.length ? v[v.length - 1] : 0);
  row.svg.dataset.samples = String(v.length);
  row.rate.textContent = v.length ? fmtRate(v[v.length - 1]) : "–";
}

function syncSelect() {
  const sel = $("tail-stream");
  const names = [...streams.keys()];
  const have = [...sel.options].map((o) => o.value);
  if (have.join("\n") !== names.join("\n")) {
    const cur = sel.value;
    sel.replaceChildren(...names.map((n) => { const o = el("option", "", n); o.value = n; return o; }));
    if (names.includes(cur)) sel.value = cur;
  }
}

// ---- the live tail (SSE) ----
function tailStatus(state, text) {
  const s = $("tail-status");
  s.dataset.state = state;
  s.dataset.opens = String(tail.opens);
  s.dataset.last = String(tail.last);
  s.dataset.gaps = String(tail.gaps);
  s.dataset.dups = String(tail.dups);
  s.textContent = text;
}

function closeTail() {
  tail.gen++;
  if (tail.es) { tail.es.close(); tail.es = null; }
  clearTimeout(tail.reopen);
}

async function startTail() {
  closeTail();
  const gen = tail.gen;
  tail.name = $("tail-stream").value;
  tail.where = $("tail-where").value.trim();
  tail.paused = false;
  tail.last = 0; tail.gaps = 0; tail.dups = 0; tail.pending = [];
  $("tail-pause").textContent = "pause";
  $("tail-table").tBodies[0].replaceChildren();
  if (!tail.name) return;
  for (const [n, r] of streams) r.tr.classList.toggle("selected", n === tail.name);
  tailStatus("loading", "loading " + tail.name + "…");
  const enc = encodeURIComponent(tail.name);
  let info;
  try {
    const r = await fetch(`/v1/streams/${enc}`, { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error(`HTTP ${r.status}` + (r.status === 403 ? " (needs data.read)" : ""));
    info = await r.json();
  } catch (e) {
    if (gen === tail.gen) tailStatus("error", `${tail.name}: ${e.message}`);
    return;
  }
  if (gen !== tail.gen) return;
  const schema = typeof info.schema === "string" ? JSON.parse(info.schema) : info.schema;
  tail.columns = schema && schema.properties ? Object.keys(schema.properties) : null;
  tail.durable = info.durable;
  // a where= the server would refuse: ask the pull API, which says why in its body
  if (tail.where && info.durable) {
    const r = await fetch(`/v1/streams/${enc}/rows?limit=1&from=latest&where=${encodeURIComponent(tail.where)}`,
      { cache: "no-store", credentials: "same-origin" }).catch(() => null);
    if (gen !== tail.gen) return;
    if (r && r.status === 400) {
      const body = await r.json().catch(() => ({}));
      tailStatus("error", "where: " + ((body.error && body.error.message) || "refused"));
      return;
    }
  }
  drawHead();
  // the last rows first, then live
  const from = info.durable && info.end_offset ? Math.max(1, info.end_offset - TAIL_ROWS_MAX) : null;
  openTail(from, null);
}

function tailUrl(from, afterId) {
  const q = [];
  if (tail.where) q.push("where=" + encodeURIComponent(tail.where));
  if (afterId) q.push("lastEventId=" + afterId);
  else if (from !== null) q.push("offset=" + from);
  return `/${encodeURIComponent(tail.name)}/events` + (q.length ? "?" + q.join("&") : "");
}

function openTail(from, afterId) {
  const gen = tail.gen;
  // EventSource reconnects by itself after a dropped connection, sending Last-Event-ID: the
  // tail goes on after the last row it saw, across a broker restart
  const es = new EventSource(tailUrl(from, afterId), { withCredentials: true });
  tail.es = es;
  tailStatus("connecting", "connecting…");
  es.onopen = () => {
    if (gen !== tail.gen) return;
    tail.opens++;
    tailStatus("open", `tailing ${tail.name}` + (tail.where ? " where " + tail.where : ""));
  };
  es.onmessage = (e) => {
    if (gen !== tail.gen) return;
    let f;
    try { f = JSON.parse(e.data); } catch { return; }   // [offset, ts_us, row]
    const off = f[0];
    if (off <= tail.last) { tail.dups++; return; }
    if (tail.last && !tail.where && off !== tail.last + 1) tail.gaps++;
    tail.last = off;
    tail.pending.push(f);
    if (tail.pending.length > TAIL_ROWS_MAX) tail.pending.shift();
    if (!tail.timer) tail.timer = setTimeout(flushTail, TAIL_RENDER_MS);
  };
  es.addEventListener("gap", (e) => {
    if (gen !== tail.gen) return;
    tail.gaps++;
    tailStatus("open", "gap: " + e.data);
  });
  es.addEventListener("end", (e) => {
    if (gen !== tail.gen) return;
    let why = "";
    try { why = JSON.parse(e.data).reason; } catch { /* ignore */ }
    tailStatus("connecting", `stream ended (${why}); resuming…`);
  });
  es.onerror = () => {
    if (gen !== tail.gen) return;
    if (es.readyState === EventSource.CLOSED) {
      // a non-200 answer (503 while the broker stops, a cap): EventSource gave up for good, so
      // start a new one after the last row seen
      tailStatus("connecting", "reconnecting…");
      tail.reopen = setTimeout(() => { if (gen === tail.gen) openTail(from, tail.last || null); }, REOPEN_MS);
    } else {
      tailStatus("connecting", "reconnecting…");
    }
  };
}

function drawHead() {
  const tr = $("tail-table").tHead.rows[0];
  const cols = ["offset", "time (UTC)", ...(tail.columns || [])];
  tr.replaceChildren(...cols.map((c) => el("th", "", c)));
}

function flushTail() {
  tail.timer = null;
  const body = $("tail-table").tBodies[0];
  const rows = tail.pending;
  tail.pending = [];
  if (!tail.columns && rows.length) {
    const r = rows[0][2];
    tail.columns = r && typeof r === "object" && !Array.isArray(r) ? Object.keys(r) : ["row"];
    drawHead();
  }
  const frag = document.createDocumentFragment();
  for (let i = rows.length - 1; i >= 0; i--) {     // newest first
    const [off, ts, row] = rows[i];
    const tr = el("tr");
    tr.dataset.offset = String(off);
    const o = el("td", "n", String(off));
    o.dataset.col = "offset";
    const t = el("td", "", typeof ts === "number" ? new Date(ts / 1000).toISOString().slice(11, 23) : fmtCell(ts));
    t.dataset.col = "ts";
    tr.append(o, t);
    tail.columns.forEach((c, j) => {
      const v = Array.isArray(row) ? row[j] : row && typeof row === "object" ? row[c] : row;
      const td = el("td", "", fmtCell(v));
      td.dataset.col = c;
      tr.appendChild(td);
    });
    frag.appendChild(tr);
  }
  body.insertBefore(frag, body.firstChild);
  while (body.rows.length > TAIL_ROWS_MAX) body.deleteRow(-1);
  tailStatus($("tail-status").dataset.state, $("tail-status").textContent);
}

function togglePause() {
  if (!tail.name) return;
  if (!tail.paused) {
    closeTail();
    if (tail.timer) { clearTimeout(tail.timer); flushTail(); }
    tail.paused = true;
    $("tail-pause").textContent = "resume";
    tailStatus("paused", `paused after offset ${tail.last}`);
  } else {
    tail.paused = false;
    $("tail-pause").textContent = "pause";
    closeTail();
    openTail(null, tail.last || null);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("tail-form").addEventListener("submit", (e) => { e.preventDefault(); startTail(); });
  $("tail-pause").addEventListener("click", togglePause);
  poll();
});
