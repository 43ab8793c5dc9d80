"""decide and spec.warmStart: the source is resolved before the first pod, pinned in the
status with one status write (its Events after it), waited for without making pods, or
refused by failing the job; once pinned it is never resolved again."""

from __future__ import annotations

from etj.api import EmbeddingTrainingJob
from etj.api.status import ConditionType
from etj.core.reconcile.policies.warmstart import RECHECK_SECONDS
from etj.core.reconcile.progress import parse_warm_start
from tests.unit.reconcile_helpers import all_pods, make_job, run, with_status

SOURCE_TABLES = [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]


def source(phase: str = "Succeeded", rows: int = 1000) -> EmbeddingTrainingJob:
    return EmbeddingTrainingJob.from_manifest(
        {
            "metadata": {"name": "day-1", "namespace": "ns", "uid": "u-day-1"},
            "spec": {
                "model": {"embeddings": [{**SOURCE_TABLES[0], "vocabularySize": rows}]},
                "checkpoint": {"uri": "gs://b/ckpt"},
            },
            "status": {"phase": phase, "progress": {"step": 300, "lastCheckpointStep": 300}},
        }
    )


def warm(**options: object) -> EmbeddingTrainingJob:
    return make_job(checkpoint={"uri": "gs://b/ckpt"}, warmStart={"fromJob": "day-1", **options})


def _condition(d, type_=ConditionType.WARM_STARTED):
    return next((c for c in d.status.conditions if c.type == type_), None)


def test_waiting_for_the_source_makes_no_pod_and_says_so_once():
    job = warm()
    d = run(job, [], jobs=[source("Running")])
    assert d.create_pods == []
    assert d.status.phase == "Pending"
    c = _condition(d)
    assert (c.status, c.reason) == ("False", "WaitingForSource")
    assert c.message == "waiting for job day-1 to succeed (it is Running)"
    assert [e.reason for e in d.events] == ["WaitingForSource"]
    assert d.requeue_after is not None and d.requeue_after <= RECHECK_SECONDS
    again = run(with_status(job, d), [], jobs=[source("Running")])
    assert again.events == [] and again.create_pods == []


def test_the_source_is_pinned_in_one_pass_and_the_pods_come_in_the_next():
    job = warm()
    d = run(job, [], jobs=[source()])
    assert d.create_pods == []
    ws = d.status.warm_start
    assert ws is not None and ws.source_job == "day-1" and ws.step == 300
    assert ws.location == "gs://b/ckpt/ns/day-1"
    assert [t.action for t in ws.tables] == ["Restored"]
    c = _condition(d)
    assert (c.status, c.reason) == ("True", "SourceResolved")
    # One Event, a line per decision.
    assert [e.message for e in d.events] == [
        "warm start from job day-1 (fromJob) at step 300: gs://b/ckpt/ns/day-1 (1 tables "
        "restored, 0 started fresh, 0 dropped)\n"
        "table user_id: restored (adagrad state kept)"
    ]
    pinned = with_status(job, d)
    # The next pass makes everything; a newer source later changes nothing.
    d2 = run(pinned, [], jobs=None)
    assert d2.create_pods
    assert d2.status.warm_start == ws and d2.events[0].reason == "Created"
    d3 = run(with_status(pinned, d2), all_pods(job, "Failed"), jobs=[source(rows=5)])
    assert d3.status.warm_start == ws


def test_a_source_that_cannot_be_used_fails_the_job_naming_why():
    d = run(warm(), [], jobs=[source(rows=2000)])
    assert d.status.phase == "Failed" and d.create_pods == []
    failed = _condition(d, ConditionType.FAILED)
    assert failed.reason == "WarmStartRefused"
    assert "table user_id: vocabularySize 2000 in the checkpoint, 1000 here" in failed.message
    assert d.events[-1].reason == "WarmStartRefused"


def test_a_location_is_pinned_without_reading_jobs():
    job = make_job(checkpoint={"uri": "gs://b/c"}, warmStart={"checkpoint": {"uri": "gs://x/y"}})
    d = run(job, [])
    assert d.status.warm_start is not None and d.status.warm_start.location == "gs://x/y"


def test_a_warm_start_added_to_a_job_with_pods_changes_nothing():
    job = warm()
    d = run(job, all_pods(job), jobs=[source()])
    assert d.status.warm_start is None and _condition(d) is None


METRICS = """# HELP etj_trainer_warm_start_table A warm start's decision for one table (labels), 1.
# TYPE etj_trainer_warm_start_table gauge
etj_trainer_warm_start_table{action="Restored",name="user_id",optimizerState="Kept",reason="float32 -> bfloat16; adagrad state kept"} 1.0
etj_trainer_warm_start_table{action="StartedFresh",name="ad_id",optimizerState="",reason="not in the checkpoint"} 1.0
etj_trainer_warm_start_table{action="Bogus",name="x",optimizerState="",reason=""} 1.0
# HELP etj_trainer_warm_start_source_step The step of the checkpoint a warm start read.
# TYPE etj_trainer_warm_start_source_step gauge
etj_trainer_warm_start_source_step 4200.0
"""


def test_the_trainers_report_of_a_location_fills_the_status_once_with_its_events():
    report = parse_warm_start(METRICS)
    assert report is not None
    step, tables = report
    assert step == 4200
    assert [(t.name, t.action, t.optimizer_state) for t in tables] == [
        ("user_id", "Restored", "Kept"),
        ("ad_id", "StartedFresh", None),
    ]
    assert parse_warm_start("etj_trainer_step 5\n") is None
    job = make_job(checkpoint={"uri": "gs://b/c"}, warmStart={"checkpoint": {"uri": "gs://x/y"}})
    pinned = with_status(job, run(job, []))
    d = run(pinned, all_pods(job), warm_start_report=report)
    ws = d.status.warm_start
    assert ws.step == 4200 and [t.name for t in ws.tables] == ["user_id", "ad_id"]
    messages = [e.message for e in d.events if e.reason == "CheckpointRead"]
    assert messages == [
        "warm start from gs://x/y at step 4200: gs://x/y (1 tables restored, 1 started "
        "fresh, 0 dropped)\n"
        "table user_id: restored (float32 -> bfloat16; adagrad state kept)\n"
        "table ad_id: started fresh (not in the checkpoint)"
    ]
    again = run(with_status(pinned, d), all_pods(job), warm_start_report=report)
    assert not [e for e in again.events if e.reason == "CheckpointRead"]
