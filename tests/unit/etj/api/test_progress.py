"""etj.api.progress: the progress record's fields, and the completion message a leader
ends with, written and read back."""

from __future__ import annotations

import pytest

from etj.api.progress import (
    COMPLETION_PREFIX,
    EVALUATION_METRICS,
    PROGRESS_METRICS,
    completion_json,
    completion_record,
    progress_fields,
)
from etj.api.status import Evaluation, Progress


def test_a_record_has_status_progress_wire_names_and_a_rounded_rate():
    record = progress_fields(
        1200, loss=0.5, auc=None, examples_per_second=1234.5678, last_checkpoint_step=1000
    )
    assert record == {
        "step": 1200,
        "loss": 0.5,
        "auc": None,
        "examplesPerSecond": 1234.6,
        "lastCheckpointStep": 1000,
        "badRecords": None,
    }
    assert Progress.model_validate({k: v for k, v in record.items() if v is not None}).step == 1200


def test_every_metric_fills_a_field_of_the_status():
    assert set(PROGRESS_METRICS.values()) <= set(Progress.model_fields)
    assert set(EVALUATION_METRICS.values()) <= set(Evaluation.model_fields)
    assert not set(PROGRESS_METRICS) & set(EVALUATION_METRICS)


def test_a_completion_message_reads_back_as_written():
    progress = progress_fields(
        10, loss=0.1, auc=0.7, examples_per_second=5.0, last_checkpoint_step=10
    )
    evaluation = {"step": 10, "auc": 0.69}
    message = COMPLETION_PREFIX + completion_json(progress, evaluation)
    assert completion_record(message) == {"progress": progress, "evaluation": evaluation}
    assert completion_record(COMPLETION_PREFIX + completion_json(progress)) == {
        "progress": progress
    }
    assert " " not in completion_json(progress)  # compact: termination messages are short


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "DataError: /data/a.csv:3: expected 4 fields",
        COMPLETION_PREFIX + "{not json",
        COMPLETION_PREFIX + "[1, 2]",
    ],
)
def test_any_other_message_is_no_completion(message):
    assert completion_record(message) is None
