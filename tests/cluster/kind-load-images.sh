#!/usr/bin/env bash
# Load the project's images (the docker archives `make images` leaves under
# $ETJ_CACHE/images, named <image>-<inputs key>.tar) into every worker node of the local
# kind cluster with `ctr -n k8s.io images import`, the nodes side by side. A node remembers
# which archives it holds (/var/lib/etj-images/<archive>), so a warm run imports only
# changed images. Called by tests/cluster/kind-up.sh with the cluster name; an empty
# $ETJ_CACHE/images is reported, not an error (run `make images`, then this again).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
NAME="${1:?cluster name}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
KIND="$CACHE/bin/kind"
eval "$(bash "$HERE/kind-docker.sh" env)"
say() { printf '[kind-load-images %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

shopt -s nullglob
# The operator and the trainer (not the pause of the local real node, nor the stand-in
# base image the trainer is built on).
archives=("$CACHE"/images/etj-operator-*.tar "$CACHE"/images/etj-trainer-*.tar)
if [ "${#archives[@]}" = 0 ]; then
  say "no image archives in $CACHE/images: run \`make images\`, then $0 $NAME"
  exit 0
fi
load_node() {
  local node=$1 a base start
  for a in "${archives[@]}"; do
    base=$(basename "$a")
    if docker exec "$node" test -f "/var/lib/etj-images/$base"; then continue; fi
    start=$SECONDS
    docker exec -i "$node" ctr -n k8s.io images import --all-platforms - <"$a" >/dev/null
    docker exec "$node" sh -c "mkdir -p /var/lib/etj-images && rm -f /var/lib/etj-images/${base%-*}-*.tar && touch /var/lib/etj-images/$base"
    say "$node: $base imported in $((SECONDS - start)) s"
  done
}
# The workers only: etj's pods (the operator too) never run on the tainted control plane,
# and each copy costs a node the archive twice over (content and unpacked layers).
nodes=()
for node in $("$KIND" get nodes --name "$NAME"); do
  [ "$(docker inspect -f '{{index .Config.Labels "io.x-k8s.kind.role"}}' "$node")" = control-plane ] || nodes+=("$node")
done
[ "${#nodes[@]}" -gt 0 ] || nodes=("$NAME-control-plane")  # a one-node cluster
pids=()
for node in "${nodes[@]}"; do
  load_node "$node" & pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ "$rc" = 0 ] || { echo "kind-load-images: an import failed" >&2; exit 1; }
node=${nodes[0]}
say "images in every worker node: $(docker exec "$node" ctr -n k8s.io images ls -q | grep -v -e '^sha256:' -e '^localhost/etj-kind/' | tr '\n' ' ')"
