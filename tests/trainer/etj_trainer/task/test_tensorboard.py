"""The leader's TensorBoard summaries, read back as TensorBoard reads them
(``tf.compat.v1.train.summary_iterator``), from real trainer processes (one process, no
TF_CONFIG): training loss, AUC and examples/s; held-out AUC and log-loss in the ``eval``
run; bad records skipped; restarts; a dynamic table's rows used, admitted and evicted. A
job resumed from its checkpoint counts a restart; a job warm-started from it with
``stepCount: Continue`` goes on along the same step axis in its own run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ROOT, adagrad_training, job_spec, read_events, trainer_config, trainer_env

from etj.api.trainer import TrainerConfig
from etj.api.warmstart import TrainerWarmStart

BAD_LINES = 3  # per training file


def _spec(data: Path, steps: int) -> Any:
    """examples/movielens.yaml's model (user ids in a dynamic table), one process, on
    files in its layout with a held-out file."""
    example = yaml.safe_load((ROOT / "examples" / "movielens.yaml").read_text())["spec"]
    model = example["model"]
    model["embeddings"][0] = {
        "name": "user",
        "vocabularySize": 4,
        "dimension": 8,
        "dynamic": {
            "capacity": 200,
            "admitAfter": 2,
            "evictAfterSteps": 30,
            "maintainEverySteps": 10,
        },
    }
    model["hiddenUnits"] = [8]
    return job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        model=model,
        data={
            **example["data"],
            "files": {**example["data"]["files"], "pattern": str(data / "train-*.csv")},
            "validation": {"pattern": str(data / "valid-*.csv"), "maxExamples": 1000},
            "maxBadRecords": 1000,
        },
        training=adagrad_training(steps, 64),
    )


def _write_data(data: Path) -> None:
    from etj_trainer.data.clicklogs import write_train_and_validation

    train, _ = write_train_and_validation("movielens", data, 2, 1500, 1000)
    for path in train:
        with path.open("a") as f:
            f.write("".join("1,2\n" for _ in range(BAD_LINES)))  # too few fields: bad


def _train(config: TrainerConfig, workdir: Path) -> list[dict[str, Any]]:
    path = workdir / f"trainer-{config.job_name}-{config.training.steps}.json"
    path.write_text(json.dumps(config.to_wire()))
    env = {k: v for k, v in trainer_env({"ETJ_METRICS_PORT": "0"}).items() if k != "TF_CONFIG"}
    result = subprocess.run(
        [sys.executable, "-m", "etj_trainer", "--config", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=workdir,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = path.with_suffix(".log")
    log.write_text(result.stdout)
    return read_events(log)


def scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files directly in ``directory``: tag -> (step, value),
    in the order written."""
    import tensorflow as tf

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars"
                number = float(tf.make_ndarray(value.tensor))
                out.setdefault(value.tag, []).append((event.step, number))
    return out


@pytest.mark.extended  # make test-all; CI has the leader's scalars of a local run (test_main.py) and the warm start's own tests
def test_tensorboard_holds_the_leaders_scalars_and_a_warm_start_continues_them(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = _spec(data, steps=200)
    _write_data(data)
    tb = tmp_path / "tensorboard"
    config = trainer_config(first, checkpoint_dir=tmp_path / "ckpt", every_steps=100)
    config = config.model_copy(update={"tensorboard_dir": str(tb / "day-1")})
    # Trained to 200, then resumed from its checkpoint to 400 (a restart, as after a failure).
    _train(config, tmp_path)
    training = config.training.model_copy(update={"steps": 400})
    events = _train(config.model_copy(update={"training": training}), tmp_path)
    assert any(e["event"] == "restored" for e in events)

    got = scalars(tb / "day-1")
    for tag in ("loss", "auc", "examples_per_second", "bad_records", "restarts"):
        assert tag in got, f"no {tag!r} among {sorted(got)}"
    steps = [s for s, _ in got["loss"]]
    assert steps == sorted(steps) and steps[-1] == 400 and steps[0] <= 200
    assert all(0 < v < 5 for _, v in got["loss"])
    assert all(0 <= v <= 1 for _, v in got["auc"])
    assert got["auc"][-1][1] > 0.55  # the generated data has a signal
    assert all(v > 0 for _, v in got["examples_per_second"][1:])
    # Each run reads the files with their bad lines; its count (the process's) only grows.
    restarts_at = dict(got["restarts"])
    for run in (0, 1):
        bad = [v for s, v in got["bad_records"] if restarts_at[s] == run]
        assert bad == sorted(bad) and bad[-1] >= BAD_LINES, (run, bad)
    assert restarts_at[min(restarts_at)] == 0 and restarts_at[400] == 1
    for stat in ("rowsUsed", "admitted", "evicted"):
        series = got[f"dynamic/user/{stat}"]
        assert [s for s, _ in series] == steps
    used = [v for _, v in got["dynamic/user/rowsUsed"]]
    admitted = [v for _, v in got["dynamic/user/admitted"]]
    assert 0 < used[-1] <= 200 and admitted == sorted(admitted) and admitted[-1] >= used[-1]
    assert "dynamic/movie/rowsUsed" not in got  # a hashed table has no such stats

    held_out = scalars(tb / "day-1" / "eval")
    # After each checkpoint: 100, 200 (the end of the first run), 300, 400.
    assert [s for s, _ in held_out["auc"]] == [100, 200, 300, 400]
    assert [s for s, _ in held_out["logloss"]] == [100, 200, 300, 400]
    assert all(0 < v <= 1 for _, v in held_out["auc"]) and held_out["auc"][-1][1] > 0.5
    assert all(0 < v < 1 for _, v in held_out["logloss"])

    # Day 2 starts from day 1's checkpoint and keeps its step count: its curves go on from
    # step 400 in a run of its own.
    warm = trainer_config(_spec(data, steps=600), checkpoint_dir=tmp_path / "ckpt-2")
    warm = warm.model_copy(
        update={
            "job_name": "day-2",
            "tensorboard_dir": str(tb / "day-2"),
            "warm_start": TrainerWarmStart(
                location=str(tmp_path / "ckpt"), source="day-1", continue_steps=True
            ),
        }
    )
    _train(warm, tmp_path)
    day2 = scalars(tb / "day-2")
    steps2 = [s for s, _ in day2["loss"]]
    assert steps2[0] > 400 and steps2[-1] == 600
    assert dict(day2["restarts"])[600] == 0
    assert [s for s, _ in scalars(tb / "day-2" / "eval")["auc"]] == [500, 600]
