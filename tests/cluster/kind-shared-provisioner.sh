#!/bin/bash
# The etj-shared provisioner: runs inside the kind control-plane node as a systemd unit
# (installed by tests/cluster/kind-shared-storage.sh). For every Pending claim of the
# etj-shared StorageClass it makes a directory under /var/lib/etj-shared (the host
# directory every node mounts, kind-config.yaml's extraMounts) and a hostPath
# PersistentVolume bound to the claim, with the claim's access modes (ReadWriteMany
# included: every node sees the same directory); a Released volume of the class is deleted
# with its directory. The local stand-in for an NFS / EFS / Filestore CSI driver: nothing
# else, and nothing outside that directory is touched. Needs only bash and kubectl.
set -uo pipefail
KC=(kubectl --kubeconfig /etc/kubernetes/admin.conf)
CLASS=etj-shared
BASE=/var/lib/etj-shared/volumes
mkdir -p "$BASE"
while true; do
  "${KC[@]}" get pvc -A -o jsonpath='{range .items[?(@.spec.storageClassName=="etj-shared")]}{.metadata.namespace}{" "}{.metadata.name}{" "}{.metadata.uid}{" "}{.status.phase}{" "}{.spec.resources.requests.storage}{" "}{.spec.accessModes}{" "}{.spec.volumeName}{"\n"}{end}' 2>/dev/null |
    while read -r ns name uid phase size modes volume; do
      [ "$phase" = Pending ] && [ -z "$volume" ] || continue
      pv="etj-shared-$uid"
      "${KC[@]}" get pv "$pv" >/dev/null 2>&1 && continue
      dir="$BASE/$ns-$name-$uid"
      mkdir -p "$dir" && chmod 0777 "$dir"
      # ["ReadWriteMany"] -> - ReadWriteMany
      modes_yaml=$(echo "$modes" | tr -d '[]"' | tr ',' '\n' | sed 's/^/    - /')
      "${KC[@]}" apply -f - >/dev/null <<YAML && echo "provisioned $pv for $ns/$name at $dir"
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $pv
  annotations:
    pv.kubernetes.io/provisioned-by: etj.dev/shared-hostpath
spec:
  storageClassName: $CLASS
  capacity:
    storage: $size
  accessModes:
$modes_yaml
  persistentVolumeReclaimPolicy: Delete
  claimRef:
    namespace: $ns
    name: $name
    uid: $uid
  hostPath:
    path: $dir
    type: Directory
YAML
    done
  "${KC[@]}" get pv -o jsonpath='{range .items[?(@.spec.storageClassName=="etj-shared")]}{.metadata.name}{" "}{.status.phase}{" "}{.spec.persistentVolumeReclaimPolicy}{" "}{.spec.hostPath.path}{"\n"}{end}' 2>/dev/null |
    while read -r pv phase policy path; do
      case "$phase" in Released|Failed) ;; *) continue ;; esac
      [ "$policy" = Delete ] || continue
      case "$path" in "$BASE"/?*) rm -rf "$path" ;; esac
      "${KC[@]}" delete pv "$pv" --wait=false >/dev/null && echo "deleted $pv and $path"
    done
  sleep 2
done
