#!/usr/bin/env bash
# Memory per idle WebSocket subscriber, and N subscribers in one broker process with no loss.
#
#   bench/idle_rss.sh [N] [BIN] [LOADGEN]
#
# Starts `corecast serve` (release build by default) on a fresh data directory, reads its RSS,
# connects N live subscribers from loadgen processes of at most 9,500 connections each (a process
# may hold 20,000 descriptors here), reads the RSS again once /stats counts them all, then has one
# publisher send 2,000 rows at 500 rows/s that every subscriber must receive, in order, exactly
# once (loadgen exits 1 on a gap, duplicate or missing tail). Prints
# `subscribers=N rss_before_kib=… rss_with_kib=… per_subscriber_bytes=… loss_check=ok|FAILED`.
set -euo pipefail
N="${1:-15000}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${2:-${CARGO_TARGET_DIR:-$ROOT/target}/release/corecast}"
LOADGEN="${3:-${CARGO_TARGET_DIR:-$ROOT/target}/release/loadgen}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
"$BIN" serve --listen 127.0.0.1:0 --data "$WORK/data" >"$WORK/out" 2>"$WORK/err" &
SERVER=$!
PIDS+=("$SERVER")
for _ in $(seq 100); do
  ADDR="$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$WORK/out" | head -n1)"
  [ -n "$ADDR" ] && break
  sleep 0.1
done
rss() { awk '/VmRSS/ {print $2}' "/proc/$SERVER/status"; }
conns() { curl -s "http://$ADDR/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])'; }
sleep 0.5
BEFORE="$(rss)"
PER=9500
left="$N"
i=0
HOLD=$(( 30 + N / 1000 ))
LG=()
COUNTS=()
while [ "$left" -gt 0 ]; do
  n=$(( left < PER ? left : PER ))
  left=$(( left - n ))
  "$LOADGEN" --url "ws://$ADDR/trades" --publishers 0 --subscribers "$n" --duration "$HOLD" \
    --json >"$WORK/lg$i.json" 2>"$WORK/lg$i.err" &
  LG+=("$!")
  COUNTS+=("$n")
  PIDS+=("$!")
  i=$(( i + 1 ))
done
# every subscriber connected
deadline=$(( $(date +%s) + 120 ))
while [ "$(conns)" -lt "$N" ]; do
  if [ "$(date +%s)" -gt "$deadline" ]; then echo "only $(conns) of $N connected" >&2; exit 1; fi
  sleep 0.5
done
sleep 2
WITH="$(rss)"
# rows every subscriber must get: a separate publisher
"$LOADGEN" --url "ws://$ADDR/trades" --publishers 1 --rate 500 --rows 2000 --subscribers 0 \
  --json >"$WORK/pub.json" 2>"$WORK/pub.err"
ok=ok
for k in "${!LG[@]}"; do
  if ! wait "${LG[$k]}"; then ok=FAILED; tail -3 "$WORK/lg$k.err" >&2; fi
  python3 - "$WORK/lg$k.json" "${COUNTS[$k]}" 2000 <<'PY' || ok=FAILED
import json, sys
r = json.load(open(sys.argv[1]))
n, rows = int(sys.argv[2]), int(sys.argv[3])
d = r.get("deliver", {})
good = d.get("frames") == n * rows and d.get("gaps") == 0 and d.get("dups") == 0
print(sys.argv[1].rsplit("/", 1)[-1], "subscribers", n, "frames", d.get("frames"), "of", n * rows,
      "gaps", d.get("gaps"), "dups", d.get("dups"), "ok" if good else "FAILED", r.get("failures"))
sys.exit(0 if good else 1)
PY
done
echo "subscribers=$N rss_before_kib=$BEFORE rss_with_kib=$WITH per_subscriber_bytes=$(( (WITH - BEFORE) * 1024 / N )) loss_check=$ok"
[ "$ok" = ok ]
