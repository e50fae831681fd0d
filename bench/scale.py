#!/usr/bin/env python3
"""Scaling with cores (issue 17, item 5): the fan-out and publish matrix at `--cores` 1, 2, 4, 8
on one hot stream, with loadgen pinned to the CPUs the broker does not use, and one table of the
speed-up per core count. Made for a 16-core machine (about 4 minutes there with the defaults);
a core count that would leave loadgen no CPU of its own is skipped and said so.

Per core count C: a fresh release broker pinned (taskset) to CPUs 0..C-1 with `--cores C`, then
  fan-out  1 publisher (window 64, 100 rows a frame) paced by --max-lag 4096, --subscribers
           subscribers: delivered frames/s, p99 publish→deliver, server CPU per frame;
  publish  --publishers durable publishers (window 64, 100 rows a frame) into the same stream:
           acknowledged rows/s (every ack: committed, fdatasynced, handed to the fan-out).
loadgen runs on the remaining CPUs with min(8, remaining) client threads, the same for every C
where the machine allows it. The goal (issue 17): fan-out >= 1.8x from 1 to 2 cores and >= 6x
from 1 to 8.

    bench/scale.sh [--no-build] [--cores 1,2,4,8] [--seconds 8] [--subscribers 1000]
"""
import argparse
import json
import os
import shutil
import tempfile
import time

from cells import Broker, fanout_row, loadgen, log, machine_note


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", default="1,2,4,8")
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--publishers", type=int, default=16)
    ap.add_argument("--max-client-threads", type=int, default=8)
    ap.add_argument("--scratch", default=os.environ.get("CORECAST_BENCH_DIR", "/tmp"))
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    started = time.monotonic()
    out = {"machine_before": machine_note(), "cpus": len(cpus), "config": vars(a).copy(),
           "rows": [], "skipped": []}
    scratch = tempfile.mkdtemp(prefix="scale-", dir=a.scratch)
    try:
        for c in [int(x) for x in a.cores.split(",")]:
            if c >= len(cpus):
                why = f"--cores {c} leaves loadgen no CPU of its own on {len(cpus)} CPUs"
                log("skipped: " + why)
                out["skipped"].append(why)
                continue
            server, client = cpus[:c], cpus[c:]
            threads = min(a.max_client_threads, len(client))
            row = {"cores": c, "client_cpus": len(client), "client_threads": threads}
            with Broker(scratch, f"c{c}", cores=c, cpus=server) as broker:
                doc = loadgen(broker, ["--threads", threads, "--publishers", 1, "--window", 64,
                                       "--batch", 100, "--subscribers", a.subscribers,
                                       "--max-lag", 4096, "--duration", a.seconds, "--drain", 10],
                              cpus=client, what=f"fan-out at --cores {c}")
                f = fanout_row(doc)
                row.update(fanout_frames_per_s=doc["deliver"]["frames_per_s"],
                           fanout_p99_us=f["p99_us"], fanout_cpu_ns_per_frame=f["cpu_ns_per_frame"])
                out["fanout_cmd"] = doc["_cmd"]
                doc = loadgen(broker, ["--threads", threads, "--publishers", a.publishers,
                                       "--window", 64, "--batch", 100, "--duration", a.seconds,
                                       "--drain", 20],
                              cpus=client, what=f"publish at --cores {c}")
                row.update(publish_rows_per_s=doc["publish"]["rows_per_s"],
                           publish_ack_p99_us=doc["publish"]["ack_latency_us"]["p99"])
                out["publish_cmd"] = doc["_cmd"]
            out["rows"].append(row)
            log(f"--cores {c}: fan-out {row['fanout_frames_per_s']:,.0f} frames/s "
                f"(p99 {row['fanout_p99_us']} µs), publish {row['publish_rows_per_s']:,.0f} rows/s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out["machine_after"] = machine_note()
    out["wall_s"] = round(time.monotonic() - started, 1)
    rows = out["rows"]
    if rows:
        base = rows[0]
        print(f"\nscaling on {len(cpus)} CPUs, one hot stream ({out['machine_before']}; "
              f"{out['wall_s']} s)")
        print("| --cores | client CPUs / threads | fan-out frames/s | speed-up | p99 µs | "
              "server CPU ns/frame | publish rows/s | speed-up | ack p99 µs |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            fs = r["fanout_frames_per_s"] / max(base["fanout_frames_per_s"], 1e-9)
            ps = r["publish_rows_per_s"] / max(base["publish_rows_per_s"], 1e-9)
            r["fanout_speedup"], r["publish_speedup"] = fs, ps
            print(f"| {r['cores']} | {r['client_cpus']} / {r['client_threads']} | "
                  f"{r['fanout_frames_per_s']:,.0f} | {fs:.2f}x | {r['fanout_p99_us']} | "
                  f"{r['fanout_cpu_ns_per_frame']:.0f} | {r['publish_rows_per_s']:,.0f} | {ps:.2f}x | "
                  f"{r['publish_ack_p99_us']} |")
        for s in out["skipped"]:
            print(f"skipped: {s}")
        print(f"fan-out: {out.get('fanout_cmd')}\npublish: {out.get('publish_cmd')}")
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
