#!/usr/bin/env bash
# Build Kueue's manager from Go modules into ~/.cache/etj/bin/kueue-<version>/kueue, for the
# tests that run a real Kueue against the local control plane (etj_testcluster.kueue).
# Called by `make kueue`. Like build-binaries.sh: Go's module and build caches under
# ~/.cache/etj/go, the installed toolchain, no cgo; a cached binary is not rebuilt.
#
# Why a wrapper module: `go install sigs.k8s.io/kueue/cmd/kueue@<v>` asks the module proxy
# for the module's version list (to check for a deprecation notice), and the proxy these
# machines reach answers 403 to that list for sigs.k8s.io/kueue while serving the version
# itself; `go build` inside a module that requires it asks for the version only. Kueue's
# go.mod has no replace directives, so the wrapper builds exactly its release.
# The manifests (CRDs, webhook configurations) come from the same module, in the module
# cache after the build.
set -euo pipefail

KUEUE_VERSION="${ETJ_KUEUE_VERSION:-v0.15.2}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
BIN="$CACHE/bin/kueue-$KUEUE_VERSION"
SRC="$CACHE/src/kueue-$KUEUE_VERSION"

say() { printf '[build-kueue %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

mkdir -p "$CACHE/bin"
# One build at a time, and a test that needs Kueue waits for this one to end
# (etj_testcluster.kueue.build_lock: keep the paths in step).
exec 9>"$CACHE/bin/kueue-$KUEUE_VERSION.lock"
flock 9
if [ -x "$BIN/kueue" ]; then say "kueue $KUEUE_VERSION: cached"; exit 0; fi
command -v go >/dev/null || { echo "build-kueue: go is required (https://go.dev/dl)" >&2; exit 1; }
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$BIN" "$SRC"
[ -f "$SRC/go.mod" ] \
  || printf 'module etj.dev/kueuebuild\n\ngo 1.25.0\n\nrequire sigs.k8s.io/kueue %s\n' "$KUEUE_VERSION" > "$SRC/go.mod"
say "kueue $KUEUE_VERSION: building"
start=$SECONDS
(cd "$SRC" && go build -trimpath -ldflags "-s -w" -o "$BIN/kueue.tmp" sigs.k8s.io/kueue/cmd/kueue)
mv "$BIN/kueue.tmp" "$BIN/kueue"
say "kueue: built in $((SECONDS - start)) s"
