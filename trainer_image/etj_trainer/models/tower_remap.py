"""Carry a flat tower's weights over to a tower of other inputs (a warm start whose model
gained or lost an embedding input). Pure numpy.

A tower's weights are named pieces of one flat vector (``models.base.FlatTower``). A piece
of the same name and shape is copied whole. A piece whose first axis is the tower's input
width on both sides (the first layer of an MLP on the concatenated inputs: ``mlp/0/kernel``
of dnn, wideDeep, deepFM; dlrm's top MLP takes other rows and is left alone) and whose
other axes match is copied row block by row block: the rows of each embedding input both
towers have (by name, of the same width) and of the dense features (same count); the rows
of a new input keep their initial values. Any other piece keeps its initial value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from etj_trainer.models.base import TowerInputs


@dataclass(frozen=True)
class Remap:
    """The new flat vector, and what was carried over (for the warm start's log)."""

    values: np.ndarray
    copied: list[str]
    by_input: list[str]
    fresh: list[str]


def _offsets(
    shapes: Sequence[tuple[str, tuple[int, ...]]],
) -> dict[str, tuple[int, tuple[int, ...]]]:
    out, offset = {}, 0
    for name, shape in shapes:
        out[name] = (offset, shape)
        offset += int(np.prod(shape)) if shape else 1
    return out


def _input_rows(inputs: TowerInputs) -> dict[str, tuple[int, int]]:
    """Each input's rows in the concatenated input (``base.concat_inputs``), and the dense
    features' under ``""``."""
    out, row = {}, 0
    for name, dim in zip(inputs.names, inputs.dims, strict=True):
        out[name] = (row, dim)
        row += dim
    if inputs.dense:
        out[""] = (row, inputs.dense)
    return out


def remap(
    saved: np.ndarray,
    saved_shapes: Sequence[tuple[str, tuple[int, ...]]],
    saved_inputs: TowerInputs,
    initial: np.ndarray,
    shapes: Sequence[tuple[str, tuple[int, ...]]],
    inputs: TowerInputs,
) -> Remap:
    """``initial`` (the new tower's flat vector) with what ``saved`` (the old one's) can
    give it (see the module docstring)."""
    old, new = _offsets(saved_shapes), _offsets(shapes)
    out = np.array(initial, copy=True)
    old_rows, new_rows = _input_rows(saved_inputs), _input_rows(inputs)
    copied, by_input, fresh = [], [], []
    for name, (offset, shape) in new.items():
        size = int(np.prod(shape)) if shape else 1
        if name not in old:
            fresh.append(name)
            continue
        src_offset, src_shape = old[name]
        if src_shape == shape:
            out[offset : offset + size] = saved[src_offset : src_offset + size]
            copied.append(name)
            continue
        if (
            len(shape) >= 2
            and shape[1:] == src_shape[1:]
            and shape[0] == inputs.width
            and src_shape[0] == saved_inputs.width
        ):
            src = saved[src_offset : src_offset + int(np.prod(src_shape))].reshape(src_shape)
            dst = out[offset : offset + size].reshape(shape)
            kept = []
            for key, (row, n) in new_rows.items():
                if key in old_rows and old_rows[key][1] == n:
                    dst[row : row + n] = src[old_rows[key][0] : old_rows[key][0] + n]
                    kept.append(key or "dense")
            out[offset : offset + size] = dst.reshape(-1)
            by_input.append(f"{name} (rows of {', '.join(kept) or 'no input'})")
            continue
        fresh.append(name)
    return Remap(out, copied, by_input, fresh)
