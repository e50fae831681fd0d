// corecast /ui: polls GET /stats (at most once a second, one request in flight) and tails one
// stream over its SSE endpoint. Plain JavaScript, no dependencies; served from the binary.
"use strict";

const POLL_MS = 1000;          // /stats: one request per second at most
const SPARK_SAMPLES = 300;     // 5 minutes of 1 s samples
const TAIL_ROWS_MAX = 100;     // rows kept in the tail table
const TAIL_RENDER_MS = 100;    // the tail's DOM is updated at most this often
const REOPEN_MS = 1000;        // first wait before re-creating an EventSource that gave up
const REOPEN_MAX_MS = 30000;   // the longest wait between tries (doubling from REOPEN_MS)

const $ = (id) => document.getElementById(id);
const streams = new Map();     // name -> { tr, cells, samples, prev }
// last: the offset of the last row shown (0: none); from: the offset the tail started at
// (null: from now, a live-only stream); a resume goes on after last, else at from
const tail = {
  name: null, where: "", columns: null, es: null, last: 0, from: null, paused: false,
  opens: 0, dups: 0, gaps: 0, pending: [], timer: null, reopen: null, gen: 0, backoff: REOPEN_MS,
};

// ---- exact numbers ----
// JSON.parse turns every number into a double: an int64 past 2^53 (a nanosecond timestamp)
// would show other digits. A number whose double prints differently from its source text is
// kept as that text (a Num); the source comes from JSON.parse's reviver context where the
// browser has it, else from a small tokenizer over the text.
class Num {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
  toJSON() { return JSON.rawJSON ? JSON.rawJSON(this.text) : Number(this.text); }
}
const NUM_KEY = "\u0000corecast-number";
const REVIVER_SOURCE = (() => {
  try {
    let seen = false;
    JSON.parse("[12345678901234567890]", (k, v, c) => { if (k === "0") seen = !!c && c.source === "12345678901234567890"; return v; });
    return seen;
  } catch { return false; }
})();
function parseExact(text) {
  if (REVIVER_SOURCE) {
    return JSON.parse(text, (k, v, c) => (typeof v === "number" && c && typeof c.source === "string" && String(v) !== c.source ? new Num(c.source) : v));
  }
  let out = "", from = 0, i = 0;
  const n = text.length;
  while (i < n) {
    const ch = text[i];
    if (ch === '"') {                                   // skip a string, escapes included
      i++;
      while (i < n && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      i++;
    } else if (ch === "-" || (ch >= "0" && ch <= "9")) {
      let j = i + 1;
      while (j < n && "0123456789.eE+-".includes(text[j])) j++;
      const tok = text.slice(i, j);
      if (String(Number(tok)) !== tok) { out += text.slice(from, i) + JSON.stringify({ [NUM_KEY]: tok }); from = j; }
      i = j;
    } else {
      i++;
    }
  }
  out += text.slice(from);
  return JSON.parse(out, (k, v) => (v && typeof v === "object" && typeof v[NUM_KEY] === "string" && Object.keys(v).length === 1 ? new Num(v[NUM_KEY]) : v));
}
// a plain number for the frame's own fields (offset, ts_us: always within 2^53)
function plain(v) { return v instanceof Num ? Number(v.text) : v; }

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
  if (v instanceof Num) return v.text;
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// The server's reason for refusing `r` (its JSON error's message), or a hint by status.
async function refusal(r, grant) {
  let message = "";
  try {
    const body = JSON.parse((await r.text()).slice(0, 4096));
    message = (body && body.error && body.error.message) || "";
  } catch { /* not a JSON error */ }
  if (!message) message = r.status === 401 ? "sign in" : r.status === 403 && grant ? `needs ${grant}` : r.statusText || "refused";
  return `HTTP ${r.status}: ${message}`;
}

// ---- /stats ----
async function poll() {
  const started = performance.now();
  try {
    const r = await fetch("/stats", { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error("/stats: " + await refusal(r, "stats.read"));
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
  tail.last = 0; tail.from = null; tail.gaps = 0; tail.dups = 0; tail.pending = []; tail.backoff = REOPEN_MS;
  $("tail-pause").textContent = "pause";
  $("tail-table").tBodies[0].replaceChildren();
  if (!tail.name) return;
  for (const [n, r] of streams) r.tr.classList.toggle("selected", n === tail.name);
  tailStatus("loading", "loading " + tail.name + "…");
  const enc = encodeURIComponent(tail.name);
  let info;
  try {
    const r = await fetch(`/v1/streams/${enc}`, { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error(await refusal(r, "data.read"));
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
  // the last rows first, then live; a durable stream's tail always starts at an offset (also
  // an empty one's), so that a pause before any row still resumes where it was
  tail.from = info.durable ? Math.max(1, (info.end_offset || 0) - TAIL_ROWS_MAX) : null;
  openTail(tail.from, null);
}

function tailUrl(from, afterId) {
  const q = [];
  if (tail.where) q.push("where=" + encodeURIComponent(tail.where));
  if (afterId) q.push("lastEventId=" + afterId);
  else if (from !== null) q.push("offset=" + from);
  return `/${encodeURIComponent(tail.name)}/events` + (q.length ? "?" + q.join("&") : "");
}

// Retry-After of `r` in ms (seconds or an HTTP date), or null.
function retryAfterMs(r) {
  const v = r.headers.get("retry-after");
  if (!v) return null;
  const s = Number(v);
  if (Number.isFinite(s)) return Math.max(0, s) * 1000;
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : null;
}

// EventSource never says why it was refused: ask the same URL with fetch, learn the status,
// the server's message and Retry-After, and only then decide to stop or to try again.
async function probeTail(url, gen, retry) {
  let r = null;
  const ctl = new AbortController();
  try {
    r = await fetch(url, { cache: "no-store", credentials: "same-origin", signal: ctl.signal });
  } catch { r = null; }                                   // the broker is away: try again
  if (gen !== tail.gen) { ctl.abort(); return; }
  if (r && r.ok) ctl.abort();                             // it would stream now: reconnect
  const again = (ms, why) => {
    const secs = Math.ceil(ms / 1000);
    tailStatus("connecting", `${why}; retrying in ${secs} s`);
    tail.reopen = setTimeout(() => { if (gen === tail.gen) retry(); }, ms);
  };
  const backoff = () => { const ms = tail.backoff; tail.backoff = Math.min(REOPEN_MAX_MS, tail.backoff * 2); return ms; };
  if (!r) return again(backoff(), "cannot reach the broker");
  if (r.ok) return again(backoff(), "the stream ended");
  const why = await refusal(r, "data.read");
  if (gen !== tail.gen) return;
  if (r.status === 429 || r.status >= 500 || r.status === 408) {
    const wait = retryAfterMs(r);
    if (wait !== null) tail.backoff = Math.min(REOPEN_MAX_MS, Math.max(tail.backoff, wait));
    return again(wait !== null ? Math.max(wait, REOPEN_MS) : backoff(), why);
  }
  // any other refusal (a where= the server refuses, a grant missing or revoked, no such
  // stream) will not change by trying again: say why and stop
  tailStatus("error", (tail.where && r.status === 400 ? "where: " : `${tail.name}: `) + why);
}

function openTail(from, afterId) {
  const gen = tail.gen;
  // EventSource reconnects by itself after a dropped connection, sending Last-Event-ID: the
  // tail goes on after the last row it saw, across a broker restart
  const url = tailUrl(from, afterId);
  const es = new EventSource(url, { withCredentials: true });
  tail.es = es;
  tailStatus("connecting", "connecting…");
  es.onopen = () => {
    if (gen !== tail.gen) return;
    tail.opens++;
    tail.backoff = REOPEN_MS;
    tailStatus("open", `tailing ${tail.name}` + (tail.where ? " where " + tail.where : "") +
      (tail.durable ? "" : " (live only: rows have no offset)"));
  };
  es.onmessage = (e) => {
    if (gen !== tail.gen) return;
    let f;
    try { f = parseExact(e.data); } catch { return; }   // [offset, ts_us, row]
    f[0] = plain(f[0]);
    f[1] = plain(f[1]);
    const off = f[0];
    // a live-only stream's rows carry no offset (null): nothing to order or dedupe them by
    if (off !== null && off !== undefined) {
      if (off <= tail.last) { tail.dups++; return; }
      if (tail.last && !tail.where && off !== tail.last + 1) tail.gaps++;
      tail.last = off;
    }
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
    tailStatus("connecting", "reconnecting…");
    if (es.readyState === EventSource.CLOSED) {
      // a non-200 answer: EventSource gave up for good. Learn why; then stop (a refusal) or
      // start a new one after the last row seen (503 while the broker stops, a cap, 429)
      es.close();
      if (tail.es === es) tail.es = null;
      probeTail(tailUrl(from, tail.last || null), gen, () => openTail(from, tail.last || null));
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
    tr.dataset.offset = off === null || off === undefined ? "" : String(off);
    const o = el("td", "n", off === null || off === undefined ? "–" : String(off));
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
    tailStatus("paused", tail.last ? `paused after offset ${tail.last}` :
      tail.from !== null ? `paused before offset ${tail.from}` : "paused (live only: rows published meanwhile are not kept)");
  } else {
    tail.paused = false;
    $("tail-pause").textContent = "pause";
    closeTail();
    tail.backoff = REOPEN_MS;
    // after the last row shown, else where the tail started (a durable stream's offset:
    // nothing published while paused is skipped); a live-only stream goes on from now
    openTail(tail.from, tail.last || null);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("tail-form").addEventListener("submit", (e) => { e.preventDefault(); startTail(); });
  $("tail-pause").addEventListener("click", togglePause);
  poll();
});
