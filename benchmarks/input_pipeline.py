"""Input pipeline throughput on Criteo-layout text, side by side with its baselines.

1. Parsing: examples/s of etj's delimited reader (``etj_trainer.data.delimited``: every field
   checked, ids hashed, log1p, bad lines named; RFC 4180 quoting on, the default) on one
   worker's file vs a bare ``tf.data.experimental.CsvDataset`` read of the same file (no
   hashing, no checks; it parses quotes too) in the same run, on two files: the Criteo
   layout (no quote in it) and the MovieLens-1M layout (a quarter of the titles quoted,
   holding a comma; the job is what ``etj init --from-data`` infers for it). Goal: ratio
   >= 1.0 on both.
2. Training: examples/s of the same model (examples/criteo.yaml's features and tables)
   trained from the files vs from etj's synthetic data for the same schema
   (``data.source: synthetic``: Zipf ids generated per batch), one process. Goal: ratio
   >= 0.8. Also beside one in-memory batch repeated (input cost ~0, the same rows every
   step: a ceiling no real input reaches).
3. Parquet (only when pyarrow is installed): examples/s of etj's Parquet reader
   (``etj_trainer.data.parquet``) on the same rows written as Parquet.

Best of ``--repeats`` alternating runs of each. Not a test: prints numbers, asserts
nothing. ``python benchmarks/input_pipeline.py [--rows 200000]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import yaml  # noqa: E402

from etj.api.job import EmbeddingTrainingJob  # noqa: E402
from etj.api.trainer import TrainerConfig  # noqa: E402
from etj.cli.from_data import build_job  # noqa: E402
from etj.core.planner import build_plan  # noqa: E402
from etj_trainer.data.clicklogs import write  # noqa: E402
from etj_trainer.data.pipeline import feature_dataset, make_dataset  # noqa: E402
from etj_trainer.task.state import TrainingState  # noqa: E402

BATCH = 1024


def _rate(ds: tf.data.Dataset, batches: int | None = None) -> float:
    """Examples/s of iterating ``ds`` (after one warm-up batch)."""
    it = iter(ds)
    next(it)
    n, start = 0, time.perf_counter()
    for i, b in enumerate(it):
        first = b[0] if isinstance(b, tuple) else b["label"]
        n += int(tf.shape(first)[0])
        if batches is not None and i + 1 >= batches:
            break
    return n / (time.perf_counter() - start)


def _bare_csv(path: str) -> tf.data.Dataset:
    defaults = [tf.constant(0, tf.int32)] * 14 + [tf.constant("", tf.string)] * 26
    ds = tf.data.experimental.CsvDataset(path, defaults, field_delim="\t")
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


def _bare_movielens(path: str, typed: bool = True) -> tf.data.Dataset:
    """The MovieLens-1M file read bare: numbers typed as in the Criteo baseline (ids,
    rating, timestamp, age, occupation), or every column as text."""
    text = tf.constant("", tf.string)
    defaults = [text] * 10
    if typed:
        i64, f32, i32 = tf.constant(0, tf.int64), tf.constant(0.0), tf.constant(0, tf.int32)
        defaults = [i64, i64, f32, i64, text, text, text, i32, i32, text]
    ds = tf.data.experimental.CsvDataset(path, defaults, header=True)
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


def _quoted_parse_rates(tmp: Path, rows: int, repeats: int) -> tuple[float, float]:
    """(etj, bare CsvDataset) examples/s on a MovieLens-1M-layout file with quoted titles."""
    (path,) = write("movielens-1m", tmp, 1, rows, prefix="movies")
    sample = path.read_text().splitlines()[:10_000]
    quoted = sum('"' in line for line in sample) / len(sample)
    doc, _ = build_job("movies", str(path), sample, rows)
    spec = EmbeddingTrainingJob.from_manifest(doc).spec
    size = path.stat().st_size / 2**20
    print(f"{rows} MovieLens-1M-layout rows in {path} ({size:.0f} MiB, {quoted:.0%} quoted)")
    ours, bare, text = [], [], []
    for _ in range(repeats):
        bare.append(_rate(_bare_movielens(str(path))))
        text.append(_rate(_bare_movielens(str(path), typed=False)))
        ours.append(_rate(feature_dataset(spec.model, spec.data, BATCH, repeat=False)))
    print(
        f"parse (quoted): etj {max(ours):,.0f} ex/s, bare CsvDataset {max(bare):,.0f} ex/s "
        f"(every column as text: {max(text):,.0f} ex/s, etj/that {max(ours) / max(text):.2f})"
    )
    return max(ours), max(bare)


def _config(spec) -> TrainerConfig:  # type: ignore[no-untyped-def]
    return TrainerConfig(
        job_name="bench",
        strategy="MultiWorkerMirrored",
        model=spec.model,
        data=spec.data,
        training=spec.training,
        shard_plan=build_plan(spec),
        metrics_port=9090,
    )


def _train_rate(state: TrainingState, ds: tf.data.Dataset, chunks: int) -> float:
    it = iter(ds)
    steps = tf.constant(20, tf.int64)
    state.train_chunk(it, steps)  # trace, warm up
    start = time.perf_counter()
    for _ in range(chunks):
        loss, *_ = state.train_chunk(it, steps)
    float(loss)
    return chunks * 20 * BATCH / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=15)
    parser.add_argument("--parse-only", action="store_true", help="skip training and Parquet")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="etj-bench-input-"))
    (path,) = write("criteo", tmp, 1, args.rows, prefix="train")
    doc = yaml.safe_load((ROOT / "examples" / "criteo.yaml").read_text())
    doc["spec"]["data"]["files"]["pattern"] = str(path)
    del doc["spec"]["data"]["validation"]
    doc["spec"]["training"] |= {"batchSizePerReplica": BATCH, "steps": 1000}
    del doc["spec"]["training"]["epochs"]
    spec = EmbeddingTrainingJob.from_manifest(doc).spec
    print(f"{args.rows} Criteo-layout rows in {path} ({path.stat().st_size / 2**20:.0f} MiB)")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))

    # The same reader with quoting off (data.files.quote: none): what looking for quotes costs.
    files = spec.data.files.model_copy(update={"quote": "none"})
    unquoted = spec.data.model_copy(update={"files": files})
    ours, bare, plain = [], [], []
    for _ in range(args.repeats):
        bare.append(_rate(_bare_csv(str(path))))
        ours.append(_rate(feature_dataset(spec.model, spec.data, BATCH, repeat=False)))
        plain.append(_rate(feature_dataset(spec.model, unquoted, BATCH, repeat=False)))
    print(
        f"parse: etj {max(ours):,.0f} ex/s (quote none: {max(plain):,.0f}), "
        f"bare CsvDataset {max(bare):,.0f} ex/s"
    )
    quoted_ours, quoted_bare = _quoted_parse_rates(tmp, args.rows, args.repeats)

    if args.parse_only:
        print(
            f"parse_ratio={max(ours) / max(bare):.2f} "
            f"quoted_parse_ratio={quoted_ours / quoted_bare:.2f}"
        )
        print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        return
    state = TrainingState(_config(spec), tf.distribute.get_strategy())
    files = feature_dataset(spec.model, spec.data, BATCH)
    memory = files.take(1).cache().repeat()
    doc["spec"]["data"] = {"source": "synthetic"}
    synthetic_spec = EmbeddingTrainingJob.from_manifest(doc).spec
    synthetic = make_dataset(synthetic_spec.model, synthetic_spec.data, BATCH)
    on_files, on_synthetic, on_memory = [], [], []
    for _ in range(args.repeats):
        on_memory.append(_train_rate(state, memory, args.chunks))
        on_synthetic.append(_train_rate(state, synthetic, args.chunks))
        on_files.append(_train_rate(state, files, args.chunks))
    print(
        f"train: files {max(on_files):,.0f} ex/s, synthetic {max(on_synthetic):,.0f} ex/s, "
        f"in-memory {max(on_memory):,.0f} ex/s"
    )

    parquet = _parquet_rate(spec, path, args.repeats)
    if parquet is not None:
        print(f"parse: etj parquet reader (pyarrow) {parquet:,.0f} ex/s")
    print(
        f"parse_ratio={max(ours) / max(bare):.2f} "
        f"quoted_parse_ratio={quoted_ours / quoted_bare:.2f} "
        f"train_ratio={max(on_files) / max(on_synthetic):.2f} (files/synthetic) "
        f"{max(on_files) / max(on_memory):.2f} (files/in-memory)"
    )
    # The machine may be shared: the numbers mean little without its load.
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


def _parquet_rate(spec, path: Path, repeats: int) -> float | None:  # type: ignore[no-untyped-def]
    """Examples/s of etj's Parquet reader (``etj_trainer.data.parquet``) on the same rows."""
    try:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        print("parquet: pyarrow not installed; skipped")
        return None
    names = spec.data.files.columns
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=names),
        parse_options=pacsv.ParseOptions(delimiter="\t"),
        convert_options=pacsv.ConvertOptions(column_types={n: "string" for n in names[14:]}),
    )
    target = path.with_suffix(".parquet")
    pq.write_table(table, target)
    files = spec.data.files.model_copy(update={"pattern": str(target), "format": "parquet"})
    data = spec.data.model_copy(update={"files": files})
    rates = [_rate(feature_dataset(spec.model, data, BATCH, repeat=False)) for _ in range(repeats)]
    return max(rates)


if __name__ == "__main__":
    main()
