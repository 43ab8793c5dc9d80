"""Rendering of a warm start (render.warmstart): the trainer config names the one
location the operator pinned; every replica mounts the source's volume read-only."""

from __future__ import annotations

from typing import Any

from etj.api import EmbeddingTrainingJob
from etj.api.warmstart import WARM_START_MOUNT
from tests.unit.etj.core.render.test_build_storage import job, pod, trainer_config


def pinned(j: EmbeddingTrainingJob, **status: Any) -> EmbeddingTrainingJob:
    return EmbeddingTrainingJob.from_manifest(
        {
            **j.model_dump(mode="json", by_alias=True, exclude_none=True),
            "status": {"warmStart": status},
        }
    )


def mounts(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in p["spec"]["containers"][0]["volumeMounts"]}


def test_a_pinned_source_job_is_read_under_a_read_only_mount_in_every_replica():
    volume = {"persistentVolumeClaim": {"claimName": "day-1-checkpoints", "readOnly": True}}
    j = pinned(
        job(
            checkpoint={"storage": {}},
            warmStart={"fromJob": "day-1", "stepCount": "Continue", "freshTables": ["user_id"]},
        ),
        source="job day-1 (fromJob)",
        location=f"{WARM_START_MOUNT}/day-1",
        volume=volume,
    )
    ws = trainer_config(j).warm_start
    assert ws is not None
    assert ws.location == f"{WARM_START_MOUNT}/day-1" and ws.source == "job day-1 (fromJob)"
    assert (ws.continue_steps, ws.keep_optimizer, ws.fresh_tables) == (True, True, ["user_id"])
    for role in ("chief", "worker", "ps"):
        p = pod(j, role)
        v = next(v for v in p["spec"]["volumes"] if v["name"] == "warm-start")
        assert v["persistentVolumeClaim"] == volume["persistentVolumeClaim"]
        assert mounts(p)["warm-start"] == {
            "name": "warm-start",
            "mountPath": WARM_START_MOUNT,
            "readOnly": True,
        }
        # Its own checkpoints stay where they were, writable.
        assert not mounts(p)["checkpoints"].get("readOnly")


def test_a_job_source_not_pinned_yet_renders_no_warm_start():
    j = job(checkpoint={"uri": "gs://b/c"}, warmStart={"fromJob": "day-1"})
    assert trainer_config(j).warm_start is None
    assert "warm-start" not in mounts(pod(j))


def test_a_location_renders_from_the_spec_alone_as_etj_render_shows_it():
    j = job(
        checkpoint={"uri": "gs://b/c"},
        warmStart={"checkpoint": {"uri": "gs://b/c/ns/day-1/ckpt-500"}, "optimizerState": "Reset"},
    )
    ws = trainer_config(j).warm_start
    assert ws is not None and ws.location == "gs://b/c/ns/day-1/ckpt-500"
    assert ws.keep_optimizer is False and ws.continue_steps is False
    assert "warm-start" not in mounts(pod(j))


def test_a_started_fresh_chain_head_gets_no_location():
    j = pinned(
        job(checkpoint={"uri": "gs://b/c"}, warmStart={"selector": {}, "ifNoSource": "StartFresh"}),
        source="none (no Succeeded job matches selector (everything))",
    )
    assert trainer_config(j).warm_start is None
