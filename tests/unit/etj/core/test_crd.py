"""The CRD is generated from the models, committed, structural and self-describing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from etj.core.crd import PRINTER_COLUMNS, build_crd, crd_yaml

ROOT = Path(__file__).resolve().parents[4]
COMMITTED = ROOT / "crds" / "embeddingtrainingjobs.training.etj.dev.yaml"
CHART_CRD = ROOT / "charts" / "etj" / "crds" / COMMITTED.name


def test_committed_crd_matches_the_models():
    assert COMMITTED.read_text() == crd_yaml(), (
        "crds/ is out of date with etj.api: run `make crds` and commit the result"
    )


def test_chart_crd_matches_the_models():
    if not CHART_CRD.parent.parent.exists():
        # The chart is created by the Helm issue; once it exists its CRD must match.
        return
    assert CHART_CRD.read_text() == crd_yaml(), "run `make crds` to refresh the chart's CRD"


def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.get("properties", {}).items():
            yield from _walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _root() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_is_structural():
    for path, node in _walk(_root()):
        assert "$ref" not in node and "allOf" not in node and "oneOf" not in node, path
        assert "additionalProperties" not in node or "properties" not in node, path
        assert "uniqueItems" not in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not isinstance(node.get("exclusiveMinimum"), int | float) or isinstance(
            node.get("exclusiveMinimum"), bool
        ), path


def test_every_spec_and_status_field_is_described():
    root = _root()
    for part in ("spec", "status"):
        for path, node in _walk(root["properties"][part], part):
            if path.endswith(("[]", "{}")):
                continue  # list items and map values are described by their field
            assert node.get("description"), (
                f"{path} has no description (kubectl explain shows none)"
            )


def test_names_columns_and_subresources():
    crd = build_crd()
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["etj"]
    assert "all" in names["categories"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {
        "status": {},
        # kubectl scale etj/NAME, HorizontalPodAutoscaler and KEDA change the worker count.
        "scale": {
            "specReplicasPath": ".spec.replicas.worker.replicas",
            "statusReplicasPath": ".status.workerReplicas",
            "labelSelectorPath": ".status.workerSelector",
        },
    }
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Strategy",
        "Phase",
        "Workers",
        "PS",
        "Step",
        "Restarts",
        "AUC",
        "Age",
    ]
    assert version["additionalPrinterColumns"] == PRINTER_COLUMNS


def test_cross_field_rules_are_cel():
    rules = [
        r["message"] for r in _root()["properties"]["spec"].get("x-kubernetes-validations", [])
    ]
    assert any("only for strategy ParameterServer" in m for m in rules)
    assert any("exactly one chief" in m for m in rules)


def test_quantities_and_auto_are_int_or_string():
    spec = _root()["properties"]["spec"]["properties"]
    ps_replicas = spec["replicas"]["properties"]["ps"]["properties"]["replicas"]
    assert ps_replicas["x-kubernetes-int-or-string"] is True
    assert ps_replicas["pattern"] == "^auto$"
    shard = spec["sharding"]["properties"]["maxShardBytes"]
    assert shard["x-kubernetes-int-or-string"] is True and "[KMGTPE]i" in shard["pattern"]


def test_committed_file_is_valid_yaml_of_one_crd():
    docs = [d for d in yaml.safe_load_all(COMMITTED.read_text()) if d]
    assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition"


def test_the_scale_paths_name_fields_of_the_schema():
    """Each path of the scale subresource is a field of the generated schema of the kind it
    must be; the worker count has a default, so a job that leaves it out still reads it."""
    version = build_crd()["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    kinds = {
        "specReplicasPath": "integer",
        "statusReplicasPath": "integer",
        "labelSelectorPath": "string",
    }
    for key, path in version["subresources"]["scale"].items():
        node = root
        for part in path.lstrip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == kinds[key], path
    replicas = root["properties"]["spec"]["properties"]["replicas"]
    assert replicas["default"] == {}
    assert replicas["properties"]["worker"]["default"] == {"replicas": 2}
