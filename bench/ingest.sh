#!/usr/bin/env bash
# End-to-end bulk ingest (issue 12 item 6): ROWS real trade rows from a Parquet file to durable
# offsets through `corecast ingest` and POST /v1/streams/NAME/ingest, release build.
#   bench/ingest.sh [--no-build] [ROWS (5000000)] [BATCH_ROWS (65536)]
# Environment: CORES (serving threads, default all), SEAL=default|deferred (deferred: no seal
# during the run, so the figure is the ingest path alone), CORECAST_BENCH_DIR (scratch, /tmp),
# KEEP=1 keeps the scratch directory. Release binaries from $CARGO_TARGET_DIR/release (default
# target/release). Prints the CLI's summary, the wall time, and checks the end offset.
# See docs/PERFORMANCE.md, "Bulk ingest".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine --bin corecast -p corecast-bench --bin trades_parquet)
fi
ROWS="${1:-5000000}"
BATCH="${2:-65536}"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
SHARED="$ROOT/../shared/data"
WORK="$(mktemp -d "${CORECAST_BENCH_DIR:-/tmp}/cc-ingest.XXXXXX")"
SERVER=""
cleanup() {
  [[ -n "$SERVER" ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
  [[ "${KEEP:-0}" == 1 ]] || rm -rf "$WORK"
}
trap cleanup EXIT
echo "input: $ROWS trade rows (btcusdt-trades.jsonl repeated) -> $WORK/trades.parquet"
"$BIN/trades_parquet" "$SHARED/btcusdt-trades.jsonl" "$WORK/trades.parquet" "$ROWS"
ls -l "$WORK/trades.parquet" | awk '{print "parquet file:", $5, "bytes"}'
SEAL_KEYS=""
if [[ "${SEAL:-default}" == deferred ]]; then
  SEAL_KEYS=$'seal_target_bytes = 17179869184\nseal_every_s = 86400'
fi
cat > "$WORK/corecast.toml" <<TOML
[[stream]]
name = "btc"
schema = "$SHARED/btcusdt-trades.schema.json"
exactly_once = true
$SEAL_KEYS
TOML
CORES_ARG=()
[[ -n "${CORES:-}" ]] && CORES_ARG=(--cores "$CORES")
"$BIN/corecast" serve --config "$WORK/corecast.toml" --data "$WORK/data" --listen 127.0.0.1:0 \
  ${CORES_ARG[@]+"${CORES_ARG[@]}"} > "$WORK/server.out" 2> "$WORK/server.err" &
SERVER=$!
for _ in $(seq 1 200); do
  ADDR="$(sed -n 's/^corecast listening on \([^ ]*\) .*/\1/p' "$WORK/server.out")"
  [[ -n "$ADDR" ]] && break
  sleep 0.05
done
[[ -n "$ADDR" ]] || { cat "$WORK/server.err"; exit 1; }
# the broker's CPU time (user + system, all threads) in clock ticks, from /proc/PID/stat
cpu_ticks() { local f; read -ra f <<<"$(sed 's/^.*) //' "/proc/$1/stat")"; echo $((f[11] + f[12])); }
TICKS="$(getconf CLK_TCK)"
CPU0="$(cpu_ticks "$SERVER")"
START=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$WORK/cli.time" \
  "$BIN/corecast" ingest "ws://$ADDR/btc" --file "$WORK/trades.parquet" --batch-rows "$BATCH"
END=$(date +%s.%N)
CPU1="$(cpu_ticks "$SERVER")"
# what the broker made the disk write (log records, spares' zeros, meta.db; the seal that may
# follow is still running, so sealed segments are only partly in it)
WROTE="$(sed -n 's/^write_bytes: //p' "/proc/$SERVER/io")"
END_OFFSET="$(curl -s "http://$ADDR/v1/streams/btc" | python3 -c 'import json,sys; print(json.load(sys.stdin)["end_offset"])')"
awk -v s="$START" -v e="$END" -v r="$ROWS" 'BEGIN { printf "wall %.2f s from the command to its last durable reply: %.0f rows/s\n", e - s, r / (e - s) }'
if [[ "$END_OFFSET" != "$((ROWS + 1))" ]]; then
  echo "end_offset $END_OFFSET, expected $((ROWS + 1))" >&2
  exit 1
fi
echo "end_offset $END_OFFSET: every row durable, offsets 1..$ROWS"
awk -v w="$WROTE" -v r="$ROWS" 'BEGIN { printf "the broker wrote %.0f MB to the disk by its last reply: %.0f bytes per row\n", w / 1e6, w / r }'
awk -v a="$CPU0" -v b="$CPU1" -v t="$TICKS" -v r="$ROWS" -v s="$START" -v e="$END" 'BEGIN {
  c = (b - a) / t
  printf "broker CPU during the ingest: %.2f s (%.2f cores busy on average): %.3f us per row\n", c, c / (e - s), c * 1e6 / r }'
read -r CLI_U CLI_S < <(tail -n1 "$WORK/cli.time")
awk -v u="$CLI_U" -v y="$CLI_S" -v r="$ROWS" 'BEGIN {
  printf "corecast ingest (the client: Parquet decoding, Arrow IPC) CPU: %.2f s: %.3f us per row\n", u + y, (u + y) * 1e6 / r }'
