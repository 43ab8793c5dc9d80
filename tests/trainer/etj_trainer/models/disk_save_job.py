"""The process ``test_disk.py``'s streaming-save test measures: a disk table of
``TABLE_MIB`` in 3 shards, its rows filled and updated through a small cache, saved with
``tf.train.Checkpoint``, restored into 2 shards (``restore_components``, the trainer's
restore) and into 1 (TensorFlow's own ``Checkpoint.read``); prints JSON with the digests
of each table's weights and slots in row order and the process' RSS (baseline and peak)."""

from __future__ import annotations

import hashlib
import json
import resource
import sys

import numpy as np
import tensorflow as tf

from etj_trainer.kernels.disk_table import DiskTable
from etj_trainer.models.disk import DiskShard, DiskTableShards
from etj_trainer.task.restore import restore_components

DIM = 256
RECORD = 4 * 2 * DIM  # Adagrad: a weight row and its accumulator row, float32.
PIECE = 1024


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table(rows: int, shards: int, folder: str, name: str) -> DiskTableShards:
    bounds = np.linspace(0, rows, shards + 1).astype(int)
    parts = []
    for j in range(shards):
        n = int(bounds[j + 1] - bounds[j])
        t = DiskTable(f"{folder}/{name}-{j}.rows", n, DIM, "adagrad", cache_rows=64, slot_init=0.1)
        parts.append(DiskShard(t, "/cpu:0", f"{name}/part_{j}", int(bounds[j]), n, PIECE))
    return DiskTableShards(parts)


def digest(t: DiskTableShards) -> list[str]:
    weights, slots = hashlib.sha256(), hashlib.sha256()
    for shard in t.shards:
        for _, w, s in shard.table.pieces(PIECE):
            weights.update(w.numpy().tobytes())
            slots.update(s.numpy().tobytes())
    return [weights.hexdigest(), slots.hexdigest()]


def main(folder: str, table_mib: int) -> None:
    rows = table_mib * 2**20 // RECORD
    DiskTable(f"{folder}/warm.rows", 8, DIM, "adagrad", 4).lookup([0]).numpy()
    baseline = rss_mib()
    source = table(rows, 3, folder, "source")
    rng = np.random.default_rng(0)
    for shard in source.shards:
        for first in range(0, shard.rows, PIECE):
            n = min(PIECE, shard.rows - first)
            w = rng.standard_normal((n, DIM), dtype=np.float32)
            shard.table.import_rows(first, w, np.abs(w) + 0.1)
    # Updates through the cache: some rows are newer in RAM than on disk when saved.
    for shard in source.shards:
        ids = rng.integers(0, shard.rows, 200)
        shard.table.apply(ids, rng.standard_normal((200, DIM), dtype=np.float32), 0.1)
    saved = digest(source)
    path = tf.train.Checkpoint(table=source, slot=source.slot_view()).write(f"{folder}/ckpt")
    saved_shapes = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    for shard in source.shards:
        shard.table.close()

    two = table(rows, 2, folder, "two")
    restore_components(path, {"table": two.variables, "slot": two.slot_view().variables})
    restored_two = digest(two)
    for shard in two.shards:
        shard.table.close()

    one = table(rows, 1, folder, "one")
    tf.train.Checkpoint(table=one, slot=one.slot_view()).read(path)
    restored_one = digest(one)
    print(
        json.dumps(
            {
                "rows": rows,
                "saved": saved,
                "restored_two": restored_two,
                "restored_one": restored_one,
                "shapes": {k: list(v) for k, v in saved_shapes.items()},
                "baseline_mib": baseline,
                "peak_mib": rss_mib(),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
