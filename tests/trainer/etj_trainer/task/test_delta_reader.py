"""Full serving versions plus their deltas (``etj_trainer.task.delta_reader``, written by
``etj_trainer.task.versions``): a reader holding version v that applies v's deltas in order
holds version v+1 bit for bit — every table shard, every dense weight, a dynamic table's
index after evictions —; a delta of another version, or out of sequence, is refused. In one
process (steps driven by the test) and on real ParameterServer processes (chief, worker,
ps) with versions and deltas written while training goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import LocalJob, adagrad_training, job_spec, trainer_config

from etj.api.export import version_of
from etj.api.trainer import TrainerExport
from tests.trainer.etj_trainer.task.one_process_versions import Clock, one_process, train_and_export

_DYNAMIC = {
    "name": "user_id",
    "vocabularySize": 50,
    "dimension": 4,
    "dynamic": {"capacity": 300, "admitAfter": 1, "evictAfterSteps": 3, "maintainEverySteps": 2},
}
_MODEL = {
    "embeddings": [_DYNAMIC, {"name": "item_id", "vocabularySize": 5000, "dimension": 4}],
    "denseFeatures": 4,
    "hiddenUnits": [8],
}


def test_a_version_and_its_deltas_are_the_next_version_bitwise(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.task import deltas
    from etj_trainer.task.delta_reader import DeltaRefused, ServingChain, version_snapshot

    state, versions, chunk = one_process(tf, tmp_path, model=_MODEL)
    versions.start(0)
    # v1 at step 10, deltas at 13 and 16, v2 (closing v1's chain) at 20, deltas at 23, 26.
    train_and_export(versions, chunk, 10, 3, 3, 4, 3, 3)
    versions.final(int(state.step.numpy()))  # v3, closing v2's chain
    written = versions.collect()
    made = versions.collect_deltas()
    assert [w.error for w in written] == [None] * 3
    v1, v2, v3 = (w.version for w in written)
    assert [(d.base, d.sequence, d.next_version, d.error) for d in made] == [
        (v1, 1, None, None),
        (v1, 2, None, None),
        (v1, 3, v2, None),
        (v2, 1, None, None),
        (v2, 2, None, None),
        (v2, 3, v3, None),
    ]
    # Deltas hold the rows that changed, not the tables (item_id has 5,000 rows); the last
    # closes v2's chain at the step of its last delta: nothing trained, nothing in it.
    rows = [d.rows for d in made]
    assert all(0 < n < 2000 for n in rows[:-1]) and rows[-1] == 0, rows
    assert sum(d.evicted for d in made) > 0, "no dynamic id was evicted: nothing shown"
    chain = ServingChain(str(tmp_path / "serving"), str(tmp_path / "deltas")).load(v1)
    pending = chain.pending()
    assert len(pending) == 3
    for path in pending:
        chain.apply(deltas.read(path))
    assert (chain.version, chain.sequence) == (v2, 0)
    assert (
        deltas.differences(chain.model, version_snapshot(str(tmp_path / "serving" / str(v2)))) == []
    )
    assert [d.sequence for d in chain.follow()] == [1, 2, 3]
    assert (chain.version, chain.sequence) == (v3, 0)
    assert (
        deltas.differences(chain.model, version_snapshot(str(tmp_path / "serving" / str(v3)))) == []
    )
    # The dynamic table's index is part of what is compared: it moved.
    first = version_snapshot(str(tmp_path / "serving" / str(v1)))
    assert "index user_id" in deltas.differences(first, chain.model)
    # Refused: a delta of another version, one out of sequence; the model is unchanged.
    old = deltas.read(pending[0])
    with pytest.raises(DeltaRefused, match=f"does not apply to version {v3}"):
        chain.apply(old)
    at_v1 = ServingChain(str(tmp_path / "serving"), str(tmp_path / "deltas")).load(v1)
    with pytest.raises(DeltaRefused, match="out of sequence: the reader has applied up to 0"):
        at_v1.apply(deltas.read(pending[1]))
    assert deltas.differences(at_v1.model, first) == []


def test_a_restarted_writer_goes_on_with_the_chain(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.task import deltas
    from etj_trainer.task.delta_reader import ServingChain, version_snapshot
    from etj_trainer.task.versions import Versions

    state, versions, chunk = one_process(tf, tmp_path, model=_MODEL)
    versions.start(0)
    train_and_export(versions, chunk, 10, 3)  # v1, its delta 1
    v1 = versions.collect()[0].version
    # A new writer (the leader restarted): it rebuilds v1 + delta 1 from their files and
    # writes delta 2 on top, then v2 closing the chain with delta 3.
    again = Versions(state, state.config.export, clock=Clock())
    again.start(13)
    train_and_export(again, chunk, 3)
    again.final(int(state.step.numpy()))
    assert [(d.base, d.sequence) for d in again.collect_deltas()] == [(v1, 2), (v1, 3)]
    v2 = again.collect()[0].version
    chain = ServingChain(str(tmp_path / "serving"), str(tmp_path / "deltas")).load(v1)
    assert [d.sequence for d in chain.follow()] == [1, 2, 3]
    assert chain.version == v2
    held = version_snapshot(str(tmp_path / "serving" / str(v2)))
    assert deltas.differences(chain.model, held) == []


def test_parameter_server_versions_and_deltas_chain_bitwise(tf: Any, tmp_path: Path) -> None:
    """Two runs of one job: the first ends with version v0 (its only one), the second
    resumes from its checkpoint, goes on with v0's chain and writes deltas and versions
    while training. Whether a delta falls between two versions depends on how long a
    version takes to write beside training (a delta starts only when nothing is being
    written: on a loaded machine the version at step 100 of one run once lasted until the
    version at step 200 was due, so every delta was a closing one — cold CI, load ~25).
    The second run's first delta is due 30 steps after its start, when nothing is being
    written and no version is due (the next is due 150 steps on), so it starts whatever
    the load, and the final version waits for it."""
    from etj_trainer.task import deltas
    from etj_trainer.task.delta_reader import ServingChain, version_snapshot

    serving, delta_dir = tmp_path / "ckpt" / "serving", tmp_path / "ckpt" / "deltas"

    def run(steps: int, every_steps: int, workdir: Path) -> tuple[dict[str, Any], list[Any]]:
        spec = job_spec(
            replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 2}},
            model=_MODEL,
            training=adagrad_training(steps, 64),
        )
        config = trainer_config(
            spec,
            checkpoint_dir=tmp_path / "ckpt",
            every_steps=1000,
            export=TrainerExport(
                directory=str(serving),
                every_steps=every_steps,
                keep=10,
                delta_directory=str(delta_dir),
                delta_steps=30,
            ),
        )
        with LocalJob(config, workdir, workers=1, ps=2) as job:
            job.start_all()
            done = job.wait_done(timeout=600)
            events = list(job.events())
        assert [e for e in events if e["event"] == "deltaFailed"] == []
        return done, [e for e in events if e["event"] == "deltaExported"]

    first, made_first = run(50, 1000, tmp_path / "first")
    assert first["step"] == 50
    # No version before the first one: no chain, no delta.
    assert made_first == []
    (base,) = sorted(v for p in serving.iterdir() if (v := version_of(p.name)) is not None)
    total = 250
    done, made = run(total, 150, tmp_path / "second")
    assert done["step"] == total
    on_disk = sorted(v for p in serving.iterdir() if (v := version_of(p.name)) is not None)
    # The version due at step 200 can slip past the end on a busy machine (a version
    # starts only when nothing is being written); the final one is certain.
    assert on_disk[0] == base and len(on_disk) >= 2, on_disk
    closing = [e for e in made if e.get("nextVersion") is not None]
    assert [e["nextVersion"] for e in closing] == on_disk[1:]
    assert any(e.get("nextVersion") is None for e in made)
    assert sum(e["evicted"] for e in made) > 0
    chain = ServingChain(str(serving), str(delta_dir)).load(on_disk[0])
    for version in on_disk[1:]:
        while chain.version != version:
            path = chain.pending()[0]
            chain.apply(deltas.read(path))
        assert deltas.differences(chain.model, version_snapshot(str(serving / str(version)))) == []
