"""The serving SavedModel on raw features (``etj_trainer.task.serving_model``).

Each architecture (and a custom ``tf.Module`` tower, and a job with tables only) trains a
few steps in this process on a CSV file full of awkward values, is exported the way a job
ends (``export.export``), and its ``serving/`` SavedModel is loaded in ONE fresh Python
process with ``tf.saved_model.load`` and fed the file's raw text cells: the probabilities
must be the trainer's own for the same rows, read through the training input path.
Also: the signature as TensorFlow Serving sees it (``saved_model_cli``), a bad value
failing the request, a table far bigger than ``saved_model.pb`` kept out of it, and the
export of a real ParameterServer job (tables sharded over 2 ps; slow) and of a
MultiWorkerMirrored one (extended). A table past 2 GB: ``benchmarks/serving_large_table.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import PYTHONPATH, job_spec, trainer_config

from etj.api.constants import MODEL_CODE_ENV

ARCHITECTURES: dict[str, dict[str, Any]] = {
    "dnn": {},
    "wideDeep": {"architecture": "wideDeep"},
    "deepFM": {"architecture": "deepFM"},
    "dcnV2": {"architecture": "dcnV2", "dcnV2": {"crossLayers": 2, "lowRank": 2}},
    "dlrm": {"architecture": "dlrm", "dlrm": {"bottomUnits": [8]}},
}
# The worked example of a custom tower (examples/custom-tower), its code as a ConfigMap holds it.
CUSTOM_TOWER_CODE = Path(__file__).resolve().parents[4] / "examples" / "custom-tower"
COLUMNS = ["label", "price", "age", "country", "user", "genres", "tags", "item"]
LONG = "x" * 5000
# Every awkward raw value training meets: unicode, empty, very long, spaces, negative
# and huge integers, multi-valued lists with empty values, too many values, only
# delimiters; vocabulary hits and misses.
ROWS = [
    ["1", "3", "41", "Zürich", "12", "Comedy|Drama", "a|b", "known-b"],
    ["0", "", "", "", "", "", "", ""],
    ["1", "0.5", "-3.25", "東京 🚀", "-7", "Drama||Comedy|", "|", "unknown"],
    ["0", "1e3", "30", LONG, "999999999999999999", "|||", "b|a|c|d|e|f", "known-a"],
    ["1", "-2", "29.5", "  padded  ", "-999999999999999999", "Horror|Horror|Horror|Horror", "", ""],
    ["0", "7", "18", "Zurich", "0", "Western", "z", "KNOWN-A"],
    ["1", "12", "55", "zürich", "1", "Comedy", "a|a", "known-c"],
    ["0", "2.5", "60", "café", "3", "|Comedy", "q|r|s", "known-b"],
]


def features_model(tmp: Path, **model: Any) -> dict[str, Any]:
    vocab = tmp / "items.txt"
    vocab.write_text("known-a\nknown-b\nknown-c\n")
    doc: dict[str, Any] = {
        "embeddings": [
            {"name": "country", "vocabularySize": 97, "dimension": 4},
            {"name": "user", "vocabularySize": 50, "dimension": 4, "combiner": "sum"},
            {"name": "genre", "vocabularySize": 31, "dimension": 4, "combiner": "mean"},
            {"name": "item", "vocabularySize": 20, "dimension": 4},
        ],
        "features": [
            {"name": "label", "kind": "label"},
            {"name": "price", "kind": "dense", "transform": "log1p", "default": 1.5},
            {"name": "age", "kind": "dense", "transform": "standardize", "mean": 35, "std": 12},
            {"name": "country", "kind": "categorical", "table": "country"},
            {"name": "user", "kind": "categorical", "table": "user", "valueType": "int"},
            {
                "name": "genres",
                "kind": "categorical",
                "table": "genre",
                "delimiter": "|",
                "maxLength": 3,
            },
            # A second multi-valued feature on the same table.
            {"name": "tags", "kind": "categorical", "table": "genre", "delimiter": "|"},
            {
                "name": "item",
                "kind": "categorical",
                "table": "item",
                "vocabularyFile": str(vocab),
            },
        ],
        "hiddenUnits": [8],
    }
    doc.update(model)
    return doc


def job(model: dict[str, Any], data: dict[str, Any] | None = None) -> Any:
    return job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 2}},
        model=model,
        data=data or {"source": "synthetic"},
        training={
            "batchSizePerReplica": 4,
            "steps": 4,
            "optimizer": "adagrad",
            "learningRate": 0.5,
        },
        sharding={"maxShardBytes": "512"},
    )


def write_csv(path: Path) -> Path:
    path.write_text("\n".join(",".join(r) for r in [COLUMNS, *ROWS]) + "\n", encoding="utf-8")
    return path


class SmallTower:
    """A user's own tower, written as users will: a ``tf.Module`` called as
    ``tower(embeddings, dense, training)``; built lazily, as ``module`` is imported."""

    @staticmethod
    def build(spec: Any) -> Any:
        import tensorflow as tf

        class Tower(tf.Module):
            def __init__(self) -> None:
                super().__init__(name="small_tower")
                self.w = tf.Variable(tf.random.stateless_normal([4], seed=(1, 2)), name="w")
                self.v = tf.Variable(tf.random.stateless_normal([2], seed=(3, 4)), name="v")
                self.b = tf.Variable(0.1, name="b")

            def __call__(self, embeddings: Any, dense: Any, training: Any) -> Any:
                x = tf.add_n([embeddings[k] for k in sorted(embeddings)])
                return tf.linalg.matvec(x, self.w) + tf.linalg.matvec(dense, self.v) + self.b

        return Tower()


def train(spec: Any, steps: int = 4, tower: Any = None) -> Any:
    """A TrainingState trained ``steps`` batches of the job's data (``tower`` replaces
    the architecture's tower before training)."""
    import tensorflow as tf

    from etj_trainer.data.pipeline import make_dataset
    from etj_trainer.task.state import TrainingState

    config = trainer_config(spec)
    state = TrainingState(config, tf.distribute.get_strategy())
    if tower is not None:
        # Swap the tower: the training step reads model.tower and model.variables.
        state.model.tower = tower
        state.variables = [i.var for i in state.items if i.var is not state.model.tower_params]
        state.items = [i for i in state.items if i.var is not state.model.tower_params]
        state.items += _dense_items(state, tower)
        state.variables = [i.var for i in state.items]
    ds = make_dataset(config.model, config.data, config.training.batch_size_per_replica, seed=1)
    state.train_chunk(iter(ds), tf.constant(steps, tf.int64))
    return state


def _dense_items(state: Any, tower: Any) -> list[Any]:
    from etj_trainer.task.optim import Slotted, create_slots

    return [
        Slotted(v, "adagrad", 0.5, create_slots(state.strategy, v, "adagrad"))
        for v in tower.trainable_variables
    ]


def trainer_probabilities(state: Any) -> list[float]:
    """The trainer's probabilities for the file's rows, read as training reads them."""
    import tensorflow as tf

    from etj_trainer.data.pipeline import feature_dataset

    config = state.config
    out: list[float] = []
    for batch in feature_dataset(config.model, config.data, 3, repeat=False):
        features = {k: v for k, v in batch.items() if k != "bad_records"}
        out += tf.sigmoid(state.model(features)).numpy().tolist()
    return out


SERVE = """
import json, sys
import tensorflow as tf
jobs = json.loads(sys.stdin.read())
out = {}
for name, job in jobs.items():
    serve = tf.saved_model.load(job["dir"]).signatures["serving_default"]
    types = {k: s.dtype for k, s in serve.structured_input_signature[1].items()}
    inputs = {k: tf.constant(v, types[k]) for k, v in job["inputs"].items()}
    out[name] = serve(**inputs)["probability"].numpy().tolist()
print("SERVED " + json.dumps(out))
"""


def serve_in_fresh_process(jobs: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    import os

    proc = subprocess.run(
        [sys.executable, "-c", SERVE],
        input=json.dumps(jobs),
        env={**os.environ, "PYTHONPATH": PYTHONPATH, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("SERVED ")]
    assert proc.returncode == 0 and lines, proc.stderr[-5000:]
    served: dict[str, list[float]] = json.loads(lines[-1].removeprefix("SERVED "))
    return served


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Per job: the trainer's probabilities and what the fresh process served."""
    from etj_trainer.task import step as core

    # One step per loop iteration: the same math, a fraction of the tracing (7 jobs).
    unroll, core.UNROLL = core.UNROLL, 1
    try:
        yield _exported(tmp_path_factory.mktemp("serving"))
    finally:
        core.UNROLL = unroll


def _exported(tmp: Path) -> dict[str, Any]:
    from etj_trainer.task.export import export, write_serving

    csv = write_csv(tmp / "rows.csv")
    data = {"source": "files", "files": {"pattern": str(csv), "format": "csv"}}
    raw = {c: [r[i] for r in ROWS] for i, c in enumerate(COLUMNS) if c != "label"}
    jobs, want = {}, {}
    for name, arch in ARCHITECTURES.items():
        state = train(job(features_model(tmp, **arch), data))
        want[name] = trainer_probabilities(state)
        path = export(state, str(tmp / name))
        jobs[name] = {"dir": str(path / "serving"), "inputs": raw}
    # A user's own tower (a tf.Module), on the same features.
    spec = job(features_model(tmp), data)
    state = train(spec, tower=SmallTower.build(spec))
    want["custom"] = trainer_probabilities(state)
    write_serving(state, tmp / "custom")
    jobs["custom"] = {"dir": str(tmp / "custom"), "inputs": raw}
    # The same through the job's spec: model.custom (the example's tf_keras tower, from
    # the directory a ConfigMap would be mounted at), trained and exported as a job is.
    code = os.environ.get(MODEL_CODE_ENV)
    os.environ[MODEL_CODE_ENV] = str(CUSTOM_TOWER_CODE)
    try:
        custom = {"module": "ctr_tower", "factory": "build_tower", "parameters": {"units": [8, 4]}}
        state = train(job(features_model(tmp, custom=custom), data))
        want["custom-spec"] = trainer_probabilities(state)
        path = export(state, str(tmp / "custom-spec"))
        jobs["custom-spec"] = {"dir": str(path / "serving"), "inputs": raw}
    finally:
        if code is None:
            os.environ.pop(MODEL_CODE_ENV, None)
        else:
            os.environ[MODEL_CODE_ENV] = code
    # Tables only: ids per table and the dense matrix (ids past the vocabulary too).
    tables = job(
        {
            "embeddings": [
                {"name": "user_id", "vocabularySize": 300, "dimension": 4},
                {"name": "item_id", "vocabularySize": 70, "dimension": 4, "idsPerExample": 3},
            ],
            "denseFeatures": 2,
            "hiddenUnits": [8],
        }
    )
    state = train(tables)
    rng = np.random.default_rng(3)
    ids = {
        "user_id": rng.integers(-5, 1000, (6, 1)),
        "item_id": rng.integers(0, 10**12, (6, 3)),
        "dense": rng.normal(size=(6, 2)).astype(np.float32),
    }
    import tensorflow as tf

    batch = {k: tf.constant(v) for k, v in ids.items()}
    want["tables"] = tf.sigmoid(state.model(batch)).numpy().tolist()
    path = export(state, str(tmp / "tables"))
    inputs = {k: v.tolist() for k, v in ids.items()}
    jobs["tables"] = {"dir": str(path / "serving"), "inputs": inputs}
    return {"want": want, "served": serve_in_fresh_process(jobs), "root": tmp}


@pytest.mark.parametrize("name", [*ARCHITECTURES, "custom", "custom-spec", "tables"])
def test_fresh_process_serves_the_trainers_probabilities(exported: dict, name: str) -> None:
    want, got = exported["want"][name], exported["served"][name]
    assert len(got) == len(want) == (6 if name == "tables" else len(ROWS))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Not vacuous: the rows differ, so a served constant would not pass.
    assert np.ptp(want) > 1e-4, want


def test_signature_takes_raw_columns_and_gives_probability(exported: dict) -> None:
    """The standard signature TensorFlow Serving reads: one string input per raw column
    (no label), ``probability`` out; vocabulary files travel as assets."""
    import tensorflow as tf

    root = exported["root"] / "wideDeep" / "serving"
    fn = tf.saved_model.load(str(root)).signatures["serving_default"]
    inputs = fn.structured_input_signature[1]
    assert sorted(inputs) == sorted(c for c in COLUMNS if c != "label")
    assert all(s.dtype == tf.string and s.shape.as_list() == [None] for s in inputs.values())
    assert list(fn.structured_outputs) == ["probability"]
    assert [p.name for p in (root / "assets").iterdir()] == ["items.txt"]
    cli = Path(sys.executable).parent / "saved_model_cli"
    if cli.exists():
        shown = subprocess.run(
            [
                str(cli),
                "show",
                "--dir",
                str(root),
                "--tag_set",
                "serve",
                "--signature_def",
                "serving_default",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert "outputs['probability']" in shown.stdout and "inputs['genres']" in shown.stdout


def test_a_bad_value_fails_the_request_naming_row_and_column(exported: dict) -> None:
    import tensorflow as tf

    fn = tf.saved_model.load(str(exported["root"] / "dnn" / "serving")).signatures[
        "serving_default"
    ]
    raw = {c: tf.constant([r[i] for r in ROWS[:2]]) for i, c in enumerate(COLUMNS) if c != "label"}
    raw["price"] = tf.constant(["3", "lots"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="request:2: dense column price"):
        fn(**raw)


def test_graph_stays_small_for_a_table_far_bigger_than_it(tmp_path: Path) -> None:
    """A 64 MiB table (two shards) is saved as variables: saved_model.pb holds no large
    constant and stays small, the variables hold the table."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from etj.api.spec import ModelSpec
    from etj_trainer.models import build_tower
    from etj_trainer.task.serving_model import save

    model = ModelSpec.model_validate(
        {
            "embeddings": [{"name": "big", "vocabularySize": 1 << 20, "dimension": 16}],
            "denseFeatures": 1,
            "hiddenUnits": [4],
        }
    )
    rows = model.tables[0].vocabulary_size
    shards = [tf.Variable(tf.zeros([rows // 2, 16])), tf.Variable(tf.ones([rows // 2, 16]))]
    tower = build_tower(model, _inputs(model), seed=1)
    save(model, [shards], tower, str(tmp_path / "serving"))
    pb = tmp_path / "serving" / "saved_model.pb"
    table_bytes = rows * 16 * 4
    assert pb.stat().st_size < 1 << 20, pb.stat().st_size
    assert pb.stat().st_size * 50 < table_bytes
    saved = saved_model_pb2.SavedModel.FromString(pb.read_bytes())
    graph = saved.meta_graphs[0].graph_def
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    consts = [n.attr["value"].tensor.ByteSize() for n in nodes if n.op == "Const"]
    assert max(consts) < 4096, max(consts)
    data = sum(p.stat().st_size for p in (tmp_path / "serving" / "variables").iterdir())
    assert data >= table_bytes
    # And it serves rows of both shards (ids past the first shard read the second).
    fn = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]
    got = fn(big=tf.constant([[1], [rows - 1]], tf.int64), dense=tf.zeros([2, 1]))
    want = tf.sigmoid(
        tower({"big": tf.constant([[0.0] * 16, [1.0] * 16])}, tf.zeros([2, 1]), False)
    )
    np.testing.assert_allclose(got["probability"].numpy(), want.numpy(), rtol=1e-6)


def test_a_dynamic_table_is_served_collisionless_with_its_index(tmp_path: Path) -> None:
    """A dynamic table's export carries its index: two admitted ids that share a fallback
    row (they would collide under hashing) read their own rows when served from a fresh
    process, as in training, and so does the memory-mapped reader; an id without a row and
    a missing one read the fallback rows as in training."""
    import tensorflow as tf

    from etj_trainer.task.export import export
    from etj_trainer.task.export_reader import MappedModel

    dynamic = {"capacity": 40, "admitAfter": 1, "maintainEverySteps": 1}
    spec = job(
        {
            "embeddings": [
                {"name": "user_id", "vocabularySize": 4, "dimension": 4, "dynamic": dynamic},
                {"name": "item_id", "vocabularySize": 70, "dimension": 4},
            ],
            "denseFeatures": 2,
            "hiddenUnits": [8],
        }
    )
    state = train(spec, steps=6)
    table = state.model.dynamic["user_id"]
    keys, rows = table.admitted_rows()
    assert len(keys) > 4 and table.invariant_violations() == []
    # Two admitted ids with one fallback row (1 + key mod 3): hashed, they would share it.
    fallback = 1 + keys % 3
    first = int(np.argmax(fallback == fallback[0]))
    second = int(np.nonzero(fallback == fallback[first])[0][1])
    pair = [int(keys[first]), int(keys[second])]
    assert rows[first] != rows[second]
    unknown = int(max(keys)) + 3  # never seen: its fallback row
    users = np.array([[pair[0]], [pair[1]], [unknown], [-1]], np.int64)
    batch = {
        "user_id": users,
        # The rest of every example alike: only the user's row can tell them apart.
        "item_id": np.full((4, 1), 7, np.int64),
        "dense": np.tile(np.array([[0.5, -1.0]], np.float32), (4, 1)),
    }
    want = tf.sigmoid(state.model({k: tf.constant(v) for k, v in batch.items()})).numpy()
    assert abs(want[0] - want[1]) > 1e-6, want
    path = export(state, str(tmp_path / "export"))
    inputs = {k: v.tolist() for k, v in batch.items()}
    got = serve_in_fresh_process({"dynamic": {"dir": str(path / "serving"), "inputs": inputs}})
    np.testing.assert_allclose(got["dynamic"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(MappedModel(path).predict(batch), want, rtol=1e-5, atol=1e-6)
    manifest = json.loads((path / "tables.json").read_text())
    entry = next(t for t in manifest["tables"] if t["name"] == "user_id")
    assert entry["rows"] == 44 and entry["dynamic"]["fallbackRows"] == 4
    index = np.load(path / entry["dynamic"]["index"])
    assert np.array_equal(index[:, 0], keys) and np.array_equal(index[:, 1], rows)


def test_a_request_needs_no_label_of_a_text_label(tmp_path: Path) -> None:
    """A label of positive/negative values (where "0" is no valid label) is no input
    of the serving signature, and parsing a request passes without it."""
    import tensorflow as tf

    from etj.api.spec import ModelSpec
    from etj_trainer.models import build_tower
    from etj_trainer.task.serving_model import save

    model = ModelSpec.model_validate(
        {
            "embeddings": [{"name": "job", "vocabularySize": 20, "dimension": 4}],
            "features": [
                {"name": "income", "kind": "label", "positive": [">50K"], "negative": ["<=50K"]},
                {"name": "job", "kind": "categorical", "table": "job"},
            ],
            "hiddenUnits": [4],
        }
    )
    shards = [tf.Variable(tf.random.uniform([20, 4], seed=1))]
    tower = build_tower(model, _inputs(model), seed=1)
    save(model, [shards], tower, str(tmp_path / "serving"))
    fn = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]
    assert set(fn.structured_input_signature[1]) == {"job"}
    got = fn(job=tf.constant(["Sales", "Tech-support"]))["probability"].numpy()
    assert got.shape == (2,) and ((got > 0) & (got < 1)).all()


def _inputs(model: Any) -> Any:
    from etj_trainer.models import TowerInputs

    return TowerInputs(
        names=tuple(t.name for t in model.embeddings),
        dims=tuple(t.dimension for t in model.embeddings),
        dense=model.dense_inputs,
    )


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI serves every architecture and a custom tower from a fresh process (single process); this is the sharded-on-ps variant
def test_parameter_server_export_serves_its_sharded_tables(tmp_path: Path) -> None:
    """A real chief + worker + 2 ps job on the CSV: each table split over the ps, the
    export written at the end of training (each ps writing its shards); the fresh process
    serves the probabilities of the model restored from the job's last checkpoint."""
    import tensorflow as tf
    from harness import LocalJob

    from etj_trainer.task.checkpoint import restore_in_pieces
    from etj_trainer.task.state import TrainingState

    csv = write_csv(tmp_path / "rows.csv")
    data = {"source": "files", "files": {"pattern": str(csv), "format": "csv"}}
    spec = job(features_model(tmp_path, architecture="wideDeep"), data)
    config = trainer_config(spec, checkpoint_dir=tmp_path / "ckpt", export_dir=tmp_path / "export")
    shards = {t.name: t.shards for t in config.shard_plan.tables}
    assert max(shards.values()) > 1, shards
    with LocalJob(config, tmp_path / "job", workers=1, ps=2) as local:
        local.start_all()
        code = local.wait_exit("chief", 0, timeout=400)
        assert code == 0, local.log_path("chief", 0).read_text()[-5000:]
    serving = tmp_path / "export" / "serving"
    # One variable per trained shard, the first-order tables' too.
    saved = [n for n, _ in tf.train.list_variables(str(serving / "variables" / "variables"))]
    assert len([n for n in saved if n.startswith("tables/")]) == sum(shards.values()), saved
    state = TrainingState(trainer_config(spec), tf.distribute.get_strategy())
    restore_in_pieces(state, tf.train.latest_checkpoint(str(tmp_path / "ckpt")))
    assert int(state.step.numpy()) == config.training.steps
    want = trainer_probabilities(state)
    raw = {c: [r[i] for r in ROWS] for i, c in enumerate(COLUMNS) if c != "label"}
    got = serve_in_fresh_process({"ps": {"dir": str(serving), "inputs": raw}})["ps"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.ptp(want) > 1e-4, want


@pytest.mark.extended
def test_multi_worker_mirrored_export_serves_the_trained_model(tmp_path: Path) -> None:
    """As the ParameterServer check, for a 2-worker MultiWorkerMirrored job: worker 0
    exports (its mirrored copy of every variable)."""
    import tensorflow as tf
    from harness import LocalJob
    from zoo import mirrored

    from etj_trainer.task.checkpoint import restore_in_pieces
    from etj_trainer.task.state import TrainingState

    csv = write_csv(tmp_path / "rows.csv")
    data = {"source": "files", "files": {"pattern": str(csv), "format": "csv"}}
    spec = job(features_model(tmp_path, architecture="dcnV2"), data)
    config = trainer_config(
        mirrored(spec),
        checkpoint_dir=tmp_path / "ckpt",
        export_dir=tmp_path / "export",
        watchdog_seconds=900,
    )
    with LocalJob(config, tmp_path / "job", workers=2, ps=0, chief=False) as local:
        local.start_all()
        for i in range(2):
            code = local.wait_exit("worker", i, timeout=900)
            assert code == 0, local.log_path("worker", i).read_text()[-5000:]
    state = TrainingState(trainer_config(spec), tf.distribute.get_strategy())
    restore_in_pieces(state, tf.train.latest_checkpoint(str(tmp_path / "ckpt")))
    want = trainer_probabilities(state)
    raw = {c: [r[i] for r in ROWS] for i, c in enumerate(COLUMNS) if c != "label"}
    serving = str(tmp_path / "export" / "serving")
    got = serve_in_fresh_process({"mwms": {"dir": serving, "inputs": raw}})["mwms"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.ptp(want) > 1e-4, want
