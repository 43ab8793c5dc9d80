#!/usr/bin/env bash
# Build what a real node of the local cluster adds to the control plane: the kubelet and
# kube-proxy (from the same k8s wrapper module as tests/cluster/build-binaries.sh, so Go's
# build cache under ~/.cache/etj/go is shared and most packages are already compiled) and
# CoreDNS (`go install github.com/coredns/coredns@<version>`: its go.mod has no replace
# directives). Output: ~/.cache/etj/bin/<k8s-version>/{kubelet,kube-proxy,coredns}.
# Called by `make node-binaries`. Idempotent: cached binaries are not rebuilt.
# Measured on the 2-core machine under other developers' load: kubelet 221 s (the control
# plane's build cache warm), kube-proxy 41 s, CoreDNS 479 s (121 s idle); warm under 1 s.
set -euo pipefail

K8S_VERSION="${ETJ_K8S_VERSION:-v1.35.4}"
COREDNS_VERSION="${ETJ_COREDNS_VERSION:-v1.15.0}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
BIN="$CACHE/bin/$K8S_VERSION"
MOD="$CACHE/src/k8s-$K8S_VERSION"

say() { printf '[build-node-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# The wrapper module is prepared by build-binaries.sh (it derives the staging replaces).
[ -f "$MOD/go.mod" ] || bash "$(dirname "$0")/build-binaries.sh"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local CGO_ENABLED=0
exec 9>"$CACHE/bin/.lock"
flock 9

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for cmd in kubelet kube-proxy; do
  if [ -x "$BIN/$cmd" ]; then say "$cmd: cached"; continue; fi
  start=$SECONDS
  (cd "$MOD" && go build -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
  mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  say "$cmd: built in $((SECONDS - start)) s"
done
if [ -x "$BIN/coredns" ]; then
  say "coredns: cached"
else
  start=$SECONDS
  tmp="$(mktemp -d)"
  GOBIN="$tmp" GOFLAGS="-buildvcs=false" go install -trimpath -ldflags "-s -w" \
    "github.com/coredns/coredns@$COREDNS_VERSION"
  mv "$tmp/coredns" "$BIN/coredns"
  rmdir "$tmp"
  say "coredns: built in $((SECONDS - start)) s"
fi
