// The browser check of GET /ui (driven by tests/ui.rs): headless Debian chromium through
// playwright-core. The Rust side owns the broker; this script asks it, one JSON line on stdout
// per step, to publish rows or restart the broker, and waits for its "ok" on stdin.
//
// Environment: CORECAST_UI_BASE (http://ADDR), CORECAST_UI_CHROMIUM (the browser binary),
// CORECAST_UI_NODE_MODULES (where playwright-core is installed), CORECAST_UI_SCREENSHOT (PNG),
// CORECAST_UI_MODE: "main" (an open broker: everything below) or "revoke" (with [auth]: the
// principal "reader", signed in with CORECAST_UI_PASSWORD, is revoked while it tails).
// Rows are trades: trade_id = offset, symbol "A" for even ids and "B" for odd ones.
import { createRequire } from "node:module";
import readline from "node:readline";

const require = createRequire(process.env.CORECAST_UI_NODE_MODULES.replace(/\/?$/, "/"));
const { chromium } = require("playwright-core");

const BASE = process.env.CORECAST_UI_BASE;
const SHOT = process.env.CORECAST_UI_SCREENSHOT;
const log = (...a) => console.error("check_ui:", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
setTimeout(() => { log("FAILED: the whole check took over 150 s"); process.exit(2); }, 150_000).unref();

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function ask(cmd) {
  process.stdout.write(JSON.stringify(cmd) + "\n");
  const { value, done } = await lines.next();
  if (done || value !== "ok") throw new Error(`harness: ${JSON.stringify(cmd)}: ${done ? "gone" : value}`);
}
function check(cond, msg) { if (!cond) throw new Error(msg); }

// The tail's rows, newest first: [{offset, cells: {col: text}}].
async function tailRows(page) {
  return page.$$eval("#tail-table tbody tr", (trs) => trs.map((tr) => {
    const cells = {};
    for (const td of tr.cells) cells[td.dataset.col] = td.textContent;
    return { offset: Number(tr.dataset.offset), cells };
  }));
}
async function waitOffset(page, off, timeout = 15_000) {
  await page.waitForSelector(`#tail-table tbody tr[data-offset="${off}"]`, { timeout });
}
function contiguous(rows, from, to) {
  const offs = rows.map((r) => r.offset).reverse();
  const want = Array.from({ length: to - from + 1 }, (_, i) => from + i);
  check(JSON.stringify(offs) === JSON.stringify(want),
    `tail offsets: want ${from}..${to} without gap or duplicate, got ${offs[0]}..${offs[offs.length - 1]} ` +
    `(${offs.length} rows: ${offs.join(",")})`);
}
function rowMatches(r) {
  const id = r.offset;
  check(r.cells.trade_id === String(id), `row ${id}: trade_id ${r.cells.trade_id}`);
  check(r.cells.symbol === (id % 2 === 0 ? "A" : "B"), `row ${id}: symbol ${r.cells.symbol}`);
  check(r.cells.price === "85566.5", `row ${id}: price ${r.cells.price}`);
  check(r.cells.event_ts === String(1_700_000_000_000_000 + id), `row ${id}: event_ts ${r.cells.event_ts}`);
  check(r.cells.side === String(id % 2), `row ${id}: side ${r.cells.side}`);
}
async function tailState(page) {
  return page.$eval("#tail-status", (s) => ({ ...s.dataset, text: s.textContent }));
}
async function spark(page, name) {
  return page.$eval(`#streams tr[data-stream="${name}"] svg.spark`, (svg) => ({
    max: Number(svg.dataset.max), samples: Number(svg.dataset.samples),
    points: svg.querySelector("polyline").getAttribute("points"),
  }));
}
async function applyWhere(page, where) {
  await page.fill("#tail-where", where);
  await page.click("#tail-apply");
}
async function tailOf(page, name, where = "") {
  await page.selectOption("#tail-stream", name);
  await applyWhere(page, where);
}
// GET requests of /NAME/events the page made (EventSource and its probes)
let eventRequests = 0;

const browser = await chromium.launch({
  executablePath: process.env.CORECAST_UI_CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});
let page;
let step = "start";
if (process.env.CORECAST_UI_MODE === "revoke") {
  try {
    const ctx = await browser.newContext({
      viewport: { width: 1280, height: 760 },
      httpCredentials: { username: "reader", password: process.env.CORECAST_UI_PASSWORD },
    });
    page = await ctx.newPage();
    page.on("request", (r) => { if (/\/events(\?|$)/.test(r.url())) eventRequests++; });
    step = "the reader signs in (Basic) and tails t";
    const resp = await page.goto(BASE + "/ui");
    check(resp.status() === 200, `/ui: HTTP ${resp.status()}`);
    await page.waitForSelector('#p-status[data-ok="true"]', { timeout: 10_000 });
    await page.click('#streams tr[data-stream="t"]');
    await page.waitForSelector('#tail-status[data-state="open"]', { timeout: 10_000 });
    await ask({ do: "publish", stream: "t", from: 1, count: 3 });
    await waitOffset(page, 3);

    step = "revoked: the tail stops and both status lines give the server's reason";
    await ask({ do: "revoke", who: "reader" });
    await page.waitForSelector('#tail-status[data-state="error"]', { timeout: 15_000 });
    const st = await tailState(page);
    check(/HTTP 403: .*revoked/.test(st.text), `tail status after the revocation: ${st.text}`);
    const n0 = eventRequests;
    await sleep(2500);
    check(eventRequests === n0, `the revoked tail was retried ${eventRequests - n0} times`);
    await page.waitForFunction(() => /revoked/.test(document.querySelector("#p-status").textContent), null, { timeout: 5000 });
    const ps = await page.textContent("#p-status");
    check(!/needs stats\.read/.test(ps), `process status guesses a grant: ${ps}`);
    log(`revoked: tail "${st.text}"; process "${ps}"`);
    if (SHOT) await page.screenshot({ path: SHOT, clip: { x: 0, y: 0, width: 1280, height: 480 } });
    log("ok");
    await browser.close();
    process.exit(0);
  } catch (e) {
    log(`FAILED at "${step}": ${e.message}`);
    await browser.close().catch(() => {});
    process.exit(1);
  }
}
try {
  page = await browser.newPage({ viewport: { width: 1280, height: 760 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") log("console:", m.text()); });
  page.on("request", (r) => { if (/\/events(\?|$)/.test(r.url())) eventRequests++; });

  step = "the page loads and lists the streams";
  const resp = await page.goto(BASE + "/ui");
  check(resp.status() === 200, `/ui: HTTP ${resp.status()}`);
  await page.waitForSelector('#streams tr[data-stream="t"]', { timeout: 10_000 });
  await page.waitForSelector('#streams tr[data-stream="u"]', { timeout: 10_000 });
  await page.waitForSelector('#p-status[data-ok="true"]', { timeout: 10_000 });
  const proc = await page.$eval("#process", (d) => d.textContent);
  check(/io_uring|fallback/.test(proc), `process: no driver in ${proc}`);
  check(/\d+\.\d+\.\d+/.test(await page.textContent("#p-version")), "process: no version");
  check(/^\d+ \(of \d+ CPUs\)$/.test(await page.textContent("#p-cores")), "process: no cores");

  step = "a tail of t shows the schema's columns";
  await page.click('#streams tr[data-stream="t"]');
  await page.waitForSelector('#tail-status[data-state="open"]', { timeout: 10_000 });
  const heads = await page.$$eval("#tail-table thead th", (ths) => ths.map((t) => t.textContent));
  check(JSON.stringify(heads) === JSON.stringify(["offset", "time (UTC)", "event_ts", "price", "amount", "side", "symbol", "trade_id"]),
    `tail columns: ${heads}`);

  step = "the rate sparkline moves while rows are published";
  // two /stats polls at least before publishing, so the line has a flat start to move from
  await sleep(2200);
  const before = await spark(page, "t");
  check(before.max === 0, `sparkline of t before publishing: max ${before.max}`);
  await ask({ do: "trickle", stream: "t", from: 1, batches: 8, per: 25, gap_ms: 400 });
  await page.waitForFunction(() => Number(document.querySelector('#streams tr[data-stream="t"] svg.spark').dataset.max) > 0,
    null, { timeout: 5000 });
  const after = await spark(page, "t");
  check(after.points !== before.points, "the sparkline did not change");
  check(after.samples > before.samples, `no new samples (${before.samples} -> ${after.samples})`);
  const idle = await spark(page, "u");
  check(idle.max === 0, `sparkline of u (nothing published) shows ${idle.max} rows/s`);
  await page.waitForFunction(() => document.querySelector('#streams tr[data-stream="t"] td[data-col="end"]').textContent === "201",
    null, { timeout: 5000 });
  log(`sparkline: max ${after.max.toFixed(1)} rows/s over ${after.samples} samples`);

  step = "the live tail shows the rows just published";
  await waitOffset(page, 200);
  let rows = await tailRows(page);
  contiguous(rows, 101, 200);
  rows.forEach(rowMatches);

  step = "the where= filter narrows the tail";
  await applyWhere(page, '{"symbol":"B"}');
  await page.waitForSelector('#tail-status[data-state="open"]', { timeout: 10_000 });
  await waitOffset(page, 199);
  await ask({ do: "publish", stream: "t", from: 201, count: 10 });
  await waitOffset(page, 209);
  rows = await tailRows(page);
  check(rows.length > 0 && rows.every((r) => r.cells.symbol === "B"), `filtered tail: ${rows.map((r) => r.cells.symbol)}`);
  check(rows.every((r) => r.offset % 2 === 1), "filtered tail holds even (A) offsets");
  check(rows[0].offset === 209, `filtered tail newest: ${rows[0].offset}`);
  rows.forEach(rowMatches);

  step = "a where= the server refuses is reported, not tailed";
  await applyWhere(page, '{"no_such_column":1}');
  await page.waitForSelector('#tail-status[data-state="error"]', { timeout: 10_000 });
  check((await tailState(page)).text.startsWith("where:"), "refused where: no reason shown");

  step = "no filter: the whole tail again";
  await applyWhere(page, "");
  await waitOffset(page, 210);
  contiguous(await tailRows(page), 111, 210);

  step = "pause holds the tail, resume continues it";
  await page.click("#tail-pause");
  await page.waitForSelector('#tail-status[data-state="paused"]');
  await ask({ do: "publish", stream: "t", from: 211, count: 10 });
  await sleep(1500);
  rows = await tailRows(page);
  check(rows[0].offset === 210, `paused tail moved on to ${rows[0].offset}`);
  await page.click("#tail-pause");
  await waitOffset(page, 220);
  contiguous(await tailRows(page), 121, 220);

  step = "after a broker restart the tail continues without a gap";
  const opens = Number((await tailState(page)).opens);
  await ask({ do: "restart" });
  await ask({ do: "publish", stream: "t", from: 221, count: 20 });
  await waitOffset(page, 240, 30_000);
  rows = await tailRows(page);
  contiguous(rows, 141, 240);
  rows.forEach(rowMatches);
  const st = await tailState(page);
  check(st.gaps === "0" && st.dups === "0", `tail after restart: gaps ${st.gaps}, duplicates ${st.dups}`);
  check(Number(st.opens) > opens, `the EventSource did not reconnect (${opens} -> ${st.opens} opens)`);
  await page.waitForSelector('#p-status[data-ok="true"]', { timeout: 10_000 });
  log(`restart: EventSource opened ${st.opens} times, tail 141..240 contiguous`);

  step = "pause before any row was shown, then resume: nothing published meanwhile is skipped";
  await tailOf(page, "u");
  await page.waitForSelector('#tail-status[data-state="open"]', { timeout: 10_000 });
  check((await tailRows(page)).length === 0, "the empty stream u shows rows");
  await page.click("#tail-pause");
  await page.waitForSelector('#tail-status[data-state="paused"]');
  await ask({ do: "publish", stream: "u", from: 1, count: 3 });
  await sleep(800);
  check((await tailRows(page)).length === 0, "the paused tail moved on");
  await page.click("#tail-pause");
  await waitOffset(page, 3);
  rows = await tailRows(page);
  contiguous(rows, 1, 3);
  rows.forEach(rowMatches);

  step = "a live-only stream's rows (no offset) are shown, int64 and float digits exact";
  await tailOf(page, "live");
  await page.waitForSelector('#tail-status[data-state="open"]', { timeout: 10_000 });
  await sleep(300);
  await ask({ do: "publish_raw", stream: "live", rows: [
    '{"ts_event":1703548799446724905,"px":0.0063289999999999996,"n":1}',
    '{"ts_event":-9223372036854775807,"px":85566.5,"n":2}',
  ] });
  await page.waitForFunction(() => document.querySelectorAll("#tail-table tbody tr").length === 2, null, { timeout: 10_000 });
  rows = await tailRows(page);
  check(rows[0].cells.n === "2" && rows[1].cells.n === "1", `live rows: ${JSON.stringify(rows)}`);
  check(rows[1].cells.ts_event === "1703548799446724905", `int64 shown as ${rows[1].cells.ts_event}`);
  check(rows[0].cells.ts_event === "-9223372036854775807", `int64 shown as ${rows[0].cells.ts_event}`);
  check(rows[1].cells.px === "0.0063289999999999996", `float shown as ${rows[1].cells.px}`);
  check(rows.every((r) => r.cells.offset === "–"), `live rows' offsets: ${rows.map((r) => r.cells.offset)}`);
  check((await tailState(page)).dups === "0", "live rows counted as duplicates");

  step = "a where= the live stream refuses is reported with the server's reason, not retried";
  await tailOf(page, "live", "{bad");
  await page.waitForSelector('#tail-status[data-state="error"]', { timeout: 10_000 });
  let st2 = await tailState(page);
  check(st2.text.startsWith("where: HTTP 400: ") && st2.text.length > "where: HTTP 400: ".length + 10,
    `refused where on live: ${st2.text}`);
  let n0 = eventRequests;
  await sleep(2500);
  check(eventRequests === n0, `the refused tail was retried ${eventRequests - n0} times`);
  log(`refused where: ${st2.text}`);

  step = "a 503 with Retry-After: 30 is waited out, with the server's reason shown";
  await tailOf(page, "t");
  await page.waitForSelector('#tail-status[data-state="open"]', { timeout: 10_000 });
  await page.click("#tail-pause");
  await page.waitForSelector('#tail-status[data-state="paused"]');
  await sleep(500);
  await ask({ do: "fill_sse", stream: "u" });
  n0 = eventRequests;
  await page.click("#tail-pause");
  await page.waitForFunction(() => /retrying in 30 s/.test(document.querySelector("#tail-status").textContent), null, { timeout: 10_000 });
  st2 = await tailState(page);
  check(st2.text.startsWith("HTTP 503: too many open SSE streams"), `503 shown as: ${st2.text}`);
  await sleep(3000);
  check(eventRequests - n0 <= 2, `${eventRequests - n0} requests in 3 s under Retry-After: 30`);
  await ask({ do: "release_sse" });
  await applyWhere(page, "");
  await page.waitForSelector('#tail-status[data-state="open"]', { timeout: 10_000 });
  log(`503: ${st2.text}`);

  step = "no script errors";
  check(problems.length === 0, `page errors: ${problems.join("; ")}`);

  step = "screenshot";
  await sleep(1200);
  // the top of the page: the process line, the streams, the tail's newest rows (a small PNG)
  if (SHOT) await page.screenshot({ path: SHOT, clip: { x: 0, y: 0, width: 1280, height: 480 } });
  log("ok");
  await browser.close();
  process.exit(0);
} catch (e) {
  log(`FAILED at "${step}": ${e.message}`);
  if (page && SHOT) await page.screenshot({ path: SHOT.replace(/\.png$/, "") + ".failed.png" }).catch(() => {});
  await browser.close().catch(() => {});
  process.exit(1);
}
