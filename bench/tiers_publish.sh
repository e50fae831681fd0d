#!/usr/bin/env bash
# publishing under load: 200k trade rows/s for 60 s with 10 live subscribers; the publish lag
# must stay bounded and the Iceberg table must hold every sealed row once (issue 12).
#   bench/tiers_publish.sh [--no-build] [options of: python3 bench/tiers.py publish --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release). See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine --bin corecast && cargo build --release -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/tiers.py" publish "$@"
