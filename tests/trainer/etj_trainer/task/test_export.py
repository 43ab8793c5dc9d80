"""The export: the trained model served from mapped tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from harness import job_spec, trainer_config


def _model_spec(**kw: Any) -> Any:
    return job_spec(**kw)


def test_export_serves_the_trained_model_from_mapped_tables(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.data.pipeline import make_dataset
    from etj_trainer.task.export import export
    from etj_trainer.task.export_reader import MappedModel
    from etj_trainer.task.state import TrainingState

    spec = _model_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        model={
            "embeddings": [
                {"name": "user_id", "vocabularySize": 500, "dimension": 4, "dtype": "bfloat16"},
                {
                    "name": "item_id",
                    "vocabularySize": 300,
                    "dimension": 4,
                    "idsPerExample": 2,
                    "combiner": "sum",
                },
            ],
            "denseFeatures": 3,
            "hiddenUnits": [8],
        },
    )
    config = trainer_config(spec)
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(make_dataset(config.model, config.data, 64))
    state.train_chunk(it, tf.constant(5, tf.int64))
    out = export(state, str(tmp_path / "export"))
    assert json.loads((out / "tables.json").read_text())["step"] == 5
    batch = next(it)
    expected = tf.sigmoid(state.model(batch)).numpy()
    served = MappedModel(out).predict({k: v.numpy() for k, v in batch.items()})
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)
    table = np.load(out / "embeddings" / "user_id.npy", mmap_mode="r")
    assert isinstance(table, np.memmap) and table.shape == (500, 4)
    # Next to checkpoints on a checkpoint.uri (gs://): the same files, through tf.io.gfile
    # (TensorFlow's in-memory filesystem stands in for the bucket).
    from etj_trainer.task.export import export_to

    remote = "ram://etj-test/ckpt/export"
    assert export_to(state, remote) == remote
    local_files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    remote_files = sorted(
        f"{d.removeprefix(remote).lstrip('/')}/{f}".lstrip("/")
        for d, _, files in tf.io.gfile.walk(remote)
        for f in files
    )
    assert remote_files == local_files
    with tf.io.gfile.GFile(f"{remote}/tables.json") as f:
        assert json.loads(f.read())["step"] == 5
