"""Progress reporting: the one reporter of etj's trainer and of a job's own program
(``etj_trainer.sdk`` exports it), with its Prometheus metrics, JSON progress lines,
TensorBoard summaries and completion message.

The operator scrapes the metrics (their names are the contract, ``etj.api.progress``:
``etj_trainer_step``, ``_examples_per_second``, ``_loss``, ``_auc``,
``_last_checkpoint_step``, ...); ``etj run`` reads the ``{"event": "progress", ...}`` lines
from the leader's stdout; the ``TrainingComplete`` termination message carries the final
record once the metrics page is gone. Only the leader reports (``is_leader``: the chief,
else worker 0).

No TensorFlow at import time (the summary writer is passed in; the sdk and the supervisor
import this module without it); this module never decides what to train.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from etj.api.constants import (
    METRICS_PORT_ENV,
    PROGRESS_SECONDS_ENV,
    REPLICA_INDEX_ENV,
    REPLICA_TYPE_ENV,
    TF_CONFIG_ENV,
)
from etj.api.disk import disk_table_stats
from etj.api.progress import (
    DISK_GAUGES,
    DISK_TABLES_KEY,
    DYNAMIC_GAUGES,
    DYNAMIC_TABLES_KEY,
    EVENT_DELTA_EXPORTED,
    EVENT_EXPORTED,
    EVENT_PROGRESS,
    INPUT_FILE_LABEL,
    INPUT_KEY,
    METRIC_AUC,
    METRIC_BAD_RECORDS,
    METRIC_DELTA_BASE_VERSION,
    METRIC_DELTA_ROWS,
    METRIC_DELTA_SEQUENCE,
    METRIC_DELTA_STEP,
    METRIC_DELTA_TIME,
    METRIC_EVAL_AUC,
    METRIC_EVAL_EXAMPLES,
    METRIC_EVAL_LOGLOSS,
    METRIC_EVAL_STEP,
    METRIC_EXAMPLES_PER_SECOND,
    METRIC_EXPORT_STEP,
    METRIC_EXPORT_TIME,
    METRIC_EXPORT_VERSION,
    METRIC_FINISHED_TIME,
    METRIC_INPUT_LAST_FILE,
    METRIC_INPUT_RECORDS,
    METRIC_LAST_CHECKPOINT_STEP,
    METRIC_LOSS,
    METRIC_RESTARTS_SEEN,
    METRIC_STEP,
    METRIC_WARM_START_SOURCE_STEP,
    METRIC_WARM_START_TABLE,
    RESTARTS_SEEN_KEY,
    WARM_START_TABLE_LABELS,
    completion_json,
    progress_fields,
)
from etj.api.roles import Role
from etj.api.roles import is_leader as leader_rule
from etj.api.status import DeltaStatus, ExportStatus, InputPositionStatus
from etj.api.trainer import TrainerConfig
from etj.api.trainer_reasons import REASON_COMPLETED
from etj_trainer.config import config_field
from etj_trainer.task.auc import BINS, auc_from_histogram
from etj_trainer.task.events import emit
from etj_trainer.task.termination import write_termination_message

log = logging.getLogger(__name__)

# Chunks of steps whose prediction histograms make up the reported AUC.
AUC_WINDOW = 50

# The leader's TensorBoard scalars (their tags). In the summaries directory itself, every
# report: the training curves, the bad records skipped so far, the times this job resumed
# from a checkpoint, and each dynamic table's stats as ``dynamic/<table>/<stat>`` (rowsUsed,
# capacity, admitted, evicted, fallbackLookups), each disk table's as ``disk/<table>/<stat>``
# (cacheHitRate, rowsReadPerSecond, ...). In its ``EVAL_RUN`` subdirectory, each
# held-out evaluation: TensorBoard shows it as a second run, its auc beside training's.
TAG_LOSS = "loss"
TAG_AUC = "auc"
TAG_EXAMPLES_PER_SECOND = "examples_per_second"
TAG_BAD_RECORDS = "bad_records"
TAG_RESTARTS = "restarts"
TAG_DYNAMIC = "dynamic"
TAG_DISK = "disk"
TAG_LOGLOSS = "logloss"
EVAL_RUN = "eval"
# Overrides where the summaries go (the trainer config's ``tensorboardDir``).
TENSORBOARD_ENV = "ETJ_TENSORBOARD_DIR"


def tensorboard_dir(config: TrainerConfig) -> str | None:
    """Where the leader's summaries go: ``ETJ_TENSORBOARD_DIR``, else the config's
    ``tensorboardDir``, else beside the checkpoints; None: nowhere."""
    return (
        os.environ.get(TENSORBOARD_ENV)
        or config.tensorboard_dir
        or (f"{config.checkpoint.directory}/tensorboard" if config.checkpoint else None)
    )


class Metrics:
    """The chief's Prometheus gauges on their own registry (no process collectors)."""

    def __init__(self, port: int | None):
        self.registry = CollectorRegistry()

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, registry=self.registry)

        self.step = gauge(METRIC_STEP, "Global training step.")
        self.examples_per_second = gauge(
            METRIC_EXAMPLES_PER_SECOND, "Training examples per second (all workers)."
        )
        self.loss = gauge(METRIC_LOSS, "Mean training log-loss of recent steps.")
        self.auc = gauge(METRIC_AUC, "Training AUC of recent steps.")
        self.last_checkpoint_step = gauge(
            METRIC_LAST_CHECKPOINT_STEP, "Step of the last checkpoint written."
        )
        self.restarts_seen = gauge(
            METRIC_RESTARTS_SEEN, "Times training resumed from a checkpoint."
        )
        self.bad_records = gauge(
            METRIC_BAD_RECORDS, "Bad input records skipped (data.maxBadRecords)."
        )
        self.eval_step = gauge(METRIC_EVAL_STEP, "Step of the last held-out evaluation.")
        self.eval_auc = gauge(METRIC_EVAL_AUC, "Held-out AUC (data.validation).")
        self.eval_logloss = gauge(METRIC_EVAL_LOGLOSS, "Held-out log-loss.")
        self.eval_examples = gauge(METRIC_EVAL_EXAMPLES, "Held-out examples scored.")
        self.finished_time = gauge(
            METRIC_FINISHED_TIME, "Unix time the leader trained its last step (0 until then)."
        )
        # Dynamic tables (model.embeddings[].dynamic), one series per table.
        self.dynamic = {
            field: Gauge(name, doc, ["table"], registry=self.registry)
            for field, name, doc in DYNAMIC_GAUGES
        }
        # Disk tables (model.embeddings[].storage.disk), one series per table.
        self.disk = {
            field: Gauge(name, doc, ["table"], registry=self.registry)
            for field, name, doc in DISK_GAUGES
        }
        # A warm start's decisions (etj.api.progress.METRIC_WARM_START_TABLE), set once.
        self.warm_start_table = Gauge(
            METRIC_WARM_START_TABLE,
            "A warm start's decision for one table (labels), 1.",
            list(WARM_START_TABLE_LABELS),
            registry=self.registry,
        )
        self.warm_start_source_step = gauge(
            METRIC_WARM_START_SOURCE_STEP, "The step of the checkpoint a warm start read."
        )
        # The newest serving version (spec.export): 0 until the first.
        self.export_version = gauge(
            METRIC_EXPORT_VERSION, "Number of the newest serving version (spec.export)."
        )
        self.export_step = gauge(METRIC_EXPORT_STEP, "Training step the newest version holds.")
        self.export_time = gauge(
            METRIC_EXPORT_TIME, "Unix time the newest serving version was moved into place."
        )
        # A following job's input position (status.progress.input).
        self.input_records = gauge(METRIC_INPUT_RECORDS, "Records trained (a following job).")
        self.input_last_file = Gauge(
            METRIC_INPUT_LAST_FILE,
            "The last file trained whole (its name the label; value 1).",
            [INPUT_FILE_LABEL],
            registry=self.registry,
        )
        # The newest delta (spec.export.deltaSteps/deltaSeconds): 0 until the first.
        self.delta_base = gauge(
            METRIC_DELTA_BASE_VERSION, "The version the newest delta applies to."
        )
        self.delta_sequence = gauge(METRIC_DELTA_SEQUENCE, "Sequence of the newest delta.")
        self.delta_step = gauge(METRIC_DELTA_STEP, "Training step the newest delta holds.")
        self.delta_time = gauge(
            METRIC_DELTA_TIME, "Unix time the newest delta was moved into place."
        )
        self.delta_rows = gauge(METRIC_DELTA_ROWS, "Embedding rows the newest delta carries.")
        self.port = port
        if port:
            try:
                start_http_server(port, registry=self.registry)
                log.info("metrics on :%d/metrics", port)
            except OSError as e:
                # Training matters more than its metrics: carry on (progress lines still flow).
                log.warning("cannot serve metrics on port %d: %s", port, e)


def is_leader(environ: dict[str, str] | None = None) -> bool:
    """Whether this replica reports progress: the chief, else worker 0 of a job without one
    (from the environment etj gives every replica)."""
    env = os.environ if environ is None else environ
    role = env.get(REPLICA_TYPE_ENV) or ""
    index = env.get(REPLICA_INDEX_ENV, "0")
    if not index.isdigit():
        return False
    cluster = json.loads(env.get(TF_CONFIG_ENV) or "{}").get("cluster") or {}
    return leader_rule(role, int(index), bool(cluster.get(Role.CHIEF)))


def metrics_port(environ: dict[str, str] | None = None) -> int | None:
    """The port of the metrics page: ``ETJ_METRICS_PORT``, else the trainer config's."""
    env = os.environ if environ is None else environ
    if env.get(METRICS_PORT_ENV):
        return int(env[METRICS_PORT_ENV])
    port = config_field("metricsPort", env)
    try:
        return int(port) if port is not None else None
    except (TypeError, ValueError):
        return None


class ProgressReporter:
    """The leader's progress, where etj reads it: its metrics page, its progress lines, its
    TensorBoard summaries and, at the end, the ``TrainingComplete`` termination message.

    A job's own program calls ``step`` with its global step (and its recent loss/AUC);
    etj's trainer calls ``start`` once and ``chunk_done`` per chunk of steps (its loss and
    AUC are the last ``AUC_WINDOW`` chunks'). Either way a report goes out every
    ``interval`` seconds (``ETJ_PROGRESS_SECONDS`` overrides it) and ``complete`` writes the
    final one. Off the leader (``enabled`` False; by default ``is_leader()``) nothing is
    reported, so the same code runs on every replica. ``port``: the metrics page's (by
    default ``metrics_port()``; 0: none).
    """

    def __init__(
        self,
        examples_per_step: int = 0,
        *,
        interval: float = 10.0,
        port: int | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        summary_writer: Any = None,
        eval_writer: Any = None,
    ):
        self.enabled = is_leader() if enabled is None else enabled
        self.examples_per_step = examples_per_step
        self.interval = float(os.environ.get(PROGRESS_SECONDS_ENV, interval))
        self.clock = clock
        self.writer = summary_writer
        # The held-out evaluations' summaries (the EVAL_RUN subdirectory of the writer's).
        self.eval_writer = eval_writer
        self.metrics = Metrics(
            (port if port is not None else metrics_port()) if self.enabled else None
        )
        self.last_step = 0
        self.last_checkpoint_step: int | None = None
        # Times this process resumed from a checkpoint (etj's trainer: ``start``).
        self.restarts: int | None = None
        self.bad_records = 0
        self.max_bad_records: int | None = None
        # The last report (its fields that are set) and held-out evaluation: the final
        # words (``completion``).
        self.last: dict[str, Any] = {"step": 0}
        self.last_evaluation: dict[str, Any] | None = None
        # The newest serving version (status.export's wire fields), for the final words.
        self.last_export: dict[str, Any] | None = None
        self.input: dict[str, Any] | None = None
        # Per dynamic table, its stats (rows used, capacity, ...): read at each report.
        self.dynamic_source: Callable[[], dict[str, dict[str, int]]] | None = None
        # Per disk table, its kernels' counters and shape (``TrainingState.disk_counters``):
        # read at each report, the rates of the interval since the one before.
        self.disk_source: Callable[[], dict[str, dict[str, int]]] | None = None
        self._disk_mark: tuple[float, dict[str, dict[str, int]]] | None = None
        self._loss: float | None = None
        self._auc: float | None = None
        self._losses: deque[float] = deque(maxlen=AUC_WINDOW)
        self._hists: deque[np.ndarray] = deque(maxlen=AUC_WINDOW)
        self._eps = 0.0
        self._mark = (clock(), 0)
        self._reported = float("-inf")  # a program's first step reports at once

    def start(self, step: int, restarts: int, last_checkpoint_step: int | None) -> None:
        """Training (re)starts at ``step``: the rate is measured from here and the first
        report comes an interval later."""
        self.last_step = step
        self.restarts = restarts
        self.last_checkpoint_step = last_checkpoint_step
        now = self.clock()
        self._mark, self._reported = (now, step), now
        self.metrics.step.set(step)
        self.metrics.restarts_seen.set(restarts)
        if last_checkpoint_step is not None:
            self.metrics.last_checkpoint_step.set(last_checkpoint_step)

    def warm_started(self, source_step: int, tables: list[dict[str, Any]]) -> None:
        """What a warm start did (``WarmStartTable`` wire dicts), on the metrics page for
        the operator (status.warmStart)."""
        if not self.enabled:
            return
        self.metrics.warm_start_source_step.set(source_step)
        for t in tables:
            labels = {k: str(t.get(k) or "") for k in WARM_START_TABLE_LABELS}
            self.metrics.warm_start_table.labels(**labels).set(1)

    def step(
        self, step: int, loss: float | None = None, auc: float | None = None, force: bool = False
    ) -> dict[str, Any] | None:
        """Training reached global ``step`` (with the recent loss/AUC, if known); reports
        when ``interval`` has passed (or ``force``). Returns what it reported, else None."""
        self.last_step = int(step)
        if not self.enabled:
            return None
        m = self.metrics
        m.step.set(step)
        if loss is not None:
            self._loss = float(loss)
            m.loss.set(loss)
        if auc is not None:
            self._auc = float(auc)
            m.auc.set(auc)
        if not force and self.clock() - self._reported < self.interval:
            return None
        return self.report()

    def chunk_done(
        self, steps: int, loss: float | None, hist: np.ndarray | None, bad: int = 0
    ) -> None:
        """etj's trainer: a chunk of ``steps`` ran, with its mean loss, its prediction
        histogram (``etj_trainer.task.auc``) and the bad records it skipped."""
        if bad:
            self.skipped(bad)
        if loss is not None:
            self._losses.append(loss)
        if hist is not None:
            self._hists.append(np.asarray(hist).reshape(2, BINS))
        self.step(self.last_step + steps)

    def skipped(self, bad: int) -> None:
        """Count skipped bad records; past ``max_bad_records`` the job stops (DataError)."""
        self.bad_records += bad
        self.metrics.bad_records.set(self.bad_records)
        limit = self.max_bad_records
        if limit is not None and self.bad_records > limit:
            from etj_trainer.data.records import DataError  # TensorFlow is loaded by now

            raise DataError(
                f"{self.bad_records} bad records skipped, more than data.maxBadRecords={limit} "
                "(each skipped record is named in its worker's log)"
            )

    def evaluated(self, result: dict[str, Any]) -> None:
        """A held-out evaluation: its gauges (the operator copies them into status)."""
        self.last_evaluation = result
        m = self.metrics
        m.eval_step.set(result["step"])
        m.eval_examples.set(result["examples"])
        m.eval_logloss.set(result["logloss"])
        if result.get("auc") is not None:
            m.eval_auc.set(result["auc"])
        if self.eval_writer is not None:
            values = {TAG_LOGLOSS: result["logloss"], TAG_AUC: result.get("auc")}
            write_scalars(
                self.eval_writer,
                int(result["step"]),
                {k: float(v) for k, v in values.items() if v is not None},
            )

    def exported(
        self,
        version: int,
        step: int,
        when: float,
        location: str,
        seconds: float | None = None,
        trained_during: int | None = None,
    ) -> None:
        """A serving version (spec.export) is in place: its gauges (status.export), an
        ``exported`` line (with how long it took and the steps trained meanwhile), and
        the final words' ``export``."""
        if not self.enabled:
            return
        m = self.metrics
        m.export_version.set(version)
        m.export_step.set(step)
        m.export_time.set(when)
        record = ExportStatus(
            last_version=version,
            step=step,
            time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
            location=location,
        ).to_wire()
        if self.last_export is not None and "lastDelta" in self.last_export:
            record["lastDelta"] = self.last_export["lastDelta"]
        self.last_export = record
        emit(
            EVENT_EXPORTED,
            **record,
            seconds=round(seconds, 2) if seconds is not None else None,
            trainedDuring=trained_during,
        )

    def delta_exported(
        self,
        base: int,
        sequence: int,
        step: int,
        when: float,
        rows: int,
        **extra: Any,
    ) -> None:
        """A delta (spec.export.deltaSteps/deltaSeconds) is in place: its gauges
        (status.export.lastDelta), a ``deltaExported`` line (with ``extra``: evicted ids,
        the version it closes with, seconds), and the final words' ``export.lastDelta``."""
        if not self.enabled:
            return
        m = self.metrics
        m.delta_base.set(base)
        m.delta_sequence.set(sequence)
        m.delta_step.set(step)
        m.delta_time.set(when)
        m.delta_rows.set(rows)
        record = DeltaStatus(
            base_version=base,
            sequence=sequence,
            step=step,
            time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
            rows=rows,
        ).to_wire()
        if self.last_export is not None:
            self.last_export = {**self.last_export, "lastDelta": record}
        emit(EVENT_DELTA_EXPORTED, **record, **extra)

    def input_position(self, last_file: str, records: int) -> None:
        """A following job's position moved (or was restored): its gauges, and the next
        progress line's ``input`` (status.progress.input)."""
        if not self.enabled:
            return
        m = self.metrics
        m.input_records.set(records)
        m.input_last_file.clear()
        if last_file:
            m.input_last_file.labels(**{INPUT_FILE_LABEL: last_file}).set(1)
        self.input = InputPositionStatus(last_file=last_file or None, records=records).to_wire()

    def checkpointed(self, step: int) -> None:
        """A checkpoint of ``step`` was written (status.progress.lastCheckpointStep)."""
        if not self.enabled:
            return
        self.last_checkpoint_step = int(step)
        self.metrics.last_checkpoint_step.set(step)
        emit("checkpoint", step=int(step))

    def report(self) -> dict[str, Any] | None:
        """Report now: the gauges, a progress line and the summaries. Returns the record."""
        if not self.enabled:
            return None
        now = self.clock()
        step = self.last_step
        mark_time, mark_step = self._mark
        if now > mark_time and step > mark_step:  # else no new measurement: keep the last
            self._eps = (step - mark_step) * self.examples_per_step / (now - mark_time)
        if self._losses:
            self._loss = float(np.mean(self._losses))
        if self._hists:
            self._auc = auc_from_histogram(np.sum(self._hists, axis=0))
        loss, auc, eps = self._loss, self._auc, self._eps
        m = self.metrics
        m.step.set(step)
        m.examples_per_second.set(eps)
        if loss is not None:
            m.loss.set(loss)
        if auc is not None:
            m.auc.set(auc)
        dynamic = self.dynamic_source() if self.dynamic_source else None
        for table, stats in (dynamic or {}).items():
            for field, value in stats.items():
                m.dynamic[field].labels(table=table).set(value)
        disk = self._disk_stats(now)
        for table, stats in (disk or {}).items():
            for field, value in stats.items():
                m.disk[field].labels(table=table).set(value)
        fields = {
            **progress_fields(
                step,
                loss=loss,
                auc=auc,
                examples_per_second=eps,
                last_checkpoint_step=self.last_checkpoint_step,
                bad_records=self.bad_records or None,
            ),
            RESTARTS_SEEN_KEY: self.restarts,
            DYNAMIC_TABLES_KEY: dynamic or None,
            DISK_TABLES_KEY: disk or None,
            INPUT_KEY: self.input,
        }
        emit(EVENT_PROGRESS, **fields)
        self._write_summaries(
            step, loss, auc, eps, {TAG_DYNAMIC: dynamic or {}, TAG_DISK: disk or {}}
        )
        self._mark, self._reported = (now, step), now
        self.last = {k: v for k, v in fields.items() if v is not None}
        return fields

    def _disk_stats(self, now: float) -> dict[str, dict[str, float | int]] | None:
        """Per disk table, its stats over the interval since the last report's read."""
        if self.disk_source is None:
            return None
        counters = self.disk_source()
        before_time, before = self._disk_mark or (now, {})
        self._disk_mark = (now, counters)
        return {
            name: disk_table_stats(c, before.get(name), now - before_time)
            for name, c in counters.items()
        }

    def completion(self) -> dict[str, Any]:
        """The final progress and evaluation, in status field names, for the termination
        message (``REASON_COMPLETED``): the operator's last scrape of the metrics page can
        be seconds older than the end."""
        progress = {
            k: v
            for k, v in self.last.items()
            if k not in (RESTARTS_SEEN_KEY, DYNAMIC_TABLES_KEY, DISK_TABLES_KEY)
        }
        out: dict[str, Any] = {"progress": progress}
        if self.last_evaluation is not None:
            out["evaluation"] = {k: v for k, v in self.last_evaluation.items() if v is not None}
        if self.last_export is not None:
            out["export"] = self.last_export
        return out

    def complete(self) -> None:
        """Training is done: the final progress (reported now unless the last report was of
        this step) as the ``TrainingComplete`` termination message. Call it just before
        exit 0."""
        if not self.enabled:
            return
        if self.last.get("step") != self.last_step:
            self.report()
        write_termination_message(REASON_COMPLETED, completion_json(**self.completion()))
        # Last: the operator reads it as "the process leaves now" (and stops one that does not).
        self.metrics.finished_time.set(time.time())
        emit("done", step=self.last_step)

    def _write_summaries(
        self,
        step: int,
        loss: float | None,
        auc: float | None,
        eps: float,
        tables: dict[str, dict[str, dict[str, Any]]],
    ) -> None:
        if self.writer is None:
            return
        values: dict[str, float | None] = {
            TAG_LOSS: loss,
            TAG_AUC: auc,
            TAG_EXAMPLES_PER_SECOND: eps,
            TAG_BAD_RECORDS: float(self.bad_records),
            TAG_RESTARTS: float(self.restarts) if self.restarts is not None else None,
        }
        # Per kind of table (TAG_DYNAMIC, TAG_DISK), per table, its stats.
        for kind, by_table in tables.items():
            for table, stats in sorted(by_table.items()):
                for stat, value in stats.items():
                    values[f"{kind}/{table}/{stat}"] = float(value)
        write_scalars(self.writer, step, {k: v for k, v in values.items() if v is not None})


def write_scalars(writer: Any, step: int, values: dict[str, float]) -> None:
    """TensorBoard scalar summaries with TensorFlow alone.

    ``tf.summary.scalar`` needs the tensorboard package, which the trainer image does not
    carry; the generic ``tf.summary.write`` with the scalars plugin's metadata writes the
    same records.
    """
    import tensorflow as tf  # already loaded by the training loop
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    with writer.as_default(step=step):
        for tag, value in values.items():
            tf.summary.write(
                tag, tf.constant(value, tf.float32), metadata=metadata.SerializeToString()
            )
    writer.flush()
