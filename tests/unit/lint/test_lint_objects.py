"""The kube-score gate's judgement (tests/lint/lint_objects.py): a finding fails unless an
exception with a reason covers its check (and, with ``only``, its text); an exception that
covers nothing fails too, so the exceptions file stays true."""

from __future__ import annotations

import yaml

from tests.lint.lint_objects import CONFIG, judge

EGRESS = (
    "pod-networkpolicy",
    "Pod/v1/ns/a-chief-0",
    "does not have a matching egress NetworkPolicy",
)
INGRESS = (
    "pod-networkpolicy",
    "Pod/v1/ns/a-chief-0",
    "does not have a matching ingress NetworkPolicy",
)
ONLY_EGRESS = {"test": "pod-networkpolicy", "only": "egress", "reason": "egress is open"}


def test_an_exception_covers_its_check_and_text_only(capsys):
    assert judge("x", [EGRESS], [ONLY_EGRESS]) == 0
    assert judge("x", [EGRESS, INGRESS], [ONLY_EGRESS]) == 1
    assert "ingress" in capsys.readouterr().out


def test_a_stale_or_unreasoned_exception_fails(capsys):
    assert judge("x", [], [ONLY_EGRESS]) == 1
    assert "no longer fires" in capsys.readouterr().out
    assert judge("x", [EGRESS], [{**ONLY_EGRESS, "reason": " "}]) == 1
    assert "gives no reason" in capsys.readouterr().out


def test_every_exception_in_the_config_has_a_reason():
    config = yaml.safe_load(CONFIG.read_text())
    for section in ("chart", "examples"):
        for exception in config[section]["exceptions"]:
            assert len(exception["reason"].split()) >= 8, exception
