"""Loads the trainer's own kernels (``build``'s library) into this process, once.

Every process that runs one of these ops loads the library before it runs a graph that
has them: a worker that builds the graph, and a parameter server before it starts its
server (an op placed on ``/job:ps`` runs in the ps process, which must know its kernels).
A library that is missing (never built for these sources and this TensorFlow, i.e. stale
or absent) or that does not load is ``KernelsError``, which says what to run: a clear
start-up error, never a crash at the first op.

This module never builds (``build`` does, from ``make kernels`` or the image's build).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from etj_trainer.kernels import build

VARIANT_ENV = "ETJ_KERNELS_VARIANT"


class KernelsError(RuntimeError):
    """The kernels' library cannot be had in this process."""


def _missing(path: Path) -> KernelsError:
    root = path.parent.parent
    others = sorted(p.parent.name for p in root.glob(f"*/{build.LIBRARY}")) if root.is_dir() else []
    stale = (
        f"; the builds there ({', '.join(others)}) are of other sources or another TensorFlow"
        if others
        else ""
    )
    return KernelsError(
        f"the etj kernels are not built for these sources and this TensorFlow: no {path}"
        f"{stale}. Build them: `make kernels` (python -m etj_trainer.kernels.build)"
    )


@functools.cache
def load(variant: str | None = None) -> Any:
    """The loaded library (its ops as Python functions); ``KernelsError`` if it cannot be.

    ``variant`` (default ``$ETJ_KERNELS_VARIANT``, else the plain build): ``asan``, the
    AddressSanitizer build the tests run under a preloaded libasan.
    """
    import tensorflow as tf

    if variant is None:
        variant = os.environ.get(VARIANT_ENV, "")

    path = build.library_path(variant)
    if not path.exists():
        raise _missing(path)
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, OSError) as e:
        raise KernelsError(
            f"the etj kernels at {path} do not load into this TensorFlow ({e}); rebuild them: "
            "`make kernels`"
        ) from e
