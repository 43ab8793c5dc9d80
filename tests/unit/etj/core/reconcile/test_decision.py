"""etj.core.reconcile.decision: the status's time format, and an empty decision does
nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from etj.core.reconcile.decision import Decision, Event, iso, parse_time


def test_times_are_written_in_utc_to_the_second():
    t = datetime(2026, 11, 22, 13, 4, 5, 987654, tzinfo=timezone(timedelta(hours=1)))
    assert iso(t) == "2026-11-22T12:04:05Z"


def test_a_written_time_reads_back_as_the_same_instant():
    t = datetime(2026, 11, 22, 12, 4, 5, tzinfo=UTC)
    assert parse_time(iso(t)) == t
    assert parse_time("2026-11-22T12:04:05+02:00") == t + timedelta(hours=-2)


@pytest.mark.parametrize("empty", [None, ""])
def test_no_time_is_none(empty):
    assert parse_time(empty) is None


def test_a_new_decision_does_nothing_and_holds_its_own_lists():
    a, b = Decision(), Decision()
    assert a.status is None and not (a.create_service or a.apply_gang or a.delete_job)
    assert a.create_pods == [] and a.events == [] and a.requeue_after is None
    a.events.append(Event("Normal", "Created", "made"))
    assert b.events == []  # not a list shared between decisions
