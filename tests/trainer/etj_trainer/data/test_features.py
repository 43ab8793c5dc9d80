"""Hashing ids to table rows is stable (across processes and a restart from a checkpoint);
transforms, labels, vocabulary files and multi-valued pooling over present values only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from etj.api.features import Feature
from etj.api.spec import DataSpec, ModelSpec

ROOT = Path(__file__).resolve().parents[4]
IDS = ["68fd1e64", "", "10000174058809263569", "18446744073709551617", "Comedy", "a,b"]
ROWS_SCRIPT = """
import json, sys
from etj_trainer.data.features import string_rows
print(json.dumps(string_rows(json.loads(sys.argv[1]), 1000003).numpy().tolist()))
"""


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "operator"), str(ROOT / "trainer_image")])
    # A different hash seed: Python's own str hash would differ between the processes.
    return {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "12345"}


def test_the_same_string_gets_the_same_row_in_another_process():
    from etj_trainer.data.features import string_rows

    here = string_rows(np.array(IDS), 1000003).numpy().tolist()
    out = subprocess.run(
        [sys.executable, "-c", ROWS_SCRIPT, json.dumps(IDS)],
        capture_output=True,
        text=True,
        env=_env(),
        # A hang net only: importing TensorFlow took over 120 s at load 25 (issue 36).
        timeout=600,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here
    assert here[1] == 0  # empty: the reserved row
    assert all(1 <= r < 1000003 for i, r in enumerate(here) if i != 1)
    assert len(set(here)) == len(here)  # 20-digit ids past int64 included


def test_vocabulary_file_values_come_first(tmp_path: Path):
    from etj_trainer.data.features import load_vocabulary, string_rows

    vocab = tmp_path / "genres.txt"
    vocab.write_text("Comedy\nDrama\nHorror\n")
    rows = string_rows(
        np.array(["Drama", "Comedy", "", "Western"]), 50, load_vocabulary(str(vocab))
    )
    assert rows.numpy().tolist()[:3] == [2, 1, 0]
    assert 4 <= int(rows[3]) < 50  # unknown: hashed past the known rows


def test_int_ids_are_taken_modulo_the_rows_after_the_reserved_one():
    from etj_trainer.data.features import int_rows

    assert int_rows(np.array([0, 5, 10, -1]), 11).numpy().tolist() == [1, 6, 1, 10]


@pytest.mark.parametrize(
    ("settings", "values", "expected"),
    [
        ({"transform": "log1p"}, [-3.0, 0.0, np.e - 1], [0.0, 0.0, 1.0]),
        ({"transform": "standardize", "mean": 2, "std": 4}, [2.0, 6.0], [0.0, 1.0]),
        ({"transform": "clip", "min": 0, "max": 1}, [-1.0, 0.5, 3.0], [0.0, 0.5, 1.0]),
        ({}, [1.5], [1.5]),
    ],
)
def test_dense_transforms(settings, values, expected):
    import tensorflow as tf

    from etj_trainer.data.features import transform

    f = Feature.model_validate({"name": "x", "kind": "dense", **settings})
    out = np.asarray(transform(tf.constant(values, tf.float32), f))
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_label_threshold():
    from etj_trainer.data.features import label

    f = Feature.model_validate({"name": "rating", "kind": "label", "threshold": 4})
    assert label(np.array([3.5, 4.0, 5.0], np.float32), f).numpy().tolist() == [0, 1, 1]


def test_multi_valued_pooling_counts_present_values_only():
    import tensorflow as tf

    from etj_trainer.models.ctr import CtrModel

    model = ModelSpec.model_validate(
        {
            "embeddings": [{"name": "g", "vocabularySize": 10, "dimension": 2}],
            "features": [
                {"name": "y", "kind": "label"},
                {"name": "genres", "kind": "categorical", "table": "g", "delimiter": "|"},
            ],
        }
    )
    config = _config(model)
    m = CtrModel(config)
    table = tf.convert_to_tensor(m.tables[0])
    ids = tf.constant([[3, 5, -1, -1, -1, -1, -1, -1], [-1] * 8], tf.int64)
    pooled = m.embed(0, ids, 8, masked=True).numpy()
    np.testing.assert_allclose(pooled[0], (table[3] + table[5]).numpy() / 2, rtol=1e-6)
    assert (pooled[1] == 0).all()  # nothing present: zeros, not row 0 or row -1


def _config(model: ModelSpec, **training):
    from etj.api.job import EmbeddingTrainingJob
    from etj.api.trainer import TrainerConfig
    from etj.core.planner import build_plan

    job = EmbeddingTrainingJob.from_manifest(
        {
            "apiVersion": "training.etj.dev/v1alpha1",
            "kind": "EmbeddingTrainingJob",
            "metadata": {"name": "t"},
            "spec": {
                "strategy": "MultiWorkerMirrored",
                "model": model.to_wire(),
                "training": {"batchSizePerReplica": 8, **training},
            },
        }
    )
    return TrainerConfig(
        job_name="t",
        strategy="MultiWorkerMirrored",
        model=job.spec.model,
        data=job.spec.data,
        training=job.spec.training,
        shard_plan=build_plan(job.spec),
        metrics_port=9090,
    )


SCORE_SCRIPT = """
import json, sys
import tensorflow as tf
from etj.api.trainer import TrainerConfig
from etj_trainer.task.state import TrainingState
from etj_trainer.data.pipeline import feature_dataset
config = TrainerConfig.model_validate_json(open(sys.argv[1]).read())
state = TrainingState(config, tf.distribute.get_strategy())
state.checkpoint.restore(sys.argv[2]).assert_existing_objects_matched()
batch = next(iter(feature_dataset(config.model, config.data, 64, repeat=False)))
print(json.dumps(state.model(batch).numpy().tolist()))
"""


@pytest.mark.extended  # make test-all; CI has the same string getting the same row in another process (above) and a checkpoint restored into other shards (task/test_restore.py)
def test_a_restored_checkpoint_scores_the_same_raw_lines_the_same(tmp_path: Path):
    """Rows come from the strings alone: a restart (another process) finds the rows the
    trained embeddings are in."""
    import tensorflow as tf

    from etj_trainer.data.pipeline import feature_dataset
    from etj_trainer.task.state import TrainingState

    data_file = tmp_path / "a.csv"
    rng = np.random.default_rng(0)
    lines = ["label,user,genres"] + [
        f"{int(rng.random() < 0.5)},u{rng.integers(1000)}9876543210987654321,Drama|Comedy"
        for _ in range(64)
    ]
    data_file.write_text("\n".join(lines) + "\n")
    model = ModelSpec.model_validate(
        {
            "embeddings": [
                {"name": "users", "vocabularySize": 5000, "dimension": 4},
                {"name": "g", "vocabularySize": 20, "dimension": 4},
            ],
            "features": [
                {"name": "label", "kind": "label"},
                {"name": "user", "kind": "categorical", "table": "users"},
                {"name": "genres", "kind": "categorical", "table": "g", "delimiter": "|"},
            ],
            "hiddenUnits": [8],
        }
    )
    data = DataSpec.model_validate(
        {"source": "files", "files": {"pattern": str(data_file), "format": "csv"}}
    )
    config = _config(model, learningRate=0.5).model_copy(update={"data": data})
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(feature_dataset(model, data, 8))
    state.train_chunk(it, tf.constant(20, tf.int64))
    path = state.checkpoint.save(str(tmp_path / "ckpt" / "ckpt"))
    batch = next(iter(feature_dataset(model, data, 64, repeat=False)))
    here = state.model(batch).numpy()
    (tmp_path / "config.json").write_text(config.model_dump_json(by_alias=True))
    out = subprocess.run(
        [sys.executable, "-c", SCORE_SCRIPT, str(tmp_path / "config.json"), path],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    there = np.array(json.loads(out.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(there, here, rtol=1e-5, atol=1e-6)
    assert np.std(here) > 0  # trained: the logits depend on the ids
