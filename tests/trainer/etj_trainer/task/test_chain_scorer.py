"""Scoring held-out rows with a serving chain's snapshot (``etj_trainer.task.chain_scorer``):
the graph of the first version with the values of the chain's model gives the trainer's
own model's probabilities (within float tolerance: another graph) and, once the chain has
reached the next version, that version's SavedModel's probabilities exactly; a dynamic
table's index shorter than the graph's is scored as its own version scores it, a longer
one refused. In one process, steps
driven by the test, on the click rows of the Kafka tests (``model.features``: raw text
columns in)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etj_testcluster.kafka import CLICK_HEADER, click_model, click_row
from tests.trainer.etj_trainer.task.one_process_versions import one_process, train_and_export


def _rows(start: int, n: int) -> list[str]:
    return [click_row(i, 499, 198) for i in range(start, start + n)]


def _csv(path: Path, lines: list[str]) -> Path:
    path.write_text(CLICK_HEADER + "\n" + "\n".join(lines) + "\n")
    return path


def _trained_chain(tf: Any, tmp_path: Path, model: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A one-process job on click rows, versions at steps 10 and 20 with deltas between
    and after; the state, the serving and deltas directories."""
    train = _csv(tmp_path / "train.csv", _rows(0, 4000))
    state, versions, chunk = one_process(
        tf,
        tmp_path,
        model=model,
        data={"source": "files", "files": {"pattern": str(train), "format": "csv"}},
        training={"batchSizePerReplica": 32, "optimizer": "adagrad", "learningRate": 0.2},
    )
    versions.start(0)
    train_and_export(versions, chunk, 10, 3, 3, 4, 3)
    assert [w.error for w in versions.collect()] == [None, None]
    return state, tmp_path / "serving", tmp_path / "deltas"


def _own_probabilities(tf: Any, state: Any, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The trainer's model's probabilities and the labels of the rows of ``path``."""
    from etj_trainer.data.batch import LABEL_KEY
    from etj_trainer.data.pipeline import feature_dataset

    data = state.config.data.model_copy(
        update={"files": state.config.data.files.model_copy(update={"pattern": str(path)})}
    )
    probs, labels = [], []
    for batch in feature_dataset(state.config.model, data, 64, repeat=False):
        probs.append(tf.sigmoid(state.model(batch)).numpy())
        labels.append(batch[LABEL_KEY].numpy())
    return np.concatenate(probs), np.concatenate(labels)


def test_the_chains_model_scores_as_the_trainer_and_the_next_version_do(
    tf: Any, tmp_path: Path
) -> None:
    from etj.api.export import version_of
    from etj_trainer.task import deltas
    from etj_trainer.task.auc import auc_from_histogram, histogram_of
    from etj_trainer.task.chain_scorer import ChainScorer, csv_columns
    from etj_trainer.task.delta_reader import ServingChain

    state, serving, delta_dir = _trained_chain(tf, tmp_path, click_model(500, 200, 4, [8]))
    v1, v2 = sorted(v for p in serving.iterdir() if (v := version_of(p.name)) is not None)
    held_out = _rows(1_000_000, 600)
    columns = csv_columns(held_out, CLICK_HEADER)
    labels = columns["clicked"].astype(np.float32)

    chain = ServingChain(str(serving), str(delta_dir)).load(v1)
    scorer = ChainScorer(chain)  # v1's graph, loaded now
    at_v1 = scorer.probability(columns)
    chain.follow()  # v1's chain to v2, then v2's delta at step 23
    assert (chain.version, chain.sequence) == (v2, 1)
    now = scorer.probability(columns)
    # The model moved since v1: the scores did.
    assert not np.allclose(at_v1, now)
    # The trainer's model (its state after step 23, the last delta's) on the same rows.
    own, own_labels = _own_probabilities(tf, state, _csv(tmp_path / "held.csv", held_out))
    assert np.array_equal(own_labels, labels)
    np.testing.assert_allclose(now, own, rtol=0, atol=1e-5)
    ours = auc_from_histogram(histogram_of(now, labels))
    assert ours == pytest.approx(auc_from_histogram(histogram_of(own, labels)), abs=1e-3)

    # At v2 (a reader that loads v2 itself): the same bits, so the same probabilities.
    at_v2 = ServingChain(str(serving), str(delta_dir)).load(v1)
    while at_v2.version != v2:
        at_v2.apply(deltas.read(at_v2.pending()[0]))
    served = tf.saved_model.load(str(serving / str(v2))).signatures["serving_default"]
    inputs = {k: tf.constant(v) for k, v in columns.items() if k != "clicked"}
    expected = served(**inputs)["probability"].numpy()
    assert np.array_equal(ChainScorer(at_v2, str(serving / str(v1))).probability(columns), expected)


def test_a_dynamic_tables_index_of_another_length(tf: Any, tmp_path: Path) -> None:
    """Shorter than the graph's: padded, scored as its own version scores; longer: refused."""
    from etj.api.export import version_of
    from etj_trainer.task.chain_scorer import ChainScorer, IndexTooLong, csv_columns
    from etj_trainer.task.delta_reader import ServingChain

    model = click_model(500, 200, 4, [8])
    model["embeddings"][0] = {
        **model["embeddings"][0],
        "vocabularySize": 50,
        # Nothing evicted, room for every user: the index grows as users arrive.
        "dynamic": {
            "capacity": 1000,
            "admitAfter": 1,
            "evictAfterSteps": 1000,
            "maintainEverySteps": 2,
        },
    }
    _, serving, delta_dir = _trained_chain(tf, tmp_path, model)
    v1, v2 = sorted(v for p in serving.iterdir() if (v := version_of(p.name)) is not None)
    columns = csv_columns(_rows(1_000_000, 400), CLICK_HEADER)
    chain = ServingChain(str(serving), str(delta_dir)).load(v1)
    # v1's index on v2's graph (longer): padded; v1's own probabilities, bit for bit.
    short = len(chain.model.indexes["user_id"][0])
    on_v2 = ChainScorer(chain, str(serving / str(v2)))
    served = tf.saved_model.load(str(serving / str(v1))).signatures["serving_default"]
    inputs = {k: tf.constant(v) for k, v in columns.items() if k != "clicked"}
    assert np.array_equal(on_v2.probability(columns), served(**inputs)["probability"].numpy())
    # Past v1: the index grew beyond v1's graph.
    scorer = ChainScorer(chain)
    chain.follow()
    assert len(chain.model.indexes["user_id"][0]) > short
    with pytest.raises(IndexTooLong, match="score with a newer version's graph"):
        scorer.probability(columns)


def test_csv_columns_refuses_a_row_of_another_width() -> None:
    from etj_trainer.task.chain_scorer import csv_columns

    cols = csv_columns(["1,2.5,u1,i2"], CLICK_HEADER)
    assert {k: list(v) for k, v in cols.items()} == {
        "clicked": ["1"],
        "price": ["2.5"],
        "user": ["u1"],
        "item": ["i2"],
    }
    with pytest.raises(ValueError, match="row 1: 3 fields, the header has 4"):
        csv_columns(["1,2.5,u1,i2", "1,2,u"], CLICK_HEADER)
