"""How etj names what it derives from a job.

The ConfigMap name is built here once; the operator (which looks for it) and the renderer
(which makes it) both call ``trainer_config_map_name``. (The contract's names themselves
are etj.api's constants and enums; tests/unit/lint/test_contract_drift.py fails on a
literal copy of any of them outside etj.api.)

Pure: no I/O.
"""

from __future__ import annotations

TRAINER_CONFIG_MAP_SUFFIX = "-trainer-config"


def trainer_config_map_name(job_name: str) -> str:
    """The ConfigMap with the job's trainer config and shard plan (mounted in every pod)."""
    return f"{job_name}{TRAINER_CONFIG_MAP_SUFFIX}"
