#!/usr/bin/env bash
# Install the Debian packages a Docker-less machine needs to build the images (buildah,
# podman, runc, uidmap; debootstrap for the stand-in base image and the kind node's root
# filesystem). Called by `make images` through `make node-packages`. (The kind cluster's
# private Docker engine installs its own: tests/cluster/kind-docker.sh.)
#
# Idempotent: packages already installed are not fetched again (a warm run is a dpkg
# query). Needs root; prints what is missing and exits 1 without it. Starts no service:
# Debian's postinst scripts ask policy-rc.d, which we never change.
set -euo pipefail

PACKAGES=(buildah podman runc uidmap debootstrap)

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
