#!/usr/bin/env bash
# A late joiner's time to its first live row on a keyed stream of 1,000,000 keys.
#
#   bench/state_join.sh [KEYS] [JOINS] [RATE] [BIN] [LOADGEN]
#
# Starts `corecast serve` (release build by default) with one keyed stream (`trades`, the
# loadgen trade schema keyed by `trade_id`), publishes KEYS rows with distinct trade ids (KEYS
# entities), waits until the state holds them all, then keeps one loadgen publisher sending RATE
# rows/s (live rows that update those keys) while JOINS readers, one after another, subscribe
# with `?state` over a plain socket: each reads its greeting (whose `end_offset` E is where the
# snapshot ends), the snapshot (every entity, offsets below E) and stops at its first live row
# (offset E). Prints one line per join and a summary:
# `join=I entities=N snapshot_bytes=B greeting_ms=… first_live_ms=… mb_per_s=…` — the time from
# sending the upgrade request to the greeting (the state thread's select and render) and to the
# first live row (render + the whole snapshot's write and read + the rows queued meanwhile).
# The reader counts bytes and looks for the live row's frame by its offset, so it parses no JSON.
set -euo pipefail
KEYS="${1:-1000000}"
JOINS="${2:-5}"
RATE="${3:-10000}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${4:-${CARGO_TARGET_DIR:-$ROOT/target}/release/corecast}"
LOADGEN="${5:-${CARGO_TARGET_DIR:-$ROOT/target}/release/loadgen}"
SHARED="${CORECAST_SHARED:-/work/shared}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
cp "$SHARED/tools/anchor/trade.schema.json" "$WORK/trade.schema.json"
cat >"$WORK/corecast.toml" <<EOF
[[stream]]
name = "trades"
schema = "trade.schema.json"
key = ["trade_id"]
max_keys = $(( KEYS * 2 ))
EOF
"$BIN" serve --config "$WORK/corecast.toml" --listen 127.0.0.1:0 --data "$WORK/data" \
  >"$WORK/out" 2>"$WORK/err" &
SERVER=$!
PIDS+=("$SERVER")
ADDR=""
for _ in $(seq 200); do
  ADDR="$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$WORK/out" "$WORK/err" | head -n1)"
  [ -n "$ADDR" ] && break
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "the server did not start:" >&2; cat "$WORK/err" >&2; exit 1; }
metric() { curl -s "http://$ADDR/metrics" | sed -n "s/^$1{stream=\"trades\"} //p"; }
"$LOADGEN" --url "ws://$ADDR/trades" --publishers 1 --window 64 --batch 500 --rows "$KEYS" \
  --json >"$WORK/fill.json" 2>"$WORK/fill.err"
deadline=$(( $(date +%s) + 300 ))
until [ "$(metric corecast_state_keys)" = "$KEYS" ]; do
  if [ "$(date +%s)" -gt "$deadline" ]; then
    echo "the state holds $(metric corecast_state_keys) of $KEYS keys" >&2; exit 1
  fi
  sleep 0.5
done
echo "state: $(metric corecast_state_keys) keys, $(metric corecast_state_row_bytes) row bytes"
"$LOADGEN" --url "ws://$ADDR/trades" --publishers 1 --window 64 --batch 10 --rate "$RATE" \
  --duration 600 --json >"$WORK/live.json" 2>"$WORK/live.err" &
PIDS+=("$!")
sleep 2
python3 - "$ADDR" "$JOINS" <<'PY'
import base64, os, re, socket, statistics, sys, time

addr, joins = sys.argv[1], int(sys.argv[2])
host, port = addr.rsplit(":", 1)


def join(i):
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    key = base64.b64encode(os.urandom(16)).decode()
    t0 = time.perf_counter()
    s.sendall((f"GET /trades?state HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    head, buf = buf.split(b"\r\n\r\n", 1)
    if b" 101 " not in head.split(b"\r\n", 1)[0]:
        raise SystemExit(f"no 101: {head[:120]!r}")
    # the greeting: the first frame (a text frame with a 7- or 16-bit length)
    while len(buf) < 4:
        buf += s.recv(65536)
    n = buf[1] & 0x7F
    hl = 2 if n < 126 else 4
    if n == 126:
        n = int.from_bytes(buf[2:4], "big")
    while len(buf) < hl + n:
        buf += s.recv(65536)
    greeting = buf[hl:hl + n].decode()
    t_greeting = time.perf_counter()
    m = re.search(r'"end_offset":(\d+)', greeting)
    if not m:
        raise SystemExit(f"no end_offset in the greeting: {greeting[:200]}")
    end = int(m.group(1))
    # the live row: a text frame whose payload starts with "[E," right after its header (2
    # bytes, or 4 with a 16-bit length)
    needle = f"[{end},".encode()
    rest = buf[hl + n:]
    total = len(rest)
    tail = rest

    def is_frame(t, at):
        return (at >= 2 and t[at - 2] == 0x81 and t[at - 1] < 126) or (
            at >= 4 and t[at - 4] == 0x81 and t[at - 3] == 126)

    while True:
        at = tail.find(needle)
        while at >= 0 and not is_frame(tail, at):
            at = tail.find(needle, at + 1)
        if at >= 0:
            break
        tail = tail[-len(needle) - 4:]
        chunk = s.recv(1 << 20)
        if not chunk:
            raise SystemExit("closed before the first live row")
        total += len(chunk)
        tail += chunk
    t_live = time.perf_counter()
    s.close()
    g_ms = (t_greeting - t0) * 1e3
    l_ms = (t_live - t0) * 1e3
    print(f"join={i} end_offset={end} snapshot_bytes={total} greeting_ms={g_ms:.0f} "
          f"first_live_ms={l_ms:.0f} mb_per_s={total / (t_live - t0) / 1e6:.0f}", flush=True)
    return g_ms, l_ms


results = [join(i) for i in range(joins)]
g = [r[0] for r in results]
l = [r[1] for r in results]
print(f"summary joins={joins} greeting_ms_median={statistics.median(g):.0f} "
      f"first_live_ms_median={statistics.median(l):.0f} first_live_ms_min={min(l):.0f} "
      f"first_live_ms_max={max(l):.0f}", flush=True)
PY
echo "entities per snapshot: $(( $(metric corecast_state_snapshot_entities_total) / JOINS )) (corecast_state_snapshot_entities_total / joins)"
echo "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
