#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and running tocl
# needs. Idempotent: when everything is present it only checks (a few
# seconds) and runs neither `apt-get update` nor `apt-get install`.
#
#   deploy/install-deps.sh          what `make test` and `make demo` need
#   deploy/install-deps.sh --fuzz   and clang with libFuzzer (tests/fuzz/run.sh)
#   deploy/install-deps.sh --bench-peers
#                                   and the peers `tocl-bench msg --peers` runs
#                                   (deploy/install-bench-peers.sh)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git clang-format
  # gRPC / protobuf
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # storage, logging, CLI, config, JSON
  libsqlite3-dev libspdlog-dev libfmt-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  # crypto: cluster credentials (tocl keygen) and the data plane's HMAC
  libssl-dev
  # RDMA (the ibverbs provider always builds)
  libibverbs-dev librdmacm-dev
  # man pages, Debian packages (CPack: dpkg-shlibdeps, file) and their checks
  help2man dpkg-dev file lintian
  # tests
  catch2 iproute2 procps sqlite3 psmisc
  # a soak that stops moving records its workers' stacks
  gdb
)
case "${1:-}" in
  "") ;;
  # clang 14 and its runtimes (libFuzzer, ASan, UBSan) for the fuzz targets.
  --fuzz) packages+=(clang libclang-rt-14-dev) ;;
  # ucx_perftest and ucx_info (UCX 1.13); mpiexec, and mpicxx / the headers
  # for find_package(MPI) (Open MPI 4.1). Benchmarks only.
  --bench-peers) packages+=(ucx-utils openmpi-bin libopenmpi-dev) ;;
  *)
    echo "install-deps: unknown argument '$1' (only --fuzz or --bench-peers)" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  # dpkg-query is fast; a package counts only when fully installed.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
else
  as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
