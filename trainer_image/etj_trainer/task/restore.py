"""Reading a checkpoint's variables into live ones, a piece at a time: what a restart, a
warm start, the evaluator and a job's own program (``sdk.restore_in_pieces``) share.

Restoring goes one piece per device at a time, each read on its device and assigned there:
TensorFlow's ``Checkpoint.restore`` reads everything a ps holds in one op before assigning
any of it, so a ps would briefly need twice its tables (measured: 3.1 GiB peak for 1.2 GiB
of shards, over the plan's memory request). A saved table restores into any number of
shards. This module decides nothing about which checkpoint, and never saves.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.ops import io_ops

from etj.api.trainer_reasons import REASON_CHECKPOINT_MISMATCH

VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


class CheckpointMismatch(Exception):
    """The checkpoint does not hold the model the config describes (a table added, renamed
    or resized): training must not silently start those variables from scratch."""

    reason = REASON_CHECKPOINT_MISMATCH


def slice_spec(full_shape: list[int], offset: int, rows: int) -> str:
    """The checkpoint slice spec of ``rows`` rows from ``offset`` ("" for the whole tensor)."""
    if offset == 0 and rows == full_shape[0]:
        return ""
    rest = ":".join("-" for _ in full_shape[1:])
    dims = " ".join(str(d) for d in full_shape)
    return f"{dims} {offset},{rows}" + (f":{rest}" if rest else "")


def restore_components(path: str, wanted: dict[str, list[Any]]) -> None:
    """Assign each variable of ``wanted`` (checkpoint key without ``VALUE_SUFFIX`` → its
    components, in row order) from ``path``, one component per device at a time, read and
    assigned on that device; a shard's rows come from the saved tensor whatever its saved
    sharding was."""
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    # Read in the dtype saved: a checkpoint may hold a bfloat16 table's slots in bfloat16,
    # and restores (cast) into the float32 slots.
    dtypes = reader.get_variable_to_dtype_map()
    missing = sorted(k for k in wanted if k + VALUE_SUFFIX not in shapes)
    if missing:
        raise CheckpointMismatch(f"{path} has no {', '.join(missing)}: was the model changed?")
    # Per device, the (component, key, slice) to restore there, in order.
    queues: dict[str, list[tuple[Any, str, str]]] = {}
    for key, components in wanted.items():
        full = list(shapes[key + VALUE_SUFFIX])
        rows = sum(int(c.shape[0]) for c in components) if full else 0
        if full[1:] != list(components[0].shape[1:]) or (full and rows != full[0]):
            raise CheckpointMismatch(
                f"{key} is {full} in {path} but {[rows, *components[0].shape[1:]]} in the "
                "config: was a table resized?"
            )
        offset = 0
        # A disk table's shard restores a piece of rows at a time (never whole in RAM).
        components = [p for c in components for p in getattr(c, "pieces", lambda c=c: [c])()]
        for c in components:
            n = int(c.shape[0]) if full else 0
            spec = slice_spec(full, offset, n) if full else ""
            queues.setdefault(c.device, []).append((c, key + VALUE_SUFFIX, spec))
            offset += n
    # Round r restores the r-th piece of every device at once; waiting for the round bounds
    # what a device holds beyond its variables to one piece (eager ops run asynchronously).
    # Reading a piece holds about three copies of it (the stored slice, the restored tensor,
    # the variable's new buffer): the planner's RESTORE_COPIES. Doing it in a graph instead,
    # to let the assign take the restored buffer, measured no lower.
    for r in range(max(map(len, queues.values()), default=0)):
        for pieces in queues.values():
            if r < len(pieces):
                var, name, spec = pieces[r]
                with tf.device(var.device):
                    value = io_ops.restore_v2(path, [name], [spec], [dtypes[name]])[0]
                    var.assign(tf.cast(value, var.dtype))
        context.async_wait()
