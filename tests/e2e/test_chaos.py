"""The chaos soak's CI version on kind (issue 39, 2): a seeded schedule of faults that stop
no node (pod SIGKILL and graceful delete, the same replica twice within a checkpoint
interval, a ps OOM-killed, the operator's leader killed with the chart at 2 replicas, the
API server restarted) over a ParameterServer job (2 ps, 3 workers, following the files the
driver lands) and a MultiWorkerMirrored one (3 workers), the invariants of
etj_testcluster.chaos checked after every fault and at the end (tests/e2e/chaos_driver.py
does the cluster's side), the table printed. ``make chaos`` is the whole soak.

Runs before test_kind.py (whose fixture installs the chart again, with one operator, and
whose last test uninstalls it).
"""

from __future__ import annotations

import pytest

from etj_testcluster import chaos

from .chaos_driver import DATA, Soak, soak_jobs, soak_schedule, worker_nodes
from .kindlib import Kind, install

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

# A seed whose six faults are six kinds (the ps OOM among them) over both strategies.
SEED = 0
FAULTS = 6
# The MultiWorkerMirrored job's length: what the faults take (each recovers within a
# minute on a quiet machine), so that it still trains at the last of them.
SECONDS = 240


# Run 3 on kind (2026-12-07): all six faults recovered with every invariant held; at the
# end the Succeeded ParameterServer job's status.replicaStatuses still counted its ps and
# workers active and ready (2, 3) with their pods gone: the pass that stopped them counted
# them (fixed since: a pod the pass deletes is not active; test_finish.py). In `make
# test-all` (extended), not CI, until it has passed on kind twice in a row after that fix.
@pytest.mark.extended
def test_a_seeded_fault_schedule_over_both_strategies_keeps_every_invariant(kind: Kind) -> None:
    k = install(kind, replicas=2)
    nodes = worker_nodes(k)
    jobs = soak_jobs(SECONDS, gcs_prefix=None)
    faults, owed = soak_schedule(
        SEED, [j.under for j in jobs], nodes, chaos.CI_KINDS, FAULTS, (3.0, 8.0)
    )
    hit = {j.under.strategy for j in jobs for f in faults if f.job == j.under.name}
    assert hit == {chaos.PS_STRATEGY, chaos.MWM_STRATEGY}, faults
    soak = Soak(k, jobs, nodes, log=k.mark)
    try:
        soak.start()
        outcomes = soak.run(faults, owed)
    finally:
        k.kubectl("delete", "etj", *[j.under.name for j in jobs], "--ignore-not-found",
                  "--wait=false", check=False)  # fmt: skip
        k.kubectl("delete", "pvc", DATA, "--ignore-not-found", "--wait=false", check=False)
    print(chaos.table(outcomes), flush=True)
    assert len(outcomes) == FAULTS, chaos.table(outcomes)
    assert all(o.recover_seconds is not None for o in outcomes), chaos.table(outcomes)
    wrong = [v for o in outcomes for v in o.violations] + soak.violations
    assert not wrong, "\n".join([chaos.table(outcomes), *wrong])
