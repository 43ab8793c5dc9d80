"""``python -m etj_trainer.data.datagen``: write synthetic training data as TFRecord or CSV files.

The files have the layout ``etj_trainer.data.pipeline`` reads (see its docstring), drawn from the
same generator as ``data.source: synthetic``, so a job can be tried on files without a
dataset of its own. It only writes files; it does not train.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tensorflow as tf

from etj.api.spec import DataSpec, FileFormat, ModelSpec
from etj_trainer.config import ConfigError, load_config
from etj_trainer.data.batch import DENSE_KEY, LABEL_KEY
from etj_trainer.data.pipeline import csv_columns, synthetic_batch_fn


def _example(batch: dict[str, tf.Tensor], row: int, model: ModelSpec, label_key: str) -> bytes:
    feature = {
        t.name: tf.train.Feature(int64_list=tf.train.Int64List(value=batch[t.name][row]))
        for t in model.embeddings
    }
    if model.dense_features:
        feature[DENSE_KEY] = tf.train.Feature(
            float_list=tf.train.FloatList(value=batch[DENSE_KEY][row])
        )
    feature[label_key] = tf.train.Feature(
        float_list=tf.train.FloatList(value=[batch[LABEL_KEY][row]])
    )
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _csv_row(batch: dict[str, tf.Tensor], row: int, model: ModelSpec) -> list[str]:
    cells = [f"{batch[LABEL_KEY][row]:g}"]
    cells += [f"{v:.6g}" for v in (batch[DENSE_KEY][row] if model.dense_features else [])]
    for t in model.embeddings:
        cells += [str(int(v)) for v in batch[t.name][row]]
    return cells


def write_files(
    model: ModelSpec,
    data: DataSpec,
    out: Path,
    fmt: str,
    files: int,
    examples_per_file: int,
    label_key: str = "label",
) -> list[Path]:
    """Write ``files`` files of ``examples_per_file`` generated examples; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    make_batch = synthetic_batch_fn(model, data, examples_per_file, stream=0)
    paths = []
    for n in range(files):
        batch = {k: v.numpy() for k, v in make_batch(tf.constant(n, tf.int64)).items()}
        suffix = FileFormat.TFRECORD if fmt == FileFormat.TFRECORD else FileFormat.CSV
        path = out / f"part-{n:05d}.{suffix}"
        if fmt == FileFormat.TFRECORD:
            with tf.io.TFRecordWriter(str(path)) as writer:
                for row in range(examples_per_file):
                    writer.write(_example(batch, row, model, label_key))
        else:
            lines = [",".join(csv_columns(model, label_key))]
            lines += [",".join(_csv_row(batch, row, model)) for row in range(examples_per_file)]
            path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etj_trainer.data.datagen", description=__doc__)
    parser.add_argument("--config", help="trainer config JSON (default: $ETJ_TRAINER_CONFIG)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--format", choices=[FileFormat.TFRECORD, FileFormat.CSV], default=FileFormat.TFRECORD
    )
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--examples-per-file", type=int, default=10_000)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"datagen: {e}", file=sys.stderr)
        return 2
    label_key = config.data.files.label_key if config.data.files else "label"
    paths = write_files(
        config.model,
        config.data,
        args.out,
        args.format,
        args.files,
        args.examples_per_file,
        label_key,
    )
    print(f"wrote {len(paths)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
