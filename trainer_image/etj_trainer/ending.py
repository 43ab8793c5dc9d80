"""How a trainer process ends: at once, as soon as it has said how it ended.

The TensorFlow objects a training role builds (the distributed dataset's iterators, the
strategy's collective executors and coordination service agent, ClusterCoordinator's
threads, gRPC channels) have destructors that wait for their own threads, and those
threads can be blocked on peers that are gone or hung. Measured (issue 36, py-spy on a
MultiWorkerMirrored leader that had written its last checkpoint and ``done`` and then
did not exit for over a minute): the main thread in ``IteratorResource::~IteratorResource``,
waiting for a tf.data thread of ``UnboundedThreadPool`` as ``run_synchronous``'s frame
was freed. Nothing in that teardown matters to the job: its checkpoints, export, events and
termination message are written before. So a role ``keep``\\s what it built (its frame's
locals, or the exception that escaped it, whose traceback holds the frames), and ``end``
flushes what Python buffers and leaves with ``os._exit``: no destructor, no atexit hook,
no wait on a peer.

No TensorFlow here. Only ``python -m etj_trainer`` calls ``end``; an in-process caller of a
role function (a test) gets its exit code back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

# What the roles built, alive until the process ends (never torn down: see above).
_KEPT: list[object] = []


def keep(*objects: object) -> None:
    """Hold ``objects`` until the process ends, so their destructors never run."""
    _KEPT.extend(objects)


def end(code: int) -> NoReturn:
    """Flush the logs and standard streams, then leave with ``code`` at once."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
