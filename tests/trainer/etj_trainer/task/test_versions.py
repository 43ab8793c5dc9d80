"""Serving versions while training (``etj_trainer.task.versions``, ``spec.export``).

In one process: versions numbered as ``etj.api.export`` says, the newest ``keep`` kept,
what a stopped writer left deleted, a failed version reported (training's business goes
on), a ``gs://``-like base path (TensorFlow's ``ram://``) written with ``saved_model.pb``
last. On real trainer processes (ParameterServer: chief, worker, ps; MultiWorkerMirrored:
two workers): versions load with ``tf.saved_model.load`` and serve while training goes on,
and a reader polling the base path through every export never sees half a version.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import LocalJob, adagrad_training, job_spec, trainer_config, wait_for

from etj.api.export import retiring_name, staging_name, version_of
from etj.api.trainer import TrainerExport
from tests.trainer.etj_trainer.task.one_process_versions import Clock

# ---- in one process ----------------------------------------------------------------------


def _state(tf: Any, directory: str, keep: int = 2, every_steps: int | None = 5) -> Any:
    from etj_trainer.data.pipeline import make_dataset
    from etj_trainer.task.state import TrainingState

    spec = job_spec(strategy="MultiWorkerMirrored", replicas={"worker": {"replicas": 1}})
    export = TrainerExport(directory=directory, every_steps=every_steps, keep=keep)
    config = trainer_config(spec, export=export)
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(make_dataset(config.model, config.data, 32))
    return state, lambda n: state.train_chunk(it, tf.constant(n, tf.int64))


def test_versions_are_numbered_kept_and_leftovers_deleted(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.task.versions import Versions

    base = tmp_path / "serving"
    (base / staging_name(17, 99)).mkdir(parents=True)  # a writer stopped half-way
    (base / retiring_name(16)).mkdir()
    state, train = _state(tf, str(base), keep=2)
    versions = Versions(state, state.config.export, clock=Clock())
    versions.start(0)
    assert sorted(p.name for p in base.iterdir()) == []
    assert not versions.tick(4)  # not due before step 5
    written = []
    for _ in range(3):
        train(5)
        assert versions.tick(int(state.step.numpy()))
        versions.wait()
        written += versions.collect()
    assert [w.error for w in written] == [None, None, None]
    assert [w.step for w in written] == [5, 10, 15]
    # One second for all three: numbered past each other, in order.
    assert [w.version for w in written] == [1_800_000_000, 1_800_000_001, 1_800_000_002]
    assert sorted(p.name for p in base.iterdir()) == ["1800000001", "1800000002"]
    newest = base / "1800000002"
    assert (newest / "saved_model.pb").is_file()
    fn = tf.saved_model.load(str(newest)).signatures["serving_default"]
    out = fn(**_request(state.config, 3))["probability"].numpy()
    assert out.shape == (3,) and np.all((out > 0) & (out < 1))
    # The final version: skipped when the newest already holds the last step.
    versions.final(15)
    assert versions.collect() == []
    train(2)
    versions.final(17)
    (final,) = versions.collect()
    assert final.step == 17 and final.version == 1_800_000_003 and final.error is None


def test_a_failed_version_is_reported_and_the_next_one_tried(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.task.versions import Versions

    base = tmp_path / "serving"
    state, train = _state(tf, str(base))
    versions = Versions(state, state.config.export, clock=Clock())
    versions.start(0)
    base.rmdir()
    base.write_text("a file where the base path should be: nothing can be written in it")
    train(5)
    assert versions.tick(5)
    versions.wait()
    (failed,) = versions.collect()
    assert failed.error is not None and "Error" in failed.error.split(":")[0]
    base.unlink()
    base.mkdir()
    train(5)
    assert versions.tick(10)
    versions.wait()
    (ok,) = versions.collect()
    assert ok.error is None and version_of(str(ok.version)) == ok.version


def test_a_remote_base_path_gets_whole_versions_saved_model_last(tf: Any) -> None:
    from etj_trainer.task.versions import Versions

    base = "ram://etj-versions/ns/job/serving"
    state, train = _state(tf, base, keep=1)
    versions = Versions(state, state.config.export, clock=Clock())
    versions.start(0)
    for _ in range(2):
        train(5)
        versions.tick(int(state.step.numpy()))
        versions.wait()
    written = versions.collect()
    assert [w.error for w in written] == [None, None]
    assert [n.rstrip("/") for n in tf.io.gfile.listdir(base)] == [str(written[-1].version)]
    version = f"{base}/{written[-1].version}"
    assert tf.io.gfile.exists(f"{version}/saved_model.pb")
    assert tf.io.gfile.exists(f"{version}/variables/variables.index")


def _request(config: Any, n: int) -> dict[str, Any]:
    """A serving request of ``n`` examples for a tables-only model (ids per table, dense)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    out = {
        t.name: tf.constant(rng.integers(0, 1 << 40, (n, t.ids_per_example)), tf.int64)
        for t in config.model.tables
    }
    out["dense"] = tf.constant(rng.normal(size=(n, config.model.dense_inputs)), tf.float32)
    return out


# ---- trainer processes -------------------------------------------------------------------


class Reader:
    """Polls a serving base path as TF Serving does, and checks every version it lists:
    a SavedModel whose variables are all there (or gone whole, when it was retired)."""

    def __init__(self, base: Path):
        self.base = base
        self.stop = threading.Event()
        self.seen: set[int] = set()
        self.scans = 0
        self.problems: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Reader:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=120)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.scan()
            self.stop.wait(0.01)  # a reader's polling interval

    def scan(self) -> None:
        try:
            names = [p.name for p in self.base.iterdir()]
        except FileNotFoundError:
            return
        self.scans += 1
        for name in names:
            version = version_of(name)
            if version is None:
                continue
            problem = _incomplete(self.base / name)
            if problem is not None and (self.base / name).exists():
                self.problems.append(f"{name}: {problem}")
            elif problem is None:
                self.seen.add(version)


def _incomplete(path: Path) -> str | None:
    """What a version directory lacks, if anything (its variables' data files by the
    count their names give)."""
    try:
        files = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
    except FileNotFoundError:
        return "gone while read"
    if "saved_model.pb" not in files:
        return "no saved_model.pb"
    if "variables/variables.index" not in files:
        return "no variables/variables.index"
    data = sorted(f for f in files if f.startswith("variables/variables.data-"))
    if not data:
        return "no variables data"
    total = int(data[0].rsplit("-of-", 1)[1])
    if len(data) != total:
        return f"{len(data)} of {total} variables data files"
    return None


def _serve(tf: Any, path: Path, config: Any) -> np.ndarray:
    fn = tf.saved_model.load(str(path)).signatures["serving_default"]
    return np.asarray(fn(**_request(config, 8))["probability"])


def _versions_during_training(tf: Any, job: LocalJob, total: int) -> dict[str, Any]:
    """Run the job with a reader on its serving base path; load a version while the leader
    is still training. What the test checks afterwards."""
    config = job.config
    assert config.export is not None
    base = Path(config.export.directory)
    with Reader(base) as reader:
        job.start_all()

        def a_version() -> list[dict[str, Any]]:
            job.check_chief_alive()
            return [e for e in job.events() if e["event"] == "exported"]

        first = wait_for(a_version, 300, "a first serving version")[0]
        assert first["step"] < total
        loaded = _serve(tf, base / str(first["lastVersion"]), config)
        training = job.procs[job.chief_key].poll() is None and job.last("done") is None
        done = job.wait_done(timeout=600)
    return {
        "reader": reader,
        "loaded": loaded,
        "loaded_while_training": training,
        "done": done,
        "exported": [e for e in job.events() if e["event"] == "exported"],
    }


def _check(tf: Any, job: LocalJob, run: dict[str, Any], total: int, keep: int) -> None:
    config, reader = job.config, run["reader"]
    base = Path(config.export.directory)
    assert run["done"]["step"] == total
    assert not reader.problems, reader.problems[:5]
    assert reader.scans > 10
    assert np.all((run["loaded"] > 0) & (run["loaded"] < 1))
    assert run["loaded_while_training"], "the first version was loaded after training ended"
    exported = run["exported"]
    numbers = [e["lastVersion"] for e in exported]
    assert numbers == sorted(set(numbers)) and len(numbers) >= 3
    steps = [e["step"] for e in exported]
    assert steps == sorted(steps) and steps[-1] == total
    # Training went on while versions were written (the cost is the leader's, not a stop).
    assert any(e["trainedDuring"] > 0 for e in exported[:-1]), exported
    # The reader saw versions come and go; the newest `keep` are left, whole.
    on_disk = sorted(v for p in base.iterdir() if (v := version_of(p.name)) is not None)
    assert on_disk == numbers[-keep:]
    assert set(on_disk) <= reader.seen | {numbers[-1]}
    assert [p.name for p in base.iterdir() if version_of(p.name) is None] == []
    # The last version is the model at the end: it serves as the final export's serving/.
    final = _serve(tf, base / str(numbers[-1]), config)
    np.testing.assert_allclose(final, _serve(tf, Path(config.export_dir) / "serving", config))


def test_parameter_server_versions_serve_while_training(tf: Any, tmp_path: Path) -> None:
    total, keep = 3000, 2
    spec = job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 1}},
        training=adagrad_training(total, 128),
    )
    config = trainer_config(
        spec,
        checkpoint_dir=tmp_path / "ckpt",
        every_steps=1000,
        export_dir=tmp_path / "ckpt" / "export",
        export=TrainerExport(
            directory=str(tmp_path / "ckpt" / "serving"), every_steps=200, keep=keep
        ),
    )
    with LocalJob(config, tmp_path, workers=1, ps=1) as job:
        run = _versions_during_training(tf, job, total)
        _check(tf, job, run, total, keep)


@pytest.mark.extended  # make test-all; CI has the ParameterServer variant and the versions' own checks above (numbered, kept, a failed one, a remote base path)
@pytest.mark.parametrize("workers", [2])
def test_mirrored_versions_serve_while_training(tf: Any, tmp_path: Path, workers: int) -> None:
    total, keep = 2000, 3
    spec = job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": workers}},
        training=adagrad_training(total, 128),
    )
    config = trainer_config(
        spec,
        checkpoint_dir=tmp_path / "ckpt",
        every_steps=1000,
        export_dir=tmp_path / "ckpt" / "export",
        export=TrainerExport(
            directory=str(tmp_path / "ckpt" / "serving"), every_steps=150, keep=keep
        ),
    )
    with LocalJob(config, tmp_path, workers=workers, ps=0, chief=False) as job:
        run = _versions_during_training(tf, job, total)
        _check(tf, job, run, total, keep)
