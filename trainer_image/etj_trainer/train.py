"""The roles of a training job and the training loop they share.

- ``run_server``: a ps, or a worker under ParameterServer — a ``tf.distribute.Server``
  that serves until it is killed (the operator stops it when the job is done).
- ``run_ps_chief``: the ParameterServer coordinator. It schedules chunks of
  ``stepsPerExecution`` steps on the workers (input is produced on the workers), keeps a
  bounded number in flight, joins at checkpoint boundaries, and survives lost workers
  (``ClusterCoordinator`` re-runs their chunks elsewhere and takes them back).
- ``run_synchronous``: MultiWorkerMirrored (every worker trains, gradients all-reduced)
  and the single-process mode (no TF_CONFIG).

Every role restores the newest checkpoint first, checkpoints every ``everySteps`` and on
SIGTERM, and exits with the codes of ``etj_trainer.exitcodes``: distributed failures a
restart cures are retryable (138).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.constants import REASON_COMPLETED
from etj.api.trainer import TrainerConfig
from etj_trainer import exitcodes
from etj_trainer.checkpoint import Checkpoints
from etj_trainer.cluster import Role, Task
from etj_trainer.core import TrainingState
from etj_trainer.data import count_records, make_dataset, ps_worker_dataset
from etj_trainer.evaluate import Scorer, held_out
from etj_trainer.export import export
from etj_trainer.model import TablePartitioner
from etj_trainer.progress import Metrics, Reporter, emit
from etj_trainer.supervisor import Heartbeat
from etj_trainer.termination import write_termination_message

log = logging.getLogger(__name__)

# Errors of a peer, a ps or a collective that a restart from the last checkpoint cures.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
)
# After a ps restarted empty, reads of its variables fail with these; a chief restart
# (restoring the checkpoint into the new ps) cures them.
PS_LOST_ERRORS: tuple[type[Exception], ...] = (
    tf.errors.NotFoundError,
    tf.errors.FailedPreconditionError,
)
PROGRESS_SECONDS_ENV = "ETJ_PROGRESS_SECONDS"
TENSORBOARD_ENV = "ETJ_TENSORBOARD_DIR"


class Terminated(Exception):
    """SIGTERM arrived: checkpoint (chief) and exit 143."""


class StopFlag:
    """Set by SIGTERM; the loop checks it between chunks."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.event.set())
        return self

    def __bool__(self) -> bool:
        return self.event.is_set()


# --- roles --------------------------------------------------------------------------


def thread_counts() -> tuple[int | None, int | None]:
    """(intra-op, inter-op) threads: ``ETJ_INTRA_OP_THREADS`` / ``ETJ_INTER_OP_THREADS``,
    else the container's CPU limit (cgroup v2 ``cpu.max``), else TensorFlow's default.

    TensorFlow sizes its pools by the node's cores, not the pod's CPU limit; a pod limited
    to 2 CPUs on a 64-core node would otherwise run 64 threads per pool and be throttled.
    """

    def env(name: str) -> int | None:
        value = os.environ.get(name, "")
        return int(value) if value.isdigit() and int(value) > 0 else None

    limit = cgroup_cpus()
    intra = env("ETJ_INTRA_OP_THREADS") or limit
    inter = env("ETJ_INTER_OP_THREADS") or limit
    # One inter-op thread deadlocks a server whose ops wait on each other (send/recv).
    return intra, max(2, inter) if inter else None


def cgroup_cpus(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """CPUs allowed by the cgroup v2 quota, rounded up; None when unlimited or unknown."""
    try:
        quota, period = Path(path).read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, -(-int(quota) // int(period)))


def configure_threads() -> None:
    intra, inter = thread_counts()
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)


def run_server(task: Task) -> int:
    """A ps, or a worker under ParameterServer: serve until killed."""
    cluster = tf.train.ClusterSpec(task.cluster)
    intra, inter = thread_counts()
    server = tf.distribute.Server(
        cluster,
        job_name=task.type,
        task_index=task.index,
        protocol="grpc",
        config=tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=intra or 0, inter_op_parallelism_threads=inter or 0
        ),
        start=True,
    )
    emit("serving", task=str(task), target=server.target)
    server.join()
    return exitcodes.SUCCESS


@dataclass
class LoopParts:
    """What the loop needs beyond the training state."""

    schedule: Callable[[int], Any]  # run a chunk of n steps (maybe asynchronously)
    result: Callable[[Any], tuple[float, np.ndarray, int]]  # wait for a chunk's result
    barrier: Callable[[], None]  # wait until every scheduled chunk is done
    max_inflight: int
    examples_per_step: int
    # Trace and compile the chunk function without training (a zero-step chunk): done
    # before the watchdog arms, as it costs minutes on a busy machine and is no hang.
    warm_up: Callable[[], None]


def run_ps_chief(config: TrainerConfig, task: Task, metrics_port: int | None) -> int:
    """The ParameterServer coordinator."""
    stop = StopFlag().install()
    configure_threads()
    # TensorFlow waits here until every ps and worker answers (pods may start in any order).
    emit("connecting", cluster=task.cluster)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(task.cluster), task_type=Role.CHIEF.value, task_id=0, rpc_layer="grpc"
    )
    partitioner = TablePartitioner()
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner
    )
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    # Under ParameterServer one step is one worker's batch.
    config = resolve_epochs(config, 1)
    state = TrainingState(config, strategy, partitioner)
    log_placement(state)
    checkpoints = Checkpoints(state, config.checkpoint)
    restored = checkpoints.restore()
    batch = config.training.batch_size_per_replica

    def dataset_fn() -> tf.data.Dataset:
        # One function for every worker; each reads its own files (see ps_worker_dataset).
        return ps_worker_dataset(config.model, config.data, batch, task.num_workers)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    parts = LoopParts(
        schedule=lambda n: coordinator.schedule(
            state.train_chunk, args=(iterator, tf.constant(n, tf.int64))
        ),
        result=lambda rv: _numpy(rv.fetch()),
        barrier=coordinator.join,
        # Enough to keep every worker busy while the chief handles results.
        max_inflight=2 * task.num_workers + 2,
        examples_per_step=batch,
        # Traced here on the chief; the zero-step closure runs on some worker, unawaited.
        warm_up=lambda: coordinator.schedule(
            state.train_chunk, args=(iterator, tf.constant(0, tf.int64))
        ),
    )
    return train_loop(config, state, checkpoints, parts, restored, stop, metrics_port, True)


def run_synchronous(config: TrainerConfig, task: Task, metrics_port: int | None) -> int:
    """MultiWorkerMirrored (every chief/worker task) or one local process."""
    stop = StopFlag().install()
    configure_threads()
    replicas = 1
    if task.distributed:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(task.cluster),
            task_type=task.type,
            task_id=task.index,
            rpc_layer="grpc",
        )
        strategy: tf.distribute.Strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver,
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING
            ),
        )
        replicas = strategy.num_replicas_in_sync
    else:
        strategy = tf.distribute.get_strategy()
    config = resolve_epochs(config, replicas)
    is_chief = task.is_chief()
    state = TrainingState(config, strategy, None, sync_replicas=replicas > 1)
    scratch = None
    if config.checkpoint is not None and not is_chief:
        scratch = tempfile.mkdtemp(prefix=f"etj-ckpt-{task.type}-{task.index}-")
    checkpoints = Checkpoints(state, config.checkpoint, scratch=scratch, count_restarts=is_chief)
    restored = checkpoints.restore()
    batch = config.training.batch_size_per_replica
    seed = config.training.seed

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(
            config.model,
            config.data,
            batch,
            num_shards=ctx.num_input_pipelines,
            shard_index=ctx.input_pipeline_id,
            seed=seed,
        )

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    parts = LoopParts(
        schedule=lambda n: state.train_chunk(iterator, tf.constant(n, tf.int64)),
        result=_numpy,
        barrier=lambda: None,
        max_inflight=0,
        examples_per_step=batch * replicas,
        warm_up=lambda: state.train_chunk(iterator, tf.constant(0, tf.int64)),
    )
    return train_loop(
        config,
        state,
        checkpoints,
        parts,
        restored,
        stop,
        metrics_port if is_chief else None,
        is_chief,
    )


def _numpy(result: Any) -> tuple[float, np.ndarray, int]:
    loss, hist, bad = result
    return float(np.asarray(loss)), np.asarray(hist), int(np.asarray(bad))


def resolve_epochs(config: TrainerConfig, replicas: int) -> TrainerConfig:
    """``training.epochs`` as steps: epochs x records / (batch x replicas), at least 1.

    Counted once, before training (one read of the files). Under ParameterServer the
    steps are what an epoch means: each worker reads its own shuffled stream, so an epoch
    is that many examples, not every record exactly once (and the coordinator may re-run
    a failed worker's chunk, whose examples then count twice).
    """
    epochs = config.training.epochs
    if not epochs:
        return config
    records = count_records(config.model, config.data)
    per_step = config.training.batch_size_per_replica * max(replicas, 1)
    steps = max(1, -(-epochs * records // per_step))
    emit("epochs", epochs=epochs, records=records, steps=steps)
    training = config.training.model_copy(update={"steps": steps})
    return config.model_copy(update={"training": training})


def log_placement(state: TrainingState) -> None:
    """One line per table: the device of every shard and of its slots (compare with the plan)."""
    for i, spec in enumerate(state.config.model.tables):
        devices = [v.device for v in state.model.table_components(i)]
        slots = {
            name: [c.device for c in getattr(var, "variables", [var])]
            for name, var in state.slots.tables[spec.name].items()
        }
        rows = [int(v.shape[0]) for v in state.model.table_components(i)]
        emit("placement", table=spec.name, devices=devices, rows=rows, slotDevices=slots)


# --- the loop -----------------------------------------------------------------------


def _boundaries(start: int, total: int, every: int | None) -> Iterator[int]:
    """The steps at which the loop joins and checkpoints, after ``start``, ending at total."""
    step = start
    while step < total:
        step = min(total, (step // every + 1) * every) if every else total
        yield step


def train_loop(
    config: TrainerConfig,
    state: TrainingState,
    checkpoints: Checkpoints,
    parts: LoopParts,
    restored: int | None,
    stop: StopFlag,
    metrics_port: int | None,
    is_chief: bool,
) -> int:
    """Train from the restored step to ``training.steps``; the exit code."""
    total = config.training.steps
    spe = config.training.steps_per_execution
    every = config.checkpoint.every_steps if config.checkpoint else None
    start = restored or 0
    reporter = _reporter(config, parts, metrics_port, is_chief)
    reporter.max_bad_records = config.data.max_bad_records
    reporter.start(start, checkpoints.restarts, restored)
    validation = held_out(config) if is_chief else None
    scorer = Scorer(state.model, validation) if validation is not None else None
    if is_chief:
        if restored is not None:
            emit(
                "restored",
                step=restored,
                path=checkpoints.latest(),
                seconds=checkpoints.restore_seconds,
                digest=state.digest(),
            )
        emit("start", step=start, restoredFrom=restored, steps=total)
    if start < total:
        began = time.monotonic()
        parts.warm_up()
        log.info("training step traced and compiled in %.1fs", time.monotonic() - began)
    watchdog = Heartbeat.from_env()
    watchdog.arm()
    try:
        step = start
        for boundary in _boundaries(start, total, every):
            step = _run_round(state, parts, reporter, watchdog, step, boundary, spe, stop)
            # Boundaries are the checkpoint steps (and the last step), or where SIGTERM cut.
            if checkpoints.enabled:
                reporter.checkpointed(checkpoints.save())
                watchdog.beat()
            if scorer is not None and (checkpoints.enabled or step >= total):
                # Inline held-out evaluation of the state just saved (the job's status
                # shows it); the watchdog must not count its time as a hang.
                result = scorer(step)
                emit("evaluation", **result)
                reporter.evaluated(result)
                watchdog.beat()
            if stop:
                raise Terminated
        watchdog.disarm()
        reporter.report()
        if is_chief and config.export_dir:
            export(state, config.export_dir)
        if is_chief:
            emit("done", step=step)
            write_termination_message(
                REASON_COMPLETED, json.dumps(reporter.completion(), separators=(",", ":"))
            )
        return exitcodes.SUCCESS
    except Terminated:
        emit("terminated", step=int(state.step.numpy()))
        return exitcodes.TERMINATED
    finally:
        watchdog.disarm()


def _run_round(
    state: TrainingState,
    parts: LoopParts,
    reporter: Reporter,
    watchdog: Heartbeat,
    step: int,
    boundary: int,
    spe: int,
    stop: StopFlag,
) -> int:
    """Chunks from ``step`` to ``boundary`` (fewer on SIGTERM); the exact step after."""
    pending: deque[tuple[int, Any]] = deque()

    def drain_one() -> None:
        n, handle = pending.popleft()
        try:
            loss, hist, bad = parts.result(handle)
        except RETRYABLE_ERRORS as e:
            # The chunk ran (its updates and step count are on the ps) but its worker went
            # away before its loss was fetched. A real ps failure still surfaces from the
            # coordinator's next schedule/join and from reading the step.
            log.warning("lost the result of a finished chunk: %s", str(e).splitlines()[0][:300])
            watchdog.beat()
            reporter.chunk_done(n, None, None)
            return
        watchdog.beat()
        reporter.chunk_done(n, loss, hist, bad)

    scheduled = step
    while scheduled < boundary and not stop:
        n = min(spe, boundary - scheduled)
        pending.append((n, parts.schedule(n)))
        scheduled += n
        while len(pending) > parts.max_inflight:
            drain_one()
    while pending:
        drain_one()
    parts.barrier()
    exact = int(state.step.numpy())
    if exact > scheduled:
        # ClusterCoordinator runs a closure at least once: a chunk whose worker died after
        # its updates reached the ps is run again elsewhere, and both runs count. Training
        # goes on from the exact count; never fewer steps than scheduled.
        emit("rerun", steps=exact - scheduled, step=exact)
    reporter.set_step(exact)
    return exact


def _reporter(
    config: TrainerConfig, parts: LoopParts, metrics_port: int | None, is_chief: bool
) -> Reporter:
    writer = None
    logdir = os.environ.get(TENSORBOARD_ENV) or (
        f"{config.checkpoint.directory}/tensorboard" if config.checkpoint else None
    )
    if is_chief and logdir:
        writer = tf.summary.create_file_writer(logdir)
    interval = float(os.environ.get(PROGRESS_SECONDS_ENV, "10"))
    metrics = Metrics(metrics_port if is_chief else None)
    # Only the chief reports; the other workers' reporters stay silent.
    return Reporter(metrics, parts.examples_per_step, interval, writer, enabled=is_chief)


def classify(error: BaseException, ps_strategy: bool) -> int:
    """The exit code for an error that escaped training."""
    if isinstance(error, RETRYABLE_ERRORS):
        return exitcodes.RETRYABLE
    if ps_strategy and isinstance(error, PS_LOST_ERRORS):
        return exitcodes.RETRYABLE
    return exitcodes.BUG
