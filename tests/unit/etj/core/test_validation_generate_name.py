"""A job with generateName and no name (`kubectl create`, a CronJob's daily job) is checked
under the longest name the API server can give it; the problems name generateName."""

from __future__ import annotations

import copy
from typing import Any

from etj.core.validation import GENERATED_NAME_SUFFIX, validate_manifest
from tests.cases.malformed import BASE


def generated(prefix: str) -> dict[str, Any]:
    job = copy.deepcopy(BASE)
    job["metadata"] = {"generateName": prefix, "labels": {"chain": "ctr"}}
    return job


def test_a_generate_name_job_is_valid_under_the_name_it_will_get():
    result = validate_manifest(generated("ctr-daily-"))
    assert result.ok, result.problems
    assert result.job is not None
    assert result.job.name == "ctr-daily-" + GENERATED_NAME_SUFFIX
    assert len(GENERATED_NAME_SUFFIX) == 5
    assert result.job.metadata.labels == {"chain": "ctr"}


def test_a_generate_name_too_long_or_malformed_is_named():
    long = validate_manifest(generated("a" * 41))
    assert [str(p) for p in long.problems] == [
        "metadata.generateName: 46 characters with the 5 the API server appends; at most 45, "
        "so that pod hostnames <name>-worker-<index> stay DNS labels"
    ]
    assert validate_manifest(generated("a" * 40)).ok
    bad = validate_manifest(generated("Daily_"))
    assert [p.field for p in bad.problems] == ["metadata.generateName"]
    assert "DNS-1123 label" in bad.problems[0].message


def test_a_name_wins_and_neither_is_still_a_missing_name():
    both = generated("ctr-daily-")
    both["metadata"]["name"] = "day-1"
    result = validate_manifest(both)
    assert result.ok and result.job is not None and result.job.name == "day-1"
    neither = generated("")
    assert [str(p) for p in validate_manifest(neither).problems] == [
        "metadata.name: required field is missing"
    ]
