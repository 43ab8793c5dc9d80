#!/usr/bin/env bash
# The local kind cluster's ReadWriteMany StorageClass, etj-shared (the cluster's default):
# volumes are directories
# of one host directory (/tmp/etj-kind-shared) that every node mounts at
# /var/lib/etj-shared (kind-config.yaml's extraMounts), made by a small provisioner that
# runs as a systemd unit in the control-plane node (tests/cluster/kind-shared-provisioner.sh).
# It is the local stand-in for NFS / EFS / Filestore: same access modes, none of their
# durability. Called by tests/cluster/kind-up.sh with the cluster name. Idempotent.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
NAME="${1:?cluster name}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
export KUBECONFIG="${KUBECONFIG:-$CACHE/kind/kubeconfig}"
KUBECTL="$CACHE/bin/${ETJ_K8S_VERSION:-v1.35.4}/kubectl"
eval "$(bash "$HERE/kind-docker.sh" env)"
say() { printf '[kind-shared-storage %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

"$KUBECTL" apply -f - >/dev/null <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: etj-shared
  annotations:
    # The default here, so a job's checkpoint.storage without a class (the quickstart's)
    # gets a volume every node shares.
    storageclass.kubernetes.io/is-default-class: "true"
    description: >-
      ReadWriteMany volumes on a host directory shared into every kind node: the local
      stand-in for NFS / EFS / Filestore (tests/cluster/kind-shared-storage.sh).
provisioner: etj.dev/shared-hostpath
reclaimPolicy: Delete
volumeBindingMode: Immediate
YAML
# kind's own fallback class (the host-path one; nothing provisions it here) stops being
# the default.
if "$KUBECTL" get storageclass standard >/dev/null 2>&1; then
  "$KUBECTL" annotate storageclass standard storageclass.kubernetes.io/is-default-class=false \
    --overwrite >/dev/null
fi
cp_node="$NAME-control-plane"
docker exec -i "$cp_node" sh -c 'cat >/usr/local/bin/etj-shared-provisioner' <"$HERE/kind-shared-provisioner.sh"
docker exec "$cp_node" chmod 0755 /usr/local/bin/etj-shared-provisioner
if [ "$(docker exec "$cp_node" systemctl is-active etj-shared-provisioner 2>/dev/null)" != active ]; then
  docker exec "$cp_node" systemd-run --unit etj-shared-provisioner --property Restart=always \
    /usr/local/bin/etj-shared-provisioner >/dev/null
fi
say "StorageClass etj-shared (ReadWriteMany; provisioner in $cp_node: journalctl -u etj-shared-provisioner)"
