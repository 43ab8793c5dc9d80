"""Scoring rows with the model a serving reader holds: a ``ServingChain``'s snapshot (a
full version plus the deltas applied since, ``etj_trainer.task.delta_reader``) run through
the serving graph of the job's versions.

Why the graph of a version and the values of the snapshot: a delta carries values, not
a graph (the graph of every version of a job is the same model's). ``ChainScorer`` loads
one version's SavedModel (``etj_trainer.task.serving_model``: raw columns in,
``probability`` out), and before scoring assigns every variable of it from the snapshot,
by the checkpoint key a version saves it under (``tables/<i>/<shard>``, the tower's keys,
``indexes/<table>/keys|rows`` with the sentinel entry ``DynamicIndex`` ends with): the
probabilities are those of the SavedModel of the next full version, once the chain has
reached it. A dynamic table's index grows and shrinks between versions, and the serving
graph is traced for the index length of its version: an index as long or shorter is
padded with sentinel entries (key ``int64`` max, row -1: the binary search never takes
them, as it never takes ``DynamicIndex``'s own), one longer is refused
(``IndexTooLong``: build the scorer on a newer version, e.g. the one the chain holds
once its chain closes). The snapshot is assigned again only when the chain has moved (a
new snapshot object).

Reads a SavedModel and scores; it does not train, read deltas (the chain does) or write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from etj_trainer.task.delta_reader import ServingChain
from etj_trainer.task.deltas import Snapshot
from etj_trainer.task.serving_model import PROBABILITY, SIGNATURE, input_name

_ATTRIBUTES = "/.ATTRIBUTES/VARIABLE_VALUE"
_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


class IndexTooLong(ValueError):
    """A dynamic table's index in the snapshot is longer than the serving graph's."""


def _unescape(segment: str) -> str:
    """A checkpoint key's path segment as the child's name (``/`` saved as ``.S``, ``.``
    as ``..``)."""
    out, i = [], 0
    while i < len(segment):
        if segment.startswith(".S", i):
            out.append("/")
            i += 2
        elif segment.startswith("..", i):
            out.append(".")
            i += 2
        else:
            out.append(segment[i])
            i += 1
    return "".join(out)


def _variable(root: Any, key: str) -> Any:
    """The variable of the loaded SavedModel ``root`` saved under checkpoint ``key``."""
    obj = root
    for segment in key[: -len(_ATTRIBUTES)].split("/"):
        child = obj._lookup_dependency(_unescape(segment))
        if child is None:
            raise KeyError(f"{key}: no {segment!r} under the loaded serving model")
        obj = child
    return obj


def variable_values(snapshot: Snapshot) -> dict[str, np.ndarray]:
    """The snapshot's values by the checkpoint key a serving version saves each under (a
    dynamic index with the sentinel entry a lookup never takes). Pure."""
    out = {
        f"tables/{i}/{j}{_ATTRIBUTES}": shard
        for i, shards in snapshot.tables.items()
        for j, shard in enumerate(shards)
    }
    out.update(snapshot.dense)
    for name, (keys, rows) in snapshot.indexes.items():
        out[f"indexes/{name}/keys{_ATTRIBUTES}"] = np.append(keys, np.iinfo(np.int64).max)
        out[f"indexes/{name}/rows{_ATTRIBUTES}"] = np.append(rows, -1)
    return out


class ChainScorer:
    """Click probabilities of raw rows under the model ``chain`` holds now (see the module
    docstring)."""

    def __init__(self, chain: ServingChain, version_dir: str | None = None):
        """``version_dir``: the SavedModel whose graph scores (default: the version the
        chain holds now, loaded here, so a version pruned later does not matter)."""
        self.chain = chain
        self._loaded = tf.saved_model.load(version_dir or f"{chain.serving_dir}/{chain.version}")
        self._serve = self._loaded.signatures[SIGNATURE]
        keys = tf.train.load_checkpoint(
            f"{(version_dir or f'{chain.serving_dir}/{chain.version}').rstrip('/')}"
            "/variables/variables"
        ).get_variable_to_shape_map()
        self._variables = {k: _variable(self._loaded, k) for k in keys if k != _GRAPH}
        self._held: Snapshot | None = None
        _, inputs = self._serve.structured_input_signature
        self.inputs = sorted(inputs)

    def _hold(self, snapshot: Snapshot) -> None:
        values = variable_values(snapshot)
        if set(values) != set(self._variables):
            missing = sorted(set(self._variables) ^ set(values))
            raise ValueError(f"the snapshot and the serving graph differ in {missing[:3]}")
        assigned = {}
        for key, value in values.items():
            var = self._variables[key]
            if key.startswith("indexes/"):
                value = self._padded(key, value, int(var.shape[0]))
            if tuple(value.shape) != tuple(var.shape):
                raise ValueError(f"{key}: shape {value.shape} in the snapshot, {var.shape} served")
            assigned[key] = value
        for key, value in assigned.items():
            self._variables[key].assign(value)
        self._held = snapshot

    @staticmethod
    def _padded(key: str, value: np.ndarray, length: int) -> np.ndarray:
        """A dynamic index's keys or rows (sentinel last) as long as the graph's."""
        if value.shape[0] > length:
            raise IndexTooLong(
                f"{key}: {value.shape[0] - 1} entries in the chain's model, the serving graph "
                f"holds {length - 1}: score with a newer version's graph"
            )
        fill = value[-1]  # the sentinel: int64 max (keys) or -1 (rows)
        return np.concatenate([value, np.full(length - value.shape[0], fill, value.dtype)])

    def probability(self, inputs: dict[str, Any]) -> np.ndarray:
        """``probability`` of the rows in ``inputs`` (the serving signature's: raw column
        values as text per column, or ids per table and ``dense``; other keys, such as
        the label's column, are left out) under the chain's model now."""
        snapshot = self.chain.model
        if snapshot is not self._held:
            self._hold(snapshot)
        given = {k: tf.constant(inputs[k]) for k in self.inputs}
        return np.asarray(self._serve(**given)[PROBABILITY])


def csv_columns(lines: Sequence[str], header: str, delimiter: str = ",") -> dict[str, np.ndarray]:
    """Rows of delimited text (no quoting) as the serving signature's inputs: one text
    array per column of ``header``, named as ``serving_model.input_name`` names it. Pure."""
    names = header.split(delimiter)
    cells = [line.split(delimiter) for line in lines]
    bad = [i for i, c in enumerate(cells) if len(c) != len(names)]
    if bad:
        raise ValueError(f"row {bad[0]}: {len(cells[bad[0]])} fields, the header has {len(names)}")
    return {
        input_name(name): np.asarray([c[j] for c in cells], dtype=object)
        for j, name in enumerate(names)
    }
