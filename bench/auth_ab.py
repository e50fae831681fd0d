#!/usr/bin/env python3
"""Fan-out with auth on against off, interleaved rounds in one run (issue 14, "Shows").

Each round starts three fresh release brokers in turn, alternating the order: `off` (no [auth]),
`token` ([auth], every connection signs in with a bearer token) and `basic` (HTTP Basic,
argon2id: the first check runs, the rest are remembered). Per broker one loadgen cell: one
publisher at --rate rows/s, --subscribers subscribers, --seconds of publishing. Reported per mode
(medians): p50/p99 publish→deliver, server CPU per delivered frame, greeting time. The gate runs
once per connection, so the per-frame cost of auth should be nil: the CPU per frame ratio
on/off is the figure.

    bench/auth_ab.sh [--no-build] [--rounds 3] [--subscribers 100] [--rate 10000] [--seconds 5]
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")
SCHEMA = os.path.join(ROOT, "..", "shared", "tools", "anchor", "trade.schema.json")
TOKEN = "bench-token-0123456789abcdef"
PASSWORD = "bench-password"


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def machine_note():
    with open("/proc/loadavg") as f:
        return "loadavg " + " ".join(f.read().split()[:3])


def hash_password(pw):
    r = subprocess.run([os.path.join(REL, "corecast"), "hash-password"], input=pw,
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def start(scratch, mode, pw_hash):
    d = os.path.join(scratch, mode)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = [f'[[stream]]\nname = "trades"\nschema = "{SCHEMA}"\nmax_replay = "unlimited"\n']
    if mode != "off":
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        cfg.append("[auth]\nmax_failures_per_minute = 1000000\n")
        cfg.append(f'[auth.principals.bench]\npassword = "{pw_hash}"\ntokens = ["{digest}"]\n'
                   'grants = { "data.read" = ["trades"], "data.publish" = ["trades"] }\n')
    path = os.path.join(d, "corecast.toml")
    with open(path, "w") as f:
        f.write("\n".join(cfg))
    logf = open(os.path.join(d, "corecast.log"), "w")
    p = subprocess.Popen([os.path.join(REL, "corecast"), "serve", "--config", path, "--listen",
                          "127.0.0.1:0", "--data", os.path.join(d, "data"), "--cores", "1"],
                         stdout=subprocess.PIPE, stderr=logf, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"corecast did not start: {line!r} (see {logf.name})")
    return p, line.split("listening on ")[1].split()[0], logf


def authorization(mode):
    if mode == "token":
        return f"Bearer {TOKEN}"
    if mode == "basic":
        import base64
        return "Basic " + base64.b64encode(f"bench:{PASSWORD}".encode()).decode()
    return None


def cell(addr, pid, mode, a):
    cmd = [os.path.join(REL, "loadgen"), "--url", f"ws://{addr}/trades", "--json", "--threads", "1",
           "--publishers", "1", "--window", "64", "--rate", str(a.rate),
           "--subscribers", str(a.subscribers), "--duration", str(a.seconds), "--drain", "10",
           "--sample", "16", "--server-pid", str(pid)]
    env = dict(os.environ)
    env.pop("LOADGEN_AUTHORIZATION", None)
    if authorization(mode):
        env["LOADGEN_AUTHORIZATION"] = authorization(mode)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise SystemExit(f"loadgen printed no JSON (rc {r.returncode}): {r.stderr[-2000:]}")
    if r.returncode != 0 or not doc.get("ok"):
        raise SystemExit(f"loadgen FAILED ({mode}): {doc.get('failures')} {doc.get('open_errors')}")
    doc["_cmd"] = " ".join(cmd[:2] + ["ws://127.0.0.1:PORT/trades"] + cmd[3:-1] + ["PID"])
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--subscribers", type=int, default=100)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--scratch", default=os.environ.get("CORECAST_BENCH_DIR", "/tmp"))
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="auth-ab-", dir=a.scratch)
    pw_hash = hash_password(PASSWORD)
    modes = ["off", "token", "basic"]
    res = {m: [] for m in modes}
    out = {"machine_before": machine_note(), "config": vars(a).copy()}
    try:
        for r in range(a.rounds):
            order = modes if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                p, addr, logf = start(scratch, mode, pw_hash)
                try:
                    doc = cell(addr, p.pid, mode, a)
                finally:
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
        for m in ("token", "basic"):
            out[f"{m}_cpu_per_frame_ratio"] = med[m]["cpu_ns_per_frame"] / med["off"]["cpu_ns_per_frame"]
            out[f"{m}_p99_ratio"] = med[m]["p99_us"] / med["off"]["p99_us"]
        out["machine_after"] = machine_note()
        log("medians: " + ", ".join(f"{m} {med[m]['cpu_ns_per_frame']:.0f} ns/frame p99 {med[m]['p99_us']} µs"
                                     for m in modes))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
