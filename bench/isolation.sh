#!/usr/bin/env bash
# Isolation: do stalled subscribers slow the others down?
#
#   bench/isolation.sh [ROUNDS] [BIN] [LOADGEN]
#
# One broker; per round, two loadgen runs side by side in time (order alternating): 90 live
# subscribers at 10,000 rows/s for 5 s, once alone and once while 10 more subscribers are stalled
# (bench/stalled_subscribers.py: they stop reading after the greeting, 4 KiB receive buffers).
# Prints each run's p99 publish->deliver latency and the median ratio with/without.
set -euo pipefail
ROUNDS="${1:-3}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${2:-${CARGO_TARGET_DIR:-$ROOT/target}/release/corecast}"
LOADGEN="${3:-${CARGO_TARGET_DIR:-$ROOT/target}/release/loadgen}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
"$BIN" serve --listen 127.0.0.1:0 --data "$WORK/data" >"$WORK/out" 2>"$WORK/err" &
PIDS+=("$!")
for _ in $(seq 100); do
  ADDR="$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$WORK/out" | head -n1)"
  [ -n "$ADDR" ] && break
  sleep 0.1
done
run() { # prints p99 µs and frames/s of one 90-subscriber run
  "$LOADGEN" --url "ws://$ADDR/trades" --publishers 1 --window 64 --rate 10000 --subscribers 90 \
    --duration 5 --drain 10 --json >"$WORK/run.json" 2>"$WORK/run.err" || true
  python3 - "$WORK/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
lat = r.get("latency_us") or r.get("latency") or {}
print(lat.get("p99"), r.get("ok"), r.get("failures"))
PY
}
with_stalled() {
  python3 "$ROOT/bench/stalled_subscribers.py" "$ADDR" trades 10 9 >"$WORK/stalled.out" &
  local p=$!
  sleep 1
  run
  wait "$p" || true
  sed -n 's/^closed by the server: /  stalled closed by the server: /p' "$WORK/stalled.out"
}
A=(); B=()
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then
    a="$(run)"; b="$(with_stalled)"
  else
    b="$(with_stalled)"; a="$(run)"
  fi
  echo "round $r: alone p99_us ok failures: $a | with 10 stalled: $b"
  A+=("$(echo "$a" | awk '{print $1}')"); B+=("$(echo "$b" | head -1 | awk '{print $1}')")
done
python3 - "${A[*]}" "${B[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"median p99 alone {ma:.0f} us, with 10 stalled {mb:.0f} us, ratio {mb / ma:.3f}")
PY
