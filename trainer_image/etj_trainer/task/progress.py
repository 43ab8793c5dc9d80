"""The chief's progress reporting: Prometheus metrics, JSON progress lines and TensorBoard
summaries.

The operator scrapes the metrics (names are part of its contract: ``etj_trainer_step``,
``_examples_per_second``, ``_loss``, ``_auc``, ``_last_checkpoint_step``,
``_restarts_seen``); ``etj run`` reads the ``{"event": "progress", ...}`` lines from the
chief's stdout. The watchdog ends a chief that has completed no step for
``watchdog_seconds`` (a hung worker can block the coordinator forever) with the retryable
exit code, so the operator restarts it from the last checkpoint.

No TensorFlow at import time (the summary writer is passed in); this module never decides
what to train.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from etj.api.progress import (
    DYNAMIC_GAUGES,
    DYNAMIC_TABLES_KEY,
    EVENT_PROGRESS,
    METRIC_AUC,
    METRIC_BAD_RECORDS,
    METRIC_EVAL_AUC,
    METRIC_EVAL_EXAMPLES,
    METRIC_EVAL_LOGLOSS,
    METRIC_EVAL_STEP,
    METRIC_EXAMPLES_PER_SECOND,
    METRIC_LAST_CHECKPOINT_STEP,
    METRIC_LOSS,
    METRIC_RESTARTS_SEEN,
    METRIC_STEP,
    RESTARTS_SEEN_KEY,
    progress_fields,
)
from etj_trainer.task.auc import BINS, auc_from_histogram

log = logging.getLogger(__name__)

# Chunks of steps whose prediction histograms make up the reported AUC.
AUC_WINDOW = 50


def emit(event: str, **fields: Any) -> None:
    """One structured JSON line on stdout (read by the local runner and log pipelines)."""
    doc = {"event": event, **{k: v for k, v in fields.items() if v is not None}}
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    sys.stdout.flush()


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
        # Dynamic tables (model.embeddings[].dynamic), one series per table.
        self.dynamic = {
            field: Gauge(name, doc, ["table"], registry=self.registry)
            for field, name, doc in DYNAMIC_GAUGES
        }
        self.port = port
        if port:
            try:
                start_http_server(port, registry=self.registry)
                log.info("metrics on :%d/metrics", port)
            except OSError as e:
                # Training matters more than its metrics: carry on (progress lines still flow).
                log.warning("cannot serve metrics on port %d: %s", port, e)


class Reporter:
    """Accumulates chunk results and reports every ``interval`` seconds."""

    def __init__(
        self,
        metrics: Metrics,
        examples_per_step: int,
        interval: float,
        summary_writer: Any = None,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.enabled = enabled
        self.metrics = metrics
        self.examples_per_step = examples_per_step
        self.interval = interval
        self.writer = summary_writer
        self.clock = clock
        self.step = 0
        self.last_checkpoint_step: int | None = None
        self.restarts = 0
        self.bad_records = 0
        self.max_bad_records: int | None = None
        self._losses: deque[float] = deque(maxlen=AUC_WINDOW)
        self._hists: deque[np.ndarray] = deque(maxlen=AUC_WINDOW)
        self._mark_time = clock()
        self._mark_step = 0
        self._last_report = clock()
        # The last report and held-out evaluation: the chief's final words (``completion``).
        self.last_report: dict[str, Any] | None = None
        self.last_evaluation: dict[str, Any] | None = None
        # Per dynamic table, its stats (rows used, capacity, ...): read at each report.
        self.dynamic_source: Callable[[], dict[str, dict[str, int]]] | None = None

    def start(self, step: int, restarts: int, last_checkpoint_step: int | None) -> None:
        self.step = self._mark_step = step
        self.restarts = restarts
        self.last_checkpoint_step = last_checkpoint_step
        self._mark_time = self._last_report = self.clock()
        self.metrics.step.set(step)
        self.metrics.restarts_seen.set(restarts)
        if last_checkpoint_step is not None:
            self.metrics.last_checkpoint_step.set(last_checkpoint_step)

    def chunk_done(
        self, steps: int, loss: float | None, hist: np.ndarray | None, bad: int = 0
    ) -> None:
        self.step += steps
        if bad:
            self.skipped(bad)
        if loss is not None:
            self._losses.append(loss)
        if hist is not None:
            self._hists.append(np.asarray(hist).reshape(2, BINS))
        if self.enabled and self.clock() - self._last_report >= self.interval:
            self.report()

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

    def checkpointed(self, step: int) -> None:
        self.last_checkpoint_step = step
        self.metrics.last_checkpoint_step.set(step)
        if self.enabled:
            emit("checkpoint", step=step)

    def set_step(self, step: int) -> None:
        """The exact global step (read from the step variable)."""
        self.step = step

    def report(self) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        now = self.clock()
        elapsed = max(now - self._mark_time, 1e-9)
        eps = (self.step - self._mark_step) * self.examples_per_step / elapsed
        loss = float(np.mean(self._losses)) if self._losses else None
        auc = auc_from_histogram(np.sum(self._hists, axis=0)) if self._hists else None
        m = self.metrics
        m.step.set(self.step)
        m.examples_per_second.set(eps)
        if loss is not None:
            m.loss.set(loss)
        if auc is not None:
            m.auc.set(auc)
        dynamic = self.dynamic_source() if self.dynamic_source else None
        for table, stats in (dynamic or {}).items():
            for field, value in stats.items():
                m.dynamic[field].labels(table=table).set(value)
        fields = {
            **progress_fields(
                self.step,
                loss=loss,
                auc=auc,
                examples_per_second=eps,
                last_checkpoint_step=self.last_checkpoint_step,
                bad_records=self.bad_records or None,
            ),
            RESTARTS_SEEN_KEY: self.restarts,
            DYNAMIC_TABLES_KEY: dynamic or None,
        }
        emit(EVENT_PROGRESS, **fields)
        self._write_summaries(loss, auc, eps)
        self._mark_time, self._mark_step, self._last_report = now, self.step, now
        self.last_report = fields
        return fields

    def completion(self) -> dict[str, Any]:
        """The final progress and evaluation, in status field names, for the termination
        message (``REASON_COMPLETED``): the operator's last scrape of the metrics page can
        be seconds older than the end."""
        progress = {
            k: v
            for k, v in (self.last_report or {"step": self.step}).items()
            if v is not None and k not in (RESTARTS_SEEN_KEY, DYNAMIC_TABLES_KEY)
        }
        out: dict[str, Any] = {"progress": progress}
        if self.last_evaluation is not None:
            out["evaluation"] = {k: v for k, v in self.last_evaluation.items() if v is not None}
        return out

    def _write_summaries(self, loss: float | None, auc: float | None, eps: float) -> None:
        if self.writer is None:
            return
        values = {"loss": loss, "auc": auc, "examples_per_second": eps}
        write_scalars(self.writer, self.step, {k: v for k, v in values.items() if v is not None})


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
