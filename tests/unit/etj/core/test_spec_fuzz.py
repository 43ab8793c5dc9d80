"""Spec fuzzing: schema-valid jobs at the extremes never hang, blow up or crash the core.

Specs are drawn from the CRD's own OpenAPI schema (``etj.core.crd.build_crd``), so whatever the
API server would store can be drawn: every number at its minimum, its maximum or between,
lists at their longest (256 tables), quantities from "0" to "1e999999999", every enum value.
For each, ``validate`` (which plans) returns problems naming a field or a plan, and
``render`` builds the objects. The work is counted, not timed: the planner's unit of work
(one per-ps load evaluation of ``tables + ps`` steps) is counted through a wrapper, and
the rendered objects are measured, and the memory validating allocates is traced; all stay
within bounds set by the spec's own numbers — never by its vocabulary sizes, dimensions or
shard counts.

Cases this test found are in ``tests/cases/malformed.py`` (marked "found by
test_spec_fuzz").
"""

from __future__ import annotations

import json
import os
import re
import tracemalloc
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import etj.core.planner as planner
from etj.api.constants import API_VERSION, KIND, MAX_JOB_NAME_LENGTH
from etj.api.spec import MAX_PS
from etj.core.crd import build_crd
from etj.core.render import RenderSettings, build_config_map, build_pod, build_service
from etj.core.render.pod import replica_set
from etj.core.validation import validate_manifest

SPEC_SCHEMA = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

# Where the schema sets no maximum, the largest value the API server's int64 holds.
INT64_MAX = 2**63 - 1
# Quantities at the extremes, beside ones drawn from the pattern.
EXTREME_QUANTITIES = [
    *("0", "1", "0.5", "1m", "1Ki", "768Mi", "4Gi", "1Ei", "7Ei", "1e18", "1e400", "1e999999999"),
    *(0, 2**63 - 1),
]
# Memory the core may allocate for one job (traced): far above any legitimate plan.
MEMORY_BOUND = 64 << 20
# Free-form objects (volumes, affinity, ...) are Kubernetes' business, not the planner's.
SKIP = {"volume", "podTemplate", "valueFrom"}
# Real Kubernetes limits the rendered objects must respect.
CONFIG_MAP_LIMIT = 1 << 20
OBJECT_LIMIT = 1_500_000


def _integers(node: dict[str, Any]) -> st.SearchStrategy[int]:
    lo = int(node.get("minimum", 0))
    hi = int(node.get("maximum", INT64_MAX))
    return st.one_of(st.just(lo), st.just(hi), st.integers(lo, hi))


def _numbers(node: dict[str, Any]) -> st.SearchStrategy[float]:
    lo = float(node.get("minimum", 0.0))
    hi = float(node.get("maximum", 1e6))
    low = st.just(lo) if not node.get("exclusiveMinimum") else st.just(lo + 1e-9)
    return st.one_of(
        low, st.just(hi), st.floats(lo, hi, exclude_min=bool(node.get("exclusiveMinimum")))
    )


def _strings(node: dict[str, Any]) -> st.SearchStrategy[str]:
    longest = int(node.get("maxLength", 64))
    shortest = int(node.get("minLength", 0))
    if "pattern" in node:
        pattern = node["pattern"]
        drawn = st.from_regex(pattern, fullmatch=True).filter(
            lambda s: shortest <= len(s) <= longest
        )
        if pattern == r"^[a-z][a-z0-9_]*$":  # table names: also the longest allowed
            return st.one_of(st.just("t" + "x" * (longest - 1)), drawn)
        return drawn
    return st.text(alphabet="abcxyz-_/.", min_size=max(1, shortest), max_size=min(longest, 20))


def _quantities(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(EXTREME_QUANTITIES), st.from_regex(node["pattern"], fullmatch=True)
    )


def from_schema(node: dict[str, Any], name: str = "") -> st.SearchStrategy[Any]:
    """A strategy for values the structural schema ``node`` accepts."""
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        if node.get("pattern") == "^auto$":
            return st.one_of(st.just("auto"), _integers(node))
        return _quantities(node)
    kind = node.get("type")
    if kind == "integer":
        return _integers(node)
    if kind == "number":
        return _numbers(node)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        return _strings(node)
    if kind == "array":
        return _arrays(node, name)
    if kind == "object" and "properties" in node:
        required = set(node.get("required", []))
        props = {k: v for k, v in node["properties"].items() if k not in SKIP}
        return st.fixed_dictionaries(
            {k: from_schema(v, k) for k, v in props.items() if k in required},
            optional={k: from_schema(v, k) for k, v in props.items() if k not in required},
        )
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        key = st.sampled_from(["memory", "cpu"])
        return st.dictionaries(key, from_schema(node["additionalProperties"]), max_size=2)
    return st.nothing()


def _arrays(node: dict[str, Any], name: str) -> st.SearchStrategy[list[Any]]:
    shortest = int(node.get("minItems", 0))
    longest = int(node.get("maxItems", 8))
    items = from_schema(node["items"])
    keys = node.get("x-kubernetes-list-map-keys")
    unique_by = (lambda item: tuple(item.get(k) for k in keys)) if keys else None

    def sized(n: int) -> st.SearchStrategy[list[Any]]:
        return st.lists(items, min_size=n, max_size=n, unique_by=unique_by)

    if name == "embeddings":
        # The longest list as one drawn table repeated under distinct names: drawing 256
        # independent tables would be slow and no more extreme.
        longest_list = items.map(lambda t: [{**t, "name": f"t{i}"} for i in range(longest)])
        return st.one_of(
            sized(shortest),
            longest_list,
            st.lists(items, min_size=1, max_size=6, unique_by=unique_by),
        )
    return st.lists(items, min_size=shortest, max_size=min(longest, 8), unique_by=unique_by)


names = st.one_of(
    st.just("j"),
    st.just("j" * MAX_JOB_NAME_LENGTH),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True),
)
manifests = st.builds(
    lambda name, spec: {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": "n" * 63, "uid": "u", "generation": 1},
        "spec": spec,
    },
    names,
    from_schema(SPEC_SCHEMA),
)


@contextmanager
def counted_planning():
    """Counts the planner's work: each per-ps load evaluation costs ``tables + ps``."""
    work = {"steps": 0}
    loads = planner._loads

    def counting(tables, counts, num_ps):
        work["steps"] += len(tables) + num_ps
        return loads(tables, counts, num_ps)

    with mock.patch.object(planner, "_loads", counting):
        yield work


def _size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def _parameter_server(manifest: dict[str, Any]) -> dict[str, Any]:
    """The same job under ParameterServer (where the planner has the most to do)."""
    spec = {**manifest["spec"], "strategy": "ParameterServer"}
    replicas = dict(spec.get("replicas") or {})
    replicas["chief"] = {**(replicas.get("chief") or {}), "replicas": 1}
    worker = replicas.get("worker") or {}
    replicas["worker"] = {**worker, "replicas": max(1, worker.get("replicas", 1))}
    replicas.setdefault("ps", {})
    return {**manifest, "spec": {**spec, "replicas": replicas}}


@settings(
    max_examples=int(os.environ.get("ETJ_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.large_base_example,
        HealthCheck.data_too_large,
    ],
)
@given(manifest=manifests, parameter_server=st.booleans())
def test_schema_valid_extremes_plan_render_and_validate_within_bounds(manifest, parameter_server):
    if parameter_server:
        manifest = _parameter_server(manifest)
    spec = manifest["spec"]
    tables = len(spec["model"]["embeddings"])
    ps = (spec.get("replicas") or {}).get("ps") or {}
    max_ps = (
        ps.get("replicas") if isinstance(ps.get("replicas"), int) else ps.get("maxReplicas", 64)
    )

    with counted_planning() as work:
        tracemalloc.start()
        try:
            result = validate_manifest(manifest)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < MEMORY_BOUND
    # The planner evaluates at most one layout per candidate ps count (plus the final one).
    assert work["steps"] <= (max_ps + 1) * (tables + max_ps)

    if not result.ok:
        event("refused: " + ("plan" if result.job is not None else "schema/model"))
        for problem in result.problems:
            assert problem.field and problem.field != "(root)", problem
            assert len(problem.message) > 10 and "Traceback" not in problem.message
            if problem.field.startswith("spec.") and "PlanTooLarge" in problem.message:
                assert re.search(r"\d", problem.message)  # says how large
        return

    job, plan = result.job, result.plan
    assert job is not None and plan is not None
    event(f"planned: {plan.strategy}")
    shards = sum(t.shards for t in plan.tables)
    assert shards <= planner.MAX_TOTAL_SHARDS
    assert all(t.shards <= planner.MAX_SHARDS_PER_TABLE for t in plan.tables)
    assert plan.ps_replicas <= MAX_PS
    # The plan's size follows from tables, shards and ps, never from rows.
    assert _size(plan.to_wire()) <= 400 * tables + 160 * shards + 120 * plan.ps_replicas + 400

    settings_ = RenderSettings()
    assert _size(build_service(job, settings_)) < 4096
    config_map = build_config_map(job, plan, settings_)
    assert sum(len(v) for v in config_map["data"].values()) < CONFIG_MAP_LIMIT
    # One pod per role (the first and the last): each is built the same way, and the
    # largest part of a pod, TF_CONFIG, grows with the number of tasks.
    replicas = replica_set(job, plan)
    tasks = sum(replicas.count(r) for r in ("chief", "worker", "ps", "evaluator"))
    for role in ("chief", "worker", "ps", "evaluator"):
        count = replicas.count(role)
        for index in sorted({0, count - 1}) if count else []:
            pod = build_pod(job, plan, role, index, settings_)
            assert _size(pod) <= 4000 + 200 * tasks + _size(spec)
            assert _size(pod) < OBJECT_LIMIT
            for resources in pod["spec"]["containers"][0].get("resources", {}).values():
                assert not str(resources.get("memory", "0")).startswith("-")
