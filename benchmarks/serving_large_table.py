"""The serving SavedModel of a table past 2 GB: export, then load and serve in a fresh process.

A string column hashed into one table of ``--rows`` rows (default 600M, dimension 1:
2.4 GB of float32, past protobuf's 2 GB and past 2^29 rows), a dense column, a small dnn
tower. The table is built as ``--shards`` variables (1: the single-process trainer's one
variable; more: a ParameterServer job's shards), exported with
``etj_trainer.task.serving_model.save`` and loaded with ``tf.saved_model.load`` in a fresh
process, which serves raw rows and must give the exporter's probabilities. Prints the
sizes (saved_model.pb, variables), times and peak RSS of each process (the exporter's
beside the table's size: saving copies nothing). Not a test: asserts only that the two
processes agree. ``python benchmarks/serving_large_table.py [--rows N] [--shards K]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

ROWS = ["Zürich", "", "user-123456789", "東京", "x" * 300, "user-42"]
DENSE = ["1.5", "", "-3", "0", "12", "7"]
GIB = 1 << 30

LOAD = """
import json, sys, time
import tensorflow as tf
def hwm():
    # VmHWM: this process's peak RSS (ru_maxrss would carry the parent's across fork/exec).
    line = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
    return int(line.split()[1]) / 2**20
start = time.monotonic()
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
loaded = time.monotonic() - start
rows = json.loads(sys.argv[2])
start = time.monotonic()
out = serve(user=tf.constant(rows["user"]), x=tf.constant(rows["x"]))["probability"]
served = time.monotonic() - start
print("LOADED " + json.dumps({
    "probability": out.numpy().tolist(), "load_s": loaded, "serve_s": served,
    "peak_rss_gib": hwm(),
}))
"""


def rss_gib() -> float:
    """This process's peak RSS (VmHWM), GiB."""
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmHWM"))
    return int(line.split()[1]) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=600_000_000)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="export here (kept)")
    args = parser.parse_args()

    import tensorflow as tf

    from etj.api.spec import ModelSpec
    from etj_trainer.models import TowerInputs, build_tower
    from etj_trainer.models.ctr import CtrModel  # noqa: F401  (the trainer's modules load)
    from etj_trainer.task.serving_model import RawServingModel, save

    spec = ModelSpec.model_validate(
        {
            "embeddings": [{"name": "big", "vocabularySize": args.rows, "dimension": 1}],
            "features": [
                {"name": "label", "kind": "label"},
                {"name": "x", "kind": "dense", "transform": "log1p", "default": 2},
                {"name": "user", "kind": "categorical", "table": "big"},
            ],
            "hiddenUnits": [8],
        }
    )
    table_bytes = args.rows * 4
    print(
        f"table: {args.rows:,} rows x 1 float32 = {table_bytes / GIB:.2f} GiB, {args.shards} shard(s)"
    )
    start = time.monotonic()
    sizes = [
        args.rows // args.shards + (1 if i < args.rows % args.shards else 0)
        for i in range(args.shards)
    ]
    shards = [
        tf.Variable(
            tf.random.stateless_uniform([n, 1], seed=(1, i), minval=-1, maxval=1), name=f"big_{i}"
        )
        for i, n in enumerate(sizes)
    ]
    built = time.monotonic() - start
    print(f"built the table in {built:.1f}s; exporter peak RSS {rss_gib():.2f} GiB")
    tower = build_tower(spec, TowerInputs(names=("user",), dims=(1,), dense=1), seed=3)
    out = args.out or Path(tempfile.mkdtemp(prefix="etj-serving-big-")) / "serving"
    before = rss_gib()
    start = time.monotonic()
    save(spec, [shards], tower, str(out))
    saved = time.monotonic() - start
    pb = (out / "saved_model.pb").stat().st_size
    variables = sum(p.stat().st_size for p in (out / "variables").iterdir())
    print(
        f"saved in {saved:.1f}s: saved_model.pb {pb / 1024:.1f} KiB, variables "
        f"{variables / GIB:.2f} GiB; exporter peak RSS {before:.2f} -> {rss_gib():.2f} GiB"
    )
    module = RawServingModel(spec, [shards], tower)
    want = module.serve({"user": tf.constant(ROWS), "x": tf.constant(DENSE)})["probability"]
    del module, shards
    rows = json.dumps({"user": ROWS, "x": DENSE})
    proc = subprocess.run(
        [sys.executable, "-c", LOAD, str(out), rows], capture_output=True, text=True, timeout=3600
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("LOADED ")]
    if proc.returncode or not lines:
        print(proc.stderr[-5000:])
        return 1
    got = json.loads(lines[-1].removeprefix("LOADED "))
    diff = max(abs(a - b) for a, b in zip(got["probability"], want.numpy().tolist(), strict=True))
    print(
        f"fresh process: loaded in {got['load_s']:.1f}s, served {len(ROWS)} raw rows in "
        f"{got['serve_s'] * 1000:.0f} ms, peak RSS {got['peak_rss_gib']:.2f} GiB; "
        f"max |probability difference| {diff:.2e}"
    )
    print(
        json.dumps(
            {
                "rows": args.rows,
                "shards": args.shards,
                "pb_bytes": pb,
                "variables_bytes": variables,
                "save_s": saved,
                **{k: v for k, v in got.items() if k != "probability"},
            }
        )
    )
    return 0 if diff < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
