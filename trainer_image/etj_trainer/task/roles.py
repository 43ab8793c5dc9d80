"""What each role of a training job runs.

- ``run_server``: a ps, or a worker under ParameterServer — a ``tf.distribute.Server``
  that serves until it is killed (the operator stops it when the job is done).
- ``run_ps_chief``: the ParameterServer coordinator. It schedules chunks of
  ``stepsPerExecution`` steps on the workers (input is produced on the workers), keeps a
  bounded number in flight, joins at checkpoint boundaries, and survives lost workers
  (``ClusterCoordinator`` re-runs their chunks elsewhere and takes them back).
- ``run_synchronous``: MultiWorkerMirrored (every worker trains, gradients all-reduced)
  and the single-process mode (no TF_CONFIG).

Each role sets up its strategy, its training state, its input and the newest checkpoint,
then hands them to the loop they share (``etj_trainer.task.loop``); this module has no
loop of its own and decides no exit code beyond a server's.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.roles import Role
from etj.api.trainer import TrainerConfig
from etj_trainer.data.pipeline import count_records, make_dataset, ps_worker_dataset
from etj_trainer.ending import keep
from etj_trainer.models.ctr import TablePartitioner
from etj_trainer.task.checkpoint import Checkpoints
from etj_trainer.task.cluster import Task
from etj_trainer.task.events import emit
from etj_trainer.task.follow import (
    FileSource,
    FollowParts,
    Source,
    file_function,
    first_header,
    follow_loop,
)
from etj_trainer.task.kafka import TopicSource, chunk_function
from etj_trainer.task.loop import LoopParts, StopFlag, train_loop
from etj_trainer.task.state import TrainingState
from etj_trainer.task.step import ChunkResult, unpack_chunk, unpack_file
from etj_trainer.task.threads import configure_threads, cpu_budget, thread_counts

# The signals that stop a server: the kubelet's SIGTERM when the operator deletes the pod
# (a finished job's ps, a replaced worker), ^C under `etj run`.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run_server(task: Task, kernels: bool = False) -> int:
    """A ps, or a worker under ParameterServer: serve until told to stop, then exit with
    128 + the signal (143 for SIGTERM). ``kernels``: load the trainer's own kernels first
    (a job with a disk table; ``KernelsError`` says what to build when they are missing).

    Not ``server.join()``: that never returns to Python, so no signal handler would run;
    and in a container this process is PID 1, for which the kernel drops a signal that has
    no handler: every ps the operator stopped sat out the grace period (60 s) until the
    kubelet's SIGKILL. Here the stop signals have a handler (so the kernel delivers them
    to PID 1), and whichever thread receives one, Python's C-level handler writes its
    number to the wakeup fd this thread reads."""
    if kernels:
        from etj_trainer.kernels import library

        library.load()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: None)
    cluster = tf.train.ClusterSpec(task.cluster)
    threads = thread_counts(budget=cpu_budget())
    server = tf.distribute.Server(
        cluster,
        job_name=task.type,
        task_index=task.index,
        protocol="grpc",
        config=tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=threads.intra or 0,
            inter_op_parallelism_threads=threads.inter or 0,
            experimental=tf.compat.v1.ConfigProto.Experimental(
                disable_thread_spinning=not threads.spin
            ),
        ),
        start=True,
    )
    emit("serving", task=str(task), target=server.target)
    got = os.read(wake_r, 1)[0]
    emit("stopping", task=str(task), signal=signal.Signals(got).name)
    # No clean shutdown exists for a tf.distribute.Server (its threads would keep the
    # interpreter's exit waiting): leave at once, as the signal's default action would,
    # with 128 + the signal as a shell reports it (exitcodes.TERMINATED for SIGTERM).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + got)


def online_source(
    config: TrainerConfig, state: TrainingState, stop: StopFlag, starts: Any = None
) -> tuple[Source, Any]:
    """A following job's source (its files, or its topic) and the ``tf.function`` that
    trains one unit of it; ``starts`` (a variable where the steps run) counts its runs."""
    assert state.position is not None
    if config.data.kafka is not None:
        return TopicSource(config, state.position), chunk_function(config, state, starts)
    header = first_header(config, stop)
    return FileSource(config, state.position), file_function(config, state, header, starts)


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
    if state.position is not None:
        # Following files or a topic: the coordinator hands each closure its unit (a file's
        # name, a chunk of messages) in its arguments.
        with strategy.scope():
            starts = tf.Variable(0, dtype=tf.int64, trainable=False, name="unit_runs")
        source, fn = online_source(config, state, stop, starts)
        follow = FollowParts(
            run=lambda args: coordinator.schedule(fn, args=args),
            result=lambda rv: unpack_file(rv.fetch()),
            barrier=coordinator.join,
            workers=task.num_workers,
            examples_per_step=batch,
            warm_up=fn.get_concrete_function,
            started=lambda: int(starts.numpy()),
        )
        code = follow_loop(config, state, checkpoints, follow, source, restored, stop, metrics_port)
        keep(locals())
        return code

    def dataset_fn() -> tf.data.Dataset:
        # One function for every worker; each reads its own files (see ps_worker_dataset).
        return ps_worker_dataset(config.model, config.data, batch, task.num_workers)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    parts = LoopParts(
        # One packed value per closure: the coordinator fetches each value on its own.
        schedule=lambda n: coordinator.schedule(
            state.train_chunk_packed, args=(iterator, tf.constant(n, tf.int64))
        ),
        result=lambda rv: unpack_chunk(rv.fetch()),
        barrier=coordinator.join,
        # Enough to keep every worker busy while the chief handles results.
        max_inflight=2 * task.num_workers + 2,
        examples_per_step=batch,
        # Traced here on the chief; the zero-step closure runs on some worker, unawaited.
        warm_up=lambda: coordinator.schedule(
            state.train_chunk_packed, args=(iterator, tf.constant(0, tf.int64))
        ),
        pause_every=state.maintain_every(),
        pause=state.maintain_between_steps,
    )
    code = train_loop(config, state, checkpoints, parts, restored, stop, metrics_port, True)
    keep(locals())  # the coordinator's threads and iterators are never torn down
    return code


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
        # The strategy's coordination service put TensorFlow's preemption notifier in place
        # of our SIGTERM handler (a stopped leader then ended without its checkpoint): ours
        # again, so a leader stopped for a change of the worker count checkpoints first.
        stop.install()
    else:
        strategy = tf.distribute.get_strategy()
    config = resolve_epochs(config, replicas)
    is_chief = task.is_leader()
    state = TrainingState(config, strategy, None, sync_replicas=replicas > 1)
    scratch = None
    if config.checkpoint is not None and not is_chief:
        scratch = tempfile.mkdtemp(prefix=f"etj-ckpt-{task.type}-{task.index}-")
    checkpoints = Checkpoints(state, config.checkpoint, scratch=scratch, count_restarts=is_chief)
    restored = checkpoints.restore()
    batch = config.training.batch_size_per_replica
    seed = config.training.seed
    if state.position is not None:
        # Following files or a topic (one process: etj.api.spec.FOLLOW_STRATEGY_RULES).
        source, fn = online_source(config, state, stop)
        follow = FollowParts(
            run=lambda args: fn(*args),
            result=unpack_file,
            barrier=lambda: None,
            workers=1,
            examples_per_step=batch,
            warm_up=fn.get_concrete_function,
        )
        code = follow_loop(config, state, checkpoints, follow, source, restored, stop, metrics_port)
        keep(locals())
        return code

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
    code = train_loop(
        config,
        state,
        checkpoints,
        parts,
        restored,
        stop,
        metrics_port if is_chief else None,
        is_chief,
    )
    # The iterators' and collectives' destructors can wait on peers (etj_trainer.ending).
    keep(locals())
    return code


def _numpy(result: Any) -> ChunkResult:
    loss, hist, bad = result
    return ChunkResult(float(np.asarray(loss)), np.asarray(hist), int(np.asarray(bad)))


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
        dynamic = state.model.dynamic.get(spec.name)
        # A dynamic table's shards: the pool shard, index and row state of each, together.
        shards = (
            [
                {
                    "pool": s.device,
                    "index": s.index.resource_handle.device,
                    "rowState": s.last_seen.device,
                    "capacity": s.capacity,
                }
                for s in dynamic.shards
            ]
            if dynamic
            else None
        )
        emit(
            "placement",
            table=spec.name,
            devices=devices,
            rows=rows,
            slotDevices=slots,
            dynamicShards=shards,
        )
