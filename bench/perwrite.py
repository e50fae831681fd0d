#!/usr/bin/env python3
"""One frame per write (issue 17, item 3): server CPU per delivered frame and its userland share,
a baseline build against this one in alternating rounds, and the `coalesce_us` trade.

`ab`: 1,000 subscribers × 100 rows/s (one row per commit, so one write per subscriber per row).
Each round starts a fresh broker of each build in turn (the order alternates), drives it with
the same loadgen (this build's) and reports per build (medians over the rounds): CPU per
delivered frame (loadgen's utime+stime over the run) and the userland share of the server's CPU
in the steady part (utime ÷ (utime+stime) of /proc/PID/stat between 4 s in and 1 s before the
end). With `--perf SECS`, round 1 also samples each broker with `perf record` for SECS and
prints the share by binary (`perf report --sort dso`): corecast + libc + vdso is userland.

`coalesce`: 1,000 subscribers × 1,000 rows/s (`--rate`) against this build with `coalesce_us` = each of
`--coalesce` on the stream, the values alternating order each round: CPU per delivered frame
against p50/p99 publish→deliver.

    bench/perwrite.sh ab --baseline DIR [--rounds 3] [--seconds 15] [--perf 8]
    bench/perwrite.sh coalesce [--rounds 2] [--seconds 10] [--coalesce 0,100,500,1000] [--rate 1000]

DIR holds a release `corecast` of the baseline (e.g. a copy of main's target/release/corecast).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time

from cells import REL, TRADES, Broker, loadgen, log, machine_note

TICK = os.sysconf("SC_CLK_TCK")


def user_sys(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[11]), int(fields[12])


def perf_share(pid, secs, out):
    """Share of samples by binary over `secs` of `perf record` on `pid`: {dso: percent}."""
    subprocess.run(["perf", "record", "-F", "1999", "-p", str(pid), "-o", out, "--", "sleep",
                    str(secs)], capture_output=True, check=True)
    r = subprocess.run(["perf", "report", "-i", out, "--sort", "dso", "--stdio", "-g", "none"],
                       capture_output=True, text=True, check=True)
    share = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%") and not line.startswith("#"):
            share[" ".join(parts[1:])] = float(parts[0][:-1])
    return share


def run_cell(scratch, name, bin_dir, cfg, args, seconds, perf=None):
    """One broker, one loadgen cell; the loadgen JSON plus the steady-state user share."""
    with Broker(scratch, name, config=cfg, bin_dir=bin_dir) as b:
        steady = {}

        def sample():
            time.sleep(4)
            u0, s0 = user_sys(b.pid)
            if perf:
                steady["perf"] = perf_share(b.pid, perf, os.path.join(scratch, name + ".perf"))
            time.sleep(max(0.0, seconds - 5 - (perf or 0)))
            u1, s1 = user_sys(b.pid)
            steady["user_s"] = (u1 - u0) / TICK
            steady["sys_s"] = (s1 - s0) / TICK

        t = threading.Thread(target=sample)
        t.start()
        doc = loadgen(b, args + ["--duration", seconds], what=name)
        t.join()
    tot = steady["user_s"] + steady["sys_s"]
    return {
        "cpu_us_per_frame": doc["server"]["cpu_us_per_delivered_frame"],
        "user_share": steady["user_s"] / tot if tot else float("nan"),
        "p50_ms": doc["latency_us"]["p50"] / 1000,
        "p99_ms": doc["latency_us"]["p99"] / 1000,
        "frames": doc["deliver"]["frames"],
        "perf": steady.get("perf"),
        "_cmd": doc["_cmd"],
    }


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def each(rows, key, scale=1.0, unit="", digits=3):
    return ", ".join(f"{r[key] * scale:.{digits}f}{unit}" for r in rows)


def ab(a):
    builds = {"baseline": a.baseline, "this": REL}
    args = ["--threads", "1", "--publishers", "1", "--window", "64", "--rate", "100",
            "--subscribers", "1000", "--drain", "10", "--sample", "16"]
    res = {k: [] for k in builds}
    with tempfile.TemporaryDirectory(prefix="perwrite-") as scratch:
        for r in range(a.rounds):
            order = list(builds) if r % 2 == 0 else list(builds)[::-1]
            for name in order:
                row = run_cell(scratch, f"{name}{r}", builds[name], TRADES, args, a.seconds,
                               perf=a.perf if (a.perf and r == 0) else None)
                log(f"round {r + 1} {name}: {row['cpu_us_per_frame']:.3f} µs/frame, user "
                    f"{row['user_share'] * 100:.1f} %, p99 {row['p99_ms']:.1f} ms  "
                    f"({machine_note()})")
                res[name].append(row)
    print(f"1,000 subscribers × 100 rows/s, {a.rounds} rounds × {a.seconds} s, alternating; "
          f"{machine_note()}")
    print(f"command: {res['this'][0]['_cmd']}")
    print("| build | CPU µs per delivered frame, each round | median | userland share, each round "
          "| median | p99 ms (median) |")
    print("|---|---|---:|---|---:|---:|")
    for name, rows in res.items():
        print(f"| {name} | {each(rows, 'cpu_us_per_frame')} | "
              f"{med(rows, 'cpu_us_per_frame'):.3f} | "
              f"{each(rows, 'user_share', 100, ' %', 1)} | "
              f"{med(rows, 'user_share') * 100:.1f} % | {med(rows, 'p99_ms'):.1f} |")
    for name, rows in res.items():
        if rows[0]["perf"]:
            p = rows[0]["perf"]
            user = sum(v for k, v in p.items() if "kernel" not in k)
            print(f"perf, {name} (round 1, {a.perf} s): " +
                  ", ".join(f"{k} {v:.1f} %" for k, v in p.items()) +
                  f" → userland {user:.1f} %")


def coalesce(a):
    values = [int(x) for x in a.coalesce.split(",")]
    args = ["--threads", "1", "--publishers", "1", "--window", "64", "--rate", str(a.rate),
            "--subscribers", "1000", "--drain", "10", "--sample", "16"]
    res = {v: [] for v in values}
    with tempfile.TemporaryDirectory(prefix="coalesce-") as scratch:
        for r in range(a.rounds):
            order = values if r % 2 == 0 else values[::-1]
            for v in order:
                cfg = TRADES + f"coalesce_us = {v}\n"
                row = run_cell(scratch, f"c{v}r{r}", REL, cfg, args, a.seconds)
                log(f"round {r + 1} coalesce_us={v}: {row['cpu_us_per_frame']:.3f} µs/frame, "
                    f"p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms ({machine_note()})")
                res[v].append(row)
    print(f"1,000 subscribers × {a.rate:,} rows/s, {a.rounds} rounds × {a.seconds} s, "
          f"alternating; {machine_note()}")
    print(f"command: {res[values[0]][0]['_cmd']}  (stream: coalesce_us = N)")
    print("| coalesce_us | CPU µs per delivered frame, each round | median | vs 0 | "
          "p50 ms (median) | p99 ms, each round | p99 median |")
    print("|---:|---|---:|---:|---:|---|---:|")
    base = med(res[values[0]], "cpu_us_per_frame")
    for v, rows in res.items():
        c = med(rows, "cpu_us_per_frame")
        print(f"| {v} | {each(rows, 'cpu_us_per_frame')} | {c:.3f} | "
              f"{c / base:.2f}× | {med(rows, 'p50_ms'):.2f} | "
              f"{each(rows, 'p99_ms', digits=1)} | {med(rows, 'p99_ms'):.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("ab")
    p.add_argument("--baseline", required=True, help="directory with the baseline's corecast")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--perf", type=int, default=0, help="perf record this long in round 1")
    p = sub.add_parser("coalesce")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--coalesce", default="0,100,500,1000")
    p.add_argument("--rate", type=int, default=1000, help="rows/s published")
    a = ap.parse_args()
    if a.seconds < 8:
        raise SystemExit("--seconds must be at least 8 (the steady window starts 4 s in)")
    ab(a) if a.mode == "ab" else coalesce(a)


if __name__ == "__main__":
    main()
