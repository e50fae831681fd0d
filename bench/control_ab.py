"""A neighbour stream's fan-out with the control plane churning other streams, against the same
fan-out with the control plane idle (issue 15, "Shows": creating, stopping and retiring streams
while 1,000 subscribers read a neighbour stream at 1,000 rows/s: the neighbour's subscribers lose
nothing and their p99 stays within 10 %).

Each round starts a fresh release broker (`[control] enabled = true`, the static stream `trades`)
per mode and runs one loadgen fan-out cell on `trades`: --subscribers subscribers, --rate rows/s,
--seconds of publishing. In mode `churn` a thread drives the control plane for the whole cell:
create `cN` (PUT with If-None-Match: *), wait for its operation, stop it, start it again, retire
it — each step a mutation with its own Idempotency-Key and the current ETag, each waited for
until `succeeded` — then the next N. Modes alternate round by round (quiet, churn, churn, quiet,
...) so that a drift of the shared machine falls on both. loadgen fails the run on any gap,
duplicate or missing row, so "loses nothing" is checked by every cell.

    bench/control_ab.sh [--no-build] [--rounds 4] [--subscribers 1000] [--rate 1000] [--seconds 10]
"""
import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request

from cells import TRADES, Broker, cpu_ns, fanout_row, loadgen, log, machine_note, medians

CONFIG = TRADES + "\n[control]\nenabled = true\n"
# the desired states each created stream goes through (CHURN_STEPS=stopped,serving,retired)
STEPS = [x for x in os.environ.get("CHURN_STEPS", "stopped,serving,retired").split(",") if x]
DECL = {"schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}}


def request(addr, method, path, body=None, headers=None):
    """One HTTP request; (status, headers, parsed JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{addr}{path}", data=data, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return r.status, r.headers, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, e.headers, (json.loads(raw) if raw else None)


class Churn:
    """Creates, stops, starts and retires streams c0, c1, ... on `addr` until closed."""

    def __init__(self, addr):
        self.addr = addr
        self.stop = threading.Event()
        self.cycles = 0
        self.mutations = 0
        self.error = None
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def mutate(self, path, body, pre):
        key = f"bench-{time.monotonic_ns()}"
        headers = {"Content-Type": "application/json", "Idempotency-Key": key, **pre}
        status, _, doc = request(self.addr, "PUT", path, body, headers)
        if status not in (200, 202):
            raise RuntimeError(f"PUT {path}: {status} {doc}")
        self.mutations += 1
        op = doc.get("operation_id") if doc else None
        while op:
            _, _, o = request(self.addr, "GET", f"/control/v1/operations/{op}")
            if o["state"] == "succeeded":
                break
            if o["state"] == "failed":
                raise RuntimeError(f"operation {op} failed: {o}")
            time.sleep(0.01)

    def desire(self, name, state):
        _, headers, _ = request(self.addr, "GET", f"/control/v1/streams/{name}")
        self.mutate(f"/control/v1/streams/{name}/desired", {"state": state},
                    {"If-Match": headers["ETag"]})

    def run(self):
        n = 0
        try:
            while not self.stop.is_set():
                name = f"c{n}"
                self.mutate(f"/control/v1/streams/{name}", DECL, {"If-None-Match": "*"})
                for state in STEPS:
                    self.desire(name, state)
                self.cycles += 1
                n += 1
        except Exception as e:  # reported by close(): the cell is void
            self.error = e

    def close(self):
        self.stop.set()
        self.t.join(60)
        if self.error:
            raise SystemExit(f"control churn failed: {self.error}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1)
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="cc-control-ab.")
    res = {"quiet": [], "churn": []}
    extra = {"churn": []}
    log(f"start: {machine_note()}")
    for r in range(a.rounds):
        order = ["quiet", "churn"] if r % 2 == 0 else ["churn", "quiet"]
        for mode in order:
            with Broker(scratch, f"{mode}{r}", config=CONFIG, cores=a.cores) as b:
                churn = Churn(b.addr) if mode == "churn" else None
                c0 = cpu_ns(b.pid)
                doc = loadgen(b, ["--threads", a.threads, "--publishers", "1", "--window", "64",
                                  "--rate", a.rate, "--subscribers", a.subscribers,
                                  "--duration", a.seconds, "--drain", "10", "--sample", "16"],
                              what=mode)
                cpu = (cpu_ns(b.pid) - c0) / 1e9
                row = fanout_row(doc)
                if churn:
                    churn.close()
                    extra["churn"].append({"cycles": churn.cycles, "mutations": churn.mutations})
                    row["cycles"] = churn.cycles
                res[mode].append(row)
                log(f"round {r} {mode}: p99 {row['p99_us']} us, p50 {row['p50_us']} us, frames "
                    f"{row['frames']}, broker CPU {cpu:.2f} s"
                    + (f", {churn.cycles} create/stop/start/retire cycles" if churn else ""))
    log(f"end: {machine_note()}")
    med = medians(res)
    print(f"command: {doc['_cmd']}")
    print(f"{a.rounds} rounds per mode, {a.subscribers} subscribers x {a.rate} rows/s, "
          f"{a.seconds} s each, corecast --cores {a.cores}")
    print("| mode | p50 µs | p99 µs | frames | server CPU ns/frame | control cycles |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in ("quiet", "churn"):
        m = med[mode]
        print(f"| {mode} | {m['p50_us']:.0f} | {m['p99_us']:.0f} | {m['frames']:.0f} | "
              f"{m['cpu_ns_per_frame']:.0f} | {m.get('cycles', 0):.0f} |")
    ratio = med["churn"]["p99_us"] / med["quiet"]["p99_us"]
    print(f"p99 churn / quiet (medians): {ratio:.3f} (goal <= 1.10); every cell lost nothing "
          f"(loadgen checks every subscriber's offsets)")
    print("per round p99 µs: " + ", ".join(
        f"{m}: " + "/".join(f"{x['p99_us']:.0f}" for x in res[m]) for m in res))
    print(f"spread of quiet p99: {statistics.pstdev(x['p99_us'] for x in res['quiet']):.0f} µs")


if __name__ == "__main__":
    main()
