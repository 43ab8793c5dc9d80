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
  shift
  for a in "$@"; do
    # An archive globbed before build-images replaced it with a newer one is gone: the
    # newer one is loaded by the e2e's own kind-up.
    [ -f "$a" ] || continue
    base=$(basename "$a")
    if docker exec "$node" test -f "/var/lib/etj-images/$base"; then continue; fi
    start=$SECONDS
    docker exec -i "$node" ctr -n k8s.io images import --all-platforms - <"$a" >/dev/null
    docker exec "$node" sh -c "mkdir -p /var/lib/etj-images && rm -f /var/lib/etj-images/${base%-*}-*.tar && touch /var/lib/etj-images/$base"
    say "$node: $base imported in $((SECONDS - start)) s"
  done
}
# The trainer into the workers only (jobs never run on the tainted control plane; each copy
# costs a node the archive twice over, content and unpacked layers); the operator into
# every node: the e2e runs it on the control plane, beside CoreDNS and fake-gcs-server, so
# that stopping a worker never takes the operator along.
operator=("$CACHE"/images/etj-operator-*.tar)
workers=() pids=()
for node in $("$KIND" get nodes --name "$NAME"); do
  if [ "$(docker inspect -f '{{index .Config.Labels "io.x-k8s.kind.role"}}' "$node")" = control-plane ]; then
    [ "${#operator[@]}" = 0 ] || { load_node "$node" "${operator[@]}" & pids+=($!); }
  else
    workers+=("$node")
    load_node "$node" "${archives[@]}" & pids+=($!)
  fi
done
[ "${#workers[@]}" -gt 0 ] || { workers=("$NAME-control-plane"); load_node "${workers[0]}" "${archives[@]}" & pids+=($!); }
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ "$rc" = 0 ] || { echo "kind-load-images: an import failed" >&2; exit 1; }
node=${workers[0]}
say "images in every worker node: $(docker exec "$node" ctr -n k8s.io images ls -q | grep -v -e '^sha256:' -e '^localhost/etj-kind/' | tr '\n' ' ')"
