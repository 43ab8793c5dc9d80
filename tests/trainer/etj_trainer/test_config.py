"""The trainer's config: where it is read from, and errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import job_spec, trainer_config

from etj_trainer.config import ConfigError, load_config, parse_config


def _config_text(**kw: Any) -> str:
    return json.dumps(trainer_config(job_spec(), **kw).to_wire())


def test_config_flag_wins_over_env(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(_config_text())
    env = {"ETJ_TRAINER_CONFIG": str(tmp_path / "missing.json")}
    assert load_config(str(good), env).job_name == "test"
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(None, env)
    with pytest.raises(ConfigError, match="--config PATH or set ETJ_TRAINER_CONFIG"):
        load_config(None, {})


def test_config_errors_name_the_field() -> None:
    doc = json.loads(_config_text())
    doc["training"]["stepsPerExecution"] = 0
    with pytest.raises(ConfigError, match=r"training\.stepsPerExecution"):
        parse_config(json.dumps(doc))
    doc = json.loads(_config_text())
    doc["shardPlan"]["tables"].reverse()
    with pytest.raises(ConfigError, match=r"do not match the model's tables"):
        parse_config(json.dumps(doc))


def test_following_files_described_by_features_is_refused_for_now() -> None:
    doc = json.loads(_config_text())
    doc["data"] = {
        "source": "files",
        "files": {"pattern": "/d/part-*.csv", "format": "csv", "follow": {}},
    }
    assert parse_config(json.dumps(doc)).data.files.follow is not None
    doc["model"]["features"] = [
        {"name": "label", "kind": "label"},
        {"name": "u", "kind": "categorical", "table": "user_id"},
        {"name": "i", "kind": "categorical", "table": "item_id"},
    ]
    with pytest.raises(ConfigError, match="follow reads etj's own file layout"):
        parse_config(json.dumps(doc))
