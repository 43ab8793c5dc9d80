"""etj.core.reconcile.conditions: one condition per type, its transition time kept while
its status holds."""

from __future__ import annotations

from etj.api.status import Condition, ConditionType
from etj.core.reconcile.conditions import condition_true, set_condition

T1, T2 = "2026-11-22T12:00:00Z", "2026-11-22T12:05:00Z"


def test_a_new_type_is_appended_with_its_time_and_generation():
    (c,) = set_condition([], ConditionType.CREATED, True, "Created", "pods made", T1, 3)
    assert (c.type, c.status, c.reason, c.message) == (
        ConditionType.CREATED.value,
        "True",
        "Created",
        "pods made",
    )
    assert (c.last_transition_time, c.observed_generation) == (T1, 3)


def test_the_transition_time_moves_only_when_the_status_does():
    first = set_condition([], ConditionType.RUNNING, True, "Running", "a", T1, 1)
    same = set_condition(first, ConditionType.RUNNING, True, "StillRunning", "b", T2, 2)
    assert same[0].last_transition_time == T1
    assert (same[0].reason, same[0].message, same[0].observed_generation) == (
        "StillRunning",
        "b",
        2,
    )
    flipped = set_condition(same, ConditionType.RUNNING, False, "Stopped", "c", T2, 2)
    assert flipped[0].last_transition_time == T2 and flipped[0].status == "False"


def test_other_conditions_keep_their_place_and_the_input_is_not_changed():
    conditions = [
        Condition(type=ConditionType.CREATED.value, status="True", reason="r"),
        Condition(type=ConditionType.RUNNING.value, status="True", reason="r"),
        Condition(type="SomeoneElses", status="True", reason="r"),
    ]
    before = [c.model_copy() for c in conditions]
    out = set_condition(conditions, ConditionType.RUNNING, False, "Stopped", "", T2, None)
    assert [c.type for c in out] == [c.type for c in conditions]
    assert out[0] is conditions[0] and out[2] is conditions[2] and out[1].status == "False"
    assert conditions == before


def test_a_condition_is_true_only_with_status_true():
    conditions = set_condition([], ConditionType.SUCCEEDED, False, "No", "", T1, None)
    assert not condition_true(conditions, ConditionType.SUCCEEDED)
    conditions = set_condition(conditions, ConditionType.SUCCEEDED, True, "Yes", "", T2, None)
    assert condition_true(conditions, ConditionType.SUCCEEDED)
    assert not condition_true(conditions, ConditionType.FAILED)
