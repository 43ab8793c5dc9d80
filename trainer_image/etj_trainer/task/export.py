"""The final export: a SavedModel of the dense tower (any architecture), plus every embedding
table (first-order tables of wideDeep/deepFM included) as a file a serving system can
memory-map.

Layout of ``export_dir``::

    tables.json              manifest: per table name, rows, dimension, dtype, combiner,
                             idsPerExample, file; and the tower's input order
    embeddings/<name>.npy    the table, row-major; np.load(path, mmap_mode="r") maps it
                             (bfloat16 is stored as its uint16 bit pattern); a dynamic
                             table's fallback rows, then its pool
    embeddings/<name>.index.npy
                             a dynamic table's index: int64 [ids, 2], each admitted key
                             and its row, keys ascending (the manifest's "dynamic" says so)
    tower/                   SavedModel; signature "serving_default" maps the pooled
                             embeddings (one input per table, or per categorical feature
                             with model.features: see "inputs"; wideDeep/deepFM add
                             each input's first-order lookup, "<input>__linear") and
                             "dense" to "probability"
    serving/                 SavedModel on RAW features (``etj_trainer.task.serving_model``):
                             "serving_default" maps one string input per raw column (a
                             delimited file's text: ids hashed as in training, "" for
                             missing, multi-valued values joined by their delimiter; or,
                             without model.features, int64 ids per table and "dense") to
                             "probability"; tables are variables (one per trained shard),
                             vocabulary files are assets, a dynamic table's index two
                             variables (collisionless as in training). What TensorFlow
                             Serving serves.

Tables are written shard by shard into a memory-mapped file, so a table larger than the
exporter's memory (or than 2 GB, the protobuf limit a SavedModel-embedded table would hit)
never has to be held whole. ``etj_trainer.task.export_reader`` reads this layout back. The export is
written next to its destination and renamed into place, so a reader never sees half of one.
An export to a TensorFlow filesystem URI (``gs://``, next to checkpoints on
``checkpoint.uri``) is written locally first, then copied up file by file with
``tf.io.gfile``, the manifest last: a reader that finds ``tables.json`` finds the rest.

Runs once, on the chief, after training (its serving SavedModel also as numbered versions
while training goes on: ``etj_trainer.task.versions``); it neither trains nor checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.dynamic import table_rows
from etj.api.spec import Dtype
from etj_trainer.models import local_tower
from etj_trainer.task.serving_model import local_io
from etj_trainer.task.serving_model import save as save_serving
from etj_trainer.task.state import TrainingState

log = logging.getLogger(__name__)

MANIFEST = "tables.json"
SERVING = "serving"
_NUMPY_DTYPES = {Dtype.FLOAT32: np.float32, Dtype.FLOAT16: np.float16, Dtype.BFLOAT16: np.uint16}


def _shard_array(shard: Any, dtype: str) -> np.ndarray:
    value = shard.read_value()
    if dtype == Dtype.BFLOAT16:
        return tf.bitcast(value, tf.uint16).numpy()
    return value.numpy()


def write_table(state: TrainingState, index: int, path: Path) -> None:
    spec = state.config.model.tables[index]
    target = np.lib.format.open_memmap(
        path,
        mode="w+",
        dtype=_NUMPY_DTYPES[spec.dtype],
        shape=(table_rows(spec), spec.dimension),
    )
    row = 0
    for shard in state.model.table_components(index):
        # A disk table's shard a piece at a time: the file is larger than RAM may be.
        for part in getattr(shard, "pieces", lambda shard=shard: [shard])():
            values = _shard_array(part, spec.dtype)
            target[row : row + values.shape[0]] = values
            row += values.shape[0]
    target.flush()
    del target


class Tower(tf.Module):
    """The model's tower (any architecture), with its own copy of the trained weights."""

    def __init__(self, state: TrainingState):
        super().__init__(name="tower")
        model = state.model
        # A fresh tower of the same kind, outside any strategy: local variables.
        self.net = local_tower(
            state.config.model, model.inputs, state.config.training.seed, model.tower
        )
        self.names = [name for name, _, _ in tower_inputs(state)]
        self.dense_features = state.config.model.dense_inputs

    def __call__(self, inputs: dict[str, tf.Tensor]) -> tf.Tensor:
        embeddings = {n: tf.cast(inputs[n], tf.float32) for n in self.names}
        dense = tf.cast(inputs["dense"], tf.float32) if self.dense_features else None
        return tf.sigmoid(self.net(embeddings, dense, False))


def tower_inputs(state: TrainingState) -> list[tuple[str, Any, str]]:
    """(input name, table, name of the ids it looks up) of each pooled embedding the tower
    takes, in order: one per table, or one per categorical feature (``model.features``;
    tables may repeat); then, for wideDeep/deepFM, each one's first-order lookup."""
    model = state.config.model
    tables = model.tables
    names = list(state.model.inputs.names)
    out = [(n, tables[x.table], n) for n, x in zip(names, state.model.lookups, strict=True)]
    if state.model.first_order:
        out += [
            (linear, tables[x.table], n)
            for linear, x, n in zip(
                state.model.inputs.linear_names(), state.model.linear_lookups, names, strict=True
            )
        ]
    return out


def _signature(tower: Tower, state: TrainingState) -> Any:
    specs = {
        name: tf.TensorSpec([None, t.dimension], tf.float32, name=name)
        for name, t, _ in tower_inputs(state)
    }
    if tower.dense_features:
        specs["dense"] = tf.TensorSpec([None, tower.dense_features], tf.float32, name="dense")

    @tf.function(input_signature=[specs])
    def serve(inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return {"probability": tower(inputs)}

    return serve


def dynamic_indexes(state: TrainingState) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per dynamic table, its admitted keys (ascending) and their rows."""
    return {name: d.admitted_rows() for name, d in state.model.dynamic.items()}


def index_file(name: str) -> str:
    return f"embeddings/{name}.index.npy"


def write_serving(
    state: TrainingState,
    path: Path,
    indexes: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> None:
    """The serving SavedModel on raw features of the trained tables and tower (their own
    variables: nothing copied into a model of the chief's), with the dynamic tables'
    indexes (``indexes``: as read earlier; by default read now)."""
    model = state.model
    tables = [model.table_components(i) for i in range(len(model.tables))]
    if indexes is None:
        indexes = dynamic_indexes(state)
    save_serving(state.config.model, tables, model.tower, str(path), indexes)


def manifest(state: TrainingState) -> dict[str, Any]:
    config = state.config
    return {
        "jobName": config.job_name,
        "step": int(state.step.numpy()),
        "denseFeatures": config.model.dense_inputs,
        # The tower's embedding inputs: a pooled vector of `table` per input name.
        # (`ids`: the ids it looks up, the input's own but for first-order lookups.)
        "inputs": [
            {"name": name, "table": t.name, "ids": ids} for name, t, ids in tower_inputs(state)
        ],
        "tables": [
            {
                "name": t.name,
                "rows": table_rows(t),
                "dimension": t.dimension,
                "dtype": t.dtype,
                "storage": "uint16-bits" if t.dtype == Dtype.BFLOAT16 else t.dtype,
                "combiner": t.combiner,
                "idsPerExample": t.ids_per_example,
                "file": f"embeddings/{t.name}.npy",
                # Ids are keys its index maps to rows (fallback: the first rows, hashed).
                **(
                    {"dynamic": {"fallbackRows": t.vocabulary_size, "index": index_file(t.name)}}
                    if t.dynamic is not None
                    else {}
                ),
            }
            for t in config.model.tables
        ],
        "tower": "tower",
        "serving": SERVING,
    }


def export(state: TrainingState, export_dir: str) -> Path:
    """Write the export to ``export_dir`` (replacing an older one); its path."""
    final = Path(export_dir)
    staging = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "embeddings").mkdir(parents=True)
    for i, t in enumerate(state.config.model.tables):
        write_table(state, i, staging / "embeddings" / f"{t.name}.npy")
    for name, (keys, rows) in dynamic_indexes(state).items():
        np.save(staging / index_file(name), np.stack([keys, rows], axis=1))
    tower = Tower(state)
    tf.saved_model.save(
        tower,
        str(staging / "tower"),
        signatures={"serving_default": _signature(tower, state)},
        options=local_io(),
    )
    write_serving(state, staging / SERVING)
    (staging / MANIFEST).write_text(json.dumps(manifest(state), indent=1))
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    log.info("exported to %s", final)
    return final


def is_remote(path: str) -> bool:
    """A TensorFlow filesystem URI (gs://, ram://) rather than a local path."""
    return "://" in path


def upload(local: Path, remote: str, last: str = MANIFEST) -> None:
    """Copy the directory ``local`` to ``remote`` (replacing an older one), the file named
    ``last`` (the manifest of an export) last."""
    remote = remote.rstrip("/")
    if tf.io.gfile.exists(remote):
        tf.io.gfile.rmtree(remote)
    files = sorted(
        (p for p in local.rglob("*") if p.is_file()),
        key=lambda p: (p.relative_to(local).as_posix() == last, str(p)),
    )
    for path in files:
        target = f"{remote}/{path.relative_to(local).as_posix()}"
        tf.io.gfile.makedirs(target.rsplit("/", 1)[0])
        tf.io.gfile.copy(str(path), target, overwrite=True)


def export_to(state: TrainingState, export_dir: str) -> str:
    """``export`` to a local path or a TensorFlow filesystem URI; where it went."""
    if not is_remote(export_dir):
        return str(export(state, export_dir))
    with tempfile.TemporaryDirectory(prefix="etj-export-") as tmp:
        upload(export(state, f"{tmp}/export"), export_dir)
    log.info("exported to %s", export_dir)
    return export_dir
