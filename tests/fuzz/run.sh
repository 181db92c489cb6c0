#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build/fuzz) and runs
# frame_decoder_fuzz for SECONDS (default 60). Findings land in
# build/fuzz/findings/; the growing corpus in build/fuzz/corpus/frame_decoder/.
#
#   tests/fuzz/run.sh 60
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${TOCL_FUZZ_BUILD_DIR:-$root/build/fuzz}

if ! command -v clang++ >/dev/null; then
  echo "run.sh: clang++ is needed (Debian: apt-get install clang)" >&2
  exit 2
fi

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTOCL_BUILD_FUZZ=ON -DTOCL_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" --target frame_decoder_fuzz

corpus=$build/corpus/frame_decoder
findings=$build/findings
mkdir -p "$corpus" "$findings"

# Seeds: a valid message header and a valid hello (little-endian fields).
seed() { printf "$2" >"$corpus/$1"; }
zeros8='\x00\x00\x00\x00\x00\x00\x00\x00'
# magic, version 1, kind 1, flags 0, tag 7, length 5, source h1.p2.t3,
# destination h1.p4.t5, seq 0, offset 0, total 5, reserved 0; then the payload.
seed message "TOCL\x01\x01\x00\x00\x07\x00\x00\x00\x05\x00\x00\x00\x03\x00\x00\x02\x00\x00\x01\x00\x05\x00\x00\x04\x00\x00\x01\x00${zeros8}${zeros8}\x05\x00\x00\x00\x00\x00\x00\x00${zeros8}hello"
# magic, version 1, kind 2 (hello), source h1.p2, destination h1.p4, all else 0.
seed hello "TOCL\x01\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x01\x00\x00\x00\x00\x04\x00\x00\x01\x00${zeros8}${zeros8}${zeros8}${zeros8}"

cd "$findings"
exec "$build/tests/fuzz/frame_decoder_fuzz" -max_total_time="$seconds" -max_len=256 \
  -dict="$root/tests/fuzz/frame_decoder.dict" -print_final_stats=1 "$corpus"
