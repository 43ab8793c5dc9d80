#!/usr/bin/env bash
# Run a command (make test's pytest) while tests/cluster/build-images.sh builds or checks
# the images in the background, niced and at idle I/O priority: a rebuild (any change to
# the package or README.md rebuilds the last layers, ~35 s; of pyproject.toml or a
# Dockerfile, everything, 3-9 min here) overlaps the suite instead of
# preceding it. The tests that need the images (tests/images, tests/e2e) run last and call
# build-images.sh themselves, which waits for this build's lock and then finds the images
# up to date. Where no engine can build (no Docker, not root) it just runs the command.
#
# The build runs in its own process group; whatever happens to the command, it is waited
# for (or killed with its group on an interrupt), so nothing outlives `make test`.
set -uo pipefail

log="${ETJ_CACHE:-$HOME/.cache/etj}/images/build.log"
pid=""
if [ "$(id -u)" = 0 ] || { command -v docker >/dev/null && docker info >/dev/null 2>&1; }; then
  mkdir -p "$(dirname "$log")"
  setsid nice -n 19 ionice -c 3 bash "$(dirname "$0")/build-images.sh" >"$log" 2>&1 &
  pid=$!
  trap 'kill -- -"$pid" 2>/dev/null; wait "$pid" 2>/dev/null; exit 130' INT TERM
  echo "[images-in-background] building the images beside the suite (log: $log)"
fi
"$@"
rc=$?
if [ -n "$pid" ] && ! wait "$pid"; then
  echo "[images-in-background] the image build failed; the end of $log:" >&2
  tail -20 "$log" >&2
  [ "$rc" != 0 ] || rc=1
fi
exit "$rc"
