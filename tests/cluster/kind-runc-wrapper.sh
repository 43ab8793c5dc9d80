#!/bin/sh
# runc, minus CAP_SYS_RESOURCE. Registered as Docker's default runtime by
# tests/cluster/kind-docker.sh and as containerd's runc binary inside the kind nodes built
# by tests/cluster/kind-node-image.sh, on VMs whose capability bounding set lacks
# CAP_SYS_RESOURCE: there every privileged container (the kind nodes themselves, and
# kube-proxy inside them) fails with `runc create failed: unable to apply caps: operation
# not permitted`, because the OCI spec asks for every capability. This drops that one
# capability from the bundle's config.json (create/run) and from `exec --process FILE`,
# then hands over to the real runc with the arguments unchanged. Where the bounding set
# has it (normal machines) nothing is registered and runc runs as usual.
# It must not change anything else in the spec.
set -eu
RUNC="${ETJ_REAL_RUNC:-/usr/sbin/runc}"
[ -x "$RUNC" ] || RUNC=/usr/bin/runc

strip() {  # strip FILE JQ_PATH_PREFIX
  [ -f "$1" ] || return 0
  tmp="$1.etj-nosysres"
  jq "$2"'|= (if type == "object" then with_entries(if (.value|type) == "array" then .value |= map(select(. != "CAP_SYS_RESOURCE")) else . end) else . end)' "$1" >"$tmp"
  mv "$tmp" "$1"
}

cmd="" bundle="" process="" prev=""
for a in "$@"; do
  case "$prev" in
    --bundle|-b) bundle="$a" ;;
    --process|-p) process="$a" ;;
  esac
  case "$a" in
    --bundle=*) bundle="${a#--bundle=}" ;;
    --process=*) process="${a#--process=}" ;;
    create|run|exec) [ -z "$cmd" ] && cmd="$a" ;;
  esac
  prev="$a"
done
case "$cmd" in
  create|run) strip "${bundle:-.}/config.json" '.process.capabilities' ;;
  exec) [ -n "$process" ] && strip "$process" '.capabilities' ;;
esac
exec "$RUNC" "$@"
