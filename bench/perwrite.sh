#!/usr/bin/env bash
# One frame per write (issue 17, item 3): CPU per delivered frame and its userland share against
# a baseline build, alternating rounds; the coalesce_us trade at 1,000 × 1,000 rows/s.
#   bench/perwrite.sh [--no-build] ab --baseline DIR [--rounds 3] [--seconds 15] [--perf 8]
#   bench/perwrite.sh [--no-build] coalesce [--rounds 2] [--seconds 10] [--coalesce 0,100,500,1000]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine --bin corecast -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/perwrite.py" "$@"
