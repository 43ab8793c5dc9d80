"""``python -m etj_trainer`` as a process: usage errors, and a local run on files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import job_spec, read_events, trainer_config, trainer_env

from etj_trainer import exitcodes


def _config_text(**kw: Any) -> str:
    return json.dumps(trainer_config(job_spec(), **kw).to_wire())


def _run_trainer(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etj_trainer", *args],
        env=trainer_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert _run_trainer({"ETJ_TRAINER_CONFIG": ""}).returncode == exitcodes.USAGE
    bad = tmp_path / "bad.json"
    bad.write_text('{"jobName": "x"}')
    result = _run_trainer({}, "--config", str(bad))
    assert result.returncode == exitcodes.USAGE and "strategy" in result.stderr
    good = tmp_path / "good.json"
    good.write_text(_config_text())
    termination = tmp_path / "termination-log"
    result = _run_trainer(
        {"TF_CONFIG": "{not json", "ETJ_TERMINATION_LOG": str(termination)}, "--config", str(good)
    )
    assert result.returncode == exitcodes.USAGE and "TF_CONFIG" in result.stderr
    # The pod's termination message says why, for `kubectl describe pod`.
    assert termination.read_text().startswith("ClusterError: TF_CONFIG is not JSON")
    assert _run_trainer({}, "--bogus").returncode == exitcodes.USAGE


def _model_spec(**kw: Any) -> Any:
    return job_spec(**kw)


def test_local_run_on_files_trains_and_exits_0(tmp_path: Path) -> None:
    """No TF_CONFIG: one local process, here reading TFRecord files."""
    from etj_trainer.data.datagen import write_files

    spec = _model_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        data={"source": "files", "files": {"pattern": str(tmp_path / "data" / "part-*")}},
        training={
            "batchSizePerReplica": 128,
            "steps": 600,
            "optimizer": "ftrl",
            "learningRate": 0.1,
            "stepsPerExecution": 20,
        },
    )
    write_files(
        spec.model, spec.data, tmp_path / "data", "tfrecord", files=2, examples_per_file=2000
    )
    config = trainer_config(spec, checkpoint_dir=tmp_path / "ckpt", every_steps=300)
    path = tmp_path / "trainer.json"
    path.write_text(json.dumps(config.to_wire()))
    env = {"ETJ_METRICS_PORT": "0", "ETJ_PROGRESS_SECONDS": "0.5"}
    env.pop("TF_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "etj_trainer", "--config", str(path)],
        env={k: v for k, v in trainer_env(env).items() if k != "TF_CONFIG"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    log = tmp_path / "out.log"
    log.write_text(result.stdout)
    events = read_events(log)
    losses = [e["loss"] for e in events if e["event"] == "progress" and "loss" in e]
    assert events[-1] == {"event": "done", "step": 600}
    assert losses[-1] < losses[0] - 0.02
    assert sorted(
        int(p.name.split("-")[1].split(".")[0]) for p in (tmp_path / "ckpt").glob("ckpt-*.index")
    ) == [300, 600]
    # TensorBoard gets the same loss curve as the progress lines, as scalar-plugin records.
    scalars = _tensorboard_scalars(tmp_path / "ckpt" / "tensorboard")
    assert {"loss", "auc", "examples_per_second"} <= set(scalars)
    tb_steps, tb_losses = zip(*scalars["loss"], strict=True)
    assert list(tb_steps) == sorted(tb_steps) and tb_steps[-1] == 600
    assert tb_losses[-1] < tb_losses[0] - 0.02


def _tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars"
                number = float(tf.make_ndarray(value.tensor))
                scalars.setdefault(value.tag, []).append((event.step, number))
    return scalars
