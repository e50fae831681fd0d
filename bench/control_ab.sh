#!/usr/bin/env bash
# A neighbour stream's fan-out with the control plane creating, stopping, starting and retiring
# other streams, against the control plane idle; interleaved rounds (issue 15).
#   bench/control_ab.sh [--no-build] [options of: python3 bench/control_ab.py --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See
# docs/PERFORMANCE.md, "The control plane beside a busy stream".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/control_ab.py" "$@"
