"""Reading serving versions and their deltas back: a full version plus its deltas, applied
in order, give the model serving should hold (``ServingChain``), bit for bit the next full
version once its chain's last delta is applied.

``version_snapshot`` reads a serving version's variables (its ``variables/`` checkpoint,
``tf.train.load_checkpoint``: no graph is loaded) as an ``etj_trainer.task.deltas.Snapshot``:
``tables/<i>/<shard>`` are table shards, ``indexes/<table>/keys|rows`` a dynamic table's
index (the last entry, a sentinel no lookup takes, dropped), everything else a dense
weight. Layout of the deltas and what they hold: ``etj_trainer.task.deltas`` and
``etj.api.export``.

A server follows a job like this: load the newest version, then ``follow()`` now and
then; each delta is applied to the model it holds (scatter ``ids`` rows into its tables,
assign the dense weights, drop ``evicted`` keys and insert ``admitted`` ones into the
index); the last delta of a chain moves the reader to the next version without loading
it. A delta for another version than the one held, or out of sequence, is refused
(``DeltaRefused``): applied, it would give a model no export ever held.

Reads local paths and TensorFlow filesystem URIs (``gs://``) alike; it does not train or
write anything.
"""

from __future__ import annotations

import re

import numpy as np
import tensorflow as tf

from etj.api.export import DELTA_MANIFEST, sequence_of
from etj_trainer.task import deltas
from etj_trainer.task.deltas import Delta, Snapshot

_TABLE = re.compile(r"^tables/(\d+)/(\d+)/\.ATTRIBUTES/VARIABLE_VALUE$")
_INDEX = re.compile(r"^indexes/(.+)/(keys|rows)/\.ATTRIBUTES/VARIABLE_VALUE$")
_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


class DeltaRefused(deltas.DeltaError):
    """A delta that does not apply to the model a reader holds (another base version, or
    not the next in sequence)."""


def _read_bytes(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as f:
        data: bytes = f.read()
    return data


def version_snapshot(version_dir: str) -> Snapshot:
    """The tables, dense weights and dynamic indexes of the serving version in
    ``version_dir`` (a SavedModel written by ``etj_trainer.task.serving_model``)."""
    reader = tf.train.load_checkpoint(f"{str(version_dir).rstrip('/')}/variables/variables")
    shards: dict[int, dict[int, np.ndarray]] = {}
    dense: dict[str, np.ndarray] = {}
    index: dict[str, dict[str, np.ndarray]] = {}
    for key in reader.get_variable_to_shape_map():
        if key == _GRAPH:
            continue
        value = np.asarray(reader.get_tensor(key))
        if m := _TABLE.match(key):
            shards.setdefault(int(m[1]), {})[int(m[2])] = value
        elif m := _INDEX.match(key):
            index.setdefault(m[1], {})[m[2]] = value
        else:
            dense[key] = value
    tables = {i: [by[j] for j in sorted(by)] for i, by in shards.items()}
    indexes = {
        name: (x["keys"][:-1].astype(np.int64), x["rows"][:-1].astype(np.int64))
        for name, x in index.items()
    }
    return Snapshot(tables, dense, indexes)


class ServingChain:
    """A serving model kept current from a job's versions and deltas (see the module
    docstring): ``load`` a version, ``follow`` its deltas."""

    def __init__(self, serving_dir: str, deltas_dir: str):
        self.serving_dir = serving_dir.rstrip("/")
        self.deltas_dir = deltas_dir.rstrip("/")
        self.version = 0
        self.sequence = 0
        self.snapshot: Snapshot | None = None

    def load(self, version: int) -> ServingChain:
        """Hold the full version ``version``."""
        self.snapshot = version_snapshot(f"{self.serving_dir}/{version}")
        self.version, self.sequence = version, 0
        return self

    @property
    def model(self) -> Snapshot:
        """The model held: tables, dense weights, dynamic indexes."""
        if self.snapshot is None:
            raise RuntimeError("no version loaded")
        return self.snapshot

    def apply(self, delta: Delta) -> None:
        """Apply ``delta``, the next one of the version held; refused (``DeltaRefused``,
        nothing changed) when it is not."""
        if delta.base != self.version:
            raise DeltaRefused(
                f"delta {delta.sequence} of version {delta.base} does not apply to version "
                f"{self.version}, the one this reader holds"
            )
        if delta.sequence != self.sequence + 1:
            raise DeltaRefused(
                f"delta {delta.sequence} of version {delta.base} is out of sequence: the "
                f"reader has applied up to {self.sequence}"
            )
        self.snapshot = deltas.apply(self.model, delta.changes)
        if delta.next_version is not None:
            self.version, self.sequence = int(delta.next_version), 0
        else:
            self.sequence = delta.sequence

    def pending(self) -> list[str]:
        """The directories of the deltas of the version held after the last applied, in
        sequence (whole ones only: their manifest is there)."""
        parent = f"{self.deltas_dir}/{self.version}"
        if not tf.io.gfile.isdir(parent):
            return []
        found = []
        for name in tf.io.gfile.listdir(parent):
            seq = sequence_of(name.rstrip("/"))
            if seq is not None and seq > self.sequence:
                path = f"{parent}/{name.rstrip('/')}"
                if tf.io.gfile.exists(f"{path}/{DELTA_MANIFEST}"):
                    found.append((seq, path))
        return [p for _, p in sorted(found)]

    def follow(self) -> list[Delta]:
        """Apply every delta written so far, across chains; the deltas applied."""
        applied = []
        while True:
            pending = self.pending()
            if not pending:
                return applied
            for path in pending:
                delta = deltas.read(path, _read_bytes)
                if delta.sequence != self.sequence + 1:
                    return applied  # a gap: the rest is not there yet
                self.apply(delta)
                applied.append(delta)
                if delta.next_version is not None:
                    break
