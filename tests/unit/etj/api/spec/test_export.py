"""``spec.export`` (serving versions while training) and ``spec.tensorboard`` (where the
summaries go): what each accepts, and the message of what it refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.spec import ExportSpec, TensorBoardSpec


def test_export_spec_takes_one_interval():
    spec = ExportSpec.model_validate({"everySteps": 500})
    assert (spec.every_steps, spec.every_seconds, spec.keep) == (500, None, 5)
    assert ExportSpec.model_validate({"everySeconds": 600, "keep": 2}).keep == 2
    assert ExportSpec.model_validate({}).every_steps is None
    with pytest.raises(ValidationError, match="set everySteps or everySeconds, not both"):
        ExportSpec.model_validate({"everySteps": 500, "everySeconds": 600})
    for bad in ({"keep": 0}, {"everySteps": 0}, {"everySeconds": -1}, {"every": 5}):
        with pytest.raises(ValidationError):
            ExportSpec.model_validate(bad)


def test_export_spec_takes_one_delta_interval_beside_versions():
    spec = ExportSpec.model_validate({"everySeconds": 600, "deltaSeconds": 60})
    assert (spec.delta_seconds, spec.delta_steps) == (60, None)
    assert ExportSpec.model_validate({"everySteps": 500, "deltaSteps": 50}).delta_steps == 50
    with pytest.raises(ValidationError, match="set deltaSteps or deltaSeconds, not both"):
        ExportSpec.model_validate({"everySteps": 500, "deltaSteps": 5, "deltaSeconds": 6})
    with pytest.raises(ValidationError, match="deltas need full versions while training"):
        ExportSpec.model_validate({"deltaSeconds": 60})
    with pytest.raises(ValidationError):
        ExportSpec.model_validate({"everySteps": 5, "deltaSteps": 0})


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://bucket/tb", "s3:// and hdfs:// are not built into TensorFlow"),
        ("tb/logs", "must be gs://bucket/prefix or an absolute path"),
        ("/tmp/tb", "/tmp is each replica's own"),
    ],
)
def test_tensorboard_uri_is_refused_where_the_leader_cannot_write_it(uri, message):
    with pytest.raises(ValidationError, match=message):
        TensorBoardSpec.model_validate({"uri": uri})


def test_tensorboard_uri_takes_a_bucket_or_a_mounted_path():
    assert TensorBoardSpec.model_validate({"uri": "gs://b/tb"}).uri == "gs://b/tb"
    assert TensorBoardSpec.model_validate({"uri": "/mnt/shared/tb"}).uri == "/mnt/shared/tb"
