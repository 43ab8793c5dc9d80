"""etj.local.configmaps: a job file's job and ConfigMaps, separated and checked."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from etj.local.configmaps import JobFileError, split_job_file, write_files

JOB = {"apiVersion": "training.etj.dev/v1alpha1", "kind": "EmbeddingTrainingJob"}


def _cm(name: object, **body: object) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **body}


def test_the_job_and_every_config_map_s_files():
    code = b"\x00\x01binary"
    job, maps = split_job_file(
        [
            _cm(
                "code",
                data={"t.py": "X = 1\n"},
                binaryData={"w.bin": base64.b64encode(code).decode()},
            ),
            JOB,
            _cm("other", data={"a.txt": "a"}),
        ]
    )
    assert job is JOB
    assert maps == {"code": {"t.py": b"X = 1\n", "w.bin": code}, "other": {"a.txt": b"a"}}


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        ([JOB, JOB], "expected one job"),
        ([_cm("code")], "expected one job"),
        ([JOB, _cm("code"), _cm("code")], "ConfigMap code appears twice"),
        ([JOB, _cm(None)], "needs metadata.name"),
        ([JOB, _cm("Bad_Name")], "needs metadata.name"),
        ([JOB, _cm("c", binaryData={"x": "not base64!"})], "binaryData.x is not base64"),
    ],
)
def test_files_that_are_not_one_job_and_its_config_maps(docs, message):
    with pytest.raises(JobFileError, match=message):
        split_job_file(docs)


def test_files_are_laid_out_read_only_and_rewritten_on_resume(tmp_path: Path):
    d = write_files({"t.py": b"A = 1\n"}, tmp_path / "code")
    assert (d / "t.py").read_bytes() == b"A = 1\n" and (d / "t.py").stat().st_mode & 0o222 == 0
    write_files({"t.py": b"A = 2\n"}, tmp_path / "code")
    assert (d / "t.py").read_bytes() == b"A = 2\n"
