"""Which checkpoint a warm-started job starts from (policies.warmstart): a pure function of
the job and its namespace's jobs."""

from __future__ import annotations

from typing import Any

from etj.api import EmbeddingTrainingJob
from etj.api.warmstart import WARM_START_MOUNT, TableAction
from etj.core.reconcile.policies.warmstart import (
    EVENT_MESSAGE_CHARS,
    event_message,
    newest_succeeded,
    resolve,
)

NOW = "2026-11-27T12:00:00Z"
TABLES = [
    {"name": "user_id", "vocabularySize": 1000, "dimension": 8},
    {"name": "item_id", "vocabularySize": 500, "dimension": 8},
]


def job(
    name: str,
    warm_start: dict[str, Any] | None = None,
    phase: str | None = None,
    completed: str | None = None,
    labels: dict[str, str] | None = None,
    tables: list[dict[str, Any]] | None = None,
    namespace: str = "ns",
    checkpoint: dict[str, Any] | None = None,
    step: int | None = None,
) -> EmbeddingTrainingJob:
    spec: dict[str, Any] = {
        "model": {"embeddings": tables or TABLES},
        "checkpoint": {"storage": {}} if checkpoint is None else checkpoint,
    }
    if warm_start is not None:
        spec["warmStart"] = warm_start
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if completed:
        status["completionTime"] = completed
    if step is not None:
        status["progress"] = {"step": step, "lastCheckpointStep": step}
    return EmbeddingTrainingJob.from_manifest(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "labels": labels or {},
            },
            "spec": spec,
            "status": status,
        }
    )


def test_a_location_needs_no_jobs():
    r = resolve(job("j", {"checkpoint": {"uri": "gs://b/ns/day-1"}}), None, NOW)
    assert r.status is not None and r.status.location == "gs://b/ns/day-1"
    assert r.status.volume is None and r.status.tables == []
    assert r.lines[0] == (
        "warm start from gs://b/ns/day-1: gs://b/ns/day-1 (the trainer decides table by "
        "table when it reads the checkpoint)"
    )


def test_a_claim_is_mounted_read_only_and_read_at_its_path():
    r = resolve(job("j", {"checkpoint": {"claim": "old", "path": "day-1/"}}), None, NOW)
    assert r.status is not None
    assert r.status.location == f"{WARM_START_MOUNT}/day-1"
    assert r.status.volume == {"persistentVolumeClaim": {"claimName": "old", "readOnly": True}}


def test_from_a_succeeded_job_its_final_checkpoint_read_only_with_table_decisions():
    source = job("day-1", phase="Succeeded", step=5000)
    added = [*TABLES, {"name": "ad_id", "vocabularySize": 10, "dimension": 4}]
    r = resolve(job("day-2", {"fromJob": "day-1"}, tables=added), [source], NOW)
    st = r.status
    assert st is not None and r.refusal is None and r.wait is None
    assert (st.source_job, st.source_uid, st.step) == ("day-1", "uid-day-1", 5000)
    assert st.location == f"{WARM_START_MOUNT}/day-1"
    assert st.volume == {
        "persistentVolumeClaim": {"claimName": "day-1-checkpoints", "readOnly": True}
    }
    assert [(t.name, t.action) for t in st.tables] == [
        ("user_id", TableAction.RESTORED),
        ("item_id", TableAction.RESTORED),
        ("ad_id", TableAction.STARTED_FRESH),
    ]
    assert r.lines == [
        f"warm start from job day-1 (fromJob) at step 5000: {WARM_START_MOUNT}/day-1 (2 "
        "tables restored, 1 started fresh, 0 dropped)",
        "table user_id: restored (adagrad state kept)",
        "table item_id: restored (adagrad state kept)",
        "table ad_id: started fresh (not in the checkpoint)",
    ]


def test_a_source_under_a_uri_is_read_there():
    source = job("day-1", phase="Succeeded", checkpoint={"uri": "gs://bucket/ckpt"})
    r = resolve(job("day-2", {"fromJob": "day-1"}), [source], NOW)
    assert r.status is not None
    assert (r.status.location, r.status.volume) == ("gs://bucket/ckpt/ns/day-1", None)


def test_waits_for_a_source_job_that_does_not_exist_or_has_not_finished():
    mine = job("day-2", {"fromJob": "day-1"})
    r = resolve(mine, [job("day-1", namespace="other", phase="Succeeded")], NOW)
    assert r.status is None and r.refusal is None
    assert r.wait is not None and r.wait.startswith("job day-1 does not exist in ns: waiting")
    r = resolve(mine, [job("day-1", phase="Running")], NOW)
    assert r.wait == "waiting for job day-1 to succeed (it is Running)"
    assert resolve(mine, None, NOW).wait is not None


def test_if_no_source_start_fresh_or_fail():
    fresh = resolve(job("j", {"fromJob": "gone", "ifNoSource": "StartFresh"}), [], NOW)
    assert fresh.status is not None and fresh.status.location is None
    assert fresh.lines == [
        "job gone does not exist in ns: starting fresh (warmStart.ifNoSource StartFresh)"
    ]
    failed = resolve(job("j", {"fromJob": "gone", "ifNoSource": "Fail"}), [], NOW)
    assert failed.refusal == "job gone does not exist in ns (warmStart.ifNoSource Fail)"


def test_refuses_a_failed_source_an_empty_dir_source_itself_and_a_changed_vocabulary():
    mine = job("day-2", {"fromJob": "day-1"})
    r = resolve(mine, [job("day-1", phase="Failed")], NOW)
    assert (
        r.refusal is not None and "it Failed" in r.refusal and "warmStart.checkpoint" in r.refusal
    )
    r = resolve(mine, [job("day-1", phase="Succeeded", checkpoint={})], NOW)
    assert r.refusal is not None and "emptyDir" in r.refusal
    r = resolve(job("day-1", {"fromJob": "day-1"}), [], NOW)
    assert r.refusal is not None and "names this job itself" in r.refusal
    resized = [{**TABLES[0], "vocabularySize": 2000}, TABLES[1]]
    r = resolve(
        job("day-2", {"fromJob": "day-1"}, tables=resized), [job("day-1", phase="Succeeded")], NOW
    )
    assert r.refusal is not None
    assert "table user_id: vocabularySize 1000 in the checkpoint, 2000 here" in r.refusal
    ok = resolve(
        job("day-2", {"fromJob": "day-1", "freshTables": ["user_id"]}, tables=resized),
        [job("day-1", phase="Succeeded")],
        NOW,
    )
    assert ok.status is not None and ok.status.tables[0].action == TableAction.STARTED_FRESH


def test_a_selector_takes_the_newest_succeeded_match_of_the_namespace_but_itself():
    chain = {"chain": "ctr"}
    mine = job("ctr-x3", {"selector": {"matchLabels": chain}}, labels=chain)
    jobs = [
        mine,
        job("ctr-a1", phase="Succeeded", completed="2026-11-25T01:00:00Z", labels=chain),
        job("ctr-b2", phase="Succeeded", completed="2026-11-26T01:00:00Z", labels=chain),
        job("ctr-c9", phase="Running", labels=chain),
        job("other", phase="Succeeded", completed="2026-11-27T01:00:00Z"),
        job(
            "ctr-zz",
            phase="Succeeded",
            completed="2026-11-27T02:00:00Z",
            labels=chain,
            namespace="elsewhere",
        ),
    ]
    assert mine.spec.warm_start is not None
    found = newest_succeeded(mine.spec.warm_start, mine, jobs)
    assert found is not None and found.name == "ctr-b2"
    r = resolve(mine, jobs, NOW)
    assert r.status is not None and r.status.source == "job ctr-b2 (newest Succeeded of chain=ctr)"
    r = resolve(mine, [mine, jobs[3]], NOW)
    assert r.wait is not None and r.wait.startswith("no Succeeded job matches selector chain=ctr")


def test_one_event_holds_a_line_per_decision_as_far_as_they_fit():
    assert event_message(["a", "b"]) == "a\nb"
    lines = [f"table t{i:03d}: restored (adagrad state kept)" for i in range(100)]
    message = event_message(lines)
    assert len(message) <= EVENT_MESSAGE_CHARS
    shown = message.splitlines()
    assert shown[:-1] == lines[: len(shown) - 1]
    assert shown[-1] == f"... and {100 - len(shown) + 1} more: see status.warmStart.tables"
