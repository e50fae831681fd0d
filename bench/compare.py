"""bench/compare: corecast vs the reference broker (and, with --peers nats, NATS server), one
loadgen matrix, one run, one disk.

Started by `bench/compare` with the anchor venv's python. Every cell runs against corecast and
then the reference (A, B, A, B ...) with the same loadgen arguments; each is bounded in time
(loadgen --duration/--drain/--max-seconds plus a hard timeout here). A cell the reference cannot
finish in that time records what it did (rows acked, frames delivered) and is marked partial.

--peers nats adds nats-server (bench/nats_setup.sh; GOMAXPROCS = --server-cores) driven by the same
loadgen with --protocol nats: the fan-out and latency cells on core NATS (subject `trades`), the
publish cells on JetStream (subject `trades_js`, a stream with file storage; the server runs with
`sync_interval: always`, so a PubAck means fsynced), and a "durable" group (corecast vs JetStream
push consumers, K = 1, 10, 100 at 1,000 rows/s). NATS has no replay: fill/replay cells skip it.
A NATS cell that fails restarts nats-server (a fresh store), so work it still owes (JetStream
acks past the drain) does not load the next cell.

--peers uws adds uWebSockets.js (bench/peers/uws/setup.sh: npm uws-pack 20.0.8 under node)
running bench/peers/uws/server.js, a WebSocket pub/sub server with topics and nothing else (no
log, no schema, no offsets, no acknowledgement beyond "handed to the topic"), driven by the same
loadgen with --protocol raw in the fan-out and latency cells only: the raw ceiling of WebSocket
fan-out here. It is one node process (one event loop), like corecast --cores 1. Two columns: "uWS"
publishes each row as its own message (one WebSocket frame per row, as corecast sends), "uWS
frame" (server.js ... frame, only in the cells with --batch > 1) the publisher's message whole,
its rows in one WebSocket frame (as NATS packs several MSGs into one). A uWS cell that fails
restarts its server.
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
ap.add_argument("--only", default="", help="comma list of cell groups: replay,publish,fanout,latency,durable")
ap.add_argument("--peers", default="", help="comma list of further brokers: nats, uws")
ap.add_argument("--no-reference", action="store_true", help="leave the reference broker out")
a = ap.parse_args()
peers = set(x for x in a.peers.split(",") if x)
if peers - {"nats", "uws"}:
    raise SystemExit(f"unknown --peers {sorted(peers - {'nats', 'uws'})} (known: nats, uws)")

ROOT, ANCHOR, PY = a.root, a.anchor, sys.executable
REL = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "release")
D = a.cell_seconds
only = set(x for x in a.only.split(",") if x)

def log(*m):
    print(*m, file=sys.stderr, flush=True)

if not a.no_build:
    log("building release corecast + loadgen ...")
    # (--bin selects in every package given: loadgen must be named too, or it is not rebuilt)
    subprocess.run(["cargo", "build", "--release", "-p", "corecast-engine", "--bin", "corecast",
                    "-p", "corecast-loadgen", "--bin", "loadgen"], cwd=ROOT, check=True)

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

def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]

NATS_BIN = None
nats_gen = [0]

def start_nats():
    """nats-server with a WebSocket listener and JetStream (file storage, fsync on every write)."""
    import socket
    nats_gen[0] += 1
    d = os.path.join(scratch, f"nats{nats_gen[0]}")
    os.makedirs(d, exist_ok=True)
    ws, cl = free_port(), free_port()
    conf = os.path.join(d, "nats.conf")
    with open(conf, "w") as f:
        f.write(f'listen: "127.0.0.1:{cl}"\nwebsocket {{ listen: "127.0.0.1:{ws}", no_tls: true }}\n'
                f'jetstream {{ store_dir: "{d}/js", sync_interval: always }}\n')
    env = dict(os.environ, GOMAXPROCS=str(a.server_cores))
    p = subprocess.Popen([NATS_BIN, "-c", conf], stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(d, "nats.log"), "w"), env=env)
    procs.append(p)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", ws), timeout=1).close()
            break
        except OSError:
            if p.poll() is not None:
                raise SystemExit(f"nats-server exited: {open(os.path.join(d, 'nats.log')).read()[-500:]}")
            time.sleep(0.05)
    return {"name": "nats", "url": f"ws://127.0.0.1:{ws}/trades", "js_url": f"ws://127.0.0.1:{ws}/trades_js",
            "pid": p.pid, "proc": p}

UWS = {}

def start_uws(mode="row"):
    """bench/peers/uws/server.js under node (uWebSockets.js), on a free loopback port; mode
    "row" (a message per row) or "frame" (a message per publish frame)."""
    p = subprocess.Popen([UWS["node"], UWS["server"], "0", mode], stdout=subprocess.PIPE,
                         stderr=open(os.path.join(scratch, "uws.log"), "a"), text=True,
                         cwd=os.path.dirname(UWS["server"]))
    procs.append(p)
    line = p.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"uws server did not start: {line!r} (see {scratch}/uws.log)")
    addr = line.split("listening on ")[1].split()[0]
    return {"name": "uws" if mode == "row" else "uwsf", "mode": mode, "url": f"ws://{addr}/trades",
            "pid": p.pid, "proc": p}

def stop(server):
    p = server.get("proc")
    if p and p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

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

def loadgen(server, args, limit, extra=()):
    before = commit_counters(server)
    url = server["url"]
    if server["name"] == "nats":
        jetstream = "--nats-jetstream" in extra
        url = server["js_url"] if jetstream else server["url"]
    cmd = [os.path.join(REL, "loadgen"), "--url", url, "--server-pid", str(server["pid"]),
           "--json", "--threads", str(a.client_threads), "--max-seconds", str(limit)] + [str(x) for x in args] + list(extra)
    load0 = os.getloadavg()[0]
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
    doc["_cmd"] = " ".join(cmd[1:]).replace(url, "$URL").replace(str(server["pid"]), "$PID")
    doc["_wall_s"] = round(time.time() - t, 2)
    doc["_load1"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
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
    results["load_start"] = os.getloadavg()
    cc = start_corecast()
    servers = [cc]
    if not a.no_reference:
        servers.append(start_reference())
    if "nats" in peers:
        NATS_BIN = subprocess.run([os.path.join(ROOT, "bench", "nats_setup.sh")], capture_output=True,
                                  text=True, check=True).stdout.strip().splitlines()[-1]
        results["nats_version"] = subprocess.run([NATS_BIN, "--version"], capture_output=True, text=True).stdout.strip()
        log(results["nats_version"])
        servers.append(start_nats())
    if "uws" in peers:
        out = subprocess.run([os.path.join(ROOT, "bench", "peers", "uws", "setup.sh")],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"bench/peers/uws/setup.sh failed: {out.stderr[-1000:]}")
        UWS["node"], UWS["server"] = out.stdout.strip().splitlines()[-2:]
        node_v = subprocess.run([UWS["node"], "--version"], capture_output=True, text=True).stdout.strip()
        results["uws_version"] = f"uWebSockets.js v20 (npm uws-pack 20.0.8) on node {node_v}"
        log(results["uws_version"])
        servers.append(start_uws("row"))
        servers.append(start_uws("frame"))
    results["corecast_start"] = cc.get("line")

    def cell(group, name, args, limit):
        if only and group not in only:
            return None
        log(f"[{group}] {name}: loadgen {' '.join(map(str, args))}")
        c = {"group": group, "name": name, "args": args, "runs": {}}
        for i, s in enumerate(servers):
            if s["name"] in ("uws", "uwsf"):
                if group not in ("fanout", "latency"):
                    continue  # a raw pub/sub server has no log, no durable publish, no replay
                if s["name"] == "uwsf" and "--batch" not in args:
                    continue  # one row per publish frame: the same as "uws"
                doc = loadgen(s, args, limit, ["--protocol", "raw"])
                c["runs"][s["name"]] = doc
                if not doc.get("ok"):
                    log(f"  {s['name']}: restarting the server after a failed cell")
                    stop(s)
                    servers[i] = start_uws(s["mode"])
                continue
            if s["name"] == "nats":
                if group in ("fill", "replay"):
                    continue  # core NATS has no log to replay
                extra = ["--protocol", "nats"] + (["--nats-jetstream"] if group in ("publish", "durable") else [])
                doc = loadgen(s, args, limit, extra)
                c["runs"]["nats"] = doc
                if not doc.get("ok"):
                    log("  nats: restarting nats-server (a fresh store) after a failed cell")
                    stop(s)
                    servers[i] = start_nats()
                continue
            if group == "durable" and s["name"] == "reference":
                continue  # the durable fan-out group is corecast vs JetStream only
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
    # 5. durable fan-out, with NATS only: corecast's fan-out (rows delivered after their commit)
    # vs JetStream push consumers (one ephemeral consumer per subscriber, delivery after the
    # store, sync_interval always); K = 1,000 is left out: nats-server refused consumer creates
    # near 1,000 ("maximum consumers limit reached") on this machine
    if "nats" in peers:
        for k in (1, 10, 100):
            cell("durable", f"durable fan-out K={k} @1000 rows/s (NATS: JetStream push consumers)", ["--publishers", 1, "--window", 64, "--rate", 1000, "--subscribers", k, "--duration", D, "--drain", 10], D + 45)
    results["load_end"] = os.getloadavg()
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

HAS_REF = not a.no_reference
HAS_NATS = "nats" in peers
HAS_UWS = "uws" in peers
rows = []
def add(cellname, metric, c, r, higher_better=True, unit="", note="", n=None, load="", u=None, uf=None):
    row = [cellname, metric, fmt(c, unit)]
    if HAS_REF:
        row += [fmt(r, unit), ratio(c, r, higher_better)]
    if HAS_NATS:
        row += [fmt(n, unit), ratio(c, n, higher_better)]
    if HAS_UWS:
        row += [fmt(u, unit), ratio(c, u, higher_better), fmt(uf, unit), ratio(c, uf, higher_better)]
    row += [load, note]
    rows.append(tuple(row))

def text_row(cellname, metric, c, r, n=None):
    row = [cellname, metric, c]
    if HAS_REF:
        row += [r, ""]
    if HAS_NATS:
        row += [n if n is not None else "—", ""]
    if HAS_UWS:
        row += ["—", "", "—", ""]
    row += ["", ""]
    rows.append(tuple(row))

def partial(doc):
    return "" if doc.get("ok") else "partial: " + "; ".join(doc.get("failures", []))[:90]

def cell_load(c):
    v = [x for d in c["runs"].values() for x in d.get("_load1", [])]
    return f"{max(v):.2f}" if v else ""

replays = {"corecast": [], "reference": []}
greets = {"corecast": [], "reference": []}
goals = []
EMPTY = {}
for c in results["cells"]:
    cc = c["runs"]["corecast"]
    rf = c["runs"].get("reference", EMPTY)
    nt = c["runs"].get("nats", EMPTY)
    uw = c["runs"].get("uws", EMPTY)
    uf = c["runs"].get("uwsf", EMPTY)
    grp, name = c["group"], c["name"]
    load = cell_load(c)
    notes = "; ".join(x for x in (("cc " + partial(cc)) if partial(cc) else "",
                                   ("ref " + partial(rf)) if rf and partial(rf) else "",
                                   ("nats " + partial(nt)) if nt and partial(nt) else "",
                                   ("uws " + partial(uw)) if uw and partial(uw) else "",
                                   ("uws frame " + partial(uf)) if uf and partial(uf) else "") if x)
    if grp == "fill":
        add(name, "rows/s", g(cc, "publish", "rows_per_s"), g(rf, "publish", "rows_per_s"), note=notes, load=load)
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
        cr, rr, nr = g(cc, "publish", "rows_per_s"), g(rf, "publish", "rows_per_s"), g(nt, "publish", "rows_per_s")
        pct = lambda v: f"{100 * v / bound:.1f}%" if v else "—"
        pc = pct(cr)
        xname = name + (" (NATS: JetStream)" if HAS_NATS else "")
        add(xname, "rows/s", cr, rr, note=notes, n=nr, load=load)
        text_row(xname, f"% of fsync bound ({rpc} rows/commit ÷ fsync p50)", pc, pct(rr), pct(nr))
        mrpc = cc.get("_rows_per_commit")
        if mrpc and cr:
            # the bound at the rows per commit corecast measured (its /metrics), for corecast only
            mpc = f"{100 * cr / (mrpc / (f50 / 1000)):.1f}%"
            text_row(xname, f"% of fsync bound at the measured {mrpc:,.1f} rows/commit", mpc, "—", "—")
            goals.append(("durable publish % of fsync bound at measured rows/commit, " + name, mpc, "≥ 80%"))
        add(xname, "server CPU µs/row", g(cc, "server", "cpu_us_per_published_row"), g(rf, "server", "cpu_us_per_published_row"),
            higher_better=False, n=g(nt, "server", "cpu_us_per_published_row"))
        p99 = lambda d: (g(d, "publish", "ack_latency_us", "p99") or 0) / 1000 if d else None
        add(xname, "ack p99 ms", p99(cc), p99(rf), higher_better=False, n=p99(nt))
        goals.append(("durable publish % of fsync bound, " + name, pc, "≥ 80%"))
        if HAS_NATS and nr:
            goals.append((f"durable publish rows/s vs NATS JetStream (sync always), {name}", ratio(cr, nr), "≥ 1.0×"))
    elif grp in ("fanout", "latency", "durable"):
        add(name, "delivered frames/s", g(cc, "deliver", "frames_per_s"), g(rf, "deliver", "frames_per_s"), note=notes,
            n=g(nt, "deliver", "frames_per_s"), load=load, u=g(uw, "deliver", "frames_per_s"),
            uf=g(uf, "deliver", "frames_per_s"))
        pf = lambda d: g(d, "server", "cpu_us_per_delivered_frame")
        add(name, "server CPU µs/delivered frame", pf(cc), pf(rf), higher_better=False, n=pf(nt), u=pf(uw), uf=pf(uf))
        fps = lambda d: 1e6 / pf(d) if pf(d) else None
        if HAS_UWS:
            add(name, "delivered frames per server CPU-second", fps(cc), fps(rf), n=fps(nt), u=fps(uw), uf=fps(uf))
        lp = lambda d: (g(d, "latency_us", "p99") or 0) / 1000 if d else None
        add(name, "p99 publish→deliver ms", lp(cc), lp(rf), higher_better=False, n=lp(nt), u=lp(uw), uf=lp(uf))
        for peer, d in (("uWebSockets.js, a message per row", uw), ("uWebSockets.js, a message per publish frame", uf)):
            if HAS_UWS and pf(cc) and pf(d):
                goals.append((f"frames per server CPU-second vs {peer} (the raw ceiling; no target), {name}",
                              ratio(pf(cc), pf(d), False), "(≥ 1.0×: as cheap as raw pub/sub)"))
        if HAS_NATS and pf(cc) and pf(nt):
            peer = "JetStream" if grp == "durable" else "core NATS"
            goals.append((f"frames per server CPU-second vs {peer}, {name}", ratio(pf(cc), pf(nt), False), "≥ 2.0×"))
            goals.append((f"p99 vs {peer}, {name}", f"{lp(cc):.3g} vs {lp(nt):.3g} ms", "corecast ≤ NATS"))
        if name == "fan-out K=1000 max (w64 b100)":
            p = pf(cc)
            goals.append(("server CPU per delivered frame at 1,000 subscribers", fmt(p, " µs"), "≤ 0.1 µs (reference ≈ 10 µs)"))
            goals.append(("delivered frames/s per server core (1e6 ÷ CPU µs/frame)", fmt(1e6 / p if p else None), "≥ 2,000,000"))
            goals.append(("delivered frames/s wall clock, 1,000 subscribers", fmt(g(cc, "deliver", "frames_per_s")), "(client-bound here)"))
        if name == "latency K=1000 @10000 rows/s":
            p99v = g(cc, "latency_us", "p99")
            goals.append(("p99 publish→deliver, 1,000 subs × 10,000 rows/s", fmt(p99v / 1000 if p99v else None, " ms"), f"≤ fsync p99 + 1 ms = {f99 + 1:.2f} ms"))
            goals.append(("  … rows/s actually published in that cell", fmt(g(cc, "publish", "rows_per_s")), "10,000"))
if replays["corecast"] or replays["reference"]:
    med = lambda v: statistics.median(v) if v else None
    add("replay 100k from offset 0 (median of 3)", "rows/s", med(replays["corecast"]), med(replays["reference"]))
    add("replay 100k from offset 0 (median of 3)", "time to greeting ms", med(greets["corecast"]), med(greets["reference"]), higher_better=False)
    goals.append(("replay rows/s from offset 0", fmt(med(replays["corecast"])), "≥ 1,000,000"))
    goals.append(("time to greeting (replay of 100k)", fmt(med(greets["corecast"]), " ms"), "≤ 5 ms"))

lines = []
lines.append(f"fsync p50 {f50} ms, p99 {f99} ms; fdatasync p50 {fs['fdatasync']['p50_ms']} ms; SQLite WAL FULL commit p50 {fs['sqlite_wal_full_commit']['p50_ms']} ms, p99 {fs['sqlite_wal_full_commit']['p99_ms']} ms (same run, same disk)")
ls, le = results.get("load_start"), results.get("load_end")
loadtxt = f"; load average (1/5/15 min) at start {ls[0]:.2f}/{ls[1]:.2f}/{ls[2]:.2f}, at end {le[0]:.2f}/{le[1]:.2f}/{le[2]:.2f}" if ls and le else ""
lines.append(f"corecast --cores {a.server_cores}; loadgen --threads {a.client_threads}; {os.cpu_count()} CPUs; cell {D} s{loadtxt}")
if HAS_NATS:
    lines.append(f"{results.get('nats_version', 'nats-server')}, GOMAXPROCS={a.server_cores}; fan-out/latency cells: core NATS; publish cells: JetStream, file storage, sync_interval always; durable fan-out cells: JetStream push consumers")
if HAS_UWS:
    lines.append(f"{results.get('uws_version', 'uWebSockets.js')}: bench/peers/uws/server.js, one event loop, loadgen --protocol raw; fan-out and latency cells only (no log, nothing durable); uWS: a message per row; uWS frame: a message per publish frame (cells with --batch only)")
lines.append("")
head = ["cell", "metric", "corecast"]
align = ["---", "---", "---:"]
if HAS_REF:
    head += ["reference", "ratio (corecast better ↑)"]
    align += ["---:", "---:"]
if HAS_NATS:
    head += ["NATS", "ratio vs NATS (corecast better ↑)"]
    align += ["---:", "---:"]
if HAS_UWS:
    head += ["uWS (a message per row)", "ratio vs uWS (corecast better ↑)",
             "uWS frame (a message per publish frame)", "ratio vs uWS frame (corecast better ↑)"]
    align += ["---:", "---:", "---:", "---:"]
head += ["load (1 min, max over the cell)", "note"]
align += ["---:", "---"]
lines.append("| " + " | ".join(head) + " |")
lines.append("|" + "|".join(align) + "|")
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
