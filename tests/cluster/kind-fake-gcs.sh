#!/usr/bin/env bash
# fake-gcs-server in the local kind cluster, for gs:// checkpoints and data. Called by
# tests/cluster/kind-up.sh with the cluster name. Idempotent.
#
# TensorFlow's GCS filesystem has no endpoint setting: it always calls
# https://www.googleapis.com (JSON API, uploads) and https://storage.googleapis.com (reads).
# So fake-gcs-server (github.com/fsouza/fake-gcs-server, built from Go modules into
# $ETJ_CACHE/bin) serves plain HTTP inside its pod, behind tests/cluster/gcs-front (TLS
# with a certificate for those two names from a test CA made here, $ETJ_CACHE/kind/gcs-ca,
# never a real CA; it also drops the "Transfer-Encoding: identity" header TF sends and
# Go's HTTP server refuses), on port 443 of a Service with a fixed ClusterIP ($GCS_IP). A pod that wants gs:// adds
#   hostAliases: [{ip: $GCS_IP, hostnames: [www.googleapis.com, storage.googleapis.com]}]
#   env: CURL_CA_BUNDLE=/etc/etj-gcs/ca.crt, NO_GCE_CHECK=true,
#        GOOGLE_AUTH_TOKEN_FOR_TESTING=<anything>
#   a volume from the ConfigMap etj-gcs-ca (copied into the default and etj-system
#   namespaces) mounted at /etc/etj-gcs.
# Objects live under the shared host directory (/tmp/etj-kind-shared/gcs/<bucket>/...):
# the e2e reads them from the host. The bucket etj-ckpt exists from the start.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
NAME="${1:?cluster name, or --binaries}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
KIND="$CACHE/bin/kind"
FAKE_GCS_VERSION="${ETJ_FAKE_GCS_VERSION:-v1.56.1}"
export KUBECONFIG="${KUBECONFIG:-$CACHE/kind/kubeconfig}"
KUBECTL="$CACHE/bin/${ETJ_K8S_VERSION:-v1.35.4}/kubectl"
GCS_IP="${ETJ_KIND_GCS_IP:-10.96.0.50}"
CA_DIR="$CACHE/kind/gcs-ca"
SHARED=/tmp/etj-kind-shared
GOENV=(GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod)
say() { printf '[kind-fake-gcs %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
kubectl() { "$KUBECTL" "$@"; }

# The binary (Go modules; no replace directives, so `go install` works). One build at a
# time: kind-up.sh and `make fake-gcs` (the cluster lane's) may both run it on a cold machine.
mkdir -p "$CACHE/bin"
exec 8>"$CACHE/bin/.fake-gcs.lock"
flock 8
if ! "$CACHE/bin/fake-gcs-server" -help 2>&1 | grep -q -- -public-host \
  || [ "$(cat "$CACHE/bin/fake-gcs-server.version" 2>/dev/null)" != "$FAKE_GCS_VERSION" ]; then
  say "building fake-gcs-server $FAKE_GCS_VERSION"
  env "${GOENV[@]}" GOBIN="$CACHE/bin" nice -n 10 go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
  echo "$FAKE_GCS_VERSION" >"$CACHE/bin/fake-gcs-server.version"
fi
(cd "$HERE/gcs-front" && env "${GOENV[@]}" go build -trimpath -ldflags "-s -w" -o "$CACHE/bin/gcs-front" .)
flock -u 8
# `kind-fake-gcs.sh --binaries`: only the builds above (kind-up.sh starts them early,
# beside the node image, so they are done when the cluster is).
[ "$NAME" != --binaries ] || exit 0
eval "$(bash "$HERE/kind-docker.sh" env)"
front_sum=$(sha256sum "$CACHE/bin/gcs-front" | cut -c1-12)
IMAGE="localhost/etj-kind/fake-gcs-server:$FAKE_GCS_VERSION-$front_sum"

# The test CA and the server certificate for the GCS host names.
if [ ! -f "$CA_DIR/tls.crt" ]; then
  mkdir -p "$CA_DIR"
  (
    cd "$CA_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=etj kind test CA (fake GCS)" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=www.googleapis.com -keyout tls.key -out tls.csr 2>/dev/null
    printf 'subjectAltName=DNS:www.googleapis.com,DNS:storage.googleapis.com,DNS:fake-gcs.etj-gcs.svc\n' >san.ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile san.ext -out tls.crt 2>/dev/null
  )
fi

# The image: the static binary on an empty root, into every node's containerd.
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  root="$(mktemp -d)"
  mkdir -p "$root/usr/local/bin" "$root/tmp"
  cp "$CACHE/bin/fake-gcs-server" "$CACHE/bin/gcs-front" "$root/usr/local/bin/"
  tar -C "$root" -c . | docker import --change 'ENTRYPOINT ["/usr/local/bin/fake-gcs-server"]' - "$IMAGE" >/dev/null
  rm -rf "$root"
fi
for node in $("$KIND" get nodes --name "$NAME"); do
  docker exec "$node" ctr -n k8s.io images ls -q | grep -qx "$IMAGE" && continue
  docker save "$IMAGE" | docker exec -i "$node" ctr -n k8s.io images import - >/dev/null
done

mkdir -p "$SHARED/gcs/etj-ckpt"
ensure_ns() { kubectl get namespace "$1" >/dev/null 2>&1 || kubectl create namespace "$1" >/dev/null; }
ensure_ns etj-gcs
kubectl -n etj-gcs create secret tls fake-gcs-tls --cert "$CA_DIR/tls.crt" --key "$CA_DIR/tls.key" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
for ns in etj-gcs default etj-system; do
  ensure_ns "$ns"
  kubectl -n "$ns" create configmap etj-gcs-ca --from-file=ca.crt="$CA_DIR/ca.crt" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: fake-gcs, namespace: etj-gcs}
spec:
  clusterIP: $GCS_IP
  selector: {app: fake-gcs}
  ports: [{name: https, port: 443, targetPort: 443}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: fake-gcs, namespace: etj-gcs}
spec:
  replicas: 1
  selector: {matchLabels: {app: fake-gcs}}
  template:
    metadata: {labels: {app: fake-gcs}}
    spec:
      # The Service "fake-gcs" would inject FAKE_GCS_PORT=tcp://..., which fake-gcs-server
      # reads as its own port setting.
      enableServiceLinks: false
      # On the control plane, with the cluster's other services: the e2e stops a worker
      # node mid-training and the jobs' gs:// must not go with it.
      nodeSelector: {node-role.kubernetes.io/control-plane: ""}
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      containers:
        - name: fake-gcs
          image: $IMAGE
          imagePullPolicy: Never
          args: [-scheme, http, -host, 127.0.0.1, -port, "4443",
                 -public-host, storage.googleapis.com, -external-url, https://www.googleapis.com,
                 -backend, filesystem, -filesystem-root, /var/lib/etj-shared/gcs, -log-level, warn]
          volumeMounts:
            - {name: objects, mountPath: /var/lib/etj-shared/gcs}
        - name: tls-front
          image: $IMAGE
          imagePullPolicy: Never
          command: [/usr/local/bin/gcs-front]
          args: [-listen, ":443", -cert, /tls/tls.crt, -key, /tls/tls.key, -upstream, "127.0.0.1:4443"]
          ports: [{containerPort: 443}]
          readinessProbe:
            tcpSocket: {port: 443}
            periodSeconds: 2
          volumeMounts:
            - {name: tls, mountPath: /tls, readOnly: true}
      volumes:
        - name: tls
          secret: {secretName: fake-gcs-tls}
        - name: objects
          hostPath: {path: /var/lib/etj-shared/gcs, type: DirectoryOrCreate}
YAML
kubectl -n etj-gcs rollout status deployment fake-gcs --timeout=300s >/dev/null
say "fake-gcs-server at $GCS_IP:443 (www/storage.googleapis.com); bucket etj-ckpt; objects in $SHARED/gcs"
