#!/usr/bin/env bash
# Build (or reuse) a kind node image offline from the project's own Kubernetes build, and
# print its tag on the last line of stdout. Called by tests/cluster/kind-up.sh.
#
# `kind build node-image` cannot run here: it always pulls etcd, CoreDNS, pause, kindnetd
# and local-path images from registries. `kind create cluster --image <tag>` pulls nothing
# when the image is present, so the image is assembled the way kind does, minus the pulls:
#   1. a base root filesystem from debootstrap (systemd, containerd, runc, the CNI
#      plugins, iptables: Debian packages), plus this project's node files
#      (tests/cluster/kind-node/: the entrypoint, the kubelet unit, containerd's config),
#      imported with `docker import`;
#   2. kubeadm, kubelet, kubectl from the project's build (tests/cluster/kind-binaries.sh)
#      copied in;
#   3. the control-plane images made from the same build (kube-apiserver,
#      kube-controller-manager, kube-scheduler, kube-proxy, etcd, CoreDNS, a static pause),
#      each a binary on a minimal root, named localhost/etj-kind/<name>:<tag> (the
#      generated kind config points kubeadm's imageRepository there), imported into the
#      node's containerd with `ctr -n k8s.io images import`, and the container committed.
# Cached: the image is tagged etj-kind-node:<k8s-version>-<key>, key = sha256 of every
# input (the binaries, the node files, $RECIPE, the base's package list); the rootfs
# under $ETJ_CACHE/kind/rootfs-<key>. A warm run is a `docker image inspect`.
# Needs root and the private Docker engine (tests/cluster/kind-docker.sh start).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="${ETJ_K8S_VERSION:-v1.35.4}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
BIN="$CACHE/bin/$K8S_VERSION"
KIND_CACHE="$CACHE/kind"
REPO="localhost/etj-kind"
SUITE=bookworm
MIRROR="${ETJ_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,conntrack,ebtables,ethtool,socat,kmod,ca-certificates,procps,iproute2,jq,libseccomp2,util-linux,mount"
# Bump when a change here changes what gets built.
RECIPE="etj-kind-node-1"
eval "$(bash "$HERE/kind-docker.sh" env)"

say() { printf '[kind-node-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { echo "kind-node-image: $*" >&2; exit 1; }

mkdir -p "$KIND_CACHE"
exec 8>"$KIND_CACHE/.lock"
flock 8

# ---- 1. the base root filesystem (debootstrap; cached by its package list) ----
# Started first and beside the Go builds of kind-binaries.sh: debootstrap mostly waits for
# the mirror and dpkg, the Go builds for the CPU, so on a cold machine they overlap.
ROOTFS_KEY=$(printf '%s\n' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-12)
ROOTFS="$KIND_CACHE/rootfs-$ROOTFS_KEY"
(
  if [ ! -f "$ROOTFS/.complete" ]; then
    command -v debootstrap >/dev/null || {
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null; }
    rm -rf "$ROOTFS.tmp"
    say "debootstrap $SUITE ($PACKAGES)"
    nice -n 10 debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS.tmp" "$MIRROR" >&2
    # Package lists and caches are not needed in a node.
    rm -rf "$ROOTFS.tmp"/var/cache/apt/archives/*.deb "$ROOTFS.tmp"/var/lib/apt/lists/*
    touch "$ROOTFS.tmp/.complete"
    rm -rf "$ROOTFS"
    mv "$ROOTFS.tmp" "$ROOTFS"
  fi
) &
rootfs_pid=$!
bash "$HERE/kind-binaries.sh" >&2 || { kill "$rootfs_pid" 2>/dev/null; wait "$rootfs_pid"; exit 1; }
wait "$rootfs_pid" || die "the base root filesystem (debootstrap) failed"
NODE_BINS=(kubeadm kubelet kubectl)
IMAGE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns-kind pause)
for b in "${NODE_BINS[@]}" "${IMAGE_BINS[@]}"; do [ -x "$BIN/$b" ] || die "missing $BIN/$b"; done

KEY=$({
  printf '%s\n' "$RECIPE" "$K8S_VERSION" "$ROOTFS_KEY"
  (cd "$BIN" && sha256sum "${NODE_BINS[@]}" "${IMAGE_BINS[@]}")
  sha256sum "$HERE/kind-runc-wrapper.sh" "$HERE"/kind-node/*
} | sha256sum | cut -c1-12)
TAG="etj-kind-node:$K8S_VERSION-$KEY"
if docker image inspect "$TAG" >/dev/null 2>&1; then
  say "cached: $TAG"
  echo "$TAG"
  exit 0
fi
start=$SECONDS

BASE_TAG="etj-kind-base:$ROOTFS_KEY"
if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
  say "importing the base root filesystem as $BASE_TAG"
  tar -C "$ROOTFS" --exclude=./.complete -c . | docker import - "$BASE_TAG" >/dev/null
fi

WORK="$(mktemp -d "$KIND_CACHE/build.XXXXXX")"
BUILDER="etj-kind-build-$KEY"
cleanup() {
  docker rm -f "$BUILDER" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- 3a. the component images: one binary each on a minimal root ----
# The minimal root: users, nsswitch, CA bundle, /tmp; plus, for kube-proxy, iptables and
# conntrack with their libraries, taken from the base's own packages (so their alternatives
# pick the same iptables backend as the node).
mini="$WORK/mini"
mkdir -p "$mini/etc/ssl/certs" "$mini/tmp" "$mini/var/run"
chmod 1777 "$mini/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$mini/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$mini/etc/group"
printf 'hosts: files dns\n' >"$mini/etc/nsswitch.conf"
cp "$ROOTFS/etc/ssl/certs/ca-certificates.crt" "$mini/etc/ssl/certs/"
proxy_root="$WORK/proxy-root"
mkdir -p "$proxy_root"
(
  cd "$ROOTFS"
  {
    # The merged-/usr links first, then every file under its /usr path (tar does not
    # extract through a link).
    ls -d ./lib64 ./lib ./bin ./sbin ./etc/alternatives/*tables* ./usr/sbin/*tables*
    for p in iptables libip4tc2 libip6tc2 libxtables12 libnftnl11 libmnl0 libnetfilter-conntrack3 \
      libnfnetlink0 conntrack libc6 libgcc-s1; do
      chroot "$ROOTFS" dpkg -L "$p" | sed -e 's#^/\(lib\|lib64\|bin\|sbin\)/#/usr/\1/#' \
        | while read -r f; do if [ -f ".$f" ] || [ -L ".$f" ]; then echo ".$f"; fi; done
    done | grep -v -e '^./usr/share/' | sort -u
  } >"$WORK/proxy-files"
  tar -c --no-recursion -T "$WORK/proxy-files" | tar -C "$proxy_root" -x
)
chroot "$proxy_root" /usr/sbin/iptables --version >/dev/null || die "kube-proxy's root has no working iptables"

declare -A IMAGES
etcd_tag="$("$BIN/etcd" --version | sed -n 's/^etcd Version: //p')-0"
coredns_tag="v$("$BIN/coredns-kind" -version | sed -n 's/^CoreDNS-//p' | head -1)"
IMAGES=(
  [kube-apiserver]="$REPO/kube-apiserver:$K8S_VERSION"
  [kube-controller-manager]="$REPO/kube-controller-manager:$K8S_VERSION"
  [kube-scheduler]="$REPO/kube-scheduler:$K8S_VERSION"
  [kube-proxy]="$REPO/kube-proxy:$K8S_VERSION"
  [etcd]="$REPO/etcd:$etcd_tag"
  [coredns-kind]="$REPO/coredns:$coredns_tag"
  [pause]="$REPO/pause:static"
)
for b in "${!IMAGES[@]}"; do
  ctx="$WORK/ctx-$b"
  mkdir -p "$ctx/root/usr/local/bin"
  cp -a "$mini/." "$ctx/root/"
  [ "$b" = kube-proxy ] && cp -a "$proxy_root/." "$ctx/root/"
  name="$b"
  [ "$b" = coredns-kind ] && name=coredns
  cp "$BIN/$b" "$ctx/root/usr/local/bin/$name"
  [ "$b" = pause ] && cp "$BIN/pause" "$ctx/root/pause"
  tar -C "$ctx/root" -c . | docker import \
    --change "ENTRYPOINT [\"/usr/local/bin/$name\"]" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "${IMAGES[$b]}" >/dev/null
  rm -rf "$ctx"
done
say "component images: ${IMAGES[*]}"
docker save "${IMAGES[@]}" -o "$WORK/images.tar"
# They now live in the node image only.
docker rmi "${IMAGES[@]}" >/dev/null

# ---- 2 + 3b. the node: binaries and files in, images into its containerd, commit ----
docker run -d --privileged --name "$BUILDER" --entrypoint sleep "$BASE_TAG" infinity >/dev/null
for b in "${NODE_BINS[@]}"; do docker cp "$BIN/$b" "$BUILDER:/usr/bin/$b"; done
N="$HERE/kind-node"
docker cp "$N/entrypoint" "$BUILDER:/usr/local/bin/entrypoint"
docker cp "$HERE/kind-runc-wrapper.sh" "$BUILDER:/usr/local/sbin/runc-nosysresource"
docker cp "$N/kubelet.service" "$BUILDER:/etc/systemd/system/kubelet.service"
docker exec "$BUILDER" mkdir -p /etc/systemd/system/kubelet.service.d /etc/containerd /etc/default \
  /kind/manifests /etc/cni/net.d /opt/cni
docker cp "$N/10-kubeadm.conf" "$BUILDER:/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
docker cp "$N/kubelet.slice" "$BUILDER:/etc/systemd/system/kubelet.slice"
docker cp "$N/kubelet.default" "$BUILDER:/etc/default/kubelet"
docker cp "$N/crictl.yaml" "$BUILDER:/etc/crictl.yaml"
sed "s#@PAUSE_IMAGE@#${IMAGES[pause]}#" "$N/containerd-config.toml" >"$WORK/config.toml"
docker cp "$WORK/config.toml" "$BUILDER:/etc/containerd/config.toml"
docker cp "$WORK/images.tar" "$BUILDER:/kind/images.tar"
docker exec -i "$BUILDER" bash -euo pipefail -s "$K8S_VERSION" <<'SH' >&2
k8s_version=$1
# runc is the real one unless the wrapper is needed; kind-up.sh's generated config
# switches containerd to the wrapper on machines that need it.
ln -sf /usr/sbin/runc /usr/local/sbin/runc
chmod 0755 /usr/local/sbin/runc-nosysresource /usr/local/bin/entrypoint
echo "$k8s_version" >/kind/version
# kind's CNI binaries path (/opt/cni/bin) for CNI configs written for kind.
ln -sfn /usr/lib/cni /opt/cni/bin
systemctl enable kubelet.service containerd.service >/dev/null 2>&1
# Units that make no sense in a container.
systemctl mask getty.target console-getty.service systemd-udevd.service \
  systemd-modules-load.service systemd-firstboot.service >/dev/null 2>&1 || true
# A fresh machine-id per node (the entrypoint makes it).
: >/etc/machine-id
touch /etc/machine-id.etj-template
# Import the images (compressed content only: the node unpacks on first use).
containerd >/tmp/containerd.log 2>&1 &
for _ in $(seq 60); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.5; done
ctr -n k8s.io images import --no-unpack --all-platforms /kind/images.tar >/dev/null
ctr -n k8s.io images ls -q
kill %1; wait || true
rm -f /kind/images.tar /tmp/containerd.log
SH
docker commit \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  --change 'CMD []' \
  --change 'ENV container=docker' \
  --change "LABEL dev.etj.inputs=$KEY" \
  --change "LABEL dev.etj.etcd-tag=$etcd_tag" \
  --change "LABEL dev.etj.coredns-tag=$coredns_tag" \
  "$BUILDER" "$TAG-commit" >/dev/null
# systemd stops cleanly on SIGRTMIN+3 (SIGTERM makes it re-execute); `docker commit`
# cannot set a stop signal, a one-line build on top can (metadata only).
printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$TAG-commit" | DOCKER_BUILDKIT=0 docker build -q -t "$TAG" - >/dev/null
docker rmi "$TAG-commit" >/dev/null || true
# Older node images are not needed any more (one still used by a cluster stays).
for old in $(docker images etj-kind-node --format '{{.Repository}}:{{.Tag}}' | grep -vx "$TAG"); do
  docker rmi "$old" >/dev/null 2>&1 || true
done
say "built $TAG in $((SECONDS - start)) s"
echo "$TAG"
