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

packages=(
  # ucx_perftest and ucx_info (UCX 1.13)
  ucx-utils
  # mpiexec, and mpicxx / the headers for find_package(MPI) (Open MPI 4.1)
  openmpi-bin libopenmpi-dev
)

missing=()
for p in "${packages[@]}"; do
  # dpkg-query is fast; a package counts only when fully installed.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-bench-peers: installing ${missing[*]}" >&2
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
else
  as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
