"""Generate the EmbeddingTrainingJob CRD from the pydantic models.

The models in ``etj.api`` are the single source of truth; this module turns their JSON
Schema into a Kubernetes *structural* schema:

- ``$ref``s are inlined (a structural schema has no references);
- ``anyOf [X, null]`` (an optional field) becomes plain ``X``: the API server prunes nulls
  of non-nullable fields, which matches the models treating ``None`` as "not given";
- ``int | str`` quantities become ``x-kubernetes-int-or-string`` with the quantity pattern,
  and ``int | "auto"`` the same with the pattern ``^auto$``;
- free-form objects (``dict[str, Any]``) become ``x-kubernetes-preserve-unknown-fields``;
- JSON Schema 2020's numeric ``exclusiveMinimum`` becomes OpenAPI 3.0's boolean form;
- ``title``, ``additionalProperties: false`` and null defaults are dropped (the server
  prunes unknown fields; ``kubectl``'s strict field validation reports them).

Pure: returns dicts and text, does no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from etj.api.constants import (
    APP_NAME,
    CATEGORIES,
    CRD_NAME,
    GROUP,
    KIND,
    LABEL_NAME,
    LABEL_PART_OF,
    MAX_JOB_NAME_LENGTH,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)
from etj.api.spec import EmbeddingTrainingJobSpec
from etj.api.status import EmbeddingTrainingJobStatus

_DROP = {"title", "x-etj-quantity", "x-etj-int-or-auto", "const"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Strategy", "type": "string", "jsonPath": ".status.strategy"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Workers", "type": "string", "jsonPath": ".status.workers"},
    {"name": "PS", "type": "integer", "jsonPath": ".status.shardPlan.psReplicas"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "AUC", "type": "number", "jsonPath": ".status.evaluation.auc"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


# ``kubectl scale etj/NAME --replicas=N`` (and so HorizontalPodAutoscaler and KEDA) sets
# the worker count; the operator applies it (etj.core.reconcile.policies.scale).
SCALE_SUBRESOURCE: dict[str, str] = {
    "specReplicasPath": ".spec.replicas.worker.replicas",
    "statusReplicasPath": ".status.workerReplicas",
    "labelSelectorPath": ".status.workerSelector",
}


def structural_schema(model: type, *, description: str | None = None) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a pydantic model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    defs = raw.pop("$defs", {})
    out = _convert(raw, defs)
    if description:
        out["description"] = description
    return out


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a ``$ref`` (and pydantic's ``allOf: [$ref]`` wrapper), keeping sibling keys."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **node["allOf"][0]}
    if "$ref" not in node:
        return node
    target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    return {**target, **siblings}  # the field's description wins over the model's docstring


def _int_or_string(node: dict[str, Any], branches: list[dict[str, Any]]) -> dict[str, Any]:
    out = {k: v for k, v in node.items() if k not in ("anyOf", "type")}
    out["x-kubernetes-int-or-string"] = True
    out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for b in branches:
        if b.get("type") == "string" and "const" in b:
            out["pattern"] = f"^{b['const']}$"
        elif b.get("type") == "string" and "pattern" in b:
            out["pattern"] = b["pattern"]
    return out


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(dict(node), defs)

    if "anyOf" in node:
        branches = [_resolve(b, defs) for b in node["anyOf"] if b.get("type") != "null"]
        types = sorted(b.get("type", "") for b in branches)
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if types == ["integer", "string"]:
            node = _int_or_string(rest, branches)
        elif len(branches) == 1:
            # An optional field: the one non-null branch, with the field's own keys on top.
            node = {**branches[0], **rest}
            return _convert(node, defs)
        else:  # pragma: no cover - the models use no other unions
            raise ValueError(f"cannot express union {types} in a structural schema")

    if node.get("default", 0) is None:
        del node["default"]
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(
        node.get("exclusiveMinimum"), bool
    ):
        node["minimum"] = node["exclusiveMinimum"]
        node["exclusiveMinimum"] = True

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "additionalProperties" and value is False):
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs) if value else _free_form()
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out[key] = _convert(value, defs)
        else:
            out[key] = value
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _free_form() -> dict[str, Any]:
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    spec = structural_schema(EmbeddingTrainingJobSpec)
    status = structural_schema(EmbeddingTrainingJobStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {LABEL_NAME: APP_NAME, LABEL_PART_OF: APP_NAME},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": SCALE_SUBRESOURCE},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (
                                "A TensorFlow training job for a model with large embedding "
                                "tables: etj plans the parameter servers and shards, runs the "
                                "chief/worker/ps pods and restarts what fails from the last "
                                "checkpoint."
                            ),
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                            "x-kubernetes-validations": [
                                {
                                    "rule": f"self.metadata.name.size() <= {MAX_JOB_NAME_LENGTH}",
                                    "message": (
                                        f"metadata.name must be at most {MAX_JOB_NAME_LENGTH} "
                                        "characters: pod hostnames <name>-worker-<index> are "
                                        "DNS labels of at most 63"
                                    ),
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block-style YAML with multi-line strings kept readable."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def to_yaml(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)


def crd_yaml() -> str:
    """The CRD as the YAML committed in ``crds/`` (a test fails when they differ)."""
    return "# Generated by `etj crd` from etj.api; do not edit.\n" + to_yaml(build_crd())
