#!/usr/bin/env bash
# `make kind-down`: delete the local kind cluster, stop the private Docker engine
# (tests/cluster/kind-docker.sh), then check that nothing is left behind: no container,
# no Docker network or bridge, no iptables chain of Docker or of the nodes, no mount of
# the engine or of a node. Exits 1 naming what is left. The caches (Docker's data-root
# with the node image, the binaries, the shared directory's content) are kept:
# `ETJ_KIND_PURGE=1` also removes the shared directory /tmp/etj-kind-shared.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
KIND="$CACHE/bin/kind"
NAME="$(sed -n 's/^name: *//p' "$ROOT/kind-config.yaml")"
eval "$(bash "$HERE/kind-docker.sh" env)"
say() { printf '[kind-down %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if [ -S /run/etj-docker/docker.sock ] && [ -x "$KIND" ]; then
  "$KIND" delete cluster --name "$NAME" --kubeconfig "$CACHE/kind/kubeconfig" || true
fi
bash "$HERE/kind-docker.sh" stop
rm -f "$CACHE/kind/kubeconfig"
if [ -f "$CACHE/kind/created-lib-modules" ]; then
  rmdir /lib/modules 2>/dev/null || true
  rm -f "$CACHE/kind/created-lib-modules"
fi
[ "${ETJ_KIND_PURGE:-0}" = 1 ] && rm -rf /tmp/etj-kind-shared

left=()
pgrep -f "^(dockerd|containerd) .*etj-docker" >/dev/null && left+=("engine processes: $(pgrep -f '^(dockerd|containerd) .*etj-docker' | tr '\n' ' ')")
pgrep -f "containerd-shim.*etj-docker" >/dev/null && left+=("shims: $(pgrep -f 'containerd-shim.*etj-docker' | tr '\n' ' ')")
m=$(awk '$5 ~ /etj-docker|\/docker\/overlay2|etj-kind/ {print $5}' /proc/self/mountinfo)
[ -z "$m" ] || left+=("mounts: $m")
# Docker's bridges (the kind network is br-<id>); the nodes' veths hang off them. Other
# tools' links (a CNI bridge of another local cluster) are not ours to judge.
links=$(ip -o link show | awk -F': ' '$2 ~ /^(docker0|br-[0-9a-f]{12})/ {print $2}')
[ -z "$links" ] || left+=("network links: $links")
for t in filter nat mangle raw; do
  for ipt in iptables-legacy iptables-nft; do
    command -v "$ipt" >/dev/null || continue
    # The nodes' own chains (KUBE-*, CNI-*) live in their network namespaces; on the
    # host only Docker's could appear.
    c=$("$ipt" -t "$t" -S 2>/dev/null | grep -E -e '^-N DOCKER' || true)
    [ -z "$c" ] || left+=("$ipt -t $t chains: $(echo "$c" | tr '\n' ' ')")
  done
done
if [ "${#left[@]}" -gt 0 ]; then
  printf 'kind-down: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
say "cluster $NAME deleted; no container, network, iptables chain or mount left"
