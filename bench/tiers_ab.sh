#!/usr/bin/env bash
# sealing on vs off under fan-out load, interleaved rounds (issue 11 (b)).
#   bench/tiers_ab.sh [--no-build] [options of: python3 bench/tiers.py ab --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/tiers.py" ab "$@"
