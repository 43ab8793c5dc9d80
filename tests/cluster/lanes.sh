#!/usr/bin/env bash
# CI's test lanes side by side, after lint and the unit tests (make test's first lane):
#
#   cluster    tests/integration (the local control plane and its process-backed node),
#              then tests/e2e and tests/images (the kind cluster and the built images,
#              which come up beside the suite: kind-in-background.sh,
#              images-in-background.sh)
#   local      tests/local (`etj run`'s processes), and the trainer's Kafka tests
#   processes  everything else: the trainer's real TensorFlow processes
#
# tests/local was in the cluster lane to even two lanes out; its own lane since the warm
# run of 2026-12-07 (warm2: cluster 1540 s, processes 1382 s, with the machine's two cores
# busy only 1.37 of the time on average): the cluster lane spends much of its time waiting
# (for an API server, a kubelet, a node's loss to be noticed, pods to start), and the
# other two fill those waits.
#
# Why lanes at once on a 2-core machine: side by side the suite takes about the longest
# lane, not the sum. Each lane is its own pytest session with its own temp dir (pytest
# prunes old numbered temp dirs; two sessions must not share the parent). Every line is
# prefixed with its lane; each lane's summary (slowest tests, failures) is printed again
# at the end. Exit status: the first failing lane's, after every lane has finished.
#
#   bash tests/cluster/lanes.sh PYTEST_ARGS...    (e.g. -q -m "not extended")
#   ETJ_JUNIT_DIR=DIR: each lane also writes DIR/<lane>.xml (per-test times).
#   ETJ_CLUSTER_LANE_BEFORE=CMD: run first in the cluster lane (its tests only if it passes).
#   ETJ_CLUSTER_LANE_BESIDE=CMD: run beside the cluster lane's tests (a failure fails it).
set -uo pipefail
cd "$(dirname "$0")/../.."

PY="${PY:-.venv/bin/python}"
CLUSTER_PATHS=(tests/integration tests/e2e tests/images)
# The trainer's Kafka tests (one broker per lane: all of them in one lane) ride in the
# local lane: the processes lane was the critical path (cold1, 2026-12-08: processes
# 2850 s, cluster 2092 s, local 983 s), and these are ~10 minutes of it.
LOCAL_PATHS=(tests/local tests/trainer/test_kafka_broker.py tests/trainer/etj_trainer/data/test_kafka.py
  tests/trainer/etj_trainer/task/test_kafka.py)
ignores=(--ignore=tests/unit)
for p in "${CLUSTER_PATHS[@]}" "${LOCAL_PATHS[@]}"; do ignores+=("--ignore=$p"); done

logs="$(mktemp -d)"
pids=()
names=()
lane() {
  local name="$1"
  shift
  mkdir -p "/tmp/pytest-etj-lane-$name"
  local junit=()
  # Every deadline-bounded wait of the lane, for the report of the tightest ones below.
  export ETJ_WAIT_LOG="$logs/$name.waits"
  [ -z "${ETJ_JUNIT_DIR:-}" ] || junit=("--junitxml=$ETJ_JUNIT_DIR/$name.xml")
  # setsid: an interrupt kills each lane's whole process group (its clusters' fixtures
  # then stop what they started).
  # The lane's script: its dependencies (before), what builds beside its tests (beside:
  # started after the dependencies, waited for at the end, its failure the lane's), pytest.
  local before="${LANE_BEFORE[$name]:-}" beside="${LANE_BESIDE[$name]:-}"
  setsid bash -c '
    set -o pipefail
    {
      if [ -n "$1" ]; then echo "[lanes] $3: $1"; eval "$1" || exit; fi
      side=""
      if [ -n "$2" ]; then echo "[lanes] $3, beside its tests: $2"; eval "$2" & side=$!; fi
      "${@:4}"
      rc=$?
      if [ -n "$side" ] && ! wait "$side"; then echo "[lanes] $3: failed beside the tests: $2"; [ "$rc" != 0 ] || rc=1; fi
      exit "$rc"
    } 2>&1 | tee "'"$logs/$name"'" | sed -u "s/^/['"$name"'] /"' \
    _ "$before" "$beside" "$name" "$PY" -m pytest --basetemp="/tmp/pytest-etj-lane-$name/t" "${junit[@]}" "$@" &
  pids+=($!)
  names+=("$name")
}
trap 'for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null; done; wait; exit 130' INT TERM

# What a lane needs before its tests, and what may build beside them (e.g. make test's
# Go builds for the cluster lane: the processes lane needs none of them, so it starts at
# once instead of waiting for them).
declare -A LANE_BEFORE=([cluster]="${ETJ_CLUSTER_LANE_BEFORE:-}")
declare -A LANE_BESIDE=([cluster]="${ETJ_CLUSTER_LANE_BESIDE:-}")

start=$SECONDS
lane cluster "$@" "${CLUSTER_PATHS[@]}"
lane local "$@" "${LOCAL_PATHS[@]}"
lane processes "$@" "${ignores[@]}"

rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  code=$?
  echo "[lanes] ${names[$i]} finished: exit $code at $((SECONDS - start)) s"
  [ "$rc" != 0 ] || rc=$code
done
for name in "${names[@]}"; do
  echo
  echo "================ lane $name: summary ================"
  # From pytest's durations / failures section to the end.
  sed -n '/= slowest\|= FAILURES\|= ERRORS\|= short test summary/,$p' "$logs/$name" | tail -80
done
echo
echo "================ waits closest to their deadlines (every lane) ================"
"$PY" -m etj_testcluster.waiting "$logs"/*.waits
rm -rf "$logs"
exit "$rc"
