"""Checks of the stream tests (issue 42, item 4) on what a finished job left: its serving
versions and deltas read back as a serving reader reads them, and held-out rows scored by
that reader's model and by the trainer's own evaluation.

``assert_chain_holds_last_version``: a ``ServingChain`` that loads the first version and
applies every delta after it holds the last version bit for bit (tables, dense weights,
dynamic indexes); its ``ChainScorer`` scores with the first version's graph.
``held_out_scores``: the chain's AUC and probabilities of held-out click rows, and the
trainer's evaluation of the same rows (``etj_trainer.task.evaluate``: the final checkpoint
restored into a local model, ``Scorer`` over them as data.validation), with its
probabilities row by row.

Used by tests/trainer/etj_trainer/task/test_kafka_stream.py and
tests/integration/scenarios/test_kafka_stream_node.py. Importing it never imports
TensorFlow: the checks do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from etj.api.export import version_of
from etj.api.spec import EmbeddingTrainingJobSpec
from etj_testcluster.kafka import CLICK_HEADER


def assert_chain_holds_last_version(job_dir: Path) -> tuple[list[int], Any]:
    """The versions under ``job_dir/serving`` (oldest first) and a ``ChainScorer`` on the
    first one's graph whose chain has applied every delta under ``job_dir/deltas``; the
    chain's model is checked equal to the last version's, bit for bit."""
    from etj_trainer.task.chain_scorer import ChainScorer
    from etj_trainer.task.delta_reader import ServingChain, version_snapshot

    serving, deltas_dir = job_dir / "serving", job_dir / "deltas"
    versions = sorted(v for p in serving.iterdir() if (v := version_of(p.name)) is not None)
    assert len(versions) >= 2, versions
    chain = ServingChain(str(serving), str(deltas_dir)).load(versions[0])
    scorer = ChainScorer(chain)  # the first version's graph, as a reader that loaded it
    applied = chain.follow()
    assert (chain.version, chain.sequence) == (versions[-1], 0), (chain.version, versions)
    # One closing delta per version after the first; deltas between them besides.
    closing = [d for d in applied if d.next_version is not None]
    assert [d.next_version for d in closing] == versions[1:]
    assert len(applied) > len(closing), "no delta between versions"
    want, held = version_snapshot(str(serving / str(versions[-1]))), chain.model
    assert sorted(want.tables) == sorted(held.tables)
    for i, shards in want.tables.items():
        assert len(shards) == len(held.tables[i])
        for a, b in zip(shards, held.tables[i], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"table {i}"
    assert sorted(want.dense) == sorted(held.dense)
    for key, value in want.dense.items():
        assert value.dtype == held.dense[key].dtype and np.array_equal(value, held.dense[key]), key
    assert sorted(want.indexes) == sorted(held.indexes)
    for name, (keys, rows) in want.indexes.items():
        assert np.array_equal(keys, held.indexes[name][0]), name
        assert np.array_equal(rows, held.indexes[name][1]), name
    return versions, scorer


def held_out_scores(
    spec: EmbeddingTrainingJobSpec,
    checkpoint: str,
    rows: list[str],
    scorer: Any,
    workdir: Path,
    batch: int,
) -> dict[str, Any]:
    """``rows`` (click rows, ``CLICK_HEADER``'s columns) scored by ``scorer`` (a
    ``ChainScorer``) and by the trainer's evaluation of ``checkpoint`` under the model and
    sharding of ``spec``: ``chain_auc``, ``chain`` (probabilities), ``trainer`` (the
    evaluation: step, auc, logloss, examples), ``trainer_probabilities``, ``labels``."""
    import tensorflow as tf

    from etj_trainer.data.batch import LABEL_KEY
    from etj_trainer.data.pipeline import validation_dataset
    from etj_trainer.models.ctr import CtrModel
    from etj_trainer.task.auc import auc_from_histogram, histogram_of
    from etj_trainer.task.chain_scorer import csv_columns
    from etj_trainer.task.evaluate import Scorer, restore_model
    from tests.trainer.harness import trainer_config

    columns = csv_columns(rows, CLICK_HEADER)
    labels = columns["clicked"].astype(np.float32)
    served = scorer.probability(columns)

    held = workdir / "held-out.csv"
    held.write_text(CLICK_HEADER + "\n" + "\n".join(rows) + "\n")
    # The job's model and sharding; its data the held-out rows, as a job's data.validation.
    data = {
        "source": "files",
        "files": {"pattern": str(held), "format": "csv"},
        "validation": {"pattern": str(held), "maxExamples": len(rows)},
    }
    doc = {**spec.to_wire(), "data": data}
    config = trainer_config(EmbeddingTrainingJobSpec.model_validate(doc))
    model = CtrModel(config)
    step = tf.Variable(0, dtype=tf.int64)
    restore_model(model, step, checkpoint)
    dataset = validation_dataset(config.model, config.data, batch)
    own = Scorer(model, dataset)(int(step.numpy()))
    probs, seen = [], []
    for b in dataset:
        probs.append(tf.sigmoid(model(b)).numpy())
        seen.append(b[LABEL_KEY].numpy())
    assert np.array_equal(np.concatenate(seen).astype(np.float32), labels)
    return {
        "chain_auc": auc_from_histogram(histogram_of(served, labels)),
        "chain": served,
        "trainer": own,
        "trainer_probabilities": np.concatenate(probs),
        "labels": labels,
    }
