"""Shared checks of the architecture tests (``test_model_<architecture>.py``).

``same_math`` runs ``same_math_chief.py`` as the chief of a real 1-worker, 2-ps
ParameterServer cluster on 127.0.0.1 (the harness's processes) and checks that the
single-process and the ParameterServer runs of the same batches from the same initial
values end with the same loss and the same values of every saved variable (tables and
their first-order tables, tower, optimizer slots); ``same_math_mirrored`` does the same
for 2-worker MultiWorkerMirrored. ``export_serves_what_the_model_predicts`` and
``checkpoint_restores_every_variable`` check the export and a checkpoint round trip;
``etj_run_trains`` runs the quickstart example, shortened, with the architecture under
``etj run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from harness import ROOT, LocalJob, job_spec, read_events, trainer_config

HERE = Path(__file__).resolve().parent


def zoo_spec(model: dict[str, Any], **overrides: Any) -> Any:
    """A 1-worker, 2-ps job whose tables split into several shards."""
    doc: dict[str, Any] = {
        "embeddings": [
            {"name": "user_id", "vocabularySize": 3000, "dimension": 8},
            {"name": "item_id", "vocabularySize": 1500, "dimension": 8, "idsPerExample": 3},
            {"name": "country", "vocabularySize": 40, "dimension": 8, "combiner": "sum"},
        ],
        "denseFeatures": 3,
        "hiddenUnits": [16, 8],
    }
    doc.update(model)
    # One chunk of 3 steps, one block: under ParameterServer a step's gradient rows travel
    # with the next step's ids (``models.fused``), so the same-math tests cover that.
    training = {
        "batchSizePerReplica": 64,
        "steps": 3,
        "stepsPerExecution": 3,
        "optimizer": "adagrad",
        "learningRate": 0.2,
    }
    training.update(overrides.pop("training", {}))
    kwargs: dict[str, Any] = {
        "replicas": {"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 2}},
        "sharding": {"maxShardBytes": "32Ki"},
    }
    kwargs.update(overrides)
    return job_spec(model=doc, training=training, **kwargs)


def mirrored(spec: Any) -> Any:
    """``spec`` as a 2-worker MultiWorkerMirrored job."""
    return spec.model_copy(
        update={
            "strategy": "MultiWorkerMirrored",
            "replicas": spec.replicas.model_validate(
                {"chief": {"replicas": 0}, "worker": {"replicas": 2}}
            ),
        }
    )


def same_math(
    spec: Any, workdir: Path, allowance: dict[str, float] | None = None
) -> dict[str, Any]:
    """The chief's report (see ``same_math_chief.py``), after checking it. ``allowance``:
    absolute differences allowed on top, by key (a low-precision table's stochastic
    rounding may flip a value by one ulp when float32 rounding moved it across a draw)."""
    allowance = allowance or {}
    config = trainer_config(spec)
    assert any(t.shards > 1 for t in config.shard_plan.tables), "some table must be split"
    job = LocalJob(config, workdir, workers=1, ps=2)
    with job:
        for i in range(2):
            job.start("ps", i)
        job.start("worker", 0)
        env = dict(job.env)
        env["TF_CONFIG"] = job.tf_config("chief", 0)
        env["ETJ_TRAINER_CONFIG"] = str(job.config_path)
        proc = subprocess.run(
            [sys.executable, "-P", str(HERE / "same_math_chief.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=workdir,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("SAME_MATH ")]
    # The chief's Python traceback, not the remote function clean-up noise after it.
    err = proc.stderr
    trace = err[err.find("Traceback") :] if "Traceback" in err else err[-5000:]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + trace[:8000]
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("SAME_MATH "))
    loss_local, loss_ps = report["loss"]
    assert abs(loss_local - loss_ps) <= 1e-5 * max(1.0, abs(loss_local)), report["loss"]
    # The tables were really sharded, every variable started equal and ended equal.
    for i, t in enumerate(config.shard_plan.tables):
        assert report["shards"][f"model/tables/{i}"] == t.shards, t.name
        # Every shard (first-order tables' too) on the ps the plan names.
        placed = [
            int(d.rsplit("task:", 1)[1].split("/")[0])
            for d in report["devices"][f"model/tables/{i}"]
        ]
        assert placed == t.ps_of_shard, (t.name, placed, t.ps_of_shard)
    assert max(report["initial"].values()) == 0.0, report["initial"]
    # Not vacuous: training moved every table, the tower and the slots; both runs moved
    # them the same way, to float32 rounding (a thousandth of the move at most).
    for key, diff in report["diff"].items():
        moved = report["moved"][key]
        assert moved > 0, (key, report["moved"])
        assert diff <= 1e-7 + 1e-3 * moved + allowance.get(key, 0.0), (key, diff, moved)
    return report


def same_math_mirrored(
    spec: Any, workdir: Path, allowance: dict[str, float] | None = None
) -> dict[str, Any]:
    """As ``same_math`` under 2-worker MultiWorkerMirrored (``same_math_mwms.py``): each
    worker trains on half of every batch; both must end where one process trained on all."""
    allowance = allowance or {}
    config = trainer_config(mirrored(spec))
    assert config.strategy == "MultiWorkerMirrored"
    job = LocalJob(config, workdir, workers=2, ps=0, chief=False)
    reference = workdir / "local.npz"
    env = dict(job.env)
    env.pop("TF_CONFIG", None)
    env["ETJ_TRAINER_CONFIG"] = str(job.config_path)
    proc = subprocess.run(
        [sys.executable, "-P", str(HERE / "same_math_mwms.py"), "local", str(reference)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    procs = []
    with job:
        for i in range(2):
            env = dict(job.env)
            env["TF_CONFIG"] = job.tf_config("worker", i)
            env["ETJ_TRAINER_CONFIG"] = str(job.config_path)
            out = (workdir / f"worker-{i}.out").open("w")
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-P",
                        str(HERE / "same_math_mwms.py"),
                        "worker",
                        str(reference),
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd=workdir,
                    start_new_session=True,
                )
            )
            out.close()
        try:
            codes = [p.wait(timeout=300) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    reports = []
    for i, code in enumerate(codes):
        text = (workdir / f"worker-{i}.out").read_text()
        lines = [line for line in text.splitlines() if line.startswith("SAME_MATH ")]
        assert code == 0 and lines, text[-5000:]
        reports.append(json.loads(lines[-1].removeprefix("SAME_MATH ")))
    for report in reports:
        for key, diff in report["diff"].items():
            moved = report["moved"][key]
            assert moved > 0, (key, report["moved"])
            assert diff <= 1e-6 + 1e-3 * moved + allowance.get(key, 0.0), (key, diff, moved)
    return reports[0]


def etj_run_trains(model: dict[str, Any], workdir: Path) -> str:
    """``etj run`` of the quickstart example with ``model`` merged into its model, shortened
    (one worker, 60 steps, a checkpoint on the way); its output, after checking that the
    job succeeded with every step done and that the loss fell."""
    doc = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    spec = doc["spec"]
    spec["model"].update(model)
    spec["replicas"]["worker"]["replicas"] = 1
    spec["training"].update({"steps": 60, "stepsPerExecution": 10})
    spec["checkpoint"]["everySteps"] = 30
    path = workdir / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "etj"),
            "run",
            str(path),
            "--workdir",
            str(workdir / "run"),
        ],
        env={**os.environ, "COLUMNS": "200", "ETJ_PROGRESS_SECONDS": "1"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "JobSucceeded" in text
    summary = text[text.index("Summary") :]
    assert "Succeeded" in summary and "60" in summary
    # The chief built this architecture's tables (first-order ones included), as planned.
    from etj.api.job import EmbeddingTrainingJob

    tables = [t.name for t in EmbeddingTrainingJob.from_manifest(doc).spec.model.tables]
    placed = [
        e["table"]
        for log in sorted((workdir / "run" / "logs").glob("*chief-0.log"))
        for e in read_events(log)
        if e["event"] == "placement"
    ]
    assert placed[: len(tables)] == tables, placed
    return text


def export_serves_what_the_model_predicts(spec: Any, workdir: Path) -> None:
    """Train a few steps in this process, export, and serve the export from its mapped
    tables: the same probabilities as the trained model for the same ids and dense values."""
    import numpy as np
    import tensorflow as tf
    from same_math_chief import batches

    from etj_trainer.task.export import export
    from etj_trainer.task.export_reader import MappedModel
    from etj_trainer.task.state import TrainingState

    config = trainer_config(spec)
    state = TrainingState(config, tf.distribute.get_strategy())
    data = batches(config)
    state.train_chunk(iter(tf.data.Dataset.from_tensor_slices(data)), tf.constant(3, tf.int64))
    batch = {k: v[0] for k, v in data.items()}
    want = tf.sigmoid(state.model({k: tf.constant(v) for k, v in batch.items()})).numpy()
    served = MappedModel(export(state, str(workdir / "export"))).predict(batch)
    np.testing.assert_allclose(served, want, rtol=1e-5, atol=1e-6)


def checkpoint_restores_every_variable(spec: Any, workdir: Path) -> None:
    """Train a few steps, save, and restore (in pieces, as the trainer does) into a fresh
    model: every variable (tables, first-order tables, tower, slots) comes back as saved."""
    import numpy as np
    import tensorflow as tf
    from same_math_chief import batches, values

    from etj_trainer.task.checkpoint import restore_in_pieces
    from etj_trainer.task.state import TrainingState

    config = trainer_config(spec)
    state = TrainingState(config, tf.distribute.get_strategy())
    data = batches(config)
    state.train_chunk(iter(tf.data.Dataset.from_tensor_slices(data)), tf.constant(3, tf.int64))
    path = state.checkpoint.write(str(workdir / "ckpt"))
    fresh = TrainingState(config, tf.distribute.get_strategy())
    assert (
        values(fresh)["model/tower_params"].tolist() != values(state)["model/tower_params"].tolist()
    )
    restore_in_pieces(fresh, path)
    saved, restored = values(state), values(fresh)
    assert saved.keys() == restored.keys()
    for key in saved:
        np.testing.assert_array_equal(restored[key], saved[key], err_msg=key)
