#!/usr/bin/env bash
# Install the Debian packages a Docker-less machine needs to build the images (buildah,
# podman, runc, uidmap; debootstrap for the stand-in base image) and to run a real node
# (containerd, the CNI plugins, iptables, conntrack). Called by `make images` and by
# `etj cluster up --node kubelet` through `make node-packages`.
#
# Idempotent: packages already installed are not fetched again (a warm run is a dpkg
# query). Needs root; prints what is missing and exits 1 without it. Starts no service:
# Debian's postinst scripts ask policy-rc.d, which we never change, and containerd is
# only ever started by `etj cluster up --node kubelet` (and stopped by `down`).
set -euo pipefail

PACKAGES=(buildah podman runc uidmap debootstrap containerd containernetworking-plugins
  iptables conntrack)

say() { printf '[node-packages %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" = 0 ]; then say "all installed"; exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "install-node-packages: root is needed to install: ${missing[*]}" >&2
  exit 1
fi
start=$SECONDS
say "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
say "installed in $((SECONDS - start)) s"
