#!/usr/bin/env bash
# The long fault-injection soak (README.md): MINUTES of faults (default 30)
# on the netns cluster, then the checks and the figures.
#
#   tests/soak/run.sh [MINUTES] [BUILD_DIR]      # BUILD_DIR default: build/dev
#   TOCL_SOAK_SEED=123 tests/soak/run.sh 5       # replay a seed's fault schedule
#
# Needs root (network namespaces) and a build with the tests
# (`cmake --build BUILD_DIR --target netns_soak`). Exit status: the test's.
set -euo pipefail

minutes=${1:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$root/build/dev}
binary=$build/tests/soak/netns_soak

if ! [[ $minutes =~ ^[1-9][0-9]*$ ]]; then
  echo "run.sh: MINUTES must be a whole number of minutes, 1 or more, not '$minutes'" >&2
  exit 2
fi
if [[ ! -x $binary ]]; then
  echo "run.sh: $binary is missing: build it first (cmake --build $build --target netns_soak)" >&2
  exit 2
fi

echo "run.sh: $minutes minutes of faults, $binary, started $(date -u +%FT%TZ)"
start=$(date +%s)
set +e
TOCL_SOAK_SECONDS=$((minutes * 60)) "$binary" "[soak]" --durations yes
status=$?
set -e
echo "run.sh: finished $(date -u +%FT%TZ) after $(($(date +%s) - start)) s:" \
  "$([[ $status == 0 ]] && echo passed || echo "FAILED (exit $status)")"
exit $status
