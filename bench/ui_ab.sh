#!/usr/bin/env bash
# Fan-out with 10 /ui pages open against none, interleaved rounds (issue 16).
#   bench/ui_ab.sh [--no-build] [options of: python3 bench/ui_ab.py --help]
# Release binaries from $CARGO_TARGET_DIR/release (default target/release); node, playwright-core
# (CORECAST_UI_NODE_MODULES, default ~/.cache/corecast-ui/node_modules) and chromium as for
# tests/ui.rs. See docs/PERFORMANCE.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--no-build" ]]; then shift; else
  (cd "$ROOT" && cargo build --release -p corecast-engine -p corecast-loadgen)
fi
exec python3 "$ROOT/bench/ui_ab.py" "$@"
