# Shared by idle_nodes.sh and restart_nodes.sh: three `cohort node`
# processes on loopback, in a temp dir, with throwaway certificates.
# Source it with COHORT (the binary), PARTITIONS and QUIESCE (on|off) set;
# it leaves the shell in the temp dir $DIR and kills the nodes on exit.

DIR=$(mktemp -d /tmp/cohort-nodes.XXXXXX)
cd "$DIR"
"$COHORT" certs init --dir certs --nodes 3 > /dev/null
CLUSTER=$(cat certs/cluster-id)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$DIR"' EXIT

# The config of node $1 (1..3).
write_config() {
  local i=$1 j
  {
    echo "[node]"
    echo "cluster_id = \"$CLUSTER\""
    echo "id = $i"
    echo "listen = \"127.0.0.1:1710$i\""
    echo "admin = 1730$i"
    echo "data_dir = \"$DIR/data-$i\""
    echo "shards = 2"
    for j in 1 2 3; do
      [ "$j" = "$i" ] && continue
      printf '[[node.peers]]\nid = %s\naddress = "127.0.0.1:1710%s"\n' "$j" "$j"
    done
    printf '[tls]\nca = "certs/ca.pem"\ncert = "certs/node-%s.pem"\nkey = "certs/node-%s.key"\n' "$i" "$i"
    echo "[cluster]"
    [ "$QUIESCE" = on ] && echo 'commit_quiesce_timeout = "30s"'
    printf '[groups]\npartitions = %s\n' "$PARTITIONS"
  } > "node-$i.toml"
}

# Start the three nodes (on whatever their data directories hold); their
# pids go to $pids in node order.
start_nodes() {
  local i
  pids=()
  for i in 1 2 3; do
    [ -f "node-$i.toml" ] || write_config "$i"
    "$COHORT" node --config "node-$i.toml" >> "node-$i.log" 2>&1 &
    pids+=($!)
  done
}
