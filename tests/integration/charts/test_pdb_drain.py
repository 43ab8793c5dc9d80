"""The chart's PodDisruptionBudget lets ``kubectl drain`` of one node proceed: rendered with
``helm template`` and judged by policy/v1's eviction arithmetic (an eviction is allowed
while the healthy pods minus one stay at or above the budget's desired healthy:
``minAvailable``, a percentage of the replicas rounded up). The default (2 operators,
``minAvailable: 1``) allows one eviction at a time, so a drain of a node holding both
operators evicts one, and the other once the first's replacement is ready on another node.
A budget that allows none (``minAvailable`` of every replica, by count or by a percentage
that rounds up to all) would block every drain forever: the chart refuses it."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from etj_testcluster.cluster import default_bin_dir

ROOT = Path(__file__).resolve().parents[3]
CHART = str(ROOT / "charts" / "etj")


def _helm(*values: str) -> subprocess.CompletedProcess[str]:
    helm = default_bin_dir() / "helm"
    # In the cluster lane, after `make binaries` (in tests/unit it skipped on every cold
    # machine: the unit tests run before anything is built).
    assert helm.exists(), f"no helm in {helm.parent}: run `make binaries`"
    sets = [arg for v in values for arg in ("--set", v)]
    return subprocess.run(
        [str(helm), "template", "etj", CHART, "--namespace", "etj-system", *sets],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _objects(*values: str) -> list[dict[str, Any]]:
    result = _helm(*values)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def desired_healthy(min_available: int | str, expected: int) -> int:
    """policy/v1's desired healthy pods of a ``minAvailable`` budget over ``expected`` pods
    (a percentage rounds up, as the disruption controller does)."""
    if isinstance(min_available, str) and min_available.endswith("%"):
        return math.ceil(int(min_available[:-1]) * expected / 100)
    return int(min_available)


def drain_evictions(min_available: int | str, replicas: int, on_node: int) -> int | None:
    """Evictions a drain of a node holding ``on_node`` of ``replicas`` operators makes, each
    as soon as the budget allows (an evicted pod's replacement becomes ready on another
    node before the next one is asked for); None if the drain would wait forever."""
    desired = desired_healthy(min_available, replicas)
    healthy, left, made = replicas, on_node, 0
    while left:
        if healthy - 1 < desired:
            return None  # the drain retries the eviction forever (429)
        healthy -= 1
        left -= 1
        made += 1
        healthy += 1  # the replacement, ready on another node
    return made


def test_the_eviction_model_follows_policy_v1():
    assert desired_healthy(1, 2) == 1 and desired_healthy("50%", 2) == 1
    assert desired_healthy("60%", 2) == 2 and desired_healthy("100%", 3) == 3
    assert drain_evictions(1, 2, on_node=2) == 2
    assert drain_evictions(2, 2, on_node=1) is None
    assert drain_evictions(0, 1, on_node=1) == 1


def _budget(docs: list[dict[str, Any]]) -> tuple[int | str, int]:
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    return pdb["spec"]["minAvailable"], int(deployment["spec"]["replicas"])


@pytest.mark.parametrize("values", [("replicaCount=2",), ("replicaCount=3",),
                                    ("replicaCount=3", "podDisruptionBudget.minAvailable=2"),
                                    ("replicaCount=2", "podDisruptionBudget.minAvailable=50%")])  # fmt: skip
def test_a_drain_of_one_node_proceeds_whatever_it_holds(values: tuple[str, ...]):
    min_available, replicas = _budget(_objects(*values))
    for on_node in range(1, replicas + 1):
        assert drain_evictions(min_available, replicas, on_node) == on_node, (values, on_node)


def test_the_default_two_operators_keep_one_through_a_drain():
    min_available, replicas = _budget(_objects("replicaCount=2"))
    assert (min_available, replicas) == (1, 2)
    assert replicas - desired_healthy(min_available, replicas) == 1  # one at a time


@pytest.mark.parametrize("min_available", ["2", "100%", "60%"])
def test_a_budget_that_would_block_every_drain_is_refused(min_available: str):
    result = _helm("replicaCount=2", f"podDisruptionBudget.minAvailable={min_available}")
    assert result.returncode != 0
    assert "would block every drain" in result.stderr, result.stderr
