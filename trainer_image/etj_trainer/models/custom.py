"""``spec.model.custom``: a job's own tower, imported, built and checked before any step.

etj imports ``custom.module`` (after putting the directory named by ``ETJ_MODEL_CODE`` —
the job's ConfigMap of code, mounted by the operator — first on ``sys.path``), calls
``factory(parameters)`` once, inside the strategy scope, and calls the result as every
architecture's tower is called::

    tower(embeddings, dense, training) -> logits [batch]

``embeddings``: each embedding input's name -> its pooled ``[batch, dimension]`` float32
tensor; ``dense``: ``[batch, n]`` float32, or ``None`` without dense features. The tower
may be a ``tf_keras`` layer or model, or a ``tf.Module``. Before any step the tower is
called once on a small batch, which also creates the variables a Keras layer makes on its
first call (they must exist before the optimizer slots and the checkpoint restore): a
module that fails to import, a factory that raises or returns no callable, and a tower that
raises or returns anything but ``[batch]`` floating logits is a ``ModelError`` naming the
module and factory, with the cause on one line.

This module only builds and checks the tower: it creates no tables, applies no optimizer,
reads no data and does not checkpoint.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from etj.api.constants import MODEL_CODE_ENV
from etj.api.custom import CustomModel
from etj.api.trainer_reasons import REASON_MODEL_ERROR
from etj_trainer.models.base import TowerInputs

# Rows of the batch the tower is checked on (2, so that [batch] and [1] differ).
CHECK_BATCH = 2


class ModelError(Exception):
    """The job's own model code cannot be used; the message names it and the cause."""

    reason = REASON_MODEL_ERROR


def _where(custom: CustomModel) -> str:
    source = f"ConfigMap {custom.config_map}" if custom.config_map else "the trainer image"
    return f"custom tower {custom.module}.{custom.factory} (from {source})"


def _cause(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def code_directory() -> str | None:
    """The directory of the job's ConfigMap of code, if the operator mounted one."""
    return os.environ.get(MODEL_CODE_ENV) or None


def load_factory(custom: CustomModel) -> Callable[[dict[str, Any]], Any]:
    """``custom.factory`` of ``custom.module``, imported from the job's code first."""
    where = _where(custom)
    directory = code_directory()
    if directory is not None:
        if not os.path.isdir(directory):
            raise ModelError(f"{where}: the code directory {directory} does not exist")
        if directory not in sys.path:
            sys.path.insert(0, directory)
        importlib.invalidate_caches()
    try:
        module = importlib.import_module(custom.module)
    except BaseException as e:  # SyntaxError, SystemExit of a script: all the user's doing
        if isinstance(e, KeyboardInterrupt):
            raise
        raise ModelError(f"{where}: cannot import {custom.module}: {_cause(e)}") from e
    factory = getattr(module, custom.factory, None)
    if factory is None:
        raise ModelError(
            f"{where}: module {custom.module} ({getattr(module, '__file__', '?')}) has no "
            f"{custom.factory}"
        )
    if not callable(factory):
        raise ModelError(f"{where}: {custom.factory} is a {type(factory).__name__}, not callable")
    return factory  # type: ignore[no-any-return]


def check_inputs(inputs: TowerInputs, batch: int = CHECK_BATCH) -> tuple[dict[str, Any], Any]:
    """A small batch of the tower's arguments (seeded values, not zeros: a tower that
    normalizes must not see a division by zero that training would never give it)."""
    embeddings = {
        name: tf.random.stateless_normal([batch, dim], seed=(7, i))
        for i, (name, dim) in enumerate(zip(inputs.names, inputs.dims, strict=True))
    }
    dense = tf.random.stateless_normal([batch, inputs.dense], seed=(8, 0)) if inputs.dense else None
    return embeddings, dense


def check_tower(tower: Any, inputs: TowerInputs, where: str) -> None:
    """Call the tower once (``training=False``) and check its logits are ``[batch]``."""
    embeddings, dense = check_inputs(inputs)
    try:
        logits = tower(embeddings, dense, False)
    except Exception as e:
        raise ModelError(f"{where}: tower(embeddings, dense, training) raised {_cause(e)}") from e
    try:
        logits = tf.convert_to_tensor(logits)
    except (TypeError, ValueError) as e:
        raise ModelError(
            f"{where}: the tower returned a {type(logits).__name__}, not a tensor of logits"
        ) from e
    shape = logits.shape.as_list() if logits.shape.rank is not None else None
    if shape != [CHECK_BATCH]:
        hint = " (squeeze the last axis: tf.squeeze(logits, axis=1))" if shape == [2, 1] else ""
        raise ModelError(
            f"{where}: the tower returned logits of shape {shape} for a batch of "
            f"{CHECK_BATCH}; it must return shape [batch], here [{CHECK_BATCH}]{hint}"
        )
    if not logits.dtype.is_floating:
        raise ModelError(f"{where}: the tower returned {logits.dtype.name} logits, not floats")


def build_custom_tower(custom: CustomModel, inputs: TowerInputs) -> Any:
    """Import, build (``factory(parameters)``, call it under the strategy scope) and check
    the job's tower; its variables exist on return."""
    where = _where(custom)
    factory = load_factory(custom)
    try:
        # A copy: a factory that edits its parameters does not change the job's config.
        tower = factory(copy.deepcopy(custom.parameters))
    except Exception as e:
        raise ModelError(f"{where}: {custom.factory}(parameters) raised {_cause(e)}") from e
    if not callable(tower):
        raise ModelError(
            f"{where}: {custom.factory}(parameters) returned a {type(tower).__name__}, not a "
            "tf_keras layer or model, a tf.Module or another callable"
        )
    check_tower(tower, inputs, where)
    return tower


def tower_variables(tower: Any) -> list[tf.Variable]:
    """Every variable of a custom tower (non-trainable ones, such as a batch norm's
    moving statistics, included): what the checkpoint saves and restores."""
    return list(getattr(tower, "variables", []) or [])


def trainable_variables(tower: Any) -> list[tf.Variable]:
    """The variables the optimizer updates."""
    return list(getattr(tower, "trainable_variables", []) or [])


def local_copy(custom: CustomModel, inputs: TowerInputs, trained: Any) -> Any:
    """A second instance of the tower, outside any strategy (for the export), holding the
    trained tower's values: built by the same factory, so its variables come in the same
    order and shapes."""
    copy_ = build_custom_tower(custom, inputs)
    mine, theirs = tower_variables(copy_), tower_variables(trained)
    if [tuple(v.shape) for v in mine] != [tuple(v.shape) for v in theirs]:
        raise ModelError(
            f"{_where(custom)}: a second factory(parameters) built different variables; the "
            "factory must build the same tower every time"
        )
    for target, source in zip(mine, theirs, strict=True):
        target.assign(source.read_value())
    return copy_
