#!/usr/bin/env bash
# Build the real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl) and helm from Go modules, into ~/.cache/etj/bin/<k8s-version>/.
# Called by `make binaries` (and so by `make test`). It builds nothing else: no tests, no
# other commands, and it writes only under $ETJ_CACHE (default ~/.cache/etj).
#
# Idempotent: a binary already in the cache is not rebuilt. Go's module and build caches
# live under ~/.cache/etj/go, so a version bump recompiles only what changed.
# ETJ_K8S_BIN_DIR (or KUBEBUILDER_ASSETS) naming a directory that already has every
# control-plane binary skips their build (helm is then built into the cache if that
# directory lacks it). A directory with only some of them (envtest's assets have no
# controller-manager or scheduler) is not mixed with ours: versions would skew.
#
# Why wrapper modules: `go install k8s.io/kubernetes/cmd/...@vX` fails because k/k's go.mod
# replaces its staging modules (k8s.io/api, k8s.io/apiserver, ...) with local paths at
# v0.0.0; a module that requires k/k and replaces each staging module with its published
# v0.<minor>.<patch> tag builds fine. The list is generated from k/k's own go.mod, since
# it changes between releases. etcd's server module has replace directives too, so it is
# built as a dependency of a wrapper module rather than installed.
#
# Measured on the 2-core machine (Go 1.26): cold (empty Go and module caches) 577 s, warm (all
# binaries cached) under 1 s.
set -euo pipefail

# Keep K8S_VERSION in step with etj_testcluster.cluster.K8S_VERSION (a test checks).
K8S_VERSION="${ETJ_K8S_VERSION:-v1.35.4}"
ETCD_VERSION="${ETJ_ETCD_VERSION:-v3.5.35}"
HELM_VERSION="${ETJ_HELM_VERSION:-v3.22.0}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
BIN="$CACHE/bin/$K8S_VERSION"
SRC="$CACHE/src"
CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

say() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

missing_in() {
  local dir=$1 b out=()
  for b in "${CONTROL_PLANE[@]}"; do [ -x "$dir/$b" ] || out+=("$b"); done
  echo "${out[*]:-}"
}

BUILD_CONTROL_PLANE=1
for var in ETJ_K8S_BIN_DIR KUBEBUILDER_ASSETS; do
  dir="${!var:-}"
  [ -n "$dir" ] || continue
  missing=$(missing_in "$dir")
  if [ -z "$missing" ]; then
    say "$var=$dir has every control-plane binary: not building them"
    BUILD_CONTROL_PLANE=0
    if [ -x "$dir/helm" ]; then say "helm: found in $dir"; exit 0; fi
    break
  fi
  say "$var=$dir lacks: $missing; building the whole control plane into $BIN instead"
done

command -v go >/dev/null || { echo "build-binaries: go is required (https://go.dev/dl)" >&2; exit 1; }
# -mod=mod: the wrapper modules have no committed go.sum; Go resolves and checks it.
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS="-mod=mod -buildvcs=false"
# The installed toolchain, never a download of another one.
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$BIN" "$SRC"

# What this run would build. Every binary is moved into place whole (built aside, then
# `mv`), so one that is there is complete: a warm run checks the files and takes no lock.
# It must not wait on the lock, which kind-binaries.sh holds for minutes while it builds
# the node's other binaries beside the test lanes (a cold CI run).
wanted=(helm)
if [ "$BUILD_CONTROL_PLANE" = 1 ]; then
  wanted+=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)
  [ "${ETJ_WITH_KUBELET:-0}" = 1 ] && wanted+=(kubelet)
fi
all_cached=1
for b in "${wanted[@]}"; do [ -x "$BIN/$b" ] || all_cached=0; done
if [ "$all_cached" = 1 ]; then
  for b in "${wanted[@]}"; do say "$b: cached"; done
  say "binaries ready in $BIN (nothing to build)"
  exit 0
fi

# Two builds at once (two checkouts, or kind-binaries.sh) would race on the same files.
if command -v flock >/dev/null; then
  exec 9>"$CACHE/bin/.lock"
  flock 9
fi

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
patch="${K8S_VERSION##*.}"
staging_version="v0.${minor}.${patch}"

build_k8s() {
  local mod="$SRC/k8s-$K8S_VERSION"
  mkdir -p "$mod"
  if [ ! -f "$mod/go.mod" ]; then
    say "preparing the k8s wrapper module ($K8S_VERSION, staging modules at $staging_version)"
    local kk_gomod
    kk_gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
      | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    [ -f "$kk_gomod" ] || { echo "build-binaries: no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
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
    grep -q '^replace k8s.io/apiserver ' "$mod/go.mod.tmp" \
      || { echo "build-binaries: found no staging replaces in $kk_gomod" >&2; exit 1; }
    mv "$mod/go.mod.tmp" "$mod/go.mod"
  fi
  # What `make` in k/k sets (hack/lib/version.sh), so /version and `kubectl version`
  # report the real release instead of v0.0.0-master.
  local pkg ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  # Every missing command in one `go build`: a package they share is compiled once and
  # the links run side by side. ETJ_WITH_KUBELET=1 (make test as root) adds the kubelet of
  # the kind node image (tests/cluster/kind-binaries.sh) to the same build.
  local cmd todo=() cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  [ "${ETJ_WITH_KUBELET:-0}" = 1 ] && cmds+=(kubelet)
  for cmd in "${cmds[@]}"; do
    if [ -x "$BIN/$cmd" ]; then say "$cmd: cached"; else todo+=("$cmd"); fi
  done
  [ "${#todo[@]}" -gt 0 ] || return 0
  say "building ${todo[*]} (cold, most of Kubernetes compiles: ~10 min on 2 cores)"
  local start=$SECONDS out
  out="$(mktemp -d "$BIN/.build.XXXXXX")"
  (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$out/" "${todo[@]/#/k8s.io/kubernetes/cmd/}")
  for cmd in "${todo[@]}"; do mv "$out/$cmd" "$BIN/$cmd"; done
  rmdir "$out"
  say "${todo[*]}: built in $((SECONDS - start)) s"
}

build_etcd() {
  if [ -x "$BIN/etcd" ]; then say "etcd: cached"; return; fi
  local mod="$SRC/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  [ -f "$mod/go.mod" ] \
    || printf 'module etj.dev/etcdbuild\n\ngo 1.23\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$mod/go.mod"
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
  [ -f "$mod/go.mod" ] \
    || printf 'module etj.dev/helmbuild\n\ngo 1.24\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION" > "$mod/go.mod"
  say "helm: building $HELM_VERSION"
  local start=$SECONDS
  (cd "$mod" && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      -o "$BIN/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$BIN/helm.tmp" "$BIN/helm"
  say "helm: built in $((SECONDS - start)) s"
}

total=$SECONDS
if [ "$BUILD_CONTROL_PLANE" = 1 ]; then
  build_etcd
  build_k8s
fi
build_helm
say "binaries ready in $BIN ($((SECONDS - total)) s)"
