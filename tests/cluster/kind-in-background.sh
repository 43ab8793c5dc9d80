#!/usr/bin/env bash
# Run a command (make test's pytest) while tests/cluster/kind-up.sh brings the local kind
# cluster up in the background (root only; elsewhere it just runs the command): the
# cluster's ~3 min from a cached node image (more when the node image must be built)
# overlap the suite instead of preceding it. The kind e2e tests run last and call
# kind-up.sh themselves, which waits for this run's lock and then finds the cluster up
# (and loads the images the background image build finished meanwhile).
#
# kind-up runs niced in its own process group; whatever happens to the command, it is
# waited for (or killed with its group on an interrupt), so nothing outlives `make test`
# but the cluster itself, which the e2e suite's last test deletes.
set -uo pipefail

log="${ETJ_CACHE:-$HOME/.cache/etj}/kind/kind-up.log"
pid=""
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$(dirname "$log")"
  setsid nice -n 10 bash "$(dirname "$0")/kind-up.sh" >"$log" 2>&1 &
  pid=$!
  trap 'kill -- -"$pid" 2>/dev/null; wait "$pid" 2>/dev/null; exit 130' INT TERM
  echo "[kind-in-background] bringing the kind cluster up beside the suite (log: $log)"
fi
"$@"
rc=$?
if [ -n "$pid" ] && ! wait "$pid"; then
  # The e2e fixture's own kind-up call reported the cause as a test failure already.
  echo "[kind-in-background] the background kind-up failed; the end of $log:" >&2
  tail -20 "$log" >&2
fi
exit "$rc"
