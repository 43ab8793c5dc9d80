"""etj.cli.run (``etj run``): its flags, what it says before and after the run, and its exit
code, around a stand-in runner (the real runner: tests/local/etj/local/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from etj.api.spec import Strategy
from etj.api.status import (
    DynamicTableStatus,
    EmbeddingTrainingJobStatus,
    Evaluation,
    Phase,
    Progress,
)
from etj.api.warmstart import TableAction, WarmStartStatus, WarmStartTable
from etj.cli.main import main
from etj.cli.run import _evaluation_rows, _step_and_count, _summary, _warm_start_rows
from etj.core.validation import validate_manifest
from etj.local.runner import RunResult
from tests.unit.conftest import ROOT

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def test_scale_workers_is_step_and_count():
    assert _step_and_count(None) is None
    assert _step_and_count("500:4") == (500, 4)


@pytest.mark.parametrize("bad", ["500", "500:0", "a:2", ":3", "500:-1"])
def test_a_malformed_scale_workers_names_the_flag(bad):
    with pytest.raises(click.BadParameter) as caught:
        _step_and_count(bad)
    assert caught.value.param_hint == "--scale-workers" and "STEP:N" in caught.value.message


def test_the_summary_has_held_out_results_bad_records_and_dynamic_tables():
    st = EmbeddingTrainingJobStatus(
        evaluation=Evaluation(step=900, auc=0.71234, logloss=None, examples=5000),
        progress=Progress(
            step=1000,
            bad_records=3,
            dynamic_tables=[
                DynamicTableStatus(
                    name="user",
                    rows_used=10,
                    capacity=20,
                    admitted=12345,
                    evicted=2,
                    fallback_lookups=7,
                )
            ],
        ),
    )
    assert _evaluation_rows(st) == [
        ("held-out AUC", "0.7123 (log-loss -, 5000 examples, step 900)"),
        ("bad records skipped", "3"),
        ("dynamic table user", "10/20 rows used, 12,345 admitted, 2 evicted, 7 fallback lookups"),
    ]
    assert _evaluation_rows(EmbeddingTrainingJobStatus()) == []


def test_the_summary_says_what_the_warm_start_did_per_table():
    st = EmbeddingTrainingJobStatus(
        warm_start=WarmStartStatus(
            source="job a",
            step=400,
            tables=[
                WarmStartTable(name="user", action=TableAction.RESTORED),
                WarmStartTable(name="item", action=TableAction.STARTED_FRESH, reason="resized"),
            ],
        )
    )
    assert _warm_start_rows(st) == [
        ("warm start", "job a at step 400"),
        ("  table user", str(TableAction.RESTORED)),
        ("  table item", f"{TableAction.STARTED_FRESH} (resized)"),
    ]
    assert _warm_start_rows(EmbeddingTrainingJobStatus()) == []


def test_the_summary_table_shows_the_last_progress(tmp_path: Path):
    console = Console(width=200, record=True, color_system=None)
    st = EmbeddingTrainingJobStatus(
        phase=Phase.SUCCEEDED,
        progress=Progress(
            step=6000, loss=0.43219, examples_per_second=12345.6, last_checkpoint_step=6000
        ),
        restarts=1,
    )
    _summary(console, st, 61.4, tmp_path)
    text = console.export_text()
    for words in ("6000", "0.4322", "12,346", "61 s", str(tmp_path), str(Phase.SUCCEEDED)):
        assert words in text


class StandInRunner:
    """Takes what ``etj run`` gives the runner, and ends as told."""

    made: list[dict[str, Any]] = []
    phase = Phase.SUCCEEDED

    def __init__(self, job: Any, plan: Any, workdir: Path, **options: Any) -> None:
        StandInRunner.made.append({"job": job, "workdir": workdir, **options})

    def run(self) -> RunResult:
        return RunResult(EmbeddingTrainingJobStatus(phase=self.phase), 1.0, Path("/w"))


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[StandInRunner]:
    StandInRunner.made = []
    monkeypatch.setattr("etj.local.runner.LocalRunner", StandInRunner)
    monkeypatch.setattr("signal.signal", lambda *a: None)
    return StandInRunner


@pytest.mark.parametrize(("phase", "code"), [(Phase.SUCCEEDED, 0), (Phase.FAILED, 1)])
def test_the_exit_code_is_the_jobs_end(stand_in, monkeypatch, phase, code):
    monkeypatch.setattr(stand_in, "phase", phase)
    wide = CliRunner(env={"COLUMNS": "200"})
    result = wide.invoke(main, ["run", QUICKSTART, "--scale-workers", "100:3"])
    assert result.exit_code == code, result.output
    plan = validate_manifest(yaml.safe_load(Path(QUICKSTART).read_text())).plan
    assert plan is not None
    shards = sum(t.shards for t in plan.tables)
    assert result.output.splitlines()[0] == (
        f"quickstart: {Strategy.PARAMETER_SERVER}, chief+2 workers+2 ps, "
        f"{len(plan.tables)} tables in {shards} shards, 6000 steps"
    )
    (made,) = stand_in.made
    assert made["workdir"] == Path(".etj-run") / "quickstart"
    assert made["scale_workers_at"] == (100, 3) and made["fresh"] and made["pin_cores"]


def test_resume_and_a_workdir_are_passed_on(stand_in, tmp_path):
    args = ["run", QUICKSTART, "--workdir", str(tmp_path), "--resume", "--no-pin-cores"]
    assert CliRunner().invoke(main, args).exit_code == 0
    (made,) = stand_in.made
    assert made["workdir"] == tmp_path and not made["fresh"] and not made["pin_cores"]


def test_an_invalid_job_names_each_problem_and_runs_nothing(stand_in, tmp_path):
    job = tmp_path / "bad.yaml"
    job.write_text(Path(QUICKSTART).read_text().replace("dimension: 16", "dimension: 0", 1))
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 2
    assert f"{job}: " in result.stderr and "dimension" in result.stderr
    assert stand_in.made == []
