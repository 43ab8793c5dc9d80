"""The mechanism of the admission rules: where a rule looks (``Scope``), what it refuses
(``Check``: its Python side and its CEL side by side, one kind at a time), where it comes from
(``Origin``) and how a namespace lifts it (``Grant``, judged against a ``Namespace``).

It declares no rule (``etj.api.admission.rules`` does) and builds no policy
(``etj.api.admission.policy``). Pure: no I/O, no environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from etj.api.constants import GROUP


class Origin(StrEnum):
    """Where a rule comes from (the README's table says it per rule)."""

    BASELINE = "Pod Security baseline"
    RESTRICTED = "Pod Security restricted"
    DEPUTY = "etj (the operator as deputy)"


@dataclass(frozen=True)
class Grant:
    """How a namespace lifts a check: its ``label`` set to "true", or (``annotation``) the
    value listed in that namespace annotation (comma-separated)."""

    label: str = ""
    annotation: str = ""

    @property
    def how(self) -> str:
        if self.annotation:
            return (
                f"a cluster admin may list it in the namespace annotation {self.annotation} "
                "(comma-separated)"
            )
        return f'a cluster admin may label the namespace {self.label}="true" to allow it'


@dataclass(frozen=True)
class Namespace:
    """What the policies read of a job's namespace (``etj validate`` takes it from flags)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def grants(self, grant: Grant) -> bool:
        """Whether a label grant is given (an annotation grant is judged per value)."""
        return bool(grant.label) and self.labels.get(grant.label) == "true"

    def listed(self, grant: Grant) -> list[str]:
        """The values the namespace lists under ``grant.annotation``."""
        raw = self.annotations.get(grant.annotation, "") if grant.annotation else ""
        return [v.strip() for v in raw.split(",") if v.strip()]


# The namespace label by which a cluster admin lets jobs there ask for host access: the
# grant of every host-access rule, judged by that policy's binding.
ALLOW_PRIVILEGED_LABEL = f"{GROUP}/allow-privileged"
PRIVILEGED = Grant(label=ALLOW_PRIVILEGED_LABEL)


@dataclass(frozen=True)
class Scope:
    """A set of places in a job, each holding an item the checks look at.

    ``routes``: paths from the job to an item; a last segment ending in ``[]`` is a list of
    items. ``parent`` + ``field``: the items of list ``field`` of every item of ``parent``.
    """

    name: str
    what: str  # in messages: "a template's container", ...
    routes: tuple[str, ...] = ()
    parent: Scope | None = None
    field: str = ""


# How a field's value is refused. Each kind has its CEL and its Python side by side.
@dataclass(frozen=True)
class Check:
    """One refused thing: ``field`` (a dotted path inside each item of ``scope``; "" is the
    item itself) with a value that ``kind``/``arg`` refuse; ``why`` is the message's
    reason, ``origin`` where the rule comes from, ``grant`` how a namespace lifts it."""

    name: str
    scope: Scope
    field: str
    # equals | present | nonzero | beyond | matches | outside | names | keys | annotated
    # | tolerates | unlisted (see ``refused``)
    kind: str
    arg: Any
    why: str
    origin: Origin = Origin.BASELINE
    grant: Grant = PRIVILEGED

    def refused(self, value: Any, namespace: Namespace | None = None) -> bool:
        """The Python side of ``cel_refused``; ``value`` is present."""
        if self.kind == "equals":
            return _cel_equal(value, self.arg)
        if self.kind == "present":
            return True
        if self.kind == "nonzero":
            return not _cel_equal(value, 0)
        # A value of another type than the field's is refused, as by the CEL.
        if self.kind == "beyond":
            return not isinstance(value, list) or any(v not in self.arg for v in value)
        if self.kind == "matches":
            return not isinstance(value, str) or re.search(self.arg, value) is not None
        if self.kind == "outside":
            return not isinstance(value, str) or value not in self.arg
        if self.kind == "names":
            return not isinstance(value, list) or any(
                not isinstance(v, dict) or v.get("name", "") not in self.arg for v in value
            )
        if self.kind == "keys":
            return not isinstance(value, dict) or any(k not in self.arg for k in value)
        if self.kind == "annotated":
            return not isinstance(value, dict) or any(
                k.startswith(self.arg)
                and not (v == "runtime/default" or str(v).startswith("localhost/"))
                for k, v in value.items()
            )
        if self.kind == "tolerates":
            return not isinstance(value, dict) or (
                value.get("operator", "Equal") == "Exists" and value.get("key", "") == ""
            )
        if self.kind == "unlisted":
            allowed = [*self.arg, *(namespace or Namespace()).listed(self.grant)]
            return not isinstance(value, str) or value not in allowed
        raise ValueError(self.kind)  # pragma: no cover - the kinds are fixed below

    def cel_refused(self, item: str) -> str:
        """CEL: whether ``item`` (a CEL variable) has the refused value."""
        opt = item + "".join(f".?{part}" for part in self.field.split(".")) if self.field else ""

        def value(default: str) -> str:
            return f"{opt}.orValue({default})" if self.field else item

        if self.kind == "equals":
            return f"{opt}.orValue(null) == {cel_literal(self.arg)}"
        if self.kind == "present":
            return f"{opt}.hasValue()"
        if self.kind == "nonzero":
            return f"{opt}.orValue(0) != 0"
        # A value of another type is refused with the check's own message (an expression
        # that errors would deny with CEL's).
        allowed = cel_literal(list(self.arg)) if isinstance(self.arg, tuple) else ""
        if self.kind == "beyond":
            v = value("[]")
            return f"(type({v}) != list || !{v}.all(v, v in {allowed}))"
        if self.kind == "matches":
            v = value("''")
            return f"(type({v}) != string || {v}.matches({cel_literal(self.arg)}))"
        if self.kind == "outside":
            v = value("''")
            return f"(type({v}) != string || !({v} in {allowed}))"
        if self.kind == "names":
            v = value("[]")
            return f"(type({v}) != list || !{v}.all(s, s.?name.orValue('') in {allowed}))"
        if self.kind == "keys":
            v = value("{}")
            return f"(type({v}) != map || !{v}.all(k, k in {allowed}))"
        if self.kind == "annotated":
            v = value("{}")
            ok = (
                f"!k.startsWith({cel_literal(self.arg)}) || {v}[k] == 'runtime/default' "
                f"|| {v}[k].startsWith('localhost/')"
            )
            return f"(type({v}) != map || !{v}.all(k, {ok}))"
        if self.kind == "tolerates":
            v = value("{}")
            return f"({v}.?operator.orValue('Equal') == 'Exists' && {v}.?key.orValue('') == '')"
        if self.kind == "unlisted":
            v = value("''")
            listed = (
                "namespaceObject.metadata.?annotations"
                f"[?{cel_literal(self.grant.annotation)}].orValue('').split(',')"
            )
            # Absent is not refused: an absent value's default '' would match the empty
            # entry of a namespace that lists nothing, or no entry of one that lists some.
            return (
                f"({opt}.hasValue() && (type({v}) != string || !({v} in {allowed} "
                f"|| {listed}.exists(s, s.trim() != '' && s.trim() == {v}))))"
            )
        raise ValueError(self.kind)  # pragma: no cover

    @property
    def shown(self) -> str:
        """The refused setting as a user would write it."""
        if self.kind == "equals":
            return f"{self.field}: {cel_literal(self.arg).strip(chr(39))}"
        return self.field or "this"

    @property
    def message(self) -> str:
        """The policy's message (one line; ``etj validate`` names the field instead)."""
        return f"{self.scope.what} may not set {self.shown} ({self.why}); {self.grant.how}"


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality: numbers by value (0 == 0.0), a bool only to a bool."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


def cel_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ", ".join(cel_literal(v) for v in value) + "]"
    raise TypeError(value)  # pragma: no cover


# --- Python: the items of a scope, each with its field path ---------------------------


def _route_items(job: Any, route: str) -> Iterator[tuple[str, Any]]:
    node: Any = job
    parts = route.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    last = parts[-1]
    if not isinstance(node, dict):
        return
    if last.endswith("[]"):
        items = node.get(last[:-2])
        for i, item in enumerate(items if isinstance(items, list) else []):
            yield f"{route[:-2]}[{i}]", item
    elif last in node:
        yield route, node[last]


def scope_items(job: Any, scope: Scope) -> Iterator[tuple[str, Any]]:
    """Every item of ``scope`` in ``job`` (its wire form), with the item's field path."""
    for route in scope.routes:
        yield from _route_items(job, route)
    if scope.parent is not None:
        for path, parent in scope_items(job, scope.parent):
            items = parent.get(scope.field) if isinstance(parent, dict) else None
            for i, item in enumerate(items if isinstance(items, list) else []):
                yield f"{path}.{scope.field}[{i}]", item


def field_value(item: Any, name: str) -> tuple[bool, Any]:
    node = item
    for part in name.split(".") if name else ():
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


# --- CEL: the same as ValidatingAdmissionPolicies -------------------------------------


def cel_route(route: str) -> str:
    """CEL for a route: a list of its items (a missing single item is ``{}``, which no
    check refuses)."""
    parts = route.removesuffix("[]").split(".")
    opt = "object." + parts[0] + "".join(f".?{p}" for p in parts[1:])
    # dyn(): a list literal of a map is list(dyn), the lists of a route's field are dyn,
    # and a list literal of both would not type-check.
    return f"{opt}.orValue([])" if route.endswith("[]") else f"dyn([{opt}.orValue({{}})])"


def scope_variable(scope: Scope) -> str:
    """A policy variable: the lists of the scope's items (CEL has no flatten everywhere)."""
    return "[" + ", ".join(cel_route(r) for r in scope.routes) + "]"
