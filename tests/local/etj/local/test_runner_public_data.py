"""`etj run` of the jobs `etj init --from-data` writes for the corpus
(tests/data/public/SOURCES.md and the crafted cases of tests/unit/etj/cli/test_init_corpus):
each trains to Succeeded and reads every record of the file it came from but the ones
without a label (or a first line of another shape), which init's maxBadRecords lets it
skip. A few small, different ones here (gzip, line breaks in quoted text, a text label, a
rating); every other file under ``extended``. Only the shape of the run is made small (one
worker, a small tower, no checkpoint claim): the features and the data settings are
init's own."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from etj.local.launch import processes_under
from tests.unit.etj.cli.test_init_corpus import CRAFTED, PUBLIC

pytestmark = [pytest.mark.trainer, pytest.mark.slow]
ETJ = str(Path(sys.executable).parent / "etj")
QUICK = {"plotly-tips.csv.gz", "reviews.csv", "census.csv", "ratings.tsv"}
TRAINABLE = {n: data for n, (data, refusal) in CRAFTED.items() if refusal is None}
TRAINABLE.pop("header-only.csv")  # no rows: init says it cannot be trained on
CASES = [p.name for p in PUBLIC] + sorted(TRAINABLE)


def _etj(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ETJ, *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "300"},
    )


def _records(path: Path, job: dict[str, Any]) -> tuple[int, int]:
    """Records of the file as Python's csv reads them (without the header), and of those
    the ones training must skip: a label empty or one of data.files.nullValues, or a
    first line of another width than the columns named."""
    files = job["spec"]["data"]["files"]
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8-sig")
    quoting = csv.QUOTE_NONE if files.get("quote") == "none" else csv.QUOTE_MINIMAL
    rows = [
        r
        for r in csv.reader(
            io.StringIO(text, newline=""), delimiter=files["delimiter"], quoting=quoting
        )
        if any(c.strip() for c in r)
    ]
    names = rows[0] if files["header"] else files["columns"]
    rows = rows[1:] if files["header"] else rows
    (label,) = [f for f in job["spec"]["model"]["features"] if f["kind"] == "label"]
    j = [n.strip() for n in names].index(label.get("column", label["name"]))
    nulls = {"", *files.get("nullValues", [])}
    bad = sum(1 for r in rows if len(r) != len(names) or r[j].strip() in nulls)
    return len(rows), bad


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[] if n in QUICK else [pytest.mark.extended]) for n in CASES],
)
def test_the_inferred_job_trains_on_the_whole_file(tmp_path: Path, name: str):
    source = next((p for p in PUBLIC if p.name == name), None)
    data = tmp_path / name
    data.write_bytes(source.read_bytes() if source else TRAINABLE[name])
    out = tmp_path / "inferred.yaml"
    result = _etj("init", "--from-data", str(data), "--name", "corpus", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    job = yaml.safe_load(out.read_text())
    spec = job["spec"]
    spec["strategy"] = "MultiWorkerMirrored"
    spec["replicas"] = {"worker": {"replicas": 1}}
    spec["training"] |= {"batchSizePerReplica": 32, "epochs": 1}
    spec["model"]["hiddenUnits"] = [8]
    del spec["checkpoint"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    workdir = tmp_path / "run"
    run = _etj("run", str(path), "--workdir", str(workdir))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Succeeded" in run.stdout[run.stdout.index("Summary") :]
    log = (workdir / "logs" / "corpus-worker-0.log").read_text(errors="replace")
    (epochs,) = [
        doc
        for line in log.splitlines()
        if line.startswith("{") and (doc := json.loads(line)).get("event") == "epochs"
    ]
    records, bad = _records(data, job)
    assert bad <= spec["data"]["maxBadRecords"]
    assert epochs["records"] == records - bad
    assert processes_under(workdir) == []
