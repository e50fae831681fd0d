#!/usr/bin/env bash
# Autobahn TestSuite conformance run of corecast's WebSocket codec, driven by kosoku (PyPI
# `kosoku`, a native runner of the Autobahn case files) against `corecast serve --echo`'s
# `/_echo` endpoint.
#
#   tests/autobahn/run.sh [CASE...]        run cases (default: 1.* … 7.*, 9.*, 10.*)
#   tests/autobahn/run.sh --install        only install kosoku into its venv
#
# Environment:
#   CORECAST_BIN     the binary to serve with (default: target/debug/corecast, built if missing)
#   AUTOBAHN_URL     test this ws://…/_echo URL instead of starting a server
#   KOSOKU_VENV      the venv holding kosoku (default: $HOME/.cache/corecast-kosoku)
#   AUTOBAHN_REPORTS where kosoku writes its reports (default: a temporary directory)
#   AUTOBAHN_JOBS    cases run in parallel (default: 1)
#
# OK, NON-STRICT and INFORMATIONAL verdicts pass; any other (FAILED, ERROR, UNIMPLEMENTED, a
# failed closing handshake) makes this exit 1. Prints the verdict counts and every case that
# was not plainly OK.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KOSOKU_VERSION="0.1.0"
VENV="${KOSOKU_VENV:-$HOME/.cache/corecast-kosoku}"
KOSOKU="$VENV/bin/kosoku"

install_kosoku() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "autobahn: creating venv at $VENV" >&2
    mkdir -p "$(dirname "$VENV")"
    "${PYTHON:-python3}" -m venv "$VENV" >&2
  fi
  if ! "$VENV/bin/python" -c "import sys; from importlib.metadata import version; sys.exit(version('kosoku') != '$KOSOKU_VERSION')" 2>/dev/null; then
    echo "autobahn: installing kosoku==$KOSOKU_VERSION into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "kosoku==$KOSOKU_VERSION" >&2
  fi
}

install_kosoku
if [ "${1:-}" = "--install" ]; then
  exit 0
fi

CASES=("$@")
if [ ${#CASES[@]} -eq 0 ]; then
  CASES=('1.*' '2.*' '3.*' '4.*' '5.*' '6.*' '7.*' '9.*' '10.*')
fi
INCLUDE=()
for c in "${CASES[@]}"; do INCLUDE+=(-i "$c"); done

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

URL="${AUTOBAHN_URL:-}"
if [ -z "$URL" ]; then
  BIN="${CORECAST_BIN:-$ROOT/target/debug/corecast}"
  if [ ! -x "$BIN" ]; then
    echo "autobahn: building corecast" >&2
    (cd "$ROOT" && cargo build --quiet -p corecast-engine --bin corecast)
    BIN="$ROOT/target/debug/corecast"
  fi
  "$BIN" serve --echo --listen 127.0.0.1:0 --data "$WORK/data" >"$WORK/server.out" 2>"$WORK/server.err" &
  SERVER_PID=$!
  ADDR=""
  for _ in $(seq 300); do
    ADDR="$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$WORK/server.out" | head -n1)"
    [ -n "$ADDR" ] && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "autobahn: corecast exited before listening:" >&2
      cat "$WORK/server.err" >&2
      exit 1
    fi
    sleep 0.1
  done
  if [ -z "$ADDR" ]; then
    echo "autobahn: corecast did not report its address within 30 s" >&2
    exit 1
  fi
  URL="ws://$ADDR/_echo"
fi

REPORTS="${AUTOBAHN_REPORTS:-$WORK/reports}"
mkdir -p "$REPORTS"
echo "autobahn: running ${CASES[*]} against $URL" >&2
set +e
(cd "$WORK" && "$KOSOKU" "$URL" "${INCLUDE[@]}" -p "${AUTOBAHN_JOBS:-1}" -o "$REPORTS") >"$WORK/kosoku.log" 2>&1
KOSOKU_RC=$?
set -e
tail -n 5 "$WORK/kosoku.log" >&2

STATUS=0
"$VENV/bin/python" - "$REPORTS/index.json" <<'PY' || STATUS=1
import collections, json, sys

try:
    index = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"autobahn: no report index: {e}")
    sys.exit(1)
cases = {cid: v for server in index.values() for cid, v in server.items()}
def key(cid):
    return [int(p) for p in cid.split(".")]
allowed = {"OK", "NON-STRICT", "INFORMATIONAL"}
allowed_close = {"OK", "INFORMATIONAL"}
counts = collections.Counter()
bad = []
for cid in sorted(cases, key=key):
    v = cases[cid]
    behavior, close = v["behavior"], v["behaviorClose"]
    verdict = behavior if behavior in allowed and close in allowed_close else "FAILED"
    counts[verdict] += 1
    if behavior != "OK" or close != "OK":
        print(f"  {cid}: {behavior} (close: {close}, remote code {v.get('remoteCloseCode')})")
    if verdict == "FAILED":
        bad.append(cid)
print("autobahn: " + ", ".join(f"{k} {counts[k]}" for k in ("OK", "NON-STRICT", "INFORMATIONAL", "FAILED")))
print(f"autobahn: {len(cases) - len(bad)} passed, {len(bad)} failed")
sys.exit(1 if bad or not cases else 0)
PY
if [ "$KOSOKU_RC" -ne 0 ]; then
  echo "autobahn: kosoku exited $KOSOKU_RC; its log:" >&2
  cat "$WORK/kosoku.log" >&2
  STATUS=1
fi

if [ -n "$SERVER_PID" ]; then
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "autobahn: corecast died during the run:" >&2
    cat "$WORK/server.err" >&2
    STATUS=1
  else
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || { echo "autobahn: corecast exited non-zero on SIGTERM" >&2; STATUS=1; }
  fi
  SERVER_PID=""
fi
exit "$STATUS"
