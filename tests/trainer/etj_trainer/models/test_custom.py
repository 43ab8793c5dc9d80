"""A job's own tower (spec.model.custom): a tf.Module and a tf_keras model train in one
process, their variables are checkpointed, restored and exported; a module that does not
import, a factory that raises and a tower of the wrong shape stop the trainer with a
one-line ModelError before any step, as a permanent failure."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import ROOT, job_spec, read_events, trainer_config, trainer_env
from zoo import same_math, same_math_mirrored, zoo_spec

from etj.api.constants import MODEL_CODE_ENV, TERMINATION_LOG_ENV
from etj.api.trainer_reasons import REASON_MODEL_ERROR

EXAMPLE = ROOT / "examples" / "custom-tower"

# A tf.Module tower: an MLP whose variables are seeded (stateless), on the inputs in name order.
MODULE_TOWER = """
import tensorflow as tf


class Tower(tf.Module):
    def __init__(self, units, width):
        super().__init__(name="my_tower")
        self.hidden = tf.Variable(
            tf.random.stateless_normal([width, units], seed=(1, 2)) * 0.3, name="hidden"
        )
        self.out = tf.Variable(tf.random.stateless_normal([units], seed=(3, 4)) * 0.3, name="out")
        # Not trained, but saved and restored with the rest.
        self.calls = tf.Variable(0.0, trainable=False, name="calls")

    def __call__(self, embeddings, dense, training):
        x = tf.concat([embeddings[k] for k in sorted(embeddings)] + [dense], axis=1)
        return tf.linalg.matvec(tf.nn.relu(tf.matmul(x, self.hidden)), self.out)


def build(parameters):
    return Tower(parameters["units"], parameters["width"])
"""


def _spec(custom: dict[str, Any]) -> Any:
    return job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        model={
            "embeddings": [
                {"name": "user_id", "vocabularySize": 500, "dimension": 4},
                {"name": "item_id", "vocabularySize": 300, "dimension": 4, "idsPerExample": 2},
            ],
            "denseFeatures": 3,
            "custom": custom,
        },
        training={
            "batchSizePerReplica": 32,
            "steps": 3,
            "optimizer": "adagrad",
            "learningRate": 0.2,
        },
    )


def _code(tmp_path: Path, name: str, text: str) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / f"{name}.py").write_text(textwrap.dedent(text))
    return code


def _tower(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if kind == "tf.Module":
        # A module name of this test's own: an imported module stays in sys.modules.
        name = f"module_tower_{tmp_path.name.replace('-', '_')}"
        monkeypatch.setenv(MODEL_CODE_ENV, str(_code(tmp_path, name, MODULE_TOWER)))
        return {"module": name, "factory": "build", "parameters": {"units": 6, "width": 11}}
    monkeypatch.setenv(MODEL_CODE_ENV, str(EXAMPLE))
    return {"module": "ctr_tower", "factory": "build_tower", "parameters": {"units": [8, 4]}}


@pytest.mark.parametrize("kind", ["tf.Module", "tf_keras"])
def test_custom_tower_trains_checkpoints_restores_and_exports(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tensorflow as tf
    from same_math_chief import batches, values

    from etj_trainer.task.checkpoint import restore_in_pieces
    from etj_trainer.task.export import export
    from etj_trainer.task.export_reader import MappedModel
    from etj_trainer.task.state import TrainingState

    config = trainer_config(_spec(_tower(kind, tmp_path, monkeypatch)))
    state = TrainingState(config, tf.distribute.get_strategy())
    tower_keys = [k for k in state.named_variables() if k.startswith("model/tower")]
    # The tower's own variables under their own paths, every one of them.
    assert tower_keys and "model/tower_params" not in tower_keys
    assert len(tower_keys) == len(state.model.tower.variables)
    assert len(state.model.dense_variables) == len(state.model.tower.trainable_variables) > 0
    before = values(state)
    data = batches(config)
    loss, _, _ = state.train_chunk(
        iter(tf.data.Dataset.from_tensor_slices(data)), tf.constant(3, tf.int64)
    )
    assert np.isfinite(float(loss))
    after = values(state)
    trained = [k for k in tower_keys if "calls" not in k]
    for key in trained:
        assert not np.array_equal(before[key], after[key]), f"{key} did not train"
    # Saved under those keys, and restored (in pieces, as the trainer restores) into a
    # fresh state whose tower starts elsewhere.
    path = state.checkpoint.write(str(tmp_path / "ckpt" / "ckpt"))
    saved = {n for n, _ in tf.train.list_variables(path)}
    for key in tower_keys:
        assert f"{key}/.ATTRIBUTES/VARIABLE_VALUE" in saved, (key, sorted(saved))
    fresh = TrainingState(config, tf.distribute.get_strategy())
    assert any(not np.array_equal(values(fresh)[k], after[k]) for k in trained)
    restore_in_pieces(fresh, path)
    restored = values(fresh)
    for key in after:
        np.testing.assert_array_equal(restored[key], after[key], err_msg=key)
    # The export's tower SavedModel computes what the trained model computes.
    batch = {k: v[0] for k, v in data.items()}
    want = tf.sigmoid(state.model({k: tf.constant(v) for k, v in batch.items()})).numpy()
    served = MappedModel(export(state, str(tmp_path / "export"))).predict(batch)
    np.testing.assert_allclose(served, want, rtol=1e-5, atol=1e-6)


BAD = {
    "import": (
        "import tensorflow as tf\nimport not_installed_anywhere\n\ndef build(p):\n    return None\n",
        "cannot import bad_tower: ModuleNotFoundError: No module named 'not_installed_anywhere'",
    ),
    "factory": (
        "def build(parameters):\n    raise ValueError(f\"units must be positive, got {parameters['units']}\")\n",
        "build(parameters) raised ValueError: units must be positive, got -3",
    ),
    "shape": (
        "import tensorflow as tf\n\n"
        "def build(parameters):\n"
        "    return lambda embeddings, dense, training: tf.reduce_sum(dense, axis=1, keepdims=True)\n",
        "returned logits of shape [2, 1] for a batch of 2; it must return shape [batch]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_model_code_is_a_model_error_before_any_step(case: str, tmp_path: Path) -> None:
    source, cause = BAD[case]
    code = _code(tmp_path, "bad_tower", source)
    spec = _spec(
        {
            "module": "bad_tower",
            "factory": "build",
            "parameters": {"units": -3},
            "configMap": "tower-code",
        }
    )
    config_path = tmp_path / "trainer.json"
    config_path.write_text(json.dumps(trainer_config(spec).to_wire()))
    termination = tmp_path / "termination-log"
    proc = subprocess.run(
        [sys.executable, "-m", "etj_trainer", "--config", str(config_path)],
        env=trainer_env(
            {
                MODEL_CODE_ENV: str(code),
                TERMINATION_LOG_ENV: str(termination),
                "ETJ_NO_SUPERVISOR": "1",
            }
        ),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    # Exit 2: a failure no restart cures (the operator fails the job on the reason).
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    message = termination.read_text()
    assert "\n" not in message
    assert message.startswith(
        f"{REASON_MODEL_ERROR}: custom tower bad_tower.build (from ConfigMap tower-code): "
    ), message
    assert cause in message, message
    log = tmp_path / "stdout.log"
    log.write_text(proc.stdout)
    events = [e["event"] for e in read_events(log)]
    assert "error" in events and "start" not in events and "progress" not in events, events


KERAS = {"module": "ctr_tower", "factory": "build_tower", "parameters": {"units": [8, 4]}}


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI has the custom tower under ParameterServer on the node (test_custom_tower_node) and every architecture's same-math under ParameterServer
def test_same_math_alone_and_under_parameter_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example's tf_keras tower: one process and a 1-worker, 2-ps cluster given the
    same initial values and batches end with the same loss and variables (the tower's
    included: its variables live on the ps and are updated there)."""
    monkeypatch.setenv(MODEL_CODE_ENV, str(EXAMPLE))
    report = same_math(zoo_spec({"custom": KERAS}), tmp_path)
    assert any(k.startswith("model/tower/gate") for k in report["diff"]), sorted(report["diff"])


@pytest.mark.slow
@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_same_math_alone_and_under_multi_worker_mirrored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MODEL_CODE_ENV, str(EXAMPLE))
    report = same_math_mirrored(zoo_spec({"custom": KERAS}), tmp_path)
    assert any(k.startswith("model/tower/gate") for k in report["diff"]), sorted(report["diff"])


def test_the_reason_is_the_one_the_operator_acts_on() -> None:
    from etj_trainer.models import ModelError

    assert ModelError.__name__ == REASON_MODEL_ERROR
