"""``etj run`` and spec.warmStart without processes: what it cannot resolve is refused
saying what to write instead (etj.local.runner.local_warm_start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etj.api import EmbeddingTrainingJob
from etj.local.runner import local_warm_start


def parse(ws: dict[str, Any]) -> EmbeddingTrainingJob:
    return EmbeddingTrainingJob.from_manifest(
        {
            "metadata": {"name": "x"},
            "spec": {
                "model": {"embeddings": [{"name": "u", "vocabularySize": 5, "dimension": 4}]},
                "warmStart": ws,
            },
        }
    )


def test_what_etj_run_cannot_resolve_is_refused_saying_what_to_write(tmp_path: Path):
    with pytest.raises(ValueError, match="etj run sees no other jobs"):
        local_warm_start(parse({"selector": {}}), tmp_path / "x")
    with pytest.raises(ValueError, match=r"give the directory as warmStart\.checkpoint\.uri"):
        local_warm_start(parse({"checkpoint": {"claim": "c"}}), tmp_path / "x")
    with pytest.raises(ValueError, match=r"no checkpoints at .*run day-1 first"):
        local_warm_start(parse({"fromJob": "day-1"}), tmp_path / "x")


def test_from_job_pins_the_sibling_work_directory(tmp_path: Path):
    saved = tmp_path / "day-1" / "checkpoints" / "day-1"
    saved.mkdir(parents=True)
    (saved / "checkpoint").write_text('model_checkpoint_path: "ckpt-30"\n')
    pinned = local_warm_start(parse({"fromJob": "day-1"}), tmp_path / "day-2")
    assert pinned is not None
    assert (pinned.location, pinned.source_job) == (str(saved), "day-1")
    assert local_warm_start(parse({"checkpoint": {"uri": "/data/ckpt"}}), tmp_path) is None
