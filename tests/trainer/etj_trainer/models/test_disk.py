"""A disk table in the model (``etj_trainer.models.disk``), in one process: the same job
trains to the same tables bitwise with ``storage: memory`` and with a disk tier caching 1 %
of the rows; its checkpoint has the keys and shapes of a table in RAM, restores into one in
RAM and back, and restores piece by piece whatever the slicing it was saved with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from harness import job_spec, trainer_config  # noqa: E402

from etj_trainer.data.pipeline import make_dataset  # noqa: E402
from etj_trainer.models import disk  # noqa: E402
from etj_trainer.task.checkpoint import restore_in_pieces  # noqa: E402
from etj_trainer.task.state import TrainingState  # noqa: E402

pytestmark = pytest.mark.trainer

TABLES = [
    {"name": "user_id", "vocabularySize": 3000, "dimension": 8},
    {"name": "item_id", "vocabularySize": 2000, "dimension": 8, "idsPerExample": 3},
]


@pytest.fixture(scope="module")
def kernels() -> Path:
    from etj_trainer.kernels import build

    return build.build()


def _state(
    cache: float | None, optimizer: str = "adagrad", seed: int = 1, rowwise: bool = False
) -> TrainingState:
    tables = []
    for t in TABLES:
        t = dict(t)
        if rowwise:
            t["optimizer"] = "rowwiseAdagrad"
        if cache is not None:
            t["storage"] = {"disk": {"cacheRows": max(1, int(t["vocabularySize"] * cache))}}
        tables.append(t)
    spec = job_spec(
        model={"embeddings": tables, "denseFeatures": 4, "hiddenUnits": [16]},
        training={
            "batchSizePerReplica": 64,
            "steps": 30,
            "optimizer": optimizer,
            "learningRate": 0.1,
            "stepsPerExecution": 10,
            "seed": seed,
        },
    )
    return TrainingState(trainer_config(spec), tf.distribute.get_strategy(), fused=True)


def _train(state: TrainingState, chunks: int = 3) -> None:
    it = iter(make_dataset(state.config.model, state.config.data, 64))
    for _ in range(chunks):
        state.train_chunk(it, tf.constant(10, tf.int64))


def _values(state: TrainingState) -> dict[str, np.ndarray]:
    return {
        key: np.concatenate([np.asarray(c.read_value()).reshape(-1) for c in parts])
        for key, parts in state.named_variables().items()
    }


@pytest.mark.parametrize(
    ("optimizer", "rowwise"), [("adagrad", False), ("sgd", False), ("adagrad", True)]
)
def test_the_same_job_trains_to_the_same_tables_bitwise_in_ram_and_on_disk(
    kernels: Path, optimizer: str, rowwise: bool
) -> None:
    ram, on_disk = (
        _state(None, optimizer, rowwise=rowwise),
        _state(0.01, optimizer, rowwise=rowwise),
    )
    assert isinstance(on_disk.model.tables[0], disk.DiskTableShards)
    before = _values(on_disk)
    np.testing.assert_array_equal(before["model/tables/0"], _values(ram)["model/tables/0"])
    _train(ram)
    _train(on_disk)
    a, b = _values(ram), _values(on_disk)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert not np.array_equal(before["model/tables/0"], b["model/tables/0"]), "it trained"
    stats = on_disk.model.tables[0].shards[0].table.stats()
    # About 1 % of the rows cached (each planned shard's share rounded up): most lookups
    # miss and evict.
    assert stats["cached"] <= 0.011 * 3000 and stats["evictions"] > stats["hits"], stats


def _save(state: TrainingState, path: Path) -> str:
    return str(state.checkpoint.write(str(path)))


def test_a_disk_checkpoint_has_the_keys_of_one_in_ram_and_restores_into_ram_and_back(
    kernels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pieces of 7 rows: saved as slices of the whole table, restored a piece at a time.
    monkeypatch.setattr(disk, "default_piece_rows", lambda record: 7)
    on_disk = _state(0.01)
    _train(on_disk, chunks=2)
    saved = _values(on_disk)
    disk_path = _save(on_disk, tmp_path / "disk")

    ram = _state(None, seed=2)
    ram_path = _save(ram, tmp_path / "ram")
    shapes = tf.train.load_checkpoint(disk_path).get_variable_to_shape_map()
    ram_shapes = tf.train.load_checkpoint(ram_path).get_variable_to_shape_map()
    assert shapes == ram_shapes

    restore_in_pieces(ram, disk_path)
    for key, value in _values(ram).items():
        np.testing.assert_array_equal(value, saved[key], err_msg=key)

    # And back, into pieces of another size (13 rows) from the unsliced tensors.
    _train(ram, chunks=1)
    trained = _values(ram)
    back_path = _save(ram, tmp_path / "back")
    monkeypatch.setattr(disk, "default_piece_rows", lambda record: 13)
    again = _state(0.01, seed=3)
    restore_in_pieces(again, back_path)
    for key, value in _values(again).items():
        np.testing.assert_array_equal(value, trained[key], err_msg=key)


def test_one_process_keeps_its_files_in_etj_disk_tables(
    kernels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETJ_DISK_TABLES", str(tmp_path))
    state = _state(0.05)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n.split("-")[0] for n in names] == ["item_id", "user_id"], names
    assert state.model.tables[1].shards[0].shape.as_list() == [2000, 8]


def test_a_distributed_table_names_the_ps_directory_and_its_variable() -> None:
    from etj.api.constants import DISK_MOUNT, DISK_TABLES_ENV

    spec = job_spec(model={"embeddings": [{**TABLES[0], "storage": {"disk": {"cacheRows": 9}}}]})
    plan = trainer_config(spec).shard_plan.tables[0]
    assert disk.directory(plan, distributed=True) == (DISK_MOUNT, DISK_TABLES_ENV)
    own = plan.model_copy(update={"disk": plan.disk.model_copy(update={"path": "/ssd"})})  # type: ignore[union-attr]
    assert disk.directory(own, distributed=True) == ("/ssd", "")


# A table of 240 MiB, saved in pieces of 2 MiB: the old save (every piece an input of one
# SaveV2) held the whole table in RAM at once.
TABLE_MIB = 240


def test_a_large_table_saves_and_restores_a_piece_at_a_time_bitwise(
    kernels: Path, tmp_path: Path
) -> None:
    script = Path(__file__).with_name("disk_save_job.py")
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(TABLE_MIB)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # The checkpoint is a table in RAM's: the whole [rows, dim] under the table's key.
    key = "table/.ATTRIBUTES/VARIABLE_VALUE"
    assert result["shapes"][key] == [result["rows"], 256]
    assert result["restored_two"] == result["saved"]
    assert result["restored_one"] == result["saved"]
    # Filling, saving and both restores together grew the process by well under the
    # table: a few pieces (2 MiB each) and TensorFlow's allocator's slack, not 240 MiB.
    grown = result["peak_mib"] - result["baseline_mib"]
    assert grown < TABLE_MIB / 4, result
