"""What the side-by-side bench scripts share (auth_ab.py, ui_ab.py, scale.py): a fresh release
broker per cell, one loadgen run against it, and the figures every script reports from a run.

Release binaries come from $CARGO_TARGET_DIR/release (default target/release).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")
SCHEMA = os.path.join(ROOT, "..", "shared", "tools", "anchor", "trade.schema.json")
TRADES = f'[[stream]]\nname = "trades"\nschema = "{SCHEMA}"\nmax_replay = "unlimited"\n'


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def machine_note():
    with open("/proc/loadavg") as f:
        return "loadavg " + " ".join(f.read().split()[:3])


def pinned(cmd, cpus):
    """`cmd` under `taskset -c CPUS` when `cpus` (a list of CPU numbers) is given."""
    if not cpus:
        return cmd
    return ["taskset", "-c", ",".join(map(str, cpus))] + cmd


class Broker:
    """`corecast serve` in its own scratch directory `scratch/name`, on a free loopback port
    (the binary of `bin_dir`, default REL)."""

    def __init__(self, scratch, name, config=TRADES, cores=1, cpus=None, bin_dir=None):
        self.dir = os.path.join(scratch, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        path = os.path.join(self.dir, "corecast.toml")
        with open(path, "w") as f:
            f.write(config)
        self.logf = open(os.path.join(self.dir, "corecast.log"), "w")
        cmd = [os.path.join(bin_dir or REL, "corecast"), "serve", "--config", path, "--listen", "127.0.0.1:0",
               "--data", os.path.join(self.dir, "data"), "--cores", str(cores)]
        self.p = subprocess.Popen(pinned(cmd, cpus), stdout=subprocess.PIPE, stderr=self.logf,
                                  text=True)
        line = self.p.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise SystemExit(f"corecast did not start: {line!r} (see {self.logf.name})")
        self.addr = line.split("listening on ")[1].split()[0]
        self.pid = self.p.pid

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.logf.close()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()


def loadgen(broker, args, env=None, cpus=None, what="", stream="trades"):
    """One loadgen run against `broker` (`args`: its options after --url/--json/--server-pid);
    the JSON document it printed, with `_cmd` (the command with the port and pid left out).
    Exits naming the cell when loadgen fails or loses a row."""
    cmd = [os.path.join(REL, "loadgen"), "--url", f"ws://{broker.addr}/{stream}", "--json",
           "--server-pid", str(broker.pid)] + [str(x) for x in args]
    r = subprocess.run(pinned(cmd, cpus), capture_output=True, text=True, env=env)
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise SystemExit(f"loadgen printed no JSON ({what}, rc {r.returncode}): {r.stderr[-2000:]}")
    if r.returncode != 0 or not doc.get("ok"):
        raise SystemExit(f"loadgen FAILED ({what}): {doc.get('failures')} {doc.get('open_errors')}")
    doc["_cmd"] = " ".join(["loadgen", "--url", f"ws://127.0.0.1:PORT/{stream}", "--json",
                            "--server-pid", "PID"] + cmd[6:])
    if cpus:
        doc["_cmd"] = f"taskset -c {','.join(map(str, cpus))} " + doc["_cmd"]
    return doc


def cpu_ns(pid):
    """CPU time of every thread of `pid` so far, in nanoseconds (/proc/PID/task/*/schedstat: the
    scheduler's own count, finer than the clock ticks of /proc/PID/stat)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended between the listing and the read
    return total


def fanout_row(doc):
    """The figures of a fan-out run: latency, frames delivered, server CPU per frame."""
    frames = doc["deliver"]["frames"]
    cpu = doc["server"]["cpu_s"] or 0
    return {"p50_us": doc["latency_us"]["p50"], "p99_us": doc["latency_us"]["p99"],
            "frames": frames, "server_cpu_s": cpu, "cpu_ns_per_frame": cpu * 1e9 / max(frames, 1)}


def medians(res):
    """{mode: [row, ...]} → {mode: {key: median}}."""
    return {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in res.items()}
