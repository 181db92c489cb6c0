#!/usr/bin/env bash
# Installs the Debian 12 packages of the peers that `tocl-bench msg --peers`
# measures tocl against: UCX's ucx_perftest and Open MPI (its mpiexec, and
# the headers and wrappers CMake needs to build tocl-bench-mpi-pingpong).
# Benchmarks only: neither `make test` nor `make demo` needs them.
# Idempotent: when everything is present it only checks (a few seconds) and
# runs neither `apt-get update` nor `apt-get install`.
#
#   deploy/install-bench-peers.sh
#
# Then reconfigure the release build (CMake looks for MPI when it
# configures): cmake --preset release && cmake --build build/release
set -euo pipefail

if [[ $# -ne 0 ]]; then
  echo "install-bench-peers: takes no arguments" >&2
  exit 2
fi

# The same check-then-install as the build's dependencies, with the peers.
exec "$(dirname "$0")/install-deps.sh" --bench-peers
