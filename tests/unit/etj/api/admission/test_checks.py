"""The kinds of check (etj.api.admission.checks): Python compares as the policy's CEL does,
and a value of another type than the field's is refused as the policy refuses it."""

from __future__ import annotations

import pytest

from etj.api.admission import CHECKS


@pytest.mark.parametrize(
    ("field", "value", "refused"),
    [
        ("hostNetwork", 1, False),  # CEL: 1 == true is false
        ("hostNetwork", "true", False),
        ("securityContext.runAsUser", 0.0, True),  # CEL: 0.0 == 0
        ("securityContext.runAsUser", False, False),
        ("securityContext.runAsUser", 1000, False),
    ],
)
def test_python_compares_as_cel_does(field: str, value: object, refused: bool):
    check = next(c for c in CHECKS if c.scope.name == "pods" and c.field == field)
    assert check.refused(value) is refused


def test_a_value_of_another_type_is_refused_as_the_policy_refuses_it():
    by_kind = {c.kind: c for c in CHECKS}
    assert by_kind["beyond"].refused("SYS_ADMIN")
    assert by_kind["matches"].refused(5)
    assert not by_kind["beyond"].refused(["NET_BIND_SERVICE"])
    assert by_kind["outside"].refused(1)
    assert by_kind["names"].refused("kernel.msgmax") and by_kind["names"].refused(["x"])
    assert by_kind["keys"].refused([]) and not by_kind["keys"].refused({"emptyDir": {}})
    assert by_kind["annotated"].refused("x")
    assert by_kind["tolerates"].refused("Exists") and not by_kind["tolerates"].refused({})
    assert by_kind["unlisted"].refused(7) and not by_kind["unlisted"].refused("default")
