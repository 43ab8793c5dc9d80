"""Loading the trainer config the operator renders (``etj.api.trainer.TrainerConfig``).

Resolves where the config comes from (``--config`` wins over ``ETJ_TRAINER_CONFIG``) and
turns every problem into a ``ConfigError`` with a message a person can act on (exit 2).
No TensorFlow import: the checks here must be cheap and must run before TF starts.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from etj.api.constants import METRICS_PORT_ENV, TRAINER_CONFIG_ENV
from etj.api.dynamic import table_rows
from etj.api.trainer import TrainerConfig
from etj.api.trainer_reasons import REASON_CONFIG_ERROR

CONFIG_ENV = TRAINER_CONFIG_ENV


class ConfigError(ValueError):
    """The trainer config is missing or invalid."""

    reason = REASON_CONFIG_ERROR


def config_path(flag: str | None, environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    value = flag or env.get(CONFIG_ENV)
    if not value:
        raise ConfigError(f"no trainer config: pass --config PATH or set {CONFIG_ENV}")
    return Path(value)


def parse_config(text: str, source: str = "trainer config") -> TrainerConfig:
    try:
        config = TrainerConfig.model_validate_json(text)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in e.errors()
        )
        raise ConfigError(f"{source} is invalid: {problems}") from e
    check_consistent(config)
    return config


def config_field(key: str, environ: dict[str, str] | None = None) -> Any:
    """One top-level field of the trainer config file ``ETJ_TRAINER_CONFIG`` names, read
    as plain JSON without validation (a job's own program asks for one setting: its
    metrics port, its checkpoint directory); None without the file or the field."""
    env = os.environ if environ is None else environ
    path = env.get(CONFIG_ENV)
    if not path:
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return json.loads(Path(path).read_text()).get(key)
    return None


def load_config(flag: str | None = None, environ: dict[str, str] | None = None) -> TrainerConfig:
    """The validated trainer config, from ``--config`` or ``ETJ_TRAINER_CONFIG``."""
    path = config_path(flag, environ)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the trainer config {path}: {e.strerror or e}") from e
    return parse_config(text, source=str(path))


def metrics_port(config: TrainerConfig, environ: dict[str, str] | None = None) -> int:
    """The chief's metrics port: ``ETJ_METRICS_PORT`` (local runs) over the config."""
    env = os.environ if environ is None else environ
    value = env.get(METRICS_PORT_ENV)
    if not value:
        return config.metrics_port
    try:
        port = int(value)
    except ValueError:
        raise ConfigError(f"{METRICS_PORT_ENV}={value!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{METRICS_PORT_ENV}={value!r} is not a port number")
    return port


def check_consistent(config: TrainerConfig) -> None:
    """Cross-field checks: the plan must describe exactly the model's tables."""
    plan = config.shard_plan
    names = [t.name for t in config.model.tables]
    planned = [t.name for t in plan.tables]
    if names != planned:
        raise ConfigError(
            f"shardPlan.tables {planned} do not match the model's tables {names} (same order)"
        )
    for table, tp in zip(config.model.tables, plan.tables, strict=True):
        if tp.rows != table_rows(table) or tp.dimension != table.dimension:
            raise ConfigError(
                f"shardPlan table {tp.name!r} is {tp.rows}x{tp.dimension} but the model says "
                f"{table_rows(table)}x{table.dimension}"
            )
        if len(tp.rows_per_shard) != tp.shards or sum(tp.rows_per_shard) != tp.rows:
            raise ConfigError(f"shardPlan table {tp.name!r}: rowsPerShard does not add up")
        if plan.ps_replicas and any(not 0 <= p < plan.ps_replicas for p in tp.ps_of_shard):
            raise ConfigError(f"shardPlan table {tp.name!r}: psOfShard names a missing ps")
    if config.strategy != plan.strategy:
        raise ConfigError(f"strategy {config.strategy} but the shard plan is for {plan.strategy}")
    if config.data.source == "files" and config.data.files is None:
        raise ConfigError("data.source is files but data.files is missing")
    files = config.data.files
    if files is not None and files.follow is not None and config.model.features is not None:
        raise ConfigError(
            "data.files.follow reads etj's own file layout (a column per table) for now, "
            "not files described by model.features"
        )
