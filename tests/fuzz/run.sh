#!/usr/bin/env bash
# Builds the libFuzzer targets (the "fuzz" preset, in build/fuzz) and runs
# each for SECONDS, one after another: all four by default, or the TARGETs
# named (frame_decoder, query_parser, gid_parser, config_loader).
#
#   tests/fuzz/run.sh 600                    # 10 minutes each, 40 in all
#   tests/fuzz/run.sh 60 query_parser
#
# Per target: corpus in build/fuzz/corpus/<target>/ (kept between runs;
# tests/fuzz/seeds/<target>/ and regressions/<target>/ are read as well),
# findings (crash-*, timeout-*, oom-*, leak-*) in build/fuzz/findings/<target>/,
# libFuzzer's output in build/fuzz/logs/<target>.log. Ends with one summary
# line per target; exits 1 if any target found something.
set -euo pipefail

usage() {
  echo "usage: tests/fuzz/run.sh SECONDS [frame_decoder|query_parser|gid_parser|config_loader]..." >&2
  exit 2
}
[[ $# -ge 1 && $1 =~ ^[0-9]+$ && $1 -gt 0 ]] || usage
seconds=$1
shift
all_targets=(frame_decoder query_parser gid_parser config_loader)
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")
for target in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $target "* ]] || {
    echo "run.sh: unknown target '$target' (${all_targets[*]})" >&2
    exit 2
  }
done

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/fuzz
build=${TOCL_FUZZ_BUILD_DIR:-$root/build/fuzz}

# clang and libFuzzer come from Debian's packages like everything else.
bash "$root/deploy/install-deps.sh" --fuzz

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" --preset fuzz -B "$build" >/dev/null
fi
cmake --build "$build" --target "${targets[@]/%/_fuzz}"

# The longest input each target is given: a frame header with some payload,
# an id, a query past the 4096-byte limit, a config file.
declare -A max_len=([frame_decoder]=256 [gid_parser]=64 [query_parser]=4200
                    [config_loader]=4096)

summary=()
failed=0
for target in "${targets[@]}"; do
  corpus=$build/corpus/$target
  findings=$build/findings/$target
  log=$build/logs/$target.log
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  # The shipped example config starts the loader's corpus too, so that
  # settings added there are fuzzed from the first run.
  [[ $target != config_loader ]] || cp "$root/deploy/toclsd.toml" "$corpus/deploy-example.toml"
  options=(-max_total_time="$seconds" -max_len="${max_len[$target]}" -timeout=10
           -print_final_stats=1 -artifact_prefix="$findings/")
  [[ ! -f $here/$target.dict ]] || options+=(-dict="$here/$target.dict")
  before=$(find "$findings" -type f | wc -l)

  echo "run.sh: fuzzing $target for ${seconds}s (log: $log)"
  rc=0
  # The first directory collects new inputs; the others are only read.
  "$build/tests/fuzz/${target}_fuzz" "${options[@]}" "$corpus" "$here/seeds/$target" \
    "$here/regressions/$target" >"$log" 2>&1 || rc=$?

  new_findings=$(($(find "$findings" -type f | wc -l) - before))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  coverage=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  files=$(find "$corpus" -type f | wc -l)
  if [[ $rc -ne 0 || $new_findings -gt 0 ]]; then
    failed=1
    echo "run.sh: $target FOUND SOMETHING (exit $rc); the end of its log:" >&2
    tail -40 "$log" >&2
  fi
  summary+=("$(printf '%-14s %12s runs %8s exec/s  %-20s corpus %6s files  findings %s (exit %s)' \
    "$target" "${runs:-?}" "${speed:-?}" "${coverage:-cov: ?}" "$files" "$new_findings" "$rc")")
done

echo
echo "run.sh: ${seconds}s per target ($build)"
printf '%s\n' "${summary[@]}"
exit "$failed"
