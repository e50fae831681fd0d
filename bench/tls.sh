#!/usr/bin/env bash
# TLS cost, in one run against one broker (release, --cores 1) serving the same stream on a
# plaintext port and on a TLS port ([tls] listen):
#   1. full handshakes per server CPU-second (openssl s_time -new, TLS 1.3 then TLS 1.2; a new
#      session each time, no resumption), read from /proc/PID/stat around each run;
#   2. fan-out: server CPU µs per delivered frame at N subscribers (default 1,000), plaintext and
#      TLS alternating, ROUNDS times each (loadgen --server-pid).
# A test CA and certificate are made with openssl in a temporary directory (never kept).
#   bench/tls.sh [--no-build] [--subscribers N] [--rate R] [--seconds S] [--rounds K]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/release"
BUILD=1 SUBS=1000 RATE=2000 SECS=3 ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0 ;;
    --subscribers) SUBS="$2"; shift ;;
    --rate) RATE="$2"; shift ;;
    --seconds) SECS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) echo "bench/tls.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ "$BUILD" = 1 ]; then
  (cd "$ROOT" && cargo build --release -p corecast-engine --bin corecast && cargo build --release -p corecast-loadgen)
fi
WORK="$(mktemp -d)"
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# the test PKI: a CA, a P-256 certificate for localhost and 127.0.0.1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/CN=corecast bench CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout "$WORK/key.pem" -out "$WORK/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$WORK/ext.cnf"
openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
  -CAcreateserial -days 1 -extfile "$WORK/ext.cnf" -out "$WORK/cert.pem" 2>/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PLAIN="$(free_port)"
TLS="$(free_port)"
cat >"$WORK/bench.toml" <<EOF
[[stream]]
name = "trades"
schema = "$ROOT/../shared/tools/anchor/trade.schema.json"
max_backlog = 65536

[tls]
cert = "cert.pem"
key = "key.pem"
listen = "127.0.0.1:$TLS"
EOF
CORECAST_LOG=warn "$TARGET/corecast" serve --config "$WORK/bench.toml" --data "$WORK/data" \
  --listen "127.0.0.1:$PLAIN" --cores 1 >"$WORK/serve.out" 2>"$WORK/serve.err" &
PID=$!
for _ in $(seq 100); do grep -q "tls on" "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
grep -q "tls on" "$WORK/serve.out" || { cat "$WORK/serve.err" >&2; exit 1; }

# server CPU seconds so far (utime + stime)
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$PID/stat"; }

echo "## handshakes (openssl s_time -new, 5 s each; server: --cores 1)"
echo
echo "| version | handshakes | server CPU s | handshakes per server CPU-second |"
echo "| --- | --- | --- | --- |"
for v in -tls1_3 -tls1_2; do
  before="$(cpu_s)"
  out="$(openssl s_time -connect "127.0.0.1:$TLS" -new -time 5 "$v" -CAfile "$WORK/ca.pem" 2>&1 || true)"
  after="$(cpu_s)"
  n="$(sed -n 's/^\([0-9]*\) connections in .* real seconds.*/\1/p' <<<"$out" | head -n1)"
  [ -n "$n" ] || { echo "s_time: $out" >&2; exit 1; }
  awk -v v="$v" -v n="$n" -v b="$before" -v a="$after" \
    'BEGIN { c = a - b; printf "| %s | %d | %.2f | %.0f |\n", v, n, c, (c > 0 ? n / c : 0) }'
done
echo
echo "## fan-out: $SUBS subscribers, $RATE rows/s, $SECS s per cell (loadgen --threads 1)"
echo
echo "| transport | round | delivered frames | server µs per delivered frame | gaps+dups+missing |"
echo "| --- | --- | --- | --- | --- |"
for r in $(seq "$ROUNDS"); do
  for t in plain tls; do
    if [ "$t" = plain ]; then url="ws://127.0.0.1:$PLAIN/trades"; else url="wss://localhost:$TLS/trades"; fi
    json="$("$TARGET/loadgen" --url "$url" --ca "$WORK/ca.pem" --publishers 1 --rate "$RATE" \
      --subscribers "$SUBS" --duration "$SECS" --drain 10 --server-pid "$PID" --json)"
    python3 - "$t" "$r" "$json" <<'PY'
import json, sys
t, r, doc = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
d = doc.get("deliver", {})
s = doc.get("server", {})
bad = sum(d.get(k, 0) or 0 for k in ("gaps", "dups", "missing"))
print(f"| {t} | {r} | {d.get('frames')} | {s.get('cpu_us_per_delivered_frame')} | {bad} |")
PY
  done
done
