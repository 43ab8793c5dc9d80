"""Quote-free throughput of etj's CSV reader now vs before multi-line quoted fields.

Issue #41's goal: files without a quote read within 5 % of the reader before records could
span lines (quoted fields holding a line break, joined per file by a ``scan``: commit
``AFTER``). The reader before it (``etj_trainer.data.delimited`` and ``records`` at
``AFTER``'s parent) is loaded from ``git show`` into a temporary package; everything else
(features, batch keys, the spec) is the current tree's.

Both read the same Criteo-layout file (``examples/criteo.yaml``'s features, tab-separated,
no quote in it; RFC 4180 quoting on, the default) once through, one shard, batches of
1,024, as ``feature_dataset`` builds them. A set runs each reader ``--passes`` times, the
order alternating from set to set, and keeps each reader's best pass; the set's ratio is
new/old. Printed per set and as the median over the sets, for examples/s (wall clock) and
for examples per CPU-second of this process (``time.process_time``: less moved by other
jobs on a shared machine). Goal: both medians >= 0.95.

Not a test: prints numbers, asserts nothing. Needs the git history (a clone, not a copy)::

    nice -n 19 .venv/bin/python benchmarks/csv_quotes.py [--rows 60000] [--sets 6] [--passes 2]
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import yaml  # noqa: E402

from etj.api.job import EmbeddingTrainingJob  # noqa: E402
from etj_trainer.data import delimited, records  # noqa: E402
from etj_trainer.data.batch import LABEL_KEY  # noqa: E402
from etj_trainer.data.clicklogs import write  # noqa: E402
from etj_trainer.data.features import FeatureSet  # noqa: E402

# The commit that added multi-line quoted fields to the reader; "before" is its parent.
AFTER = "9b073ed003113002d1b3322ef718c038162fe579"
DATA = "trainer_image/etj_trainer/data"
BATCH = 1024


def reader_before(tmp: Path) -> tuple[ModuleType, ModuleType]:
    """``delimited`` and ``records`` as they were at ``AFTER``'s parent, importable as the
    package ``etj_csv_before`` (the old ``delimited`` imports the old ``records``)."""
    package = tmp / "etj_csv_before"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("delimited", "records"):
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{AFTER}^:{DATA}/{name}.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        source = source.replace("etj_trainer.data.records", "etj_csv_before.records")
        (package / f"{name}.py").write_text(source)
    sys.path.insert(0, str(tmp))
    return (
        importlib.import_module("etj_csv_before.delimited"),
        importlib.import_module("etj_csv_before.records"),
    )


def reader_dataset(mod: ModuleType, recs: ModuleType, spec, path: Path) -> tf.data.Dataset:  # type: ignore[no-untyped-def]
    """One pass over ``path`` through reader ``mod``, as ``feature_dataset`` builds it."""
    fs = FeatureSet(spec.model)
    files, data = [str(path)], spec.data.files
    sharding = recs.Sharding(1, 0, None, False)
    columns = mod.preflight(files, data, fs)
    ds = mod.dataset(files, data, fs, columns, BATCH, 0, sharding)
    options = tf.data.Options()
    options.deterministic = True
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def one_pass(ds: tf.data.Dataset) -> tuple[float, float]:
    """(examples/s, examples per CPU-second of this process) of one pass over ``ds``."""
    n, wall, cpu = 0, time.perf_counter(), time.process_time()
    for b in ds:
        n += int(tf.shape(b[LABEL_KEY])[0])
    return n / (time.perf_counter() - wall), n / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--sets", type=int, default=6)
    parser.add_argument("--passes", type=int, default=2, help="passes per reader and set")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="etj-bench-csv-quotes-"))
    (path,) = write("criteo", tmp, 1, args.rows, prefix="train")
    doc = yaml.safe_load((ROOT / "examples" / "criteo.yaml").read_text())
    doc["spec"]["data"]["files"]["pattern"] = str(path)
    del doc["spec"]["data"]["validation"]
    spec = EmbeddingTrainingJob.from_manifest(doc).spec
    old, old_records = reader_before(tmp)
    readers = {
        "new": reader_dataset(delimited, records, spec, path),
        "old": reader_dataset(old, old_records, spec, path),
    }
    for ds in readers.values():  # warm up: trace both pipelines once
        one_pass(ds)
    print(f"{args.rows} Criteo-layout rows in {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    print(f"old = {DATA}/delimited.py at {AFTER[:7]}^, new = the working tree")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    wall_ratios, cpu_ratios = [], []
    for s in range(args.sets):
        order = ("new", "old") if s % 2 == 0 else ("old", "new")
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.passes):
            for name in order:
                wall, cpu = one_pass(readers[name])
                prev = best.get(name, (0.0, 0.0))
                best[name] = (max(prev[0], wall), max(prev[1], cpu))
        wall_ratios.append(best["new"][0] / best["old"][0])
        cpu_ratios.append(best["new"][1] / best["old"][1])
        print(
            f"set {s + 1}: new {best['new'][0]:,.0f} ex/s {best['new'][1]:,.0f} ex/CPU-s, "
            f"old {best['old'][0]:,.0f} ex/s {best['old'][1]:,.0f} ex/CPU-s: "
            f"new/old {wall_ratios[-1]:.3f} (wall) {cpu_ratios[-1]:.3f} (CPU)"
        )
    print(
        f"median new/old over {args.sets} sets: {statistics.median(wall_ratios):.3f} (wall), "
        f"{statistics.median(cpu_ratios):.3f} (CPU)"
    )
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
