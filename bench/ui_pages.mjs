// Holds 10 (--pages) headless chromium pages for bench/ui_ab.py: `open URL` points every page at
// URL and waits until each shows a live /stats; `blank` points them at about:blank; `quit`.
// One "ok" line per command on stdout. Needs playwright-core (CORECAST_UI_NODE_MODULES) and
// Debian's chromium, as tests/ui.rs does.
import { createRequire } from "node:module";
import readline from "node:readline";

const require = createRequire(
  (process.env.CORECAST_UI_NODE_MODULES || `${process.env.HOME}/.cache/corecast-ui/node_modules`).replace(/\/?$/, "/"));
const { chromium } = require("playwright-core");
const n = Number(process.argv[2] || 10);
const browser = await chromium.launch({
  executablePath: process.env.CORECAST_UI_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});
const ctx = await browser.newContext({ viewport: { width: 1280, height: 760 } });
const pages = [];
for (let i = 0; i < n; i++) pages.push(await ctx.newPage());
for await (const line of readline.createInterface({ input: process.stdin })) {
  const [cmd, arg] = line.trim().split(" ");
  if (cmd === "open") {
    await Promise.all(pages.map(async (p) => {
      await p.goto(arg);
      await p.waitForSelector('#p-status[data-ok="true"]', { timeout: 15_000 });
    }));
  } else if (cmd === "blank") {
    await Promise.all(pages.map((p) => p.goto("about:blank")));
  } else if (cmd === "quit") {
    break;
  }
  process.stdout.write("ok\n");
}
await browser.close();
process.exit(0);
