#!/bin/bash
# Z2: how long three real `cohort node` processes with PARTITIONS groups
# take until every group has a primary, first on empty data directories,
# then again after every node was killed (SIGKILL) and restarted on what
# its directory holds (recovery of each shard's WAL and superblocks).
#
# "Every group led": over the three nodes' /metrics, the groups in state
# busy or idle (a primary) reach PARTITIONS + 1 (the metadata group is one
# too). A group serves writes from then on (its primary was elected by a
# quorum); the script also says when no replica is left in a view change
# (the last backups have taken the StartView).
# The gauges of a shard with more than 10,000 groups are counted every 5 s,
# so at 100,000 groups a figure is an upper bound, up to 5 s late.
#
#   cargo build --release --bin cohort
#   tests/scripts/restart_nodes.sh 100000
set -euo pipefail
PARTITIONS=${1:?usage: restart_nodes.sh PARTITIONS [TIMEOUT_SECS]}
TIMEOUT=${2:-120}
QUIESCE=off
COHORT=$(cd "$(dirname "$0")/../.." && pwd)/target/release/cohort
[ -x "$COHORT" ] || { echo "build it first: cargo build --release --bin cohort" >&2; exit 2; }
# shellcheck source=nodes_lib.sh
source "$(dirname "$0")/nodes_lib.sh"

led() { # "primaries view_changes" over the three nodes
  local i
  for i in 1 2 3; do curl -s "http://127.0.0.1:1730$i/metrics" || true; done |
    awk '/^cohort_groups\{.*state="(busy|idle)"/ {p += $2} /^cohort_groups\{.*state="view_change"/ {v += $2} END {print p + 0, v + 0}'
}

# "LED SETTLED": seconds from now until every group has a primary, and
# until, besides, no replica is in a view change; fails after TIMEOUT.
time_until_led() {
  local began=$SECONDS primaries changes led=""
  while :; do
    read -r primaries changes <<< "$(led)"
    if [ -z "$led" ] && [ "$primaries" -ge $((PARTITIONS + 1)) ]; then
      led=$((SECONDS - began))
    fi
    if [ -n "$led" ] && [ "$changes" -eq 0 ]; then
      echo "$led $((SECONDS - began))"
      return
    fi
    if [ $((SECONDS - began)) -ge "$TIMEOUT" ]; then
      echo "not settled after $TIMEOUT s ($primaries primaries, $changes in a view change)" >&2
      exit 1
    fi
    printf '\r%s s: %s of %s groups led, %s replicas in a view change ' $((SECONDS - began)) "$primaries" \
      $((PARTITIONS + 1)) "$changes" >&2
    sleep 1
  done
}

echo "3 nodes x $PARTITIONS groups: empty data directories" >&2
start_nodes
read -r empty_led empty_settled <<< "$(time_until_led)"
echo >&2
sleep 5 # a few heartbeats and flushes on every group
kill -9 "${pids[@]}"
wait "${pids[@]}" 2>/dev/null || true
echo "killed every node (SIGKILL); restarting on $(du -sh "$DIR" | cut -f1) of data directories" >&2
start_nodes
read -r recovered_led recovered_settled <<< "$(time_until_led)"
echo >&2
echo "empty directories: every group led after ${empty_led} s, no replica in a view change after ${empty_settled} s"
echo "recovered directories: every group led after ${recovered_led} s, no replica in a view change after ${recovered_settled} s"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
