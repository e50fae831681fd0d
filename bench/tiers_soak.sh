#!/usr/bin/env bash
# the compressed soak: 20M trade rows with 8 MiB seals, hot-log bound, tiers add up, full replay (issue 11 (c)).
#   bench/tiers_soak.sh [--no-build] [options of: python3 bench/tiers.py soak --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/tiers.py" soak "$@"
