"""parse_progress: the chief's Prometheus page into status.progress."""

import pytest

from etj.core.reconcile.progress import parse_completion, parse_progress

PAGE = """# HELP etj_trainer_step Last completed step
# TYPE etj_trainer_step gauge
etj_trainer_step 1234.0
etj_trainer_examples_per_second{job="x"} 51234.5
etj_trainer_loss 0.4321
etj_trainer_auc NaN
etj_trainer_last_checkpoint_step 1000.0
python_gc_objects_collected_total{generation="0"} 12.0
"""


def test_parses_known_gauges_and_skips_nan():
    p = parse_progress(PAGE, "2026-11-22T12:00:00Z")
    assert p is not None
    assert p.step == 1234 and p.last_checkpoint_step == 1000
    assert p.examples_per_second == 51234.5 and p.loss == 0.4321
    assert p.auc is None
    assert p.update_time == "2026-11-22T12:00:00Z"


def test_the_finished_time_is_read_once_set():
    """The leader's ``etj_trainer_finished_time_seconds`` (Unix time, 0 until it finished)."""
    assert parse_progress(PAGE, "t").finished_time is None
    unset = parse_progress(PAGE + "etj_trainer_finished_time_seconds 0.0\n", "t")
    assert unset.finished_time is None
    page = PAGE + "etj_trainer_finished_time_seconds 1795800000.0\n"  # 2026-11-27T17:20:00Z
    assert parse_progress(page, "t").finished_time == "2026-11-27T17:20:00Z"


def test_a_following_jobs_input_position_is_read_from_its_gauges_and_its_line():
    """status.progress.input: the last file trained whole (a label) and the records."""
    from etj.core.reconcile.progress import progress_record

    following = (
        PAGE
        + "etj_trainer_input_records 72000.0\n"
        + 'etj_trainer_input_last_file{lastFile="gs://logs/dt=2026-12-07/hour=02/part-3.csv"} 1.0\n'
    )
    p = parse_progress(following, "t")
    assert p is not None and p.input is not None
    assert p.input.last_file == "gs://logs/dt=2026-12-07/hour=02/part-3.csv"
    assert p.input.records == 72000
    assert p.to_wire()["input"] == {
        "lastFile": "gs://logs/dt=2026-12-07/hour=02/part-3.csv",
        "records": 72000,
    }
    # Every trainer serves the records gauge; a job that does not follow reads 0: none.
    assert parse_progress(PAGE + "etj_trainer_input_records 0.0\n", "t").input is None
    assert parse_progress(PAGE, "t").input is None
    line = {"step": 5, "input": {"lastFile": "a/part-1.csv", "records": 30}}
    assert progress_record(line, "t").input.records == 30


def test_no_step_no_progress():
    assert parse_progress("etj_trainer_loss 1.0\n", "t") is None
    assert parse_progress("", "t") is None


EVAL_PAGE = """# HELP etj_trainer_step Global training step.
# TYPE etj_trainer_step gauge
etj_trainer_step 600.0
etj_trainer_bad_records 3.0
etj_trainer_eval_step 500.0
etj_trainer_eval_auc 0.8123
etj_trainer_eval_logloss 0.4567
etj_trainer_eval_examples 4000.0
"""


def test_parses_the_held_out_evaluation_and_skipped_records():
    from etj.core.reconcile.progress import parse_evaluation

    ev = parse_evaluation(EVAL_PAGE, "t")
    assert ev is not None
    assert (ev.step, ev.auc, ev.logloss, ev.examples) == (500, 0.8123, 0.4567, 4000)
    progress = parse_progress(EVAL_PAGE, "t")
    assert progress is not None and progress.bad_records == 3


def test_no_evaluation_before_one_scored_examples():
    from etj.core.reconcile.progress import parse_evaluation

    # Gauges read 0 before the first evaluation; a broken page is no evaluation either.
    assert parse_evaluation(PAGE, "t") is None
    assert parse_evaluation(EVAL_PAGE.replace("4000.0", "0.0"), "t") is None
    assert parse_evaluation("not { a metrics page", "t") is None


def test_completion_message_gives_the_final_progress_and_evaluation():
    text = (
        'TrainingComplete: {"progress":{"step":1250,"loss":0.4,"lastCheckpointStep":1250,'
        '"newerField":1},"evaluation":{"step":1250,"auc":0.7,"logloss":0.5,"examples":2000}}'
    )
    progress, evaluation = parse_completion(text, "2026-11-24T00:00:00Z")
    assert progress is not None and evaluation is not None
    assert (progress.step, progress.loss, progress.last_checkpoint_step) == (1250, 0.4, 1250)
    assert (evaluation.step, evaluation.auc, evaluation.examples) == (1250, 0.7, 2000)


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "DataError: /data/a.csv:3: expected 40 fields",
        "TrainingComplete: not json",
        "TrainingComplete: [1, 2]",
        'TrainingComplete: {"progress": {"step": -5}}',
        'TrainingComplete: {"progress": "1250"}',
    ],
)
def test_anything_else_is_no_completion(message):
    assert parse_completion(message, "2026-11-24T00:00:00Z") == (None, None)
