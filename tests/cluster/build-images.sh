#!/usr/bin/env bash
# Build the two images from their Dockerfiles, unchanged: etj-operator:dev
# (operator/Dockerfile) and etj-trainer:dev (trainer_image/Dockerfile). Called by
# `make images`.
#
# Engine: docker when a Docker engine answers (`docker info`), else buildah (root; the
# Debian packages come from tests/cluster/install-node-packages.sh) with the settings in
# tests/cluster/containers.conf (runc, fixed ulimits, cgroupfs). In RUN steps pip verifies
# TLS with the host's CA bundle and tests/cluster/pip-ca.conf, both mounted read-only,
# never copied into an image; RUN steps use the host network (no CNI needed to build).
#
# Base image: python:3.11.11-slim-bookworm when present or pullable. Where no registry
# serves it (these machines reach package registries only) a STAND-IN of the same name is
# built from Debian packages: `debootstrap --variant=minbase bookworm` with python3,
# python3-venv and ca-certificates, and a venv at /usr/local so the official image's layout
# (/usr/local/bin/python, pip, site-packages) holds. It is Debian's Python 3.11, not the
# official image's 3.11.11 build: fine for building and testing here, not for publishing.
#
# Cache: every built image is saved as a docker archive under $ETJ_CACHE/images, keyed by
# the sha256 of its inputs (Dockerfile, the files it copies, the base image's id, $RECIPE)
# and labelled with that key. A warm run whose images carry the right key does nothing
# (but save an archive that is gone: kind loads the archives);
# a fresh engine storage with a cached archive loads it; only a change of inputs rebuilds.
#
# Layers: buildah builds with --layers (docker's BuildKit caches by itself), and both
# Dockerfiles install their dependencies before copying the code, so a change to the code
# alone rebuilds the small last layers (see below for when the cache is dropped).
#
# Measured on the 2-core machine (buildah, nice 19, load 5-20 from other developers):
# packages 30 s cold; stand-in base 114 s (152 MB); operator ~85 s (331 MB); trainer 550 s
# (2.34 GB; 176-196 s on an idle machine) + ~60 s to save; a warm run (labels match) 10 s.
#
# Arguments name the images to build (pause, operator, trainer); none means all three.
set -euo pipefail

WANT=" ${*:-pause operator trainer} "
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
IMAGES="$CACHE/images"
BASE="python:3.11.11-slim-bookworm"
BASE_FQ="docker.io/library/$BASE"
PAUSE_TAG="etj-pause:dev"
OPERATOR_TAG="${ETJ_OPERATOR_IMAGE:-etj-operator:dev}"
TRAINER_TAG="${ETJ_TRAINER_IMAGE:-etj-trainer:dev}"
LABEL="dev.etj.inputs"
# Part of every cache key: bump it when a change here changes what gets built (build flags,
# the stand-in's packages), so edits elsewhere in this script do not rebuild the images.
RECIPE="etj-images-1"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/tests/cluster/containers.conf}"

say() { printf '[build-images %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { echo "build-images: $*" >&2; exit 1; }

cd "$ROOT"
mkdir -p "$IMAGES"
exec 9>"$IMAGES/.lock"
flock 9

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  ENGINE=docker
else
  [ "$(id -u)" = 0 ] || die "no Docker engine and not root: buildah needs root here"
  bash "$ROOT/tests/cluster/install-node-packages.sh"
  ENGINE=podman
fi
say "engine: $ENGINE"

image_label() {  # image label -> value or empty
  $ENGINE image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}
image_id() { $ENGINE image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# The sha256 of a list of files and directories (content and path), plus extra strings.
inputs_key() {
  local extra=$1; shift
  {
    printf '%s\n' "$extra"
    find "$@" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 \
      | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

drop_replaced() {  # tag previous-id: remove the previous image once the tag names another
  local current
  current="$(image_id "$1")"
  if [ -n "$2" ] && [ -n "$current" ] && [ "$2" != "$current" ]; then
    $ENGINE rmi "$2" >/dev/null 2>&1 && say "$1: removed the image it replaced (${2:0:12})"
  fi
  return 0
}

# The image a run replaces is removed once its successor is tagged, so the engine's storage
# holds one image per tag instead of growing by ~2 GB with every change of the inputs.
load_or_build() {  # tag key build-function...
  local previous
  previous="$(image_id "$1")"
  load_or_build_1 "$@"
  drop_replaced "$1" "$previous"
}

load_or_build_1() {
  local tag=$1 key=$2; shift 2
  local name="${tag%:*}"; name="${name##*/}"
  local archive="$IMAGES/$name-$key.tar"
  if [ "$(image_label "$tag" "$LABEL")" = "$key" ]; then
    say "$tag: up to date ($key)"
    # kind's nodes load the archives (kind-load-images.sh): a cleared cache beside an
    # engine that still holds the image must get its archive back, not be passed over.
    [ -f "$archive" ] || save_archive "$tag" "$name" "$archive"
    return
  fi
  if [ -f "$archive" ]; then
    local start=$SECONDS
    $ENGINE load -i "$archive" >/dev/null
    if [ "$(image_label "$tag" "$LABEL")" = "$key" ]; then
      say "$tag: loaded from $archive in $((SECONDS - start)) s"
      return
    fi
    say "$tag: $archive holds another image; rebuilding"
  fi
  local start=$SECONDS
  "$@"
  say "$tag: built in $((SECONDS - start)) s; saving"
  save_archive "$tag" "$name" "$archive"
}

save_archive() {  # tag name archive: the image as the one archive of its name
  local start=$SECONDS
  rm -f "$IMAGES/$2"-*.tar
  if [ "$ENGINE" = docker ]; then
    docker save -o "$3.tmp" "$1"
  else
    podman save -q --format docker-archive -o "$3.tmp" "$1"
  fi
  mv "$3.tmp" "$3"
  say "$1: saved $(du -h "$3" | cut -f1) to $3 ($((SECONDS - start)) s)"
}

# ---- base image -------------------------------------------------------------------------

build_stand_in_base() {
  local root
  root="$(mktemp -d "$IMAGES/rootfs.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" RETURN
  local mirror
  mirror="$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources \
    2>/dev/null | head -1)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  say "base: $BASE cannot be pulled; building the Debian stand-in (debootstrap from $mirror)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" "$mirror" >"$IMAGES/debootstrap.log" 2>&1 \
    || { tail -20 "$IMAGES/debootstrap.log" >&2; die "debootstrap failed"; }
  # The official image keeps its Python under /usr/local; a venv there keeps that layout.
  chroot "$root" /usr/bin/python3 -m venv /usr/local
  chroot "$root" /bin/sh -c 'ln -sf python3 /usr/local/bin/python'
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/*
  tar -C "$root" -c . | $ENGINE import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL $LABEL=$BASE_KEY" \
    --change 'LABEL dev.etj.stand-in="Debian bookworm python3 (debootstrap), not the official image"' \
    --change 'CMD ["python3"]' - "$BASE_FQ" >/dev/null 2>&1
}

ensure_base() {
  if [ -n "$(image_id "$BASE_FQ")" ]; then
    say "base: $BASE present"
    return
  fi
  if timeout 60 $ENGINE pull -q "$BASE_FQ" >/dev/null 2>&1; then
    say "base: pulled $BASE"
    return
  fi
  [ "$ENGINE" = podman ] || die "cannot pull $BASE with docker"
  BASE_KEY="$(inputs_key "$RECIPE stand-in $BASE" /etc/apt/sources.list.d/debian.sources)"
  load_or_build "$BASE_FQ" "$BASE_KEY" build_stand_in_base
}

# ---- the two images ---------------------------------------------------------------------

build_with() {  # dockerfile tag key
  local dockerfile=$1 tag=$2 key=$3
  if [ "$ENGINE" = docker ]; then
    docker build -f "$dockerfile" -t "$tag" --label "$LABEL=$key" .
  else
    buildah bud --layers --network host --pull=false \
      -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
      -v "$ROOT/tests/cluster/pip-ca.conf:/etc/pip.conf:ro" \
      -f "$dockerfile" -t "$tag" --label "$LABEL=$key" .
  fi
}

# ---- the pause image of a real node's pod sandboxes (podman only: kind brings its own) ----

build_pause() {
  local dir
  dir="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '$dir'" RETURN
  # A pod sandbox's first process only has to sleep until it is told to stop.
  cat >"$dir/main.go" <<'GO'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
GO
  printf 'module etj.dev/pause\n\ngo 1.22\n' >"$dir/go.mod"
  (cd "$dir" && GOTOOLCHAIN=local CGO_ENABLED=0 GOCACHE="$CACHE/go/build" \
    go build -trimpath -ldflags "-s -w" -o pause .)
  local ctr
  ctr="$(buildah from scratch)"
  buildah copy "$ctr" "$dir/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --label "$LABEL=$PAUSE_KEY" "$ctr"
  buildah commit -q "$ctr" "$PAUSE_TAG" >/dev/null
  buildah rm "$ctr" >/dev/null
}

if [[ "$WANT" == *" pause "* ]] && [ "$ENGINE" = podman ] && command -v go >/dev/null; then
  PAUSE_KEY="$(inputs_key "$RECIPE pause $(go version)" /dev/null)"
  load_or_build "$PAUSE_TAG" "$PAUSE_KEY" build_pause
fi

[[ "$WANT" == *" operator "* || "$WANT" == *" trainer "* ]] || exit 0
ensure_base
base_id="$(image_id "$BASE_FQ")"
# The layer cache: each Dockerfile installs the dependencies from pyproject.toml in a stage
# before the code, so a change to the code reuses that layer (seconds, not minutes, and a
# few MB more in the engine's storage instead of 2 GB). When what the dependency stages
# see changes, their cached layers are dead weight: drop the untagged intermediate images.
deps_key="$(inputs_key "$RECIPE $base_id" operator/Dockerfile trainer_image/Dockerfile pyproject.toml)"
if [ "$ENGINE" = podman ] && [ "$(cat "$IMAGES/deps.key" 2>/dev/null)" != "$deps_key" ]; then
  buildah rmi --prune >/dev/null 2>&1 || true
  say "dependency stages changed ($deps_key): dropped the old layer cache"
  echo "$deps_key" >"$IMAGES/deps.key"
fi
context=(pyproject.toml README.md operator/etj trainer_image/etj_trainer)
for pair in "operator operator/Dockerfile $OPERATOR_TAG" "trainer trainer_image/Dockerfile $TRAINER_TAG"; do
  read -r what dockerfile tag <<<"$pair"
  [[ "$WANT" == *" $what "* ]] || continue
  key="$(inputs_key "$RECIPE $base_id $tag" "$dockerfile" "${context[@]}")"
  load_or_build "$tag" "$key" build_with "$dockerfile" "$tag" "$key"
done
say "images ready: $OPERATOR_TAG $TRAINER_TAG"
