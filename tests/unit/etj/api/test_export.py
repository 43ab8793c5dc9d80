"""Serving versions' pure rules (``etj.api.export``): names, numbers, schedule, pruning."""

from __future__ import annotations

import pytest

from etj.api.export import (
    ExportSchedule,
    delta_name,
    deltas_location,
    is_leftover,
    next_version,
    retiring_name,
    sequence_of,
    serving_location,
    staging_name,
    version_of,
    versions_in,
    versions_to_prune,
)


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("1764240000", 1764240000),
        ("7", 7),
        ("0", None),  # TF Serving's versions are positive
        ("-3", None),
        ("12a", None),
        ("", None),
        ("١٢", None),  # digits of another script: not what TF Serving parses
        (staging_name(1764240000, 42), None),
        (retiring_name(1764240000), None),
        ("tensorboard", None),
    ],
)
def test_version_of_reads_only_what_tf_serving_takes_for_a_version(name, version):
    assert version_of(name) == version


def test_staging_and_retiring_names_are_leftovers_and_never_versions():
    for name in (staging_name(5, 123), retiring_name(5)):
        assert is_leftover(name) and version_of(name) is None
    assert not is_leftover("5")
    assert staging_name(5, 1) != staging_name(5, 2)  # two writers never share one


def test_versions_in_lists_the_versions_ascending():
    names = ["30", staging_name(40, 1), "4", "variables", retiring_name(2), "100"]
    assert versions_in(names) == [4, 30, 100]


def test_next_version_is_the_second_unless_that_would_not_be_the_highest():
    assert next_version(1764240000.9, []) == 1764240000
    assert next_version(1764240000.9, [1764230000]) == 1764240000
    # Two in one second, and a clock set back: always above every version there.
    assert next_version(1764240000.2, [1764240000]) == 1764240001
    assert next_version(1000.0, [1764240000, 5]) == 1764240001


def test_versions_to_prune_keeps_the_newest():
    assert versions_to_prune([5, 1, 9, 3], keep=2) == [1, 3]
    assert versions_to_prune([5, 1], keep=2) == []
    assert versions_to_prune([], keep=1) == []
    assert versions_to_prune([4, 4, 2], keep=1) == [2]
    with pytest.raises(ValueError, match="keep"):
        versions_to_prune([1], keep=0)


def test_schedule_by_steps_is_due_when_a_multiple_is_passed():
    s = ExportSchedule(every_steps=100)
    assert not s.due(99, now=1e9, last_step=0, last_time=0)
    assert s.due(100, now=0, last_step=0, last_time=0)
    assert s.due(130, now=0, last_step=90, last_time=0)  # chunks need not end on one
    assert not s.due(190, now=0, last_step=130, last_time=0)
    # A job resumed at step 250 (its last version maybe older): the next at 300.
    assert not s.due(260, now=0, last_step=250, last_time=0)
    assert s.due(300, now=0, last_step=250, last_time=0)


def test_schedule_by_seconds_counts_from_the_last_version():
    s = ExportSchedule(every_seconds=60)
    assert not s.due(10**6, now=159.0, last_step=0, last_time=100.0)
    assert s.due(1, now=160.0, last_step=0, last_time=100.0)


def test_without_an_interval_only_the_final_version_is_written():
    assert not ExportSchedule().due(10**9, now=1e12, last_step=0, last_time=0)


def test_serving_location_is_beside_the_checkpoints():
    assert serving_location("gs://b/etj/ns/job/") == "gs://b/etj/ns/job/serving"
    assert (
        serving_location("/var/lib/etj/checkpoints/job") == "/var/lib/etj/checkpoints/job/serving"
    )


def test_deltas_go_beside_the_serving_base_path_numbered_in_the_order_they_apply():
    assert deltas_location("gs://b/etj/ns/job/") == "gs://b/etj/ns/job/deltas"
    assert [delta_name(n) for n in (1, 2, 10)] == ["00000001", "00000002", "00000010"]
    assert sorted(delta_name(n) for n in (10, 2, 1)) == [delta_name(n) for n in (1, 2, 10)]
    assert sequence_of(delta_name(12)) == 12
    assert sequence_of(staging_name(3, 7)) is None
    with pytest.raises(ValueError, match="starts at 1"):
        delta_name(0)
