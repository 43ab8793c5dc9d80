"""etj_trainer.task.events: one JSON line per event on stdout, what the local runner reads."""

from __future__ import annotations

import json

import pytest

from etj.api.progress import EVENT_PROGRESS
from etj_trainer.task.events import emit


def test_an_event_is_one_sorted_json_line_without_empty_fields(capsys: pytest.CaptureFixture[str]):
    emit(EVENT_PROGRESS, step=12, loss=0.5, auc=None, tables={"b": 1, "a": 2})
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1
    doc = json.loads(out)
    assert doc == {"event": EVENT_PROGRESS, "step": 12, "loss": 0.5, "tables": {"a": 2, "b": 1}}
    assert out.index('"event"') < out.index('"loss"') < out.index('"step"')  # sorted keys


def test_events_follow_each_other_line_by_line(capsys: pytest.CaptureFixture[str]):
    emit("started")
    emit("done", step=3)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["started", "done"]
