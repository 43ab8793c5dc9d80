"""Each ParameterServer worker reads its own part of the files: whole files when there are
at least as many files as workers, every other batch when there are fewer. Checked on the
pipelines themselves and through a real ClusterCoordinator (1 ps + 2 workers in one
process on 127.0.0.1), where TensorFlow binds each worker's index when its dataset runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from harness import free_ports, trainer_env

from etj.api.spec import DataSpec, ModelSpec

MODEL: dict[str, Any] = {
    "embeddings": [{"name": "ids", "vocabularySize": 100, "dimension": 4}],
    "features": [
        {"name": "label", "kind": "label"},
        {"name": "row", "kind": "dense"},
        {"name": "c", "kind": "categorical", "table": "ids"},
    ],
}
ROWS_PER_FILE = 32
BATCH = 8


def _files(tmp_path: Path, n: int, rows: int = ROWS_PER_FILE) -> dict[int, int]:
    """``n`` CSV files whose every row has its own number; row -> file."""
    owner = {}
    for f in range(n):
        lines = ["label,row,c"]
        for r in range(rows):
            row = f * 1000 + r
            owner[row] = f
            lines.append(f"{r % 2},{row},x{r}")
        (tmp_path / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
    return owner


def _data(tmp_path: Path) -> DataSpec:
    return DataSpec.model_validate(
        {"source": "files", "files": {"pattern": str(tmp_path / "part-*.csv"), "format": "csv"}}
    )


def _rows_of_shard(tmp_path: Path, shards: int, index: int, batches: int) -> set[int]:
    from etj_trainer.data.pipeline import make_dataset

    ds = make_dataset(
        ModelSpec.model_validate(MODEL),
        _data(tmp_path),
        BATCH,
        num_shards=shards,
        shard_index=index,
    )
    rows: set[int] = set()
    for batch in ds.take(batches):
        rows |= {int(v) for v in batch["dense"].numpy()[:, 0]}
    return rows


def test_two_shards_read_disjoint_files_whose_union_is_all(tmp_path: Path):
    owner = _files(tmp_path, 4)
    # A shard has 8 distinct batches; batches leave the 16-batch shuffle buffer in
    # bounded time, so 100 draws span many passes and every row is seen.
    seen = [_rows_of_shard(tmp_path, 2, i, 100) for i in range(2)]
    files = [{owner[r] for r in rows} for rows in seen]
    assert files[0].isdisjoint(files[1]), files
    assert files[0] | files[1] == {0, 1, 2, 3}
    assert all(len(f) == 2 for f in files), files
    assert seen[0] | seen[1] == set(owner)


def test_fewer_files_than_shards_splits_the_records(tmp_path: Path):
    # 3 files of 5 batches each (an odd count), 4 shards: every 4th batch of each file,
    # the same ones in every pass whatever the file order.
    owner = _files(tmp_path, 3, rows=40)
    seen = [_rows_of_shard(tmp_path, 4, i, 100) for i in range(4)]
    for a in range(4):
        for b in range(a + 1, 4):
            assert seen[a].isdisjoint(seen[b]), (a, b)
    assert set().union(*seen) == set(owner)
    assert all(seen)


# Runs in its own process: in-process servers cannot be stopped, and the coordinator
# must not share the test process's TensorFlow context.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    from etj.api.spec import DataSpec, ModelSpec
    from etj_trainer.data.pipeline import ps_worker_dataset

    model = ModelSpec.model_validate(json.loads(sys.argv[1]))
    data = DataSpec.model_validate(json.loads(sys.argv[2]))
    ps_port, w0, w1 = (int(p) for p in sys.argv[3:6])
    cluster = {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{w0}", f"127.0.0.1:{w1}"]}
    spec = tf.train.ClusterSpec(cluster)
    for job, tasks in cluster.items():
        for i in range(len(tasks)):
            tf.distribute.Server(spec, job_name=job, task_index=i, protocol="grpc", start=True)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    per_worker = coordinator.create_per_worker_dataset(
        lambda: ps_worker_dataset(model, data, int(sys.argv[6]), 2)
    )
    iterator = iter(per_worker)

    @tf.function
    def step(it):
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        return worker, next(it)["dense"][:, 0]

    seen = {0: set(), 1: set()}
    # Until both workers have read all their rows (each worker's share of the files,
    # twice over), with a bound on the closures scheduled.
    for _ in range(40):
        results = [coordinator.schedule(step, args=(iterator,)) for _ in range(16)]
        coordinator.join()
        for r in results:
            worker, rows = r.fetch()
            seen[int(worker)] |= {int(v) for v in rows}
        if sum(len(s) for s in seen.values()) >= int(sys.argv[7]):
            break
    print(json.dumps({str(k): sorted(v) for k, v in seen.items()}))
    sys.stdout.flush()
    import os
    os._exit(0)
    """
)


def test_parameter_server_workers_read_their_own_files(tmp_path: Path):
    owner = _files(tmp_path, 4)
    data = _data(tmp_path).model_dump(by_alias=True, exclude_none=True)
    args = [json.dumps(MODEL), json.dumps(data), *map(str, free_ports(3)), str(BATCH)]
    args.append(str(len(owner)))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = {int(k): set(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    files = {w: {owner[r] for r in rows} for w, rows in seen.items()}
    assert files[0] and files[1], files
    assert files[0].isdisjoint(files[1]), files
    assert files[0] | files[1] == {0, 1, 2, 3}
    # Worker i reads every second file from its index (the files in name order).
    assert files == {0: {0, 2}, 1: {1, 3}}
    assert seen[0] | seen[1] == set(owner)


def test_etj_layout_with_fewer_files_than_shards_splits_the_records(tmp_path: Path):
    """Files in etj's own layout (no model.features): the same split by record."""
    from etj_trainer.data.pipeline import make_dataset

    rows = 31  # odd: a split of the repeated stream would swap halves every pass
    lines = ["label,dense_0,ids"] + [f"{r % 2},{r},{r % 7}" for r in range(rows)]
    (tmp_path / "own-0.csv").write_text("\n".join(lines) + "\n")
    model = ModelSpec.model_validate(
        {"embeddings": [{"name": "ids", "vocabularySize": 10, "dimension": 4}], "denseFeatures": 1}
    )
    data = DataSpec.model_validate(
        {"source": "files", "files": {"pattern": str(tmp_path / "own-*.csv"), "format": "csv"}}
    )
    seen = []
    for index in range(2):
        ds = make_dataset(model, data, 5, num_shards=2, shard_index=index)
        got: set[int] = set()
        for batch in ds.take(60):
            got |= {int(v) for v in batch["dense"].numpy()[:, 0]}
        seen.append(got)
    assert seen[0].isdisjoint(seen[1])
    assert seen[0] | seen[1] == set(range(rows))


def test_etj_layout_one_file_is_read_once_per_pass(tmp_path: Path):
    """One file in etj's own layout: each record once per pass over it (the interleave used
    to open the repeated file four times at once, so every record came four times in a
    row and a pass took four times as many steps)."""
    from etj_trainer.data.pipeline import make_dataset

    rows = 12_000  # past the shuffle buffer: a first batch of it holds no record twice
    lines = ["label,dense_0,ids"] + [f"{r % 2},{r},{r % 7}" for r in range(rows)]
    (tmp_path / "own-0.csv").write_text("\n".join(lines) + "\n")
    model = ModelSpec.model_validate(
        {"embeddings": [{"name": "ids", "vocabularySize": 10, "dimension": 4}], "denseFeatures": 1}
    )
    data = DataSpec.model_validate(
        {"source": "files", "files": {"pattern": str(tmp_path / "own-*.csv"), "format": "csv"}}
    )
    batch = next(iter(make_dataset(model, data, 1000)))
    values = batch["dense"].numpy()[:, 0].tolist()
    assert len(set(values)) == len(values)
