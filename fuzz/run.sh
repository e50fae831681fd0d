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
# per target (target, wall seconds, executions, corpus files, crashes, CPU seconds, UTC end) in
# fuzz/logs/summary.tsv.
#
# Reproduce an artifact: fuzz/run.sh TARGET 0 fuzz/artifacts/TARGET/crash-… (runs that input;
# libFuzzer reads a file argument as an input to run once).
#
# FUZZ_BUDGET=cpu makes SECONDS the fuzzer's own CPU time (user + system, read from
# /proc/PID/stat) instead of wall time: on a shared machine a wall-clock hour may be a fraction
# of a CPU-hour, and the long documented runs are stated in CPU time. The run is stopped with
# SIGINT once the budget is spent (libFuzzer then prints its final stats and exits 72, which
# counts as success here); a wall-clock cap of 24 × SECONDS still applies.
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
BUDGET="${FUZZ_BUDGET:-wall}"
case "$BUDGET" in wall | cpu) ;; *)
  echo "fuzz/run.sh: FUZZ_BUDGET must be wall or cpu, not '$BUDGET'" >&2
  exit 2
  ;;
esac
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
    if [ "$BUDGET" = cpu ]; then
      args+=(-max_total_time="$((SECONDS_EACH * 24))")
    else
      args+=(-max_total_time="$SECONDS_EACH")
    fi
    inputs=("corpus/$t" "seeds/$t")
  else
    inputs=()
  fi
  failures() { find "artifacts/$t" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l; }
  before="$(failures)"
  rc=0
  started=$SECONDS
  # The binary cargo fuzz built, run directly (as `cargo fuzz run` would, minus its rebuild check
  # and its re-run of each failing input through `cargo run` to print it).
  CORECAST_FUZZ_SEEDS="seeds/$t" "$BIN_DIR/$t" -artifact_prefix="artifacts/$t/" "${args[@]}" \
    "$@" "${inputs[@]}" >"logs/$t.log" 2>&1 &
  pid=$!
  cpu=0
  interrupted=0
  ticks="$(getconf CLK_TCK)"
  while kill -0 "$pid" 2>/dev/null; do
    # Fields 14 and 15 of /proc/PID/stat (after the parenthesised name): utime, stime in ticks.
    if stat="$(cat "/proc/$pid/stat" 2>/dev/null)"; then
      read -ra fields <<<"${stat##*) }"
      cpu=$(((fields[11] + fields[12]) / ticks))
    fi
    if [ "$BUDGET" = cpu ] && [ "$SECONDS_EACH" -gt 0 ] && [ "$cpu" -ge "$SECONDS_EACH" ] &&
      [ "$interrupted" = 0 ]; then
      kill -INT "$pid" 2>/dev/null || true
      interrupted=1
    fi
    sleep 2
  done
  wait "$pid" || rc=$?
  # libFuzzer's exit status after SIGINT (-interrupted_exitcode, default 72): the budget ran out.
  if [ "$interrupted" = 1 ] && [ "$rc" = 72 ]; then rc=0; fi
  wall=$((SECONDS - started))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$t.log" | tail -n1)"
  corpus="$(find "corpus/$t" -type f | wc -l)"
  crashes=$(($(failures) - before))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$wall" "${execs:-?}" "$corpus" "$crashes" "$cpu" \
    "$(date -u +%Y-%m-%dT%H:%MZ)" |
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
