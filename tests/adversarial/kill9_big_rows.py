#!/usr/bin/env python3
# Adversarial: kill -9 the broker while two pipelined publishers send frames of 1..50 small rows,
# 1..8 rows of 20-400 KB and single rows of 3-4 MB (max_message_bytes 4 MiB) to a stream whose
# segments are 64 KiB or 4 KiB (alternating per start), so nearly every commit is larger than a
# segment and the kill often lands in the middle of a multi-MB pwrite (torn records in spares).
# After each kill: restart, read the whole log through the pull API and check every acknowledged
# offset holds its row (id, length, bytes) with no hole.
# Usage: python3 tests/adversarial/kill9_big_rows.py WORKDIR ROUNDS SEED (needs target/debug/corecast)
import os, sys, socket, struct, json, random, subprocess, time, threading, signal, urllib.request, base64, shutil
BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/debug/corecast")
base = sys.argv[1]; rounds = int(sys.argv[2]); seed = int(sys.argv[3])
rng = random.Random(seed)
data = os.path.join(base, "data")
cfgs = []
for sb in (65536, 4096):
    p = os.path.join(base, f"c{sb}.toml")
    open(p, "w").write(f'''[[stream]]
name = "big"
durable = true
max_replay = "unlimited"
max_message_bytes = 4194304
segment_bytes = {sb}
''')
    cfgs.append(p)

def start(cfg, log):
    f = open(log, "wb")
    p = subprocess.Popen([BIN, "serve", "--config", cfg, "--data", data, "--listen", "127.0.0.1:0", "--cores", "2"], stdout=subprocess.PIPE, stderr=f)
    line = p.stdout.readline().decode()
    if "listening on" not in line:
        p.wait(); raise SystemExit("no listen: " + line + open(log).read())
    addr = line.split("listening on ")[1].split()[0]
    return p, addr

def ws_connect(addr, path):
    h, port = addr.rsplit(":", 1)
    s = socket.create_connection((h, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c: raise IOError("eof in handshake")
        buf += c
    head, rest = buf.split(b"\r\n\r\n", 1)
    assert b" 101 " in head.split(b"\r\n")[0], head
    return s, rest

def send_frame(s, payload, opcode=1):
    mask = os.urandom(4)
    n = len(payload)
    hdr = bytes([0x80 | opcode])
    if n < 126: hdr += bytes([0x80 | n])
    elif n < 65536: hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
    else: hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
    # mask quickly
    m = (mask * (n // 4 + 1))[:n]
    body = (int.from_bytes(payload, "big") ^ int.from_bytes(m, "big")).to_bytes(n, "big") if n else b""
    s.sendall(hdr + mask + body)

class Reader:
    def __init__(self, s, rest): self.s = s; self.buf = rest
    def need(self, n):
        while len(self.buf) < n:
            c = self.s.recv(1 << 16)
            if not c: raise IOError("eof")
            self.buf += c
    def frame(self):
        self.need(2)
        b0, b1 = self.buf[0], self.buf[1]; n = b1 & 0x7f; off = 2
        if n == 126: self.need(4); n = struct.unpack(">H", self.buf[2:4])[0]; off = 4
        elif n == 127: self.need(10); n = struct.unpack(">Q", self.buf[2:10])[0]; off = 10
        self.need(off + n)
        p = self.buf[off:off+n]; self.buf = self.buf[off+n:]
        return b0 & 0x0f, p

acked = {}  # offset -> (id, len)
next_id = [1]
def publisher(addr, stop, out):
    try:
        s, rest = ws_connect(addr, "/big?publish")
    except Exception as e:
        out.append(("connect", str(e))); return
    r = Reader(s, rest)
    op, g = r.frame()  # greeting
    inflight = []
    lock = threading.Lock()
    def reader():
        try:
            while True:
                op, p = r.frame()
                if op != 1: continue
                v = json.loads(p)
                with lock: rows = inflight.pop(0)
                if "ok" not in v: out.append(("refused", p[:200])); continue
                for off, key in zip(v["ok"], rows): acked[off] = key
        except Exception as e:
            pass
    t = threading.Thread(target=reader, daemon=True); t.start()
    try:
        while not stop.is_set():
            with lock: n_in = len(inflight)
            if n_in > 6: time.sleep(0.002); continue
            kind = rng.random()
            if kind < 0.3:
                rows = [(next_id[0] + i, rng.randint(10, 300)) for i in range(rng.randint(1, 50))]
            elif kind < 0.8:
                rows = [(next_id[0] + i, rng.randint(20000, 400000)) for i in range(rng.randint(1, 8))]
            else:
                rows = [(next_id[0], rng.randint(3000000, 4100000))]
            next_id[0] += len(rows)
            text = "[" + ",".join('{"i":%d,"p":"%s"}' % (i, chr(97 + i % 26) * L) for i, L in rows) + "]"
            if len(text) > 4194304:
                rows = rows[:1]; text = '{"i":%d,"p":"%s"}' % (rows[0][0], chr(97 + rows[0][0] % 26) * 4000000)
                rows = [(rows[0][0], 4000000)]
            with lock: inflight.append(rows)
            send_frame(s, text.encode())
    except Exception as e:
        pass

def pull_all(addr):
    got = {}
    frm = 1
    while True:
        u = f"http://{addr}/v1/streams/big/rows?from={frm}&limit=500"
        v = json.loads(urllib.request.urlopen(u, timeout=60).read())
        for off, ts, row in v["rows"]:
            got[off] = row
        if v["next_offset"] >= v["end_offset"]:
            return got, v["end_offset"]
        frm = v["next_offset"]

os.makedirs(data, exist_ok=True)
total_acked = 0
for rnd in range(1, rounds + 1):
    cfg = cfgs[rnd % 2]
    p, addr = start(cfg, os.path.join(base, f"a{rnd}.log"))
    stop = threading.Event(); out = []
    ts = [threading.Thread(target=publisher, args=(addr, stop, out)) for _ in range(2)]
    for t in ts: t.start()
    time.sleep(rng.uniform(0.2, 2.0))
    p.send_signal(signal.SIGKILL); p.wait()
    stop.set()
    for t in ts: t.join(5)
    p, addr = start(cfgs[(rnd + 1) % 2], os.path.join(base, f"b{rnd}.log"))
    try:
        got, end = pull_all(addr)
    except Exception as e:
        print("round", rnd, "pull failed", e, open(os.path.join(base, f"b{rnd}.log")).read()[-2000:]); sys.exit(1)
    problems = [o for o in out if o[0] == "refused"]
    for off, (i, L) in acked.items():
        row = got.get(off)
        if row is None: problems.append(("missing", off)); continue
        if row.get("i") != i or len(row.get("p", "")) != L or row["p"] != chr(97 + i % 26) * L:
            problems.append(("wrong", off, row.get("i"), i))
    offs = sorted(got)
    if offs and offs != list(range(offs[0], end)):
        problems.append(("holes", offs[0], end, len(offs)))
    errs = [l for l in open(os.path.join(base, f"b{rnd}.log")).read().splitlines() if "ERROR" in l or "torn" in l]
    p.send_signal(signal.SIGTERM); p.wait(20)
    print(f"round {rnd}: acked total {len(acked)}, log end {end}, problems {len(problems)} {problems[:5]} log: {errs[:3]}", flush=True)
    if problems: sys.exit(1)
print("OK", len(acked), "acked rows")
