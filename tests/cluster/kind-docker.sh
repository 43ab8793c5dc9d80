#!/usr/bin/env bash
# A private Docker engine for the local kind cluster: `kind-docker.sh packages|start|stop|env`
# (packages: install the Debian packages only; make test-deps runs it before the suite).
# Called by tests/cluster/kind-up.sh and kind-down.sh (make kind-up / kind-down).
#
# Debian's docker.io and containerd, started by hand (no systemd here) with their own
# sockets, state and data-root, so they never meet a containerd or Docker another tool on
# this machine runs (dockerd would otherwise adopt /run/containerd/containerd.sock):
#   data:   $ETJ_CACHE/docker  (images, the cached kind node image; survives stop)
#   state:  /run/etj-docker    (sockets, pid files; gone after stop)
# Clients use DOCKER_HOST=unix:///run/etj-docker/docker.sock (`kind-docker.sh env`).
#
# Host networking is left alone: --iptables=false --ip-forward=false --ip-masq=false, so
# dockerd adds no iptables chain and never turns the FORWARD policy to DROP (the nodes
# reach each other on their bridge at layer 2 and need no route out: everything is
# offline). Published ports go through docker-proxy, the userland proxy.
#
# On VMs whose capability bounding set lacks CAP_SYS_RESOURCE, privileged containers
# fail in runc; then tests/cluster/kind-runc-wrapper.sh is the default runtime.
# Packages are installed only when missing (root). It must not touch any other engine.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
DATA="$CACHE/docker"
RUN=/run/etj-docker
SOCK="$RUN/docker.sock"
CTRD_SOCK="$RUN/containerd.sock"
export DOCKER_HOST="unix://$SOCK"
PACKAGES=(docker.io containerd runc jq iptables)

say() { printf '[kind-docker %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { echo "kind-docker: $*" >&2; exit 1; }

# True when this kernel's capability bounding set lacks CAP_SYS_RESOURCE (bit 24).
lacks_sys_resource() {
  local bnd
  bnd=$(sed -n 's/^CapBnd:\s*//p' /proc/self/status)
  (( (16#$bnd >> 24 & 1) == 0 ))
}

install_packages() {
  local p missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" = 0 ] && return 0
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

running() { [ -S "$SOCK" ] && docker info >/dev/null 2>&1; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what did not come up (logs: $RUN/*.log)"
    sleep 0.5
  done
}

start() {
  [ "$(id -u)" = 0 ] || die "root is needed to run the kind cluster's Docker engine"
  if running; then say "running ($SOCK)"; return 0; fi
  install_packages
  mkdir -p "$RUN" "$DATA/docker" "$DATA/containerd"
  # containerd: its own root, state and socket; docker's moby namespace lives here.
  cat >"$RUN/containerd.toml" <<TOML
version = 2
root = "$DATA/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  disable_apparmor = true
TOML
  say "starting containerd"
  # 7>&-: the engine outlives kind-up.sh, whose lock is fd 7 (kind-up.sh); a daemon that
  # inherited it held the lock for its whole life and the e2e fixture's own kind-up.sh
  # waited on it until pytest's timeout (CI, 2026-11-25).
  setsid containerd --config "$RUN/containerd.toml" >"$RUN/containerd.log" 2>&1 </dev/null 7>&- &
  echo $! >"$RUN/containerd.pid"
  wait_for 30 containerd test -S "$CTRD_SOCK"
  local runtime_args=()
  if lacks_sys_resource; then
    install -m 0755 "$ROOT/tests/cluster/kind-runc-wrapper.sh" "$RUN/runc-nosysresource"
    runtime_args=(--add-runtime "etj-runc=$RUN/runc-nosysresource" --default-runtime etj-runc)
    say "CAP_SYS_RESOURCE is not in the bounding set: runtime wrapper is the default"
  fi
  say "starting dockerd (data-root $DATA/docker)"
  setsid dockerd --data-root "$DATA/docker" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
    -H "unix://$SOCK" --containerd "$CTRD_SOCK" --storage-driver overlay2 \
    --exec-opt native.cgroupdriver=cgroupfs --iptables=false --ip-forward=false --ip-masq=false \
    --bridge=none "${runtime_args[@]}" >"$RUN/dockerd.log" 2>&1 </dev/null 7>&- &
  wait_for 60 dockerd docker info
  say "running ($SOCK)"
}

stop_pid() {  # stop_pid PIDFILE NAME
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { say "$2 did not stop in 30 s: SIGKILL"; kill -9 "$pid"; }
  fi
  rm -f "$1"
}

stop() {
  [ -d "$RUN" ] || { say "not running"; return 0; }
  if running; then
    local ids
    ids=$(docker ps -aq)
    [ -z "$ids" ] || { say "removing containers: $ids"; docker rm -f $ids >/dev/null; }
    local nets
    nets=$(docker network ls -q --filter type=custom)
    [ -z "$nets" ] || docker network rm $nets >/dev/null
  fi
  stop_pid "$RUN/dockerd.pid" dockerd
  stop_pid "$RUN/containerd.pid" containerd
  # Whatever the daemons left mounted under their state (shm, netns, overlay mounts).
  local m
  for m in $(awk -v r="$RUN" -v d="$DATA" '$5 ~ "^"r || $5 ~ "^"d {print $5}' /proc/self/mountinfo | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$RUN"
  say "stopped"
}

case "${1:-}" in
  packages) [ "$(id -u)" = 0 ] || die "root is needed to install ${PACKAGES[*]}"; install_packages ;;
  start) start ;;
  stop) stop ;;
  env) echo "export DOCKER_HOST=unix://$SOCK" ;;
  *) die "usage: kind-docker.sh packages|start|stop|env" ;;
esac
