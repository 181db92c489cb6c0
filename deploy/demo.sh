#!/usr/bin/env bash
# Runs the tocl demo against a daemon of its own:
#
#   deploy/demo.sh build/dev
#
# Starts BUILD_DIR/toclsd/toclsd on BUILD_DIR/demo-state (unix socket only),
# waits until it answers, runs tocl-demo, lists what the directory now holds
# with `tocl ps --all` and a query, runs tocl-pingpong (two processes whose
# threads exchange messages, over shm and then over tcp, printing their
# latency), shows their buffer pools, and stops the daemon with SIGTERM. The
# state directory is kept, so a second run also shows the first run's
# processes (exited): the directory is durable. Exits non-zero if any step,
# or the daemon's clean stop, fails.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
toclsd="$build_dir/toclsd/toclsd"
tocl="$build_dir/tools/tocl"
demo="$build_dir/tools/tocl-demo"
pingpong="$build_dir/tools/tocl-pingpong"
state_dir="$build_dir/demo-state"
address="unix:$state_dir/toclsd.sock"
log="$state_dir/toclsd.log"
ready_timeout_s=10

for binary in "$toclsd" "$tocl" "$demo" "$pingpong"; do
  if [[ ! -x "$binary" ]]; then
    echo "demo.sh: $binary is missing (build the project first)" >&2
    exit 1
  fi
done
mkdir -p "$state_dir"

daemon_pid=""
# Stops the daemon on every way out of this script; a daemon that does not
# stop cleanly (exit 0) fails the run.
stop_daemon() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n "$daemon_pid" ]]; then
    kill -TERM "$daemon_pid" 2>/dev/null || true  # it may have exited already
    local daemon_status=0
    wait "$daemon_pid" || daemon_status=$?
    if [[ $daemon_status -ne 0 ]]; then
      echo "demo.sh: toclsd exited with status $daemon_status; the end of $log:" >&2
      tail -n 20 "$log" >&2
      [[ $status -ne 0 ]] || status=1
    else
      echo "demo.sh: toclsd stopped"
    fi
  fi
  exit "$status"
}
trap stop_daemon EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "demo.sh: starting toclsd (state in $state_dir, log in $log)"
"$toclsd" --state-dir "$state_dir" --listen none >>"$log" 2>&1 &
daemon_pid=$!

# Poll until the daemon answers, failing early if it died.
deadline=$((SECONDS + ready_timeout_s))
until "$tocl" --daemon "$address" hosts >/dev/null 2>&1; do
  if ! kill -0 "$daemon_pid" 2>/dev/null; then
    echo "demo.sh: toclsd exited during start-up" >&2
    exit 1  # stop_daemon reports its status and log
  fi
  if ((SECONDS >= deadline)); then
    echo "demo.sh: toclsd did not answer at $address within ${ready_timeout_s} s" >&2
    exit 1
  fi
  sleep 0.1
done
echo "demo.sh: toclsd answers at $address"

echo
"$demo" --daemon "$address"

echo
echo "\$ tocl ps --all"
"$tocl" --daemon "$address" ps --all

echo
echo "\$ tocl query 'kind=thread and role=merger'"
"$tocl" --daemon "$address" query 'kind=thread and role=merger'
echo

echo "\$ tocl-pingpong --subsystems shm --threads 2   (two processes, 2 pairs of threads)"
"$pingpong" --daemon "$address" --subsystems shm --threads 2 --count 20000
echo
echo "\$ tocl-pingpong --subsystems tcp --threads 2"
"$pingpong" --daemon "$address" --subsystems tcp --threads 2 --count 5000
echo
