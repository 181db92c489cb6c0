#!/usr/bin/env bash
# A cluster of tocl hosts in network namespaces on this machine, by hand, for
# experiments: the same layout as the tests' NetnsCluster (tests/netns/).
#
#   deploy/netns-cluster.sh up N [RATE0 RATE1]   N hosts (2..8), two networks, optional tbf
#                                                rates ("500mbit", "" or "-" = unlimited)
#   deploy/netns-cluster.sh shape NET RATE       change network NET's (0 or 1) rate now
#   deploy/netns-cluster.sh link H NET up|down   set host H's device of network NET up or down
#   deploy/netns-cluster.sh exec H CMD [ARGS]    run CMD in host H with TOCL_DAEMON,
#                                                TOCL_NETWORKS and TOCL_CREDENTIALS set
#   deploy/netns-cluster.sh status               namespaces, addresses, qdiscs, daemons
#   deploy/netns-cluster.sh down                 stop the daemons, delete everything
#
# Host H is namespace tocl-x-hH with eth0 = 10.77.1.H/24 and eth1 = 10.77.2.H/24
# and a toclsd (--host-id H, listening on 10.77.1.H:7390, state in
# $TOCL_NETNS_DIR/hH; host 1 is the cluster's seed, the others join it, one
# after the other); namespace tocl-x-sw holds one bridge per network. The
# daemons listen on non-loopback addresses, so `up` makes cluster credentials
# first (`tocl keygen $TOCL_NETNS_DIR/credentials`, a directory per host, with
# the tocl next to toclsd's build, else in $PATH) and starts each daemon with
# --credentials $TOCL_NETNS_DIR/credentials/tocl-x-hH.
# Needs root and iproute2. TOCLSD picks the daemon binary (default: the
# release build's, else the dev build's, else toclsd in $PATH). SPAWN_ALLOW
# (space-separated globs, matched against real paths) is what the daemons
# may spawn; default: the programs of every build's tools/ and
# tests/netns/helpers/.
set -euo pipefail

PREFIX=tocl-x
NETWORKS=2
PORT=7390
STATE=${TOCL_NETNS_DIR:-/tmp/tocl-netns}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "netns-cluster: $*" >&2; exit 1; }
ns() { echo "$PREFIX-h$1"; }
addr() { echo "10.77.$(($2 + 1)).$1"; }
hosts() { cat "$STATE/hosts" 2>/dev/null || echo 0; }

toclsd_path() {
  if [[ -n "${TOCLSD:-}" ]]; then echo "$TOCLSD"; return; fi
  for candidate in "$ROOT/build/release/toclsd/toclsd" "$ROOT/build/dev/toclsd/toclsd"; do
    if [[ -x "$candidate" ]]; then echo "$candidate"; return; fi
  done
  command -v toclsd || die "no toclsd found: build it or set TOCLSD"
}

networks_of() { echo "tcp:eth0,tcp:eth1,shm"; }
credentials_of() { echo "$STATE/credentials/$(ns "$1")"; }

tocl_path() {  # tocl_path TOCLSD: the tocl of the same build
  local built
  built="$(dirname "$1")/../tools/tocl"
  if [[ -x "$built" ]]; then echo "$built"; return; fi
  command -v tocl || die "no tocl found next to $1 or in \$PATH (tocl keygen makes the credentials)"
}

# --spawn-allow flags (read -a: the globs are not expanded by the shell).
spawn_allow_flags() {
  local root globs glob
  root=$(realpath "$ROOT")
  read -r -a globs <<<"${SPAWN_ALLOW:-$root/build/*/tools/* $root/build/*/tests/netns/helpers/*}"
  for glob in "${globs[@]}"; do printf '%s\0%s\0' --spawn-allow "$glob"; done
}

shape() {  # shape NET RATE
  local net=$1 rate=${2:-} n h burst bits
  n=$(hosts)
  for ((h = 1; h <= n; h++)); do
    if [[ -z "$rate" || "$rate" == "-" ]]; then
      if tc -n "$(ns "$h")" qdisc show dev "eth$net" root | grep -q tbf; then
        tc -n "$(ns "$h")" qdisc del dev "eth$net" root
      fi
    else
      # The bucket holds 4 ms at the rate and at least one 64 KiB GSO packet.
      [[ "$rate" =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "rate '$rate' is not like 500mbit"
      case ${BASH_REMATCH[2]} in
        bit) bits=${BASH_REMATCH[1]} ;;
        kbit) bits=$((BASH_REMATCH[1] * 1000)) ;;
        mbit) bits=$((BASH_REMATCH[1] * 1000000)) ;;
        gbit) bits=$((BASH_REMATCH[1] * 1000000000)) ;;
      esac
      burst=$((bits / 8 / 250))
      ((burst < 65536)) && burst=65536
      tc -n "$(ns "$h")" qdisc replace dev "eth$net" root tbf rate "$rate" burst "$burst" latency 50ms
    fi
  done
}

up() {
  local n=${1:-} rate0=${2:-} rate1=${3:-} h m daemon
  [[ "$n" =~ ^[2-8]$ ]] || die "usage: up N [RATE0 RATE1] with N in 2..8"
  [[ "$(hosts)" == 0 ]] || die "a cluster is up already ($STATE/hosts): run down first"
  [[ $EUID -eq 0 ]] || die "needs root (network namespaces)"
  daemon=$(toclsd_path)
  mkdir -p "$STATE"
  echo "$n" >"$STATE/hosts"
  local keygen=()
  for ((h = 1; h <= n; h++)); do keygen+=(--host "$(ns "$h")=$(addr "$h" 0)"); done
  "$(tocl_path "$daemon")" keygen "$STATE/credentials" "${keygen[@]}" >"$STATE/keygen.log"
  ip netns add "$PREFIX-sw"
  for ((h = 1; h <= n; h++)); do
    ip netns add "$(ns "$h")"
    ip -n "$(ns "$h")" link set dev lo up
  done
  for ((m = 0; m < NETWORKS; m++)); do
    ip -n "$PREFIX-sw" link add name "br$m" type bridge
    ip -n "$PREFIX-sw" link set dev "br$m" up
    for ((h = 1; h <= n; h++)); do
      ip -n "$PREFIX-sw" link add name "h${h}n$m" type veth peer name "eth$m" netns "$(ns "$h")"
      ip -n "$PREFIX-sw" link set dev "h${h}n$m" master "br$m" up
      ip -n "$(ns "$h")" addr add "$(addr "$h" "$m")/24" dev "eth$m"
      ip -n "$(ns "$h")" link set dev "eth$m" up
    done
  done
  shape 0 "$rate0"
  shape 1 "$rate1"
  local allow=()
  mapfile -d '' allow < <(spawn_allow_flags)
  for ((h = 1; h <= n; h++)); do
    mkdir -p "$STATE/h$h"
    local role=(--seed)
    ((h == 1)) || role=(--join "$(addr 1 0):$PORT")
    ip netns exec "$(ns "$h")" "$daemon" --state-dir "$STATE/h$h" --host-id "$h" "${role[@]}" \
      --host-name "$PREFIX-h$h" --listen "$(addr "$h" 0):$PORT" --networks "$(networks_of "$h")" \
      --credentials "$(credentials_of "$h")" --log-level info "${allow[@]}" \
      >>"$STATE/h$h/toclsd.log" 2>&1 &
    echo $! >"$STATE/h$h/toclsd.pid"
    # One after the other: a joiner needs the seed up.
    for _ in $(seq 100); do
      [[ -S "$STATE/h$h/toclsd.sock" ]] && break
      kill -0 "$(cat "$STATE/h$h/toclsd.pid")" 2>/dev/null || die "toclsd of host $h exited: see $STATE/h$h/toclsd.log"
      sleep 0.1
    done
    [[ -S "$STATE/h$h/toclsd.sock" ]] || die "toclsd of host $h did not start: see $STATE/h$h/toclsd.log"
  done
  status
}

down() {
  local n h
  n=$(hosts)
  for ((h = 1; h <= 8; h++)); do
    if [[ -f "$STATE/h$h/toclsd.pid" ]]; then
      kill "$(cat "$STATE/h$h/toclsd.pid")" 2>/dev/null || true
    fi
    if ip netns list | grep -qw "$(ns "$h")"; then
      for pid in $(ip netns pids "$(ns "$h")"); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$(ns "$h")"
    fi
  done
  if ip netns list | grep -qw "$PREFIX-sw"; then ip netns del "$PREFIX-sw"; fi
  rm -rf "$STATE"
  echo "netns-cluster: down (had $n hosts)"
}

status() {
  local n h
  n=$(hosts)
  [[ "$n" != 0 ]] || { echo "netns-cluster: no cluster up"; return 0; }
  echo "netns-cluster: $n hosts, state in $STATE"
  for ((h = 1; h <= n; h++)); do
    local pid state
    pid=$(cat "$STATE/h$h/toclsd.pid" 2>/dev/null || echo "")
    state="not running"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && state="pid $pid"
    echo "host $h ($(ns "$h")): toclsd $(addr "$h" 0):$PORT $state, socket unix:$STATE/h$h/toclsd.sock"
    for ((m = 0; m < NETWORKS; m++)); do
      echo "  eth$m $(ip -n "$(ns "$h")" -o -4 addr show dev "eth$m" | awk '{print $4}')" \
        "$(ip -n "$(ns "$h")" -o link show dev "eth$m" | grep -o 'state [A-Z]*')" \
        "$(tc -n "$(ns "$h")" qdisc show dev "eth$m" root | grep -o 'tbf.*rate [^ ]*' |
          sed -E 's/tbf.*(rate [^ ]*)/tbf \1/' || echo unlimited)"
    done
  done
}

run_in() {  # exec H CMD...
  local h=${1:-} n
  n=$(hosts)
  [[ "$h" =~ ^[0-9]+$ ]] && ((h >= 1 && h <= n)) || die "usage: exec H CMD [ARGS] with H in 1..$n"
  shift
  [[ $# -gt 0 ]] || die "usage: exec H CMD [ARGS]"
  exec ip netns exec "$(ns "$h")" env TOCL_DAEMON="unix:$STATE/h$h/toclsd.sock" \
    TOCL_NETWORKS="$(networks_of "$h")" TOCL_CREDENTIALS="$(credentials_of "$h")" "$@"
}

command=${1:-}
shift || true
case "$command" in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  shape) [[ $# -ge 1 && "$1" =~ ^[01]$ ]] || die "usage: shape NET RATE"; shape "$1" "${2:-}" ;;
  link)
    [[ $# -eq 3 && "$3" =~ ^(up|down)$ ]] || die "usage: link H NET up|down"
    ip -n "$(ns "$1")" link set dev "eth$2" "$3"
    ;;
  exec) run_in "$@" ;;
  *) sed -n '2,/^set -euo/{/^#/p}' "$0" >&2; exit 2 ;;
esac
