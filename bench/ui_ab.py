#!/usr/bin/env python3
"""The cost of the live page: fan-out with 10 /ui pages open against none, interleaved rounds in
one run (issue 16, "Shows"). A third mode, `polled`, makes the requests of 10 idle pages (GET
/stats 10 times a second) from this script, without the browsers: the broker's own cost of the
pages, apart from 10 renderers competing for the same CPUs.

One headless chromium holds 10 pages for the whole run (bench/ui_pages.mjs), so the browser's
own CPU is there in both modes: in `pages` they show http://BROKER/ui (each polls /stats once a
second and draws it), in `none` they show about:blank. Each round starts a fresh release broker
(--cores 1) per mode, alternating the order, and runs one loadgen cell against it: one publisher
at --rate rows/s, --subscribers subscribers, --seconds of publishing. Reported per mode
(medians): server CPU per delivered frame and p50/p99 publish→deliver; the figure is the CPU per
frame ratio pages/none (issue 16: within 2 %).

    bench/ui_ab.sh [--no-build] [--rounds 5] [--subscribers 100] [--rate 10000] [--seconds 5]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")
SCHEMA = os.path.join(ROOT, "..", "shared", "tools", "anchor", "trade.schema.json")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def machine_note():
    with open("/proc/loadavg") as f:
        return "loadavg " + " ".join(f.read().split()[:3])


def start(scratch, mode):
    d = os.path.join(scratch, mode)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path = os.path.join(d, "corecast.toml")
    with open(path, "w") as f:
        f.write(f'[[stream]]\nname = "trades"\nschema = "{SCHEMA}"\nmax_replay = "unlimited"\n')
    logf = open(os.path.join(d, "corecast.log"), "w")
    p = subprocess.Popen([os.path.join(REL, "corecast"), "serve", "--config", path, "--listen",
                          "127.0.0.1:0", "--data", os.path.join(d, "data"), "--cores", "1"],
                         stdout=subprocess.PIPE, stderr=logf, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"corecast did not start: {line!r} (see {logf.name})")
    return p, line.split("listening on ")[1].split()[0], logf


def cell(addr, pid, a):
    cmd = [os.path.join(REL, "loadgen"), "--url", f"ws://{addr}/trades", "--json", "--threads", "1",
           "--publishers", "1", "--window", "64", "--rate", str(a.rate),
           "--subscribers", str(a.subscribers), "--duration", str(a.seconds), "--drain", "10",
           "--sample", "16", "--server-pid", str(pid)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise SystemExit(f"loadgen printed no JSON (rc {r.returncode}): {r.stderr[-2000:]}")
    if r.returncode != 0 or not doc.get("ok"):
        raise SystemExit(f"loadgen FAILED: {doc.get('failures')} {doc.get('open_errors')}")
    doc["_cmd"] = " ".join(cmd[:2] + ["ws://127.0.0.1:PORT/trades"] + cmd[3:-1] + ["PID"])
    return doc


class Polls:
    """What n idle pages ask of the broker, without the browsers: GET /stats n times a second."""

    def __init__(self, addr, n):
        self.stop = threading.Event()
        self.count = 0
        self.t = threading.Thread(target=self.run, args=(addr, n), daemon=True)
        self.t.start()

    def run(self, addr, n):
        nxt = time.monotonic()
        while not self.stop.is_set():
            for _ in range(n):
                with urllib.request.urlopen(f"http://{addr}/stats", timeout=5) as r:
                    r.read()
                self.count += 1
            nxt += 1.0
            self.stop.wait(max(0.0, nxt - time.monotonic()))

    def close(self):
        self.stop.set()
        self.t.join(10)


class Pages:
    def __init__(self, n):
        self.p = subprocess.Popen(["node", os.path.join(ROOT, "bench", "ui_pages.mjs"), str(n)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def do(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        got = self.p.stdout.readline().strip()
        if got != "ok":
            raise SystemExit(f"ui_pages.mjs: {line}: {got!r}")

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
            self.p.wait(20)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pages", type=int, default=10)
    ap.add_argument("--subscribers", type=int, default=100)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--scratch", default=os.environ.get("CORECAST_BENCH_DIR", "/tmp"))
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="ui-ab-", dir=a.scratch)
    modes = ["none", "polled", "pages"]
    res = {m: [] for m in modes}
    out = {"machine_before": machine_note(), "config": vars(a).copy()}
    pages = Pages(a.pages)
    try:
        pages.do("blank")
        for r in range(a.rounds):
            order = modes if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                p, addr, logf = start(scratch, mode)
                polls = None
                try:
                    pages.do(f"open http://{addr}/ui" if mode == "pages" else "blank")
                    if mode == "polled":
                        polls = Polls(addr, a.pages)
                    time.sleep(1)
                    doc = cell(addr, p.pid, a)
                    pages.do("blank")
                finally:
                    if polls:
                        polls.close()
                    p.terminate()
                    p.wait(20)
                    logf.close()
                frames = doc["deliver"]["frames"]
                cpu = doc["server"]["cpu_s"] or 0
                row = {"p50_us": doc["latency_us"]["p50"], "p99_us": doc["latency_us"]["p99"],
                       "frames": frames, "server_cpu_s": cpu,
                       "cpu_ns_per_frame": cpu * 1e9 / max(frames, 1)}
                res[mode].append(row)
                out["cmd"] = doc["_cmd"]
                log(f"round {r + 1} {mode}: p99 {row['p99_us']} µs, {frames} frames, "
                    f"{row['cpu_ns_per_frame']:.0f} ns CPU/frame")
        med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in res.items()}
        out.update(rounds=res, median=med)
        for m in ("polled", "pages"):
            out[f"{m}_cpu_per_frame_ratio"] = med[m]["cpu_ns_per_frame"] / med["none"]["cpu_ns_per_frame"]
            out[f"{m}_p99_ratio"] = med[m]["p99_us"] / med["none"]["p99_us"]
        out["machine_after"] = machine_note()
        log("medians: " + ", ".join(f"{m} {med[m]['cpu_ns_per_frame']:.0f} ns/frame p99 {med[m]['p99_us']} µs"
                                     for m in modes)
            + f"; CPU/frame polled/none {out['polled_cpu_per_frame_ratio']:.3f}"
            + f", pages/none {out['pages_cpu_per_frame_ratio']:.3f}")
    finally:
        pages.close()
        shutil.rmtree(scratch, ignore_errors=True)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
