"""Rendering: the pure ``build_*`` functions that turn a job and its plan into objects.

No I/O and no environment reads; the operator's ``etj.controller`` applies what these
return, and ``etj render`` prints it.
"""

from etj.core.render.build import build_config_map, build_objects, build_service
from etj.core.render.meta import job_selector
from etj.core.render.pod import build_pod, build_pods, replica_set
from etj.core.render.settings import RenderSettings
from etj.core.render.trainer_config import build_trainer_config

__all__ = [
    "RenderSettings",
    "build_config_map",
    "build_objects",
    "build_pod",
    "build_pods",
    "build_service",
    "build_trainer_config",
    "job_selector",
    "replica_set",
]
