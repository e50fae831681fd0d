"""bench/compare: corecast vs the reference broker, one loadgen matrix, one run, one disk.

Started by `bench/compare` with the anchor venv's python. Every cell runs against corecast and
then the reference (A, B, A, B ...) with the same loadgen arguments; each is bounded in time
(loadgen --duration/--drain/--max-seconds plus a hard timeout here). A cell the reference cannot
finish in that time records what it did (rows acked, frames delivered) and is marked partial.
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--root", required=True)
ap.add_argument("--anchor", required=True)
ap.add_argument("--no-build", action="store_true")
ap.add_argument("--quick", action="store_true", help="fewer cells (smoke)")
ap.add_argument("--out", help="directory for results.json and table.md")
ap.add_argument("--scratch", default=None, help="data directories live here (and fsync is probed here)")
ap.add_argument("--cell-seconds", type=float, default=3.0)
ap.add_argument("--server-cores", type=int, default=1)
ap.add_argument("--client-threads", type=int, default=1)
ap.add_argument("--only", default="", help="comma list of cell groups: replay,publish,fanout,latency")
a = ap.parse_args()

ROOT, ANCHOR, PY = a.root, a.anchor, sys.executable
REL = os.path.join(ROOT, "target", "release")
D = a.cell_seconds
only = set(x for x in a.only.split(",") if x)

def log(*m):
    print(*m, file=sys.stderr, flush=True)

if not a.no_build:
    log("building release corecast + loadgen ...")
    subprocess.run(["cargo", "build", "--release", "-p", "corecast-engine", "--bin", "corecast",
                    "-p", "corecast-loadgen"], cwd=ROOT, check=True)

scratch = tempfile.mkdtemp(prefix="cc-compare-", dir=a.scratch)
procs = []

def cleanup():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    shutil.rmtree(scratch, ignore_errors=True)

def fsync_probe():
    d = os.path.join(scratch, "fsync"); os.makedirs(d, exist_ok=True)
    out = subprocess.run([PY, os.path.join(ANCHOR, "fsync_probe.py"), "--dir", d],
                         capture_output=True, text=True, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])

def start_reference():
    p = subprocess.Popen([PY, os.path.join(ANCHOR, "serve.py"), "--port", "0", "--root",
                          os.path.join(scratch, "ref"), "--schema",
                          os.path.join(ANCHOR, "trade.schema.json"), "--stream", "trades"],
                         stdout=subprocess.PIPE, stderr=open(os.path.join(scratch, "ref.log"), "w"), text=True)
    procs.append(p)
    line = p.stdout.readline()
    if not line.startswith("READY"):
        raise SystemExit(f"reference did not start: {line!r}")
    kv = dict(x.split("=") for x in line.split()[1:])
    return {"name": "reference", "url": f"ws://127.0.0.1:{kv['port']}/trades", "pid": int(kv["pid"])}

def start_corecast():
    p = subprocess.Popen([os.path.join(REL, "corecast"), "serve", "--listen", "127.0.0.1:0",
                          "--data", os.path.join(scratch, "cc"), "--cores", str(a.server_cores)],
                         stdout=subprocess.PIPE, stderr=open(os.path.join(scratch, "cc.log"), "w"), text=True)
    procs.append(p)
    line = p.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"corecast did not start: {line!r}")
    addr = line.split("listening on ")[1].split()[0]
    return {"name": "corecast", "url": f"ws://{addr}/trades", "pid": p.pid, "line": line.strip()}

def commit_counters(server):
    """(rows committed, commits) of the `trades` stream from corecast's /metrics; None for the reference."""
    if server["name"] != "corecast":
        return None
    import urllib.request
    host = server["url"].split("//", 1)[1].split("/", 1)[0]
    try:
        text = urllib.request.urlopen(f"http://{host}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    vals = {}
    for line in text.splitlines():
        for key in ("corecast_rows_in_total", "corecast_commit_latency_seconds_count"):
            if line.startswith(key + '{stream="trades"}'):
                vals[key] = float(line.rsplit(" ", 1)[1])
    if len(vals) != 2:
        return None
    return vals["corecast_rows_in_total"], vals["corecast_commit_latency_seconds_count"]

def loadgen(server, args, limit):
    before = commit_counters(server)
    cmd = [os.path.join(REL, "loadgen"), "--url", server["url"], "--server-pid", str(server["pid"]),
           "--json", "--threads", str(a.client_threads), "--max-seconds", str(limit)] + [str(x) for x in args]
    t = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 15)
        out = r.stdout.strip().splitlines()
        doc = json.loads(out[-1]) if out else {"ok": False, "failures": [r.stderr[-300:]]}
    except subprocess.TimeoutExpired:
        doc = {"ok": False, "failures": ["killed by the compare's timeout"]}
    after = commit_counters(server)
    if before and after and after[1] > before[1]:
        # what the server actually folded into each commit during this cell
        doc["_rows_per_commit"] = (after[0] - before[0]) / (after[1] - before[1])
    doc["_cmd"] = " ".join(cmd[1:]).replace(server["url"], "$URL").replace(str(server["pid"]), "$PID")
    doc["_wall_s"] = round(time.time() - t, 2)
    log(f"  {server['name']:9s} {doc['_wall_s']:5.1f}s ok={doc.get('ok')} {'; '.join(doc.get('failures', []))[:160]}")
    return doc

def g(doc, *path):
    for k in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc

results = {"cells": []}
try:
    fs = fsync_probe()
    results["fsync"] = fs
    f50, f99 = fs["fsync"]["p50_ms"], fs["fsync"]["p99_ms"]
    log(f"fsync p50 {f50} ms p99 {f99} ms (sqlite WAL commit p50 {fs['sqlite_wal_full_commit']['p50_ms']} ms)")
    cc = start_corecast()
    ref = start_reference()
    results["corecast_start"] = cc.get("line")
    servers = [cc, ref]

    def cell(group, name, args, limit):
        if only and group not in only:
            return None
        log(f"[{group}] {name}: loadgen {' '.join(map(str, args))}")
        c = {"group": group, "name": name, "args": args, "runs": {}}
        for s in servers:
            c["runs"][s["name"]] = loadgen(s, args, limit)
        results["cells"].append(c)
        return c

    # 1. fill exactly 100,000 rows, then replay them from EARLIEST (3 runs, median)
    if not only or "replay" in only:
        cell("fill", "fill 100k rows (w64 b100)", ["--publishers", 1, "--window", 64, "--batch", 100, "--rows", 100000, "--drain", 30], 90)
        for i in range(3):
            cell("replay", f"replay 100k from offset 0 (run {i+1})", ["--publishers", 0, "--subscribers", 1, "--offset", "earliest"], 60)
    # 2. durable publish
    for w in (1, 64, 1024):
        for b in (1, 100):
            if a.quick and (w, b) not in ((1, 1), (64, 100)):
                continue
            cell("publish", f"publish w{w} b{b}", ["--publishers", 1, "--window", w, "--batch", b, "--duration", D, "--drain", 20], D + 40)
    # 3. fan-out at a fixed rate and at max
    for k in (1, 10, 100, 1000):
        if a.quick and k not in (10, 1000):
            continue
        cell("fanout", f"fan-out K={k} @1000 rows/s", ["--publishers", 1, "--window", 64, "--rate", 1000, "--subscribers", k, "--duration", D, "--drain", 10], D + 45)
        # max = the fastest publishing every subscriber keeps up with: the publisher is paced to
        # keep the slowest subscriber within 4,096 rows (half the servers' max_backlog), so a
        # client thread that cannot read 100 sockets as fast as the server commits does not turn
        # the cell into a 4429 drop test
        cell("fanout", f"fan-out K={k} max (w64 b100)", ["--publishers", 1, "--window", 64, "--batch", 100, "--subscribers", k, "--duration", D, "--drain", 10, "--max-lag", 4096], D + 45)
    # 4. latency at fixed rates
    cell("latency", "latency K=10 @1000 rows/s", ["--publishers", 1, "--window", 64, "--rate", 1000, "--subscribers", 10, "--duration", D, "--drain", 10, "--sample", 1], D + 45)
    cell("latency", "latency K=1000 @10000 rows/s", ["--publishers", 1, "--window", 64, "--rate", 10000, "--subscribers", 1000, "--duration", D, "--drain", 10, "--sample", 16], D + 45)
finally:
    cleanup()

# ---- the table ----
def fmt(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, float):
        if abs(v) >= 1000: s = f"{v:,.0f}"
        elif abs(v) >= 10: s = f"{v:.1f}"
        else: s = f"{v:.3g}"
    else:
        s = f"{v:,}"
    return s + unit

def ratio(c, r, higher_better=True):
    if not c or not r:
        return "—"
    x = c / r if higher_better else r / c
    return f"{x:,.1f}×"

rows = []
def add(cellname, metric, c, r, higher_better=True, unit="", note=""):
    rows.append((cellname, metric, fmt(c, unit), fmt(r, unit), ratio(c, r, higher_better), note))

def partial(doc):
    return "" if doc.get("ok") else "partial: " + "; ".join(doc.get("failures", []))[:90]

replays = {"corecast": [], "reference": []}
greets = {"corecast": [], "reference": []}
goals = []
for c in results["cells"]:
    cc, rf = c["runs"]["corecast"], c["runs"]["reference"]
    grp, name = c["group"], c["name"]
    notes = "; ".join(x for x in (("cc " + partial(cc)) if partial(cc) else "", ("ref " + partial(rf)) if partial(rf) else "") if x)
    if grp == "fill":
        add(name, "rows/s", g(cc, "publish", "rows_per_s"), g(rf, "publish", "rows_per_s"), note=notes)
    elif grp == "replay":
        for s, d in (("corecast", cc), ("reference", rf)):
            if g(d, "replay", "rows_per_s"):
                replays[s].append(g(d, "replay", "rows_per_s"))
            if g(d, "greeting_us", "p50"):
                greets[s].append(g(d, "greeting_us", "p50") / 1000)
    elif grp == "publish":
        w, b = c["args"][3], c["args"][5]
        rpc = min(w * b, 65536)
        bound = rpc / (f50 / 1000)
        cr, rr = g(cc, "publish", "rows_per_s"), g(rf, "publish", "rows_per_s")
        pc = f"{100 * cr / bound:.1f}%" if cr else "—"
        pr = f"{100 * rr / bound:.1f}%" if rr else "—"
        add(name, "rows/s", cr, rr, note=notes)
        rows.append((name, f"% of fsync bound ({rpc} rows/commit ÷ fsync p50)", pc, pr, "", ""))
        mrpc = cc.get("_rows_per_commit")
        if mrpc and cr:
            # the bound at the rows per commit corecast measured (its /metrics), for corecast only
            mpc = f"{100 * cr / (mrpc / (f50 / 1000)):.1f}%"
            rows.append((name, f"% of fsync bound at the measured {mrpc:,.1f} rows/commit", mpc, "—", "", ""))
            goals.append(("durable publish % of fsync bound at measured rows/commit, " + name, mpc, "≥ 80%"))
        add(name, "server CPU µs/row", g(cc, "server", "cpu_us_per_published_row"), g(rf, "server", "cpu_us_per_published_row"), higher_better=False)
        add(name, "ack p99 ms", (g(cc, "publish", "ack_latency_us", "p99") or 0) / 1000, (g(rf, "publish", "ack_latency_us", "p99") or 0) / 1000, higher_better=False)
        goals.append(("durable publish % of fsync bound, " + name, pc, "≥ 80%"))
    elif grp in ("fanout", "latency"):
        add(name, "delivered frames/s", g(cc, "deliver", "frames_per_s"), g(rf, "deliver", "frames_per_s"), note=notes)
        add(name, "server CPU µs/delivered frame", g(cc, "server", "cpu_us_per_delivered_frame"), g(rf, "server", "cpu_us_per_delivered_frame"), higher_better=False)
        add(name, "p99 publish→deliver ms", (g(cc, "latency_us", "p99") or 0) / 1000, (g(rf, "latency_us", "p99") or 0) / 1000, higher_better=False)
        if name == "fan-out K=1000 max (w64 b100)":
            pf = g(cc, "server", "cpu_us_per_delivered_frame")
            goals.append(("server CPU per delivered frame at 1,000 subscribers", fmt(pf, " µs"), "≤ 0.1 µs (reference ≈ 10 µs)"))
            goals.append(("delivered frames/s per server core (1e6 ÷ CPU µs/frame)", fmt(1e6 / pf if pf else None), "≥ 2,000,000"))
            goals.append(("delivered frames/s wall clock, 1,000 subscribers", fmt(g(cc, "deliver", "frames_per_s")), "(client-bound here)"))
        if name == "latency K=1000 @10000 rows/s":
            p99 = g(cc, "latency_us", "p99")
            goals.append(("p99 publish→deliver, 1,000 subs × 10,000 rows/s", fmt(p99 / 1000 if p99 else None, " ms"), f"≤ fsync p99 + 1 ms = {f99 + 1:.2f} ms"))
            goals.append(("  … rows/s actually published in that cell", fmt(g(cc, "publish", "rows_per_s")), "10,000"))
if replays["corecast"] or replays["reference"]:
    med = lambda v: statistics.median(v) if v else None
    add("replay 100k from offset 0 (median of 3)", "rows/s", med(replays["corecast"]), med(replays["reference"]))
    add("replay 100k from offset 0 (median of 3)", "time to greeting ms", med(greets["corecast"]), med(greets["reference"]), higher_better=False)
    goals.append(("replay rows/s from offset 0", fmt(med(replays["corecast"])), "≥ 1,000,000"))
    goals.append(("time to greeting (replay of 100k)", fmt(med(greets["corecast"]), " ms"), "≤ 5 ms"))

lines = []
lines.append(f"fsync p50 {f50} ms, p99 {f99} ms; fdatasync p50 {fs['fdatasync']['p50_ms']} ms; SQLite WAL FULL commit p50 {fs['sqlite_wal_full_commit']['p50_ms']} ms, p99 {fs['sqlite_wal_full_commit']['p99_ms']} ms (same run, same disk)")
lines.append(f"corecast --cores {a.server_cores}; loadgen --threads {a.client_threads}; {os.cpu_count()} CPUs; cell {D} s")
lines.append("")
lines.append("| cell | metric | corecast | reference | ratio (corecast better ↑) | note |")
lines.append("|---|---|---:|---:|---:|---|")
for r in rows:
    lines.append("| " + " | ".join(r) + " |")
lines.append("")
lines.append("| goal | corecast | target |")
lines.append("|---|---:|---|")
for gname, val, tgt in goals:
    lines.append(f"| {gname} | {val} | {tgt} |")
table = "\n".join(lines)
print(table)
if a.out:
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")
