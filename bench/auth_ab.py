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
import subprocess
import tempfile

from cells import REL, TRADES, Broker, fanout_row, loadgen, log, machine_note, medians

TOKEN = "bench-token-0123456789abcdef"
PASSWORD = "bench-password"


def hash_password(pw):
    r = subprocess.run([os.path.join(REL, "corecast"), "hash-password"], input=pw,
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def config(mode, pw_hash):
    cfg = [TRADES]
    if mode != "off":
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        cfg.append("[auth]\nmax_failures_per_minute = 1000000\n")
        cfg.append(f'[auth.principals.bench]\npassword = "{pw_hash}"\ntokens = ["{digest}"]\n'
                   'grants = { "data.read" = ["trades"], "data.publish" = ["trades"] }\n')
    return "\n".join(cfg)


def authorization(mode):
    if mode == "token":
        return f"Bearer {TOKEN}"
    if mode == "basic":
        import base64
        return "Basic " + base64.b64encode(f"bench:{PASSWORD}".encode()).decode()
    return None


def cell(broker, mode, a):
    env = dict(os.environ)
    env.pop("LOADGEN_AUTHORIZATION", None)
    if authorization(mode):
        env["LOADGEN_AUTHORIZATION"] = authorization(mode)
    return loadgen(broker, ["--threads", "1", "--publishers", "1", "--window", "64", "--rate", a.rate,
                            "--subscribers", a.subscribers, "--duration", a.seconds, "--drain", "10",
                            "--sample", "16"], env=env, what=mode)


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
                with Broker(scratch, mode, config(mode, pw_hash)) as broker:
                    doc = cell(broker, mode, a)
                row = fanout_row(doc)
                frames = row["frames"]
                res[mode].append(row)
                out["cmd"] = doc["_cmd"]
                log(f"round {r + 1} {mode}: p99 {row['p99_us']} µs, {frames} frames, "
                    f"{row['cpu_ns_per_frame']:.0f} ns CPU/frame")
        med = medians(res)
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
