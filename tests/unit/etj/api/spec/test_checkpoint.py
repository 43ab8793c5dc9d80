"""etj.api.spec.checkpoint: one place for checkpoints, and only places every replica sees."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.spec import UNSUPPORTED_SCHEMES, CheckpointSpec


def test_the_default_is_an_emptydir_no_other_pod_shares():
    c = CheckpointSpec()
    assert (c.uri, c.volume, c.storage) == (None, None, None)
    assert not c.shared
    assert (c.every_steps, c.keep, c.mount_path) == (1000, 3, "/var/lib/etj/checkpoints")


@pytest.mark.parametrize(
    "place",
    [
        {"uri": "gs://bucket/ckpt"},
        {"uri": "/mnt/shared/ckpt"},
        {"storage": {"size": "10Gi"}},
        {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}},
    ],
)
def test_any_one_place_is_shared(place):
    assert CheckpointSpec.model_validate(place).shared


def test_two_places_are_refused():
    with pytest.raises(ValidationError, match="at most one of uri, volume and storage"):
        CheckpointSpec.model_validate({"uri": "gs://b/c", "storage": {"size": "1Gi"}})


@pytest.mark.parametrize("scheme", UNSUPPORTED_SCHEMES)
def test_an_unsupported_scheme_says_why_and_what_to_use(scheme):
    with pytest.raises(ValidationError, match=r"not built into TensorFlow.*use gs://"):
        CheckpointSpec(uri=f"{scheme}bucket/ckpt")


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("ckpt/relative", "absolute path that every replica"),
        ("/tmp", "/tmp is each replica's own"),
        ("/tmp/ckpt", "/tmp is each replica's own"),
    ],
)
def test_a_path_no_other_replica_sees_is_refused(uri, words):
    with pytest.raises(ValidationError, match=words):
        CheckpointSpec(uri=uri)


def test_a_path_under_tmp_by_name_only_is_fine():
    assert CheckpointSpec(uri="/tmpdata/ckpt").shared


def test_the_interval_and_kept_count_are_bounded():
    for bad in ({"everySteps": 0}, {"keep": 0}, {"keep": 1001}, {"mountPath": "relative"}):
        with pytest.raises(ValidationError):
            CheckpointSpec.model_validate(bad)
