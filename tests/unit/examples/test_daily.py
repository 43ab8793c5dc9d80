"""examples/daily: the daily chain's jobs, CronJob and logs agree with each other and with
etj (the chain run end to end: tests/integration/scenarios/test_daily_chain_node.py)."""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from etj.api import EmbeddingTrainingJob
from etj.api.warmstart import TableAction
from etj.core.reconcile.policies.warmstart import resolve
from etj.core.validation import validate_manifest
from etj_trainer.data.daily import HEADER, write_days

ROOT = Path(__file__).resolve().parents[3]
DAILY = ROOT / "examples" / "daily"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DAILY / name).read_text()) if d]


def day(n: int) -> dict[str, Any]:
    (job,) = docs(f"day-{n}.yaml")
    return job


def created(manifest: dict[str, Any], name: str, phase: str | None = None) -> EmbeddingTrainingJob:
    """The job as the API server holds it once `kubectl create` named it."""
    meta = {k: v for k, v in manifest["metadata"].items() if k != "generateName"}
    status = {"phase": phase, "progress": {"step": 160, "lastCheckpointStep": 160}}
    return EmbeddingTrainingJob.from_manifest(
        {
            **manifest,
            "metadata": {**meta, "name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "status": status if phase else {},
        }
    )


def test_both_days_are_valid_generate_name_jobs_of_one_chain():
    plans = {}
    for n in (1, 2):
        job = day(n)
        assert "name" not in job["metadata"] and job["metadata"]["generateName"]
        result = validate_manifest(job)
        assert result.ok, result.problems
        assert result.plan is not None
        plans[n] = result.plan
        selector = job["spec"]["warmStart"]["selector"]["matchLabels"]
        assert selector.items() <= job["metadata"]["labels"].items()
    assert plans[2].ps_replicas == plans[1].ps_replicas + 1 == 3
    tables = [{t["name"] for t in day(n)["spec"]["model"]["embeddings"]} for n in (1, 2)]
    assert tables[1] - tables[0] == {"position"} and tables[0] < tables[1]
    # The chain's first job starts fresh; the next ones wait for a predecessor.
    assert day(1)["spec"]["warmStart"]["ifNoSource"] == "StartFresh"
    assert day(2)["spec"]["warmStart"]["ifNoSource"] == "Wait"


def test_day_two_finds_day_one_by_label_and_restores_its_tables():
    first = created(day(1), "ctr-daily-abcde", "Succeeded")
    second = created(day(2), "ctr-daily-fghij")
    resolution = resolve(second, [first, second], "2026-11-27T02:00:00Z")
    assert resolution.status is not None, resolution
    assert resolution.status.source_job == "ctr-daily-abcde"
    assert [(t.name, t.action) for t in resolution.status.tables] == [
        ("user", TableAction.RESTORED),
        ("item", TableAction.RESTORED),
        ("position", TableAction.STARTED_FRESH),
    ]
    # Day 1's claim, mounted read-only into day 2's pods.
    assert resolution.status.volume == {
        "persistentVolumeClaim": {"claimName": "ctr-daily-abcde-checkpoints", "readOnly": True}
    }


def test_the_logs_job_writes_the_directories_the_days_read(tmp_path: Path):
    claim, job = docs("logs.yaml")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = job["spec"]["template"]["spec"]
    (mount,) = pod["containers"][0]["volumeMounts"]
    (volume,) = pod["volumes"]
    command = pod["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "etj_trainer.data.daily"]
    out = command[command.index("--out") + 1]
    days = int(command[command.index("--days") + 1])
    assert out == mount["mountPath"] == "/data"
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    write_days(tmp_path, days, files=1, rows=10, validation_rows=10)
    for n in (1, 2):
        data = day(n)["spec"]["data"]
        assert data["files"]["volume"] == {
            "persistentVolumeClaim": {"claimName": claim["metadata"]["name"], "readOnly": True}
        }
        for pattern in (data["files"]["pattern"], data["validation"]["pattern"]):
            assert pattern.startswith("/data/")
            assert list(tmp_path.glob(pattern.removeprefix("/data/"))), pattern
        columns = {f["name"] for f in day(n)["spec"]["model"]["features"]}
        assert columns <= set(HEADER.split(","))


def test_the_cronjob_may_create_jobs_and_nothing_else():
    objects = {o["kind"]: o for o in docs("cronjob.yaml")}
    assert objects["Role"]["rules"] == [
        {
            "apiGroups": ["training.etj.dev"],
            "resources": ["embeddingtrainingjobs"],
            "verbs": ["create"],
        }
    ]
    account = objects["ServiceAccount"]["metadata"]["name"]
    binding = objects["RoleBinding"]
    assert binding["roleRef"]["name"] == objects["Role"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    pod = objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account


def run_script(tmp_path: Path, day_env: str) -> tuple[str, str]:
    """The CronJob's script with a kubectl that records what it was asked: (its arguments,
    what it read)."""
    cron = next(o for o in docs("cronjob.yaml") if o["kind"] == "CronJob")
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "job")["mountPath"]
    assert env["JOB_FILE"].startswith(mount + "/")
    template = tmp_path / "job.yaml"
    template.write_text((DAILY / "day-2.yaml").read_text())
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "kubectl").write_text(
        f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat > {tmp_path}/created\n'
    )
    (fake / "kubectl").chmod(0o755)
    subprocess.run(
        [*container["command"], *container["args"]],
        env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "JOB_FILE": str(template),
             "DAY": day_env},
        check=True,
        timeout=60,
    )  # fmt: skip
    return (tmp_path / "args").read_text().strip(), (tmp_path / "created").read_text()


def test_the_cronjob_creates_the_template_reading_the_day(tmp_path: Path):
    args, text = run_script(tmp_path, "day-7")
    assert args == "create -f -"
    job = yaml.safe_load(text)
    assert job["metadata"] == day(2)["metadata"]
    data = job["spec"]["data"]
    assert data["files"]["pattern"] == "/data/day-7/train-*.csv"
    assert data["validation"]["pattern"] == "/data/day-7/valid-*.csv"
    assert {**job, "spec": {**job["spec"], "data": day(2)["spec"]["data"]}} == day(2)


def test_without_a_day_the_cronjob_reads_yesterdays_directory(tmp_path: Path):
    before = datetime.datetime.now(datetime.UTC).date()
    _, text = run_script(tmp_path, "")
    after = datetime.datetime.now(datetime.UTC).date()
    pattern = yaml.safe_load(text)["spec"]["data"]["files"]["pattern"]
    yesterday = {str(d - datetime.timedelta(days=1)) for d in (before, after)}
    assert pattern in {f"/data/{d}/train-*.csv" for d in yesterday}, pattern
