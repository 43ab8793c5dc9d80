"""etj.api.rules: one rule, its CEL for the CRD and its predicate for pydantic."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from etj.api.rules import Rule, cel_extra, check_rules

POSITIVE = Rule(cel="self.n > 0", message="n must be positive", check=lambda m: m.n > 0)
SMALL = Rule(
    cel="self.n < 10",
    message="n must be below 10",
    check=lambda m: m.n < 10,
    detail=lambda m: f"n is {m.n}, must be below 10",
)


def test_the_crd_gets_each_rules_cel_and_message_in_order():
    extra = cel_extra(POSITIVE, SMALL)
    assert extra == {
        "x-kubernetes-validations": [
            {"rule": "self.n > 0", "message": "n must be positive"},
            {"rule": "self.n < 10", "message": "n must be below 10"},
        ]
    }


def test_rules_for_the_api_server_alone_come_after():
    transition = {"rule": "self == oldSelf", "message": "immutable", "fieldPath": ".n"}
    assert cel_extra(POSITIVE, extra=[transition])["x-kubernetes-validations"][-1] == transition


def test_a_model_that_keeps_every_rule_passes():
    check_rules(SimpleNamespace(n=5), (POSITIVE, SMALL))


def test_the_first_broken_rule_says_its_message_or_its_detail():
    with pytest.raises(ValueError, match=r"^n must be positive$"):
        check_rules(SimpleNamespace(n=0), (POSITIVE, SMALL))
    with pytest.raises(ValueError, match=r"^n is 12, must be below 10$"):
        check_rules(SimpleNamespace(n=12), (POSITIVE, SMALL))
