"""Fixtures for the pure unit tests: jobs built in memory, no cluster, no TensorFlow."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def load_example(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


@pytest.fixture
def quickstart() -> dict[str, Any]:
    return copy.deepcopy(load_example("quickstart.yaml"))


def job_manifest(
    spec: dict[str, Any], name: str = "demo", uid: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": meta,
        "spec": spec,
    }
