#!/usr/bin/env bash
# Creates (once) the Python environment the tier interop test reads segments with: pyarrow and
# DuckDB from PyPI, in $CORECAST_TIER_VENV (default $HOME/.cache/corecast-tier-venv). Prints the
# venv's python on success; exits non-zero if the packages cannot be installed.
set -euo pipefail
VENV="${CORECAST_TIER_VENV:-$HOME/.cache/corecast-tier-venv}"
PY="$VENV/bin/python"
if [ -x "$PY" ] && "$PY" -c "import pyarrow, duckdb" 2>/dev/null; then
  echo "$PY"
  exit 0
fi
python3 -m venv "$VENV" >&2
"$PY" -m pip install --quiet --disable-pip-version-check "pyarrow>=20" "duckdb>=1.1" >&2
"$PY" -c "import pyarrow, duckdb" >&2
echo "$PY"
