#!/usr/bin/env bash
# Build kube-score (github.com/zegl/kube-score, static checks of Kubernetes objects) from Go
# modules into ~/.cache/etj/bin/kube-score-<version>/kube-score, for `make lint-objects`
# (tests/lint/lint-objects.sh). Like build-kueue.sh: Go's module and build caches under
# ~/.cache/etj/go, the installed toolchain, no cgo; a cached binary is not rebuilt.
#
# Why kube-score and not kube-linter: the Go module proxy these machines reach serves no
# version of golang.stackrox.io/kube-linter (nor of its GitHub path); kube-score checks
# the same kind of things (security contexts, probes, resources, network policies,
# selectors) and is served.
# Why a wrapper module: as for Kueue, `go build` inside a module that requires the tool
# asks the proxy for that version only, never for the version list.
set -euo pipefail

KUBE_SCORE_VERSION="${ETJ_KUBE_SCORE_VERSION:-v1.20.0}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
BIN="$CACHE/bin/kube-score-$KUBE_SCORE_VERSION"
SRC="$CACHE/src/kube-score-$KUBE_SCORE_VERSION"

say() { printf '[build-kube-score %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -x "$BIN/kube-score" ]; then say "kube-score $KUBE_SCORE_VERSION: cached"; echo "$BIN/kube-score"; exit 0; fi
command -v go >/dev/null || { echo "build-kube-score: go is required (https://go.dev/dl)" >&2; exit 1; }
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$BIN" "$SRC"
[ -f "$SRC/go.mod" ] \
  || printf 'module etj.dev/kubescorebuild\n\ngo 1.24\n\nrequire github.com/zegl/kube-score %s\n' "$KUBE_SCORE_VERSION" > "$SRC/go.mod"
say "kube-score $KUBE_SCORE_VERSION: building"
start=$SECONDS
(cd "$SRC" && nice -n 10 go build -trimpath -ldflags "-s -w -X main.version=$KUBE_SCORE_VERSION" \
    -o "$BIN/kube-score.tmp" github.com/zegl/kube-score/cmd/kube-score)
mv "$BIN/kube-score.tmp" "$BIN/kube-score"
say "kube-score: built in $((SECONDS - start)) s"
echo "$BIN/kube-score"
