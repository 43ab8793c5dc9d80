"""Checkpoints and data every pod can share (etj.api.storage, spec.checkpoint): what is
refused for a multi-pod job, with one line naming the field, and what one pod may keep."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from etj.api import EmbeddingTrainingJob
from etj.api.spec import CHECKPOINT_NOT_SHARED
from etj.api.storage import claims_to_read, job_pods, sharing_problems
from etj.cli.main import main
from etj.core.planner import build_plan
from etj.core.validation import validate_manifest
from tests.unit.conftest import job_manifest

TABLES = {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]}
RWO_CLAIM = {"persistentVolumeClaim": {"claimName": "ckpt"}}


def spec(strategy: str = "ParameterServer", workers: int = 2, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "strategy": strategy,
        "replicas": {"worker": {"replicas": workers}},
        "model": copy.deepcopy(TABLES),
        **extra,
    }
    if strategy == "ParameterServer":
        body["replicas"]["ps"] = {"replicas": 1}
    return body


def problems(body: dict[str, Any], **kw: Any) -> list[str]:
    return [str(p) for p in validate_manifest(job_manifest(body), **kw).problems]


# ---- the emptyDir default ------------------------------------------------------------


def test_a_ps_job_on_the_emptydir_default_is_refused_in_one_line_naming_the_choices():
    (line,) = problems(spec())
    assert line == f"spec: {CHECKPOINT_NOT_SHARED}"
    assert "\n" not in line
    for field in ("checkpoint.storage", "checkpoint.uri", "checkpoint.volume"):
        assert field in line


def test_mirrored_with_two_workers_is_refused_and_with_one_keeps_the_default():
    assert problems(spec("MultiWorkerMirrored", workers=2)) == [f"spec: {CHECKPOINT_NOT_SHARED}"]
    assert problems(spec("MultiWorkerMirrored", workers=1)) == []


def test_strategy_auto_is_judged_on_the_strategy_it_resolves_to():
    # Small tables: Auto picks MultiWorkerMirrored; two workers are two pods.
    assert problems(spec("Auto", workers=2)) == [f"spec: {CHECKPOINT_NOT_SHARED}"]
    assert problems(spec("Auto", workers=1)) == []


def test_an_evaluator_reads_checkpoints_too():
    body = spec("MultiWorkerMirrored", workers=1)
    body["replicas"]["evaluator"] = {"replicas": 1}
    assert problems(body) == [f"spec: {CHECKPOINT_NOT_SHARED}"]


@pytest.mark.parametrize(
    "checkpoint",
    [
        {"storage": {"size": "1Gi"}},
        {"uri": "gs://bucket/prefix"},
        {"uri": "/mnt/shared/ckpt"},
        {"volume": {"nfs": {"server": "nfs.example", "path": "/ckpt"}}},
        {"volume": RWO_CLAIM},  # a claim's access modes are read by the operator
    ],
)
def test_a_shared_choice_is_accepted(checkpoint: dict[str, Any]):
    assert problems(spec(checkpoint=checkpoint)) == []


def test_etj_run_shares_one_host_so_it_keeps_the_default():
    assert problems(spec(), shared_storage=False) == []


def test_a_job_running_its_own_program_keeps_its_checkpoints_where_it_chooses():
    body = spec()
    own = {"spec": {"containers": [{"name": "tensorflow", "command": ["python", "t.py"]}]}}
    body["replicas"] = {
        "chief": {"replicas": 1, "template": own},
        "worker": {"replicas": 2, "template": own},
        "ps": {"replicas": 1, "template": own},
    }
    assert problems(body) == []
    # ... but a volume it names is still judged.
    body["checkpoint"] = {"volume": {"hostPath": {"path": "/ckpt"}}}
    assert any(p.startswith("spec.checkpoint.volume: a hostPath") for p in problems(body))


# ---- volumes that are one pod's or one node's own ----------------------------------------


@pytest.mark.parametrize(
    ("volume", "why"),
    [
        ({"emptyDir": {}}, "an emptyDir is each pod's own"),
        ({"hostPath": {"path": "/ckpt"}}, "a hostPath is each node's own directory"),
    ],
)
def test_a_local_checkpoint_volume_is_refused(volume: dict[str, Any], why: str):
    (line,) = problems(spec(checkpoint={"volume": volume}))
    assert line.startswith(f"spec.checkpoint.volume: {why}, and this job's 4 pods")
    assert "checkpoint.storage" in line and "checkpoint.uri" in line


def test_a_hostpath_data_volume_is_refused_for_a_multi_pod_job_only():
    files = {"pattern": "/data/*.tfrecord", "volume": {"hostPath": {"path": "/srv/data"}}}
    body = spec(checkpoint={"storage": {}}, data={"source": "files", "files": files})
    (line,) = problems(body)
    assert line.startswith("spec.data.files.volume: a hostPath is each node's own directory")
    one = spec("MultiWorkerMirrored", workers=1, data={"source": "files", "files": files})
    assert problems(one) == []


# ---- claims: their access modes, as the operator reads them ------------------------------


def _job(body: dict[str, Any]) -> EmbeddingTrainingJob:
    return EmbeddingTrainingJob.from_manifest(job_manifest(body))


def _sharing(body: dict[str, Any], modes: dict[str, list[str]]) -> list[tuple[str, str]]:
    job = _job(body)
    plan = build_plan(job.spec)
    return sharing_problems(job.spec, plan.strategy, plan.ps_replicas, modes)


def test_a_read_write_once_checkpoint_claim_is_refused_naming_it_and_its_modes():
    body = spec(checkpoint={"volume": RWO_CLAIM})
    ((field, message),) = _sharing(body, {"ckpt": ["ReadWriteOnce"]})
    assert field == "spec.checkpoint.volume"
    assert message.startswith("claim ckpt has accessModes ReadWriteOnce, so this job's 4 pods")
    assert _sharing(body, {"ckpt": ["ReadWriteMany"]}) == []
    # A claim not (yet) there is not judged: its pods wait for it as any pod would.
    assert _sharing(body, {}) == []


def test_a_data_claim_may_be_read_only_many_but_not_read_write_once():
    files = {"pattern": "/data/*.tfrecord", "volume": {"persistentVolumeClaim": {"claimName": "d"}}}
    body = spec(checkpoint={"uri": "gs://b/p"}, data={"source": "files", "files": files})
    assert _sharing(body, {"d": ["ReadOnlyMany"]}) == []
    ((field, message),) = _sharing(body, {"d": ["ReadWriteOnce"]})
    assert field == "spec.data.files.volume" and "ReadOnlyMany" in message


def test_claims_to_read_are_those_the_job_names():
    files = {"pattern": "/data/*", "volume": {"persistentVolumeClaim": {"claimName": "d"}}}
    body = spec(checkpoint={"volume": RWO_CLAIM}, data={"source": "files", "files": files})
    assert claims_to_read(_job(body).spec) == ["ckpt", "d"]
    assert claims_to_read(_job(spec(checkpoint={"storage": {}})).spec) == []


def test_job_pods_counts_a_default_chief_under_ps_only():
    ps = _job(spec())
    assert job_pods(ps.spec, "ParameterServer", 3) == 1 + 2 + 3
    assert job_pods(ps.spec, "MultiWorkerMirrored", 0) == 2


# ---- the checkpoint place itself (schema + pydantic, the same rule) ----------------------


def test_at_most_one_place_for_checkpoints():
    (line,) = problems(spec(checkpoint={"uri": "gs://b/p", "storage": {}}))
    assert line.endswith("checkpoint: set at most one of uri, volume and storage")


@pytest.mark.parametrize("uri", ["s3://bucket/ckpt", "hdfs://namenode/ckpt"])
def test_s3_and_hdfs_are_refused_with_the_reason(uri: str):
    (line,) = problems(spec(checkpoint={"uri": uri}))
    assert "s3:// and hdfs:// are not built into TensorFlow 2.21" in line
    assert "tensorflow-io" in line and "gs://" in line


def test_a_relative_or_unknown_uri_is_refused():
    (line,) = problems(spec(checkpoint={"uri": "ckpt/here"}))
    assert "checkpoint.uri must be gs://bucket/prefix or an absolute path" in line


def test_a_uri_in_tmp_is_refused_it_is_each_replicas_own():
    (line,) = problems(spec(checkpoint={"uri": "/tmp/ckpt"}))
    assert "checkpoint.uri: /tmp is each replica's own" in line
    assert problems(spec(checkpoint={"uri": "/tmpfs/ckpt"})) == []


def test_s3_data_patterns_are_refused_with_the_reason():
    files = {"pattern": "s3://bucket/train-*.tfrecord"}
    (line,) = problems(spec(checkpoint={"storage": {}}, data={"source": "files", "files": files}))
    assert line.startswith("spec: data.files.pattern: s3:// and hdfs:// are not built into")
    files = {"pattern": "gs://bucket/train-*.tfrecord"}
    body = spec(
        checkpoint={"storage": {}},
        data={"source": "files", "files": files, "validation": {"pattern": "hdfs://n/v"}},
    )
    (line,) = problems(body)
    assert line.startswith("spec: data.validation.pattern: s3:// and hdfs://")


def test_gs_data_is_accepted():
    files = {"pattern": "gs://bucket/train-*.tfrecord"}
    body = spec(
        checkpoint={"uri": "gs://bucket/ckpt"},
        data={"source": "files", "files": files, "validation": {"pattern": "gs://bucket/v-*"}},
    )
    assert problems(body) == []


# ---- etj validate ------------------------------------------------------------------------


def _validate(tmp_path, body: dict[str, Any]):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_manifest(body)))
    return path, CliRunner().invoke(main, ["validate", str(path)])


def test_etj_validate_refuses_the_default_and_a_hostpath_and_s3(tmp_path):
    path, result = _validate(tmp_path, spec())
    assert result.exit_code == 2
    assert f"{path}: spec: {CHECKPOINT_NOT_SHARED}" in result.output
    _, result = _validate(tmp_path, spec(checkpoint={"volume": {"hostPath": {"path": "/c"}}}))
    assert result.exit_code == 2 and "spec.checkpoint.volume: a hostPath" in result.output
    _, result = _validate(tmp_path, spec(checkpoint={"uri": "s3://b/c"}))
    assert result.exit_code == 2 and "not built into TensorFlow 2.21" in result.output
    _, result = _validate(tmp_path, spec(checkpoint={"storage": {"size": "5Gi"}}))
    assert result.exit_code == 0, result.output


def test_a_warm_start_claim_may_be_read_only_many_but_not_read_write_once():
    body = spec(checkpoint={"uri": "gs://b/p"}, warmStart={"checkpoint": {"claim": "old"}})
    assert claims_to_read(_job(body).spec) == ["old"]
    assert _sharing(body, {"old": ["ReadOnlyMany"]}) == []
    ((field, message),) = _sharing(body, {"old": ["ReadWriteOnce"]})
    assert field == "spec.warmStart.checkpoint.claim"
    assert message.startswith("claim old has accessModes ReadWriteOnce, so this job's 4 pods")
