#!/usr/bin/env bash
# Build the real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl) and helm from Go modules, into ~/.cache/etj/bin/<k8s-version>/.
#
# Idempotent: a binary already in the cache is not rebuilt. Go's module and build caches
# live under ~/.cache/etj/go so a version bump rebuilds only what changed.
# ETJ_K8S_BIN_DIR (or KUBEBUILDER_ASSETS) pointing at a directory that already has the
# binaries skips the build entirely.
#
# Why wrapper modules: `go install k8s.io/kubernetes/cmd/...@vX` fails because k/k's go.mod
# replaces its staging modules (k8s.io/api, k8s.io/apiserver, ...) with local paths at
# v0.0.0; a module that requires k/k and replaces each staging module with its published
# v0.<minor>.<patch> tag builds fine. etcd's server module has replace directives too.
set -euo pipefail

K8S_VERSION="${ETJ_K8S_VERSION:-v1.35.4}"
ETCD_VERSION="${ETJ_ETCD_VERSION:-v3.5.35}"
HELM_VERSION="${ETJ_HELM_VERSION:-v3.22.0}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
BIN="$CACHE/bin/$K8S_VERSION"
SRC="$CACHE/src"

say() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

for dir in "${ETJ_K8S_BIN_DIR:-}" "${KUBEBUILDER_ASSETS:-}"; do
  if [ -n "$dir" ] && [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; then
    say "using existing binaries in $dir"
    exit 0
  fi
done

command -v go >/dev/null || { echo "go is required (https://go.dev/dl)" >&2; exit 1; }
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS="-mod=mod" GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$BIN" "$SRC"

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
patch="${K8S_VERSION##*.}"
staging_version="v0.${minor}.${patch}"

build_k8s() {
  local mod="$SRC/k8s-$K8S_VERSION"
  mkdir -p "$mod"
  if [ ! -f "$mod/go.mod" ]; then
    say "preparing the k8s wrapper module ($K8S_VERSION, staging $staging_version)"
    local kk_gomod
    kk_gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    {
      echo "module etj.dev/k8sbuild"
      echo
      echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$kk_gomod")"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      # Every staging module k/k replaces with ./staging/... gets its published tag.
      sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#replace \1 => \1 '"$staging_version"'#p' "$kk_gomod"
    } > "$mod/go.mod.tmp"
    mv "$mod/go.mod.tmp" "$mod/go.mod"
  fi
  local pkg="k8s.io/component-base/version"
  local ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    if [ -x "$BIN/$cmd" ]; then say "$cmd: cached"; continue; fi
    say "$cmd: building (several minutes on 2 cores)"
    local start=$SECONDS
    (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
    say "$cmd: built in $((SECONDS - start)) s"
  done
}

build_etcd() {
  if [ -x "$BIN/etcd" ]; then say "etcd: cached"; return; fi
  local mod="$SRC/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  printf 'module etj.dev/etcdbuild\n\ngo 1.23\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$mod/go.mod"
  say "etcd: building $ETCD_VERSION"
  local start=$SECONDS
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  say "etcd: built in $((SECONDS - start)) s"
}

build_helm() {
  if [ -x "$BIN/helm" ]; then say "helm: cached"; return; fi
  local mod="$SRC/helm-$HELM_VERSION"
  mkdir -p "$mod"
  printf 'module etj.dev/helmbuild\n\ngo 1.24\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION" > "$mod/go.mod"
  say "helm: building $HELM_VERSION"
  local start=$SECONDS
  (cd "$mod" && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      -o "$BIN/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$BIN/helm.tmp" "$BIN/helm"
  say "helm: built in $((SECONDS - start)) s"
}

total=$SECONDS
build_etcd
build_k8s
build_helm
say "all binaries in $BIN ($((SECONDS - total)) s)"
