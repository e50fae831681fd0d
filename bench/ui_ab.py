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

Rounds that far apart differ by more than 2 % on a shared machine, so the script also measures
the pages' cost on its own: after the fan-out rounds, --idle-rounds rounds of a fresh broker with
no load and the 10 pages open (`pages`) or blank (`none`) for --idle-seconds, the broker's CPU
read from the scheduler (ns). The difference is what the pages cost the broker per second; the
page's work does not depend on the fan-out's, so divided by the fan-out's server CPU per second it
is the share the pages add to the CPU per delivered frame (`pages_added_cpu_share`).

    bench/ui_ab.sh [--no-build] [--rounds 5] [--subscribers 100] [--rate 10000] [--seconds 5]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

from cells import ROOT, Broker, cpu_ns, fanout_row, loadgen, log, machine_note, medians

def cell(broker, a):
    return loadgen(broker, ["--threads", "1", "--publishers", "1", "--window", "64", "--rate", a.rate,
                            "--subscribers", a.subscribers, "--duration", a.seconds, "--drain", "10",
                            "--sample", "16"], what="ui")


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
    ap.add_argument("--idle-rounds", type=int, default=3)
    ap.add_argument("--idle-seconds", type=float, default=20)
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
                polls = None
                with Broker(scratch, mode) as broker:
                    try:
                        pages.do(f"open http://{broker.addr}/ui" if mode == "pages" else "blank")
                        if mode == "polled":
                            polls = Polls(broker.addr, a.pages)
                        time.sleep(1)
                        doc = cell(broker, a)
                        pages.do("blank")
                    finally:
                        if polls:
                            polls.close()
                row = fanout_row(doc)
                frames = row["frames"]
                res[mode].append(row)
                out["cmd"] = doc["_cmd"]
                log(f"round {r + 1} {mode}: p99 {row['p99_us']} µs, {frames} frames, "
                    f"{row['cpu_ns_per_frame']:.0f} ns CPU/frame")
        med = medians(res)
        out.update(rounds=res, median=med)
        idle = {"none": [], "pages": []}
        for r in range(a.idle_rounds):
            for mode in (("none", "pages") if r % 2 == 0 else ("pages", "none")):
                with Broker(scratch, f"idle-{mode}") as broker:
                    pages.do(f"open http://{broker.addr}/ui" if mode == "pages" else "blank")
                    time.sleep(3)
                    c0, t0 = cpu_ns(broker.pid), time.monotonic()
                    time.sleep(a.idle_seconds)
                    c1, t1 = cpu_ns(broker.pid), time.monotonic()
                    pages.do("blank")
                idle[mode].append((c1 - c0) / (t1 - t0))
                log(f"idle round {r + 1} {mode}: broker {idle[mode][-1] / 1e3:.0f} µs CPU/s")
        added = statistics.median(idle["pages"]) - statistics.median(idle["none"])
        fanout_cpu_per_s = statistics.median(x["server_cpu_s"] / a.seconds for x in res["none"])
        out.update(idle_cpu_ns_per_s=idle, pages_added_cpu_ns_per_s=added,
                   fanout_cpu_s_per_s=fanout_cpu_per_s,
                   pages_added_cpu_share=added / 1e9 / fanout_cpu_per_s)
        log(f"{a.pages} pages add {added / 1e3:.0f} µs of broker CPU per second; the fan-out "
            f"takes {fanout_cpu_per_s * 1e3:.0f} ms/s: +{out['pages_added_cpu_share'] * 100:.3f}% "
            f"CPU per delivered frame")
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
