"""A job that follows its files (etj_trainer.task.follow) on real trainer processes: files
written after it started are trained as they land, each exactly once in the model across a
worker killed and the chief killed (the records the checkpoint's tables learned from equal
the records written), what a restored chief re-reads is exactly the files after the
position of the checkpoint it restored, and the job stops when suspended (SIGTERM) or when
the location stays quiet. A restore is checked against the checkpoint by digest."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import tensorflow as tf
from harness import LocalJob, assert_restored_as_saved, job_spec, trainer_config, wait_for

from etj_trainer import exitcodes
from etj_trainer.data.datagen import write_files

RECORDS = 3000  # per file: 47 steps of 64, the last one short
BATCH = 64


class Landing:
    """Writes files the way a following job expects them to land: aside, then renamed
    into the followed directory (a name appears only for a complete file)."""

    def __init__(self, spec: Any, root: Path, fmt: str):
        self.spec, self.fmt = spec, fmt
        self.scratch, self.dir = root / "scratch", root / "in"
        self.dir.mkdir(parents=True)
        self.names: list[str] = []

    def land(self, n: int) -> list[str]:
        paths = write_files(self.spec.model, self.spec.data, self.scratch, self.fmt, n, RECORDS)
        out = []
        for p in paths:
            name = str(self.dir / f"part-{len(self.names):05d}{p.suffix}")
            p.rename(name)
            self.names.append(name)
            out.append(name)
        return out

    @property
    def written(self) -> int:
        return RECORDS * len(self.names)


def _spec(pattern: str, fmt: str, follow: dict[str, Any], **overrides: Any) -> Any:
    return job_spec(
        data={"source": "files", "files": {"pattern": pattern, "format": fmt, "follow": follow}},
        training={
            "batchSizePerReplica": BATCH,
            "optimizer": "adagrad",
            "learningRate": 0.1,
        },
        **overrides,
    )


def _consumed(job: LocalJob, start: int | None = None) -> list[str]:
    return [f for e in job.events(start=start) if e["event"] == "consumed" for f in e["files"]]


def _wait_consumed(job: LocalJob, name: str, timeout: float = 300) -> None:
    def done() -> bool:
        job.check_chief_alive()
        return name in _consumed(job)

    wait_for(done, timeout, f"{name} to be trained (consumed so far: {_consumed(job)[-3:]})")


def _wait_training(job: LocalJob, beyond: int, timeout: float = 300) -> None:
    """Until the chief reports a step past ``beyond`` (a round of new files under way)."""
    wait_for(lambda: job.step() > beyond, timeout, f"a step past {beyond}")


def _saved(checkpoints: Path) -> tuple[int, str, int]:
    """The newest checkpoint's records, last file and step."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(checkpoints)))
    value = "/.ATTRIBUTES/VARIABLE_VALUE"
    return (
        int(reader.get_tensor(f"input/records{value}")),
        reader.get_tensor(f"input/last_file{value}").decode(),
        int(reader.get_tensor(f"step{value}")),
    )


def _reread_is_after_the_position(job: LocalJob, start: int) -> None:
    """What a restarted chief trained again: exactly the files after the position it
    restored (each at most once more), none at or before it; and what it restored is what
    the checkpoint holds (its digest, variable by variable)."""
    restored = next(e for e in job.events(start=start) if e["event"] == "restored")
    assert_restored_as_saved(restored)
    assert restored["seconds"] >= 0
    again = _consumed(job, start)
    assert again and all(f > restored["position"] for f in again), (restored, again)
    before = [f for n in range(start) for f in _consumed(job, n)]
    reread = sorted(set(before) & set(again))
    assert reread == sorted(f for f in set(before) if f > restored["position"]), reread


def test_a_parameter_server_job_trains_each_landed_file_once_across_a_worker_and_a_chief_kill(
    tmp_path: Path,
) -> None:
    landing = Landing(_spec(f"{tmp_path}/in/part-*.tfrecord", "tfrecord", {}), tmp_path, "tfrecord")
    # A long idle allowance: this job ends when it is suspended (SIGTERM).
    spec = _spec(
        str(landing.dir / "part-*.tfrecord"),
        "tfrecord",
        {"pollSeconds": 1, "stopAfterIdleSeconds": 3600},
    )
    assert spec.training.steps is None
    ckpt = tmp_path / "ckpt"
    config = trainer_config(
        spec, checkpoint_dir=ckpt, every_steps=100, keep=50, watchdog_seconds=120
    )
    with LocalJob(config, tmp_path / "job", workers=2, ps=2) as job:
        job.start_all()
        wait_for(lambda: job.last("start") is not None, 300, "the chief to start following")
        # Files that land after the job started.
        _wait_consumed(job, landing.land(4)[-1])
        # A worker lost while a round of files is being trained.
        at = job.step()
        last = landing.land(12)[-1]
        _wait_training(job, at)
        job.kill("worker", 1)
        job.start("worker", 1)
        _wait_consumed(job, last)
        # The chief lost while a round is being trained: restarted, it restores.
        at = job.step()
        last = landing.land(8)[-1]
        _wait_training(job, at)
        job.kill("chief", 0)
        job.start("chief", 0)
        _wait_consumed(job, last)
        _reread_is_after_the_position(job, 1)
        # Suspended: the chief checkpoints and leaves with 143.
        job.kill("chief", 0, signal.SIGTERM)
        assert job.wait_exit("chief", 0, 300) == exitcodes.TERMINATED
    records, last_file, step = _saved(ckpt)
    assert last_file == landing.names[-1] and step == 24 * 47
    # Every record written trained once into the saved tables: none lost, none twice.
    assert records == landing.written == 24 * RECORDS
    rolled = [e for n in range(2) for e in job.events(start=n) if e["event"] == "rolledBack"]
    print(f"rollbacks after the worker kill: {len(rolled)}")


def test_a_one_process_job_survives_its_kill_and_stops_when_the_location_is_quiet(
    tmp_path: Path,
) -> None:
    mirrored = {
        "strategy": "MultiWorkerMirrored",
        "replicas": {"worker": {"replicas": 1}},
    }
    landing = Landing(_spec(f"{tmp_path}/in/part-*.csv", "csv", {}, **mirrored), tmp_path, "csv")
    spec = _spec(
        str(landing.dir / "part-*.csv"),
        "csv",
        {"pollSeconds": 1, "stopAfterIdleSeconds": 5},
        **mirrored,
    )
    ckpt = tmp_path / "ckpt"
    config = trainer_config(
        spec, checkpoint_dir=ckpt, every_steps=40, keep=50, watchdog_seconds=120
    )
    landing.land(2)  # some before it starts
    with LocalJob(config, tmp_path / "job", workers=1, ps=0, chief=False) as job:
        job.start_all()
        at = job.step()
        last = landing.land(4)[-1]
        _wait_training(job, at)
        job.kill("worker", 0)
        landing.land(2)
        job.start("worker", 0)
        done = job.wait_done(600)
        _reread_is_after_the_position(job, 1)
        idle = job.last("idle")
        assert idle is not None and idle["seconds"] >= 5
    assert last in [f for n in range(2) for f in _consumed(job, n)]
    records, last_file, step = _saved(ckpt)
    assert (records, last_file) == (landing.written, landing.names[-1])
    assert records == 8 * RECORDS and step == done["step"] == 8 * 47
    # The position reaches status.progress.input: the leader's last progress line has it.
    final = job.last("progress")
    assert final is not None and final["input"] == {"lastFile": last_file, "records": records}
