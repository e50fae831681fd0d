#!/usr/bin/env bash
# Runs the fuzz targets (issue 13, point 8) with cargo-fuzz on the pinned stable toolchain.
#
#   fuzz/run.sh TARGET SECONDS [libFuzzer args...]
#   fuzz/run.sh all SECONDS [libFuzzer args...]      every target, one after the other
#   fuzz/run.sh list
#
# Installs cargo-fuzz when it is missing, builds every target once (`--sanitizer none`: no
# nightly needed; `-a`: debug assertions and overflow checks on), writes each target's seeds
# (generated from the repository's tests and ../shared/data, see src/seeds.rs) into
# fuzz/seeds/TARGET, and runs libFuzzer for SECONDS on the corpus fuzz/corpus/TARGET (which
# grows and is kept between runs) plus the seeds. A crash, a panic, an input running over 30 s
# (`-timeout`) or more than 2 GiB of memory (`-rss_limit_mb`) fails the run: exit status
# non-zero, the input in fuzz/artifacts/TARGET/. Logs: fuzz/logs/TARGET.log; one summary line
# per target (target, seconds, executions, corpus files, crashes) in fuzz/logs/summary.tsv.
#
# Reproduce an artifact: fuzz/run.sh TARGET 0 fuzz/artifacts/TARGET/crash-… (runs that input;
# libFuzzer reads a file argument as an input to run once).
# CARGO_TARGET_DIR is honoured (default fuzz/target).
set -euo pipefail

FUZZ="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TARGETS=(ws_frame ws_receiver http_request row_codec where_filter pull_cursor sse_last_event_id
  parquet_segment)
CARGO_FUZZ_VERSION=0.13.2

usage() {
  echo "usage: fuzz/run.sh TARGET|all SECONDS [libFuzzer args...]; targets: ${TARGETS[*]}" >&2
  exit 2
}
[ $# -ge 1 ] || usage
if [ "$1" = list ]; then
  printf '%s\n' "${TARGETS[@]}"
  exit 0
fi
[ $# -ge 2 ] || usage
WHICH="$1"
SECONDS_EACH="$2"
shift 2
case "$SECONDS_EACH" in '' | *[!0-9]*) usage ;; esac
if [ "$WHICH" = all ]; then
  RUN=("${TARGETS[@]}")
else
  found=0
  for t in "${TARGETS[@]}"; do [ "$t" = "$WHICH" ] && found=1; done
  [ "$found" = 1 ] || usage
  RUN=("$WHICH")
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

TARGET_DIR="${CARGO_TARGET_DIR:-$FUZZ/target}"
# The flags every cargo-fuzz call gets (the same for build and run, so run does not rebuild).
FLAGS=(--sanitizer none --debug-assertions --target-dir "$TARGET_DIR")
cd "$FUZZ"
cargo fuzz build "${FLAGS[@]}"
BIN_DIR="$TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release"

mkdir -p logs
failed=()
for t in "${RUN[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t" "artifacts/$t"
  echo "=== fuzz/run.sh: $t for ${SECONDS_EACH}s ($(date -u +%H:%M:%S))"
  args=(-timeout=30 -rss_limit_mb=2048 -print_final_stats=1)
  if [ "$SECONDS_EACH" -gt 0 ]; then
    args+=(-max_total_time="$SECONDS_EACH")
    inputs=("corpus/$t" "seeds/$t")
  else
    inputs=()
  fi
  failures() { find "artifacts/$t" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l; }
  before="$(failures)"
  rc=0
  # The binary cargo fuzz built, run directly (as `cargo fuzz run` would, minus its rebuild check
  # and its re-run of each failing input through `cargo run` to print it).
  CORECAST_FUZZ_SEEDS="seeds/$t" "$BIN_DIR/$t" -artifact_prefix="artifacts/$t/" "${args[@]}" \
    "$@" "${inputs[@]}" >"logs/$t.log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$t.log" | tail -n1)"
  corpus="$(find "corpus/$t" -type f | wc -l)"
  crashes=$(($(failures) - before))
  printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$SECONDS_EACH" "${execs:-?}" "$corpus" "$crashes" |
    tee -a logs/summary.tsv
  if [ "$rc" != 0 ]; then
    echo "fuzz/run.sh: $t FAILED (exit $rc); last lines of fuzz/logs/$t.log:" >&2
    tail -n 40 "logs/$t.log" >&2
    failed+=("$t")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz/run.sh: failed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz/run.sh: ${RUN[*]}: no crash"
