#!/usr/bin/env bash
# Fan-out with auth on (bearer token, HTTP Basic) against off, interleaved rounds (issue 14).
#   bench/auth_ab.sh [--no-build] [options of: python3 bench/auth_ab.py --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/auth_ab.py" "$@"
