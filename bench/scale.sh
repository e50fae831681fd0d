#!/usr/bin/env bash
# Fan-out and publish speed-up at --cores 1, 2, 4, 8 on one hot stream, loadgen on the other CPUs
# (issue 17, item 5; made for a 16-core machine, ~4 minutes there).
#   bench/scale.sh [--no-build] [options of: python3 bench/scale.py --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/scale.py" "$@"
