"""Reading an export back for serving: memory-mapped tables + the tower SavedModel.

The tables are mapped, not loaded: a lookup touches only the pages of the rows it reads,
so a host serves tables larger than its memory ("virtual memory" serving). This is the
reference reader of the layout ``etj_trainer.task.export`` writes; it does not train.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from etj.api.spec import Dtype
from etj_trainer.task.export import MANIFEST


class MappedTable:
    """One exported table, memory-mapped."""

    def __init__(self, root: Path, entry: dict[str, Any]):
        self.name = entry["name"]
        self.dimension = int(entry["dimension"])
        self.dtype = entry["dtype"]
        self.combiner = entry["combiner"]
        self.ids_per_example = int(entry["idsPerExample"])
        self.rows = np.load(root / entry["file"], mmap_mode="r")
        dynamic = entry.get("dynamic")
        # A dynamic table's index (keys ascending, rows) and its fallback rows.
        self.index = np.load(root / dynamic["index"]) if dynamic else None
        self.fallback_rows = int(dynamic["fallbackRows"]) if dynamic else 0

    def row_of(self, ids: np.ndarray) -> np.ndarray:
        """The row of each id (int64 ``[n]``): modulo the vocabulary; a dynamic table's id
        (a key) its own row, else row 0 when missing (negative), else its hashed fallback
        row, as ``models.dynamic.with_fallback``."""
        if self.index is None:
            return np.mod(ids, self.rows.shape[0])
        keys, rows = self.index[:, 0], self.index[:, 1]
        own = np.full_like(ids, -1)
        if len(keys):
            at = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
            own = np.where(keys[at] == ids, rows[at], -1)
        n = self.fallback_rows
        fallback = np.zeros_like(ids) if n == 1 else 1 + np.mod(ids, n - 1)
        return np.where(own >= 0, own, np.where(ids < 0, 0, fallback))

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """float32 rows for ``ids`` (any shape); ids are taken modulo the vocabulary, a
        dynamic table's read through its index (``row_of``)."""
        flat = self.row_of(np.asarray(ids, dtype=np.int64).reshape(-1))
        raw = self.rows[flat]
        if self.dtype == Dtype.BFLOAT16:
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        return np.asarray(raw, dtype=np.float32).reshape(*np.shape(ids), self.dimension)

    def pooled(self, ids: np.ndarray) -> np.ndarray:
        """The combined vector per example for ids ``[batch, idsPerExample]``."""
        vectors = self.lookup(np.asarray(ids).reshape(-1, self.ids_per_example))
        return vectors.sum(axis=1) if self.combiner == "sum" else vectors.mean(axis=1)


class MappedModel:
    """Predicts click probabilities from ids and dense features, tables memory-mapped."""

    def __init__(self, export_dir: str | Path):
        import tensorflow as tf

        root = Path(export_dir)
        self.manifest = json.loads((root / MANIFEST).read_text())
        self.tables = [MappedTable(root, e) for e in self.manifest["tables"]]
        self._serve = tf.saved_model.load(str(root / self.manifest["tower"])).signatures[
            "serving_default"
        ]

    def predict(self, features: dict[str, np.ndarray]) -> np.ndarray:
        import tensorflow as tf

        tables = {t.name: t for t in self.tables}
        # Per input: the table's rows of the ids given under the input's name.
        names = self.manifest.get("inputs") or [{"name": n, "table": n} for n in tables]
        inputs = {
            i["name"]: tf.constant(tables[i["table"]].pooled(features[i.get("ids", i["name"])]))
            for i in names
        }
        if self.manifest["denseFeatures"]:
            inputs["dense"] = tf.constant(np.asarray(features["dense"], np.float32))
        return np.asarray(self._serve(**inputs)["probability"])
