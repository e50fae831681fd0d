#!/usr/bin/env bash
# replay from offset 1 of a sealed+evicted stream vs the same rows from the hot log (issue 11 (a)).
#   bench/tiers_replay.sh [--no-build] [options of: python3 bench/tiers.py replay --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/tiers.py" replay "$@"
