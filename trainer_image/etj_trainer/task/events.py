"""The trainer's structured records: one JSON line per event on stdout (read by the local
runner and log pipelines).

No TensorFlow, numpy or Prometheus: the termination path imports it too.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def emit(event: str, **fields: Any) -> None:
    """One structured JSON line on stdout (read by the local runner and log pipelines)."""
    doc = {"event": event, **{k: v for k, v in fields.items() if v is not None}}
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    sys.stdout.flush()
