"""TF_CONFIG as the trainer parses and checks it."""

from __future__ import annotations

import json

import pytest

from etj_trainer.task.cluster import ClusterError, check_strategy, parse_tf_config


def test_tf_config_parsing() -> None:
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}
    task = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    assert (task.type, task.index, task.num_workers, task.num_ps) == ("worker", 1, 2, 1)
    assert not task.is_leader()
    assert parse_tf_config(None).distributed is False
    evaluator = parse_tf_config(
        json.dumps({"cluster": cluster, "task": {"type": "evaluator", "index": 0}})
    )
    assert evaluator.type == "evaluator"
    mwms = parse_tf_config(
        json.dumps({"cluster": {"worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}})
    )
    assert mwms.is_leader()
    for bad in (
        "{",
        '{"cluster": {"worker": ["x"]}, "task": {"type": "worker", "index": 3}}',
        '{"cluster": {"boss": ["x"]}, "task": {"type": "boss", "index": 0}}',
    ):
        with pytest.raises(ClusterError):
            parse_tf_config(bad)
    with pytest.raises(ClusterError, match="needs chief, worker and ps"):
        check_strategy(mwms, "ParameterServer")
