#!/bin/bash
# Z3: idle traffic and CPU of three real `cohort node` processes on this
# machine (docs/heartbeats.md, "Quiescence"). Starts three nodes with
# PARTITIONS groups each on loopback, quiescence on or off, waits SETTLE_SECS,
# then measures MEASURE_SECS: bytes each node wrote to its peers (from
# cohort_peer_bytes_sent_total on /metrics) and its CPU time (from /proc).
#
#   cargo build --release --bin cohort
#   tests/scripts/idle_nodes.sh 10000 on 90 60
set -euo pipefail
PARTITIONS=${1:?usage: idle_nodes.sh PARTITIONS on|off SETTLE_SECS MEASURE_SECS}
QUIESCE=${2:?on or off}
SETTLE=${3:-90}
MEASURE=${4:-60}
# COHORT=path/to/cohort measures another binary (e.g. a copy of the one
# before a change, to compare in the same session).
COHORT=${COHORT:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/cohort}
[ -x "$COHORT" ] || { echo "build it first: cargo build --release --bin cohort" >&2; exit 2; }
# shellcheck source=nodes_lib.sh
source "$(dirname "$0")/nodes_lib.sh"
start_nodes
echo "3 nodes x $PARTITIONS groups, quiescence $QUIESCE: settling for $SETTLE s, then measuring $MEASURE s" >&2
sleep "$SETTLE"
sample() { # node index -> "bytes_to_peers cpu_ticks"
  local bytes
  bytes=$(curl -s "http://127.0.0.1:1730$1/metrics" | awk '/^cohort_peer_bytes_sent_total/ {s += $2} END {print s + 0}')
  echo "$bytes $(awk '{print $14 + $15}' "/proc/${pids[$(($1 - 1))]}/stat")"
}
declare -A before
for i in 1 2 3; do before[$i]=$(sample "$i"); done
sleep "$MEASURE"
hz=$(getconf CLK_TCK)
for i in 1 2 3; do
  read -r b0 c0 <<< "${before[$i]}"
  read -r b1 c1 <<< "$(sample "$i")"
  metrics=$(curl -s "http://127.0.0.1:1730$i/metrics")
  quiesced=$(awk '/^cohort_quiesced_total/ {s += $2} END {print s + 0}' <<< "$metrics")
  mismatches=$(awk '/^cohort_quiet_mismatches_total/ {s += $2} END {print s + 0}' <<< "$metrics")
  cpu=$(awk -v c0="$c0" -v c1="$c1" -v hz="$hz" -v s="$MEASURE" 'BEGIN {printf "%.2f", (c1 - c0) * 100 / hz / s}')
  echo "node $i: $(((b1 - b0) / MEASURE)) bytes/s to its peers, $cpu % of a core, quiesced $quiesced, mismatches $mismatches"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
