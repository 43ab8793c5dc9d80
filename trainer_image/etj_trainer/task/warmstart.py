"""Warm start: restore another job's checkpoint into this job's model (``config.warm_start``).

Only when the job has no checkpoint of its own (``Checkpoints.restore``: a restart resumes
from its own, never from the source again). One restore, the one a restart uses
(``restore_components``: every variable read as slices of the saved tensor on the device
that holds it, so any ps count and shard layout; a bfloat16 table from a float32 one and
back, cast), given a map from the *source's* checkpoint keys to this model's variables:

- tables by name: the checkpoint keys tables by position, so the source's model comes from
  the manifest beside its checkpoints (``CheckpointManifest``, written at every save);
  ``table_decisions`` (``etj.api.warmstart``, the operator's rules too) says which are
  restored, started fresh (not in the checkpoint, or in ``freshTables``) or left behind,
  and refuses a table whose rows would mean other ids (``CheckpointMismatch``, exit 2,
  naming it);
- optimizer slots of a restored table when kept (same optimizer, ``optimizerState Keep``);
- the tower when every one of its variables has the saved shape; when its inputs changed
  (a table added or removed), each weight of unchanged shape and the first layer's rows
  input by input (``models.tower_remap``); a job's own tower of another shape starts
  fresh; its optimizer slots go with it when kept;
- the step only under ``stepCount: Continue``; a dynamic table's index comes with its
  pool (laid out anew for another shard count: ``restore_dynamic``), its rows' last-seen
  steps moved back by the source's step under ``Restart`` so staleness keeps its meaning.

The source's files are only read. One ``warmStarted`` line (and one per decision in the
log) says what was done.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import io_ops

from etj.api.spec import ModelSpec
from etj.api.trainer import TrainerConfig
from etj.api.warmstart import (
    CHECKPOINT_MANIFEST_FILE,
    CheckpointManifest,
    TableAction,
    TrainerWarmStart,
    WarmStartTable,
    decision_line,
    table_decisions,
    table_infos,
)
from etj_trainer.models import build_tower
from etj_trainer.models.ctr import tower_inputs_of
from etj_trainer.models.dynamic import FREE
from etj_trainer.models.dynamic_relayout import (
    Relayout,
    apply_relayout,
    plan_relayout,
    read_saved,
    restore_dynamic,
    write_rows,
)
from etj_trainer.models.tower_remap import Remap, remap
from etj_trainer.task.optim import dense_optimizer
from etj_trainer.task.restore import (
    VALUE_SUFFIX,
    CheckpointMismatch,
    restore_components,
    slice_spec,
)
from etj_trainer.task.state import TrainingState

log = logging.getLogger(__name__)


@dataclass
class WarmStartReport:
    """What a warm start did: the source, its checkpoint and step, and every decision."""

    source: str
    path: str
    source_step: int
    step: int
    tables: list[WarmStartTable] = field(default_factory=list)
    tower: str = ""
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [decision_line(t) for t in self.tables] + [f"tower: {self.tower}", *self.notes]


def _parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


def checkpoint_path(location: str) -> str | None:
    """The checkpoint ``location`` names: itself (a prefix, ``.../ckpt-5000``) or the
    newest in it (a directory); None when there is none."""
    if tf.io.gfile.exists(f"{location}.index"):
        return location
    latest: str | None = tf.train.latest_checkpoint(location)
    return latest


def write_manifest(directory: str, config: TrainerConfig) -> None:
    """The model the checkpoints of ``directory`` hold (written whole, then renamed)."""
    manifest = CheckpointManifest(
        model=config.model.to_wire(), optimizer=str(config.training.optimizer)
    )
    path = f"{directory}/{CHECKPOINT_MANIFEST_FILE}"
    with tf.io.gfile.GFile(f"{path}.tmp", "w") as f:
        f.write(json.dumps(manifest.to_wire(), sort_keys=True))
    tf.io.gfile.rename(f"{path}.tmp", path, overwrite=True)


def read_manifest(path: str) -> CheckpointManifest | None:
    """The manifest beside the checkpoint ``path``; None when there is none."""
    file = f"{_parent(path)}/{CHECKPOINT_MANIFEST_FILE}"
    if not tf.io.gfile.exists(file):
        return None
    with tf.io.gfile.GFile(file) as f:
        return CheckpointManifest.model_validate_json(f.read())


def _components(var: Any) -> list[Any]:
    return list(getattr(var, "variables", [var]))


def _same_shapes(shapes: dict[str, Any], wanted: dict[str, list[Any]]) -> list[str]:
    """The keys of ``wanted`` the checkpoint lacks or holds in another shape."""
    out = []
    for key, parts in wanted.items():
        saved = shapes.get(key + VALUE_SUFFIX)
        rows = sum(int(p.shape[0]) for p in parts) if parts[0].shape.rank else None
        here = [rows, *parts[0].shape[1:]] if rows is not None else []
        if saved is None or list(saved) != [int(d) for d in here]:
            out.append(f"{key} {list(saved) if saved is not None else 'missing'} vs {here}")
    return out


def warm_start(state: TrainingState, ws: TrainerWarmStart) -> WarmStartReport:
    """Restore ``ws``'s checkpoint into ``state`` (see the module docstring)."""
    config = state.config
    path = checkpoint_path(ws.location)
    if path is None:
        raise CheckpointMismatch(
            f"warm start from {ws.source}: no checkpoint at {ws.location} (a directory of "
            "checkpoints or one checkpoint's prefix, e.g. .../ckpt-5000)"
        )
    manifest = read_manifest(path)
    if manifest is None:
        raise CheckpointMismatch(
            f"warm start from {ws.source}: {_parent(path)} has no {CHECKPOINT_MANIFEST_FILE} "
            "(etj's trainer writes it beside every checkpoint): its tables cannot be told apart"
        )
    source = ModelSpec.model_validate(manifest.model)
    decisions, problems = table_decisions(
        table_infos(source, manifest.optimizer),
        table_infos(config.model, config.training.optimizer),
        ws.fresh_tables,
        ws.keep_optimizer,
    )
    if problems:
        raise CheckpointMismatch(f"warm start from {ws.source}: " + "; ".join(problems))
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    by_name = {d.name: d for d in decisions}
    position = {t.name: i for i, t in enumerate(source.tables)}
    wanted: dict[str, list[Any]] = {}
    dynamic = {}
    resized: list[tuple[int, int, bool]] = []
    capacity = {t.name: t.dynamic.capacity for t in source.tables if t.dynamic is not None}
    for i, table in enumerate(config.model.tables):
        d = by_name[table.name]
        if d.action != TableAction.RESTORED:
            continue
        if table.dynamic is not None and capacity[table.name] != table.dynamic.capacity:
            # Another pool size: rows cannot be read by position (``_restore_resized``).
            resized.append((i, position[table.name], d.optimizer_state == "Kept"))
            continue
        wanted[f"model/tables/{position[table.name]}"] = state.model.table_components(i)
        if d.optimizer_state == "Kept":
            for slot, var in state.slots.tables[table.name].items():
                wanted[f"slots/tables/{table.name}/{slot}"] = _components(var)
        if table.dynamic is not None:
            dynamic[table.name] = state.model.dynamic[table.name]
    tower = dict(state.tower_keys)
    changed = _same_shapes(shapes, tower)
    dense_opt = dense_optimizer(str(config.training.optimizer))
    keep_dense = ws.keep_optimizer and dense_opt == dense_optimizer(manifest.optimizer)
    dense = {
        f"slots/dense/{i}/{j}": [var]
        for i, slots in enumerate(state.slots.dense)
        for j, var in enumerate(slots)
    }
    state_note = (
        f" ({dense_opt} state kept)" if keep_dense and dense else " (optimizer state reset)"
    )
    remapped: Remap | None = None
    if not changed:
        wanted.update(tower)
        tower_line = "restored" + (state_note if dense else "")
        if keep_dense and dense and not _same_shapes(shapes, dense):
            wanted.update(dense)
    elif config.model.custom is None and source.custom is None:
        remapped = _remap_tower(state, reader, source, keep_dense)
        tower_line = (
            f"partly restored (its inputs changed): {', '.join(remapped.copied) or 'no piece'} "
            f"whole; {', '.join(remapped.by_input) or 'none'} by input; "
            f"{', '.join(remapped.fresh) or 'nothing'} fresh" + state_note
        )
    else:
        tower_line = (
            "started fresh: its weights changed shape since the checkpoint (its inputs or "
            f"layers changed): {'; '.join(changed)}"
        )
    if ws.continue_steps:
        wanted["step"] = [state.step]
    source_step = int(reader.get_tensor("step" + VALUE_SUFFIX))
    restore_components(path, wanted)
    step = int(state.step.numpy())
    if dynamic:
        pools = {t.name: state.model.tables[i] for i, t in enumerate(config.model.tables)}
        restore_dynamic(dynamic, pools, state.dynamic_slots, path, step)
    for i, source_index, keep_slots in resized:
        name = config.model.tables[i].name
        dynamic[name] = state.model.dynamic[name]
        _restore_resized(state, reader, path, i, source_index, keep_slots, step)
    if step != source_step:
        for table in dynamic.values():
            _rebase(table, source_step - step)
    report = WarmStartReport(ws.source, path, source_step, step, decisions, tower_line)
    if config.steps is not None and step >= config.steps:
        report.notes.append(
            f"the step count goes on at {step} (stepCount Continue), at or past "
            f"training.steps {config.steps}: nothing is left to train; raise "
            "training.steps or use stepCount Restart"
        )
    for line in report.lines():
        (log.warning if line in report.notes else log.info)(
            "warm start from %s: %s", ws.source, line
        )
    return report


def _remap_tower(state: TrainingState, reader: Any, source: ModelSpec, keep_slots: bool) -> Remap:
    """Assign the tower what the saved one of other inputs gives it (``tower_remap``), and
    its optimizer slots the same way when kept; what was carried over."""
    config = state.config
    # The saved tower's layout: a copy built from the source's model (a small variable on
    # this process, never trained).
    saved_inputs = tower_inputs_of(source)
    saved_tower = build_tower(source, saved_inputs, config.training.seed)
    tower = state.model.tower
    key = next(iter(state.tower_keys))

    def carry(saved_key: str, var: Any) -> Remap:
        out = remap(
            np.asarray(reader.get_tensor(saved_key + VALUE_SUFFIX)),
            saved_tower.shapes,
            saved_inputs,
            var.numpy(),
            tower.shapes,
            state.model.inputs,
        )
        var.assign(out.values)
        return out

    result = carry(key, tower.params)
    if keep_slots:
        for j, var in enumerate(state.slots.dense[0] if state.slots.dense else []):
            if reader.has_tensor(f"slots/dense/0/{j}" + VALUE_SUFFIX):
                carry(f"slots/dense/0/{j}", var)
    return result


def _restore_resized(
    state: TrainingState,
    reader: Any,
    path: str,
    i: int,
    source_index: int,
    keep_slots: bool,
    step: int,
) -> None:
    """A dynamic table saved with another capacity: its fallback rows by position; each
    admitted id's row (and optimizer slots when kept) to the row ``plan_relayout`` gives it
    in the new pool, the ids seen least recently dropped where a shard has no row left
    (counted as evicted); its index and row state as planned. Read one saved shard's rows
    at a time (on this process), written on the devices of the new ones."""
    spec = state.config.model.tables[i]
    table = state.model.dynamic[spec.name]
    fallback = int(spec.vocabulary_size)
    keys: dict[str, list[Any]] = {f"model/tables/{source_index}": state.model.table_components(i)}
    if keep_slots:
        for slot, var in state.slots.tables[spec.name].items():
            keys[f"slots/tables/{spec.name}/{slot}"] = _components(var)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    saved = read_saved(reader, f"model/dynamic/{spec.name}")
    relayout = plan_relayout(saved, fallback, [s.capacity for s in table.shards])
    saved_firsts = fallback + np.concatenate([[0], np.cumsum([s.capacity for s in saved])[:-1]])
    new_firsts = fallback + np.concatenate(
        [[0], np.cumsum([s.capacity for s in table.shards])[:-1]]
    )
    row_of = {
        int(k): int(first + slot)
        for first, s in zip(saved_firsts, saved, strict=True)
        for k, slot in zip(s.keys.tolist(), s.slots.tolist(), strict=True)
    }
    pairs = np.array(
        [
            (row_of[int(k)], int(first + slot))
            for first, s in zip(new_firsts, relayout.shards, strict=True)
            for k, slot in zip(s.keys.tolist(), s.slots.tolist(), strict=True)
        ],
        np.int64,
    ).reshape(-1, 2)
    for key, parts in keys.items():
        name = key + VALUE_SUFFIX
        full, dtype = list(shapes[name]), dtypes[name]
        # The fallback rows, as a table's rows are restored: by position, on each device.
        start = 0
        for part in parts:
            n = min(int(part.shape[0]), fallback - start)
            if n > 0:
                with tf.device(part.device):
                    value = io_ops.restore_v2(path, [name], [slice_spec(full, start, n)], [dtype])
                    part.scatter_update(
                        tf.IndexedSlices(tf.cast(value[0], part.dtype), tf.range(n))
                    )
            start += int(part.shape[0])
        # The pool's admitted rows, one saved shard at a time.
        for first, s in zip(saved_firsts, saved, strict=True):
            mine = (pairs[:, 0] >= first) & (pairs[:, 0] < first + s.capacity)
            if not mine.any():
                continue
            rows = io_ops.restore_v2(
                path, [name], [slice_spec(full, int(first), s.capacity)], [dtype]
            )[0]
            values = tf.gather(rows, pairs[mine, 0] - first)
            write_rows(parts, pairs[mine, 1], tf.cast(values, parts[0].dtype))
    empty = np.zeros(0, np.int64)
    state_only = Relayout(relayout.shards, empty.reshape(0, 2), empty, relayout.dropped)
    apply_relayout(table, state.model.tables[i], state.dynamic_slots[spec.name], state_only, step)
    log.info(
        "dynamic table %s saved with capacity %d, restored into %d: %d ids kept, %d dropped "
        "(seen least recently, their shard had no row left)",
        spec.name,
        sum(s.capacity for s in saved),
        table.capacity,
        len(pairs),
        relayout.dropped,
    )


def _rebase(table: Any, offset: int) -> None:
    """Move a dynamic table's last-seen steps back by ``offset`` (the job's step count
    restarted below the source's), so a row's staleness is the same steps as before; a
    value that would read as ``FREE`` is taken one step older."""
    for shard in table.shards:
        with tf.device(shard.device):
            seen = shard.last_seen.read_value()
            moved = seen - offset
            moved = tf.where(moved == FREE, tf.constant(FREE - 1, tf.int64), moved)
            shard.last_seen.assign(tf.where(seen == FREE, seen, moved))
            keys, values = shard.candidate_seen.export()
            moved = values - offset
            moved = tf.where(moved == FREE, tf.constant(FREE - 1, tf.int64), moved)
            shard.candidate_seen.insert(keys, moved)
