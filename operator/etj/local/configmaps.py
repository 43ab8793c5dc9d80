"""The ConfigMaps a job file carries beside its job, for runs with no cluster.

A job whose replicas mount a ConfigMap of the user's (``spec.model.custom.configMap``: the
code of a custom tower) needs its files where no API server holds them. ``etj run`` takes
them from the job's own file: further YAML documents (``---``) of ``kind: ConfigMap`` —
the same file ``kubectl apply -f`` takes. ``split_job_file`` separates the job from them;
``write_files`` lays one out as a ConfigMap volume would (one file per key). Pure but for
``write_files``.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from etj.api.custom import DNS1123_SUBDOMAIN

CONFIG_MAP = ("v1", "ConfigMap")


class JobFileError(ValueError):
    """The file is not one job plus ConfigMaps, or a ConfigMap cannot be used."""


def is_config_map(doc: Any) -> bool:
    return isinstance(doc, dict) and (doc.get("apiVersion"), doc.get("kind")) == CONFIG_MAP


def config_map_files(doc: dict[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's files: ``data`` as UTF-8 text, ``binaryData`` decoded from base64."""
    name = (doc.get("metadata") or {}).get("name")
    files: dict[str, bytes] = {}
    for key, value in (doc.get("data") or {}).items():
        files[str(key)] = str(value).encode()
    for key, value in (doc.get("binaryData") or {}).items():
        try:
            files[str(key)] = base64.b64decode(str(value), validate=True)
        except binascii.Error:
            raise JobFileError(f"ConfigMap {name}: binaryData.{key} is not base64") from None
    for key in files:
        # Keys are file names in the volume (Kubernetes: [-._a-zA-Z0-9]+, not "." or "..").
        if "/" in key or key in (".", "..") or not key:
            raise JobFileError(f"ConfigMap {name}: key {key!r} cannot be a file name")
    return files


def split_job_file(docs: list[Any]) -> tuple[Any, dict[str, dict[str, bytes]]]:
    """The one job document of a file and its ConfigMaps' files, by ConfigMap name."""
    import re

    jobs = [d for d in docs if not is_config_map(d)]
    if len(jobs) != 1:
        raise JobFileError(
            f"expected one job (and the ConfigMaps it mounts), found {len(jobs)} other "
            f"documents among {len(docs)}"
        )
    maps: dict[str, dict[str, bytes]] = {}
    for doc in docs:
        if not is_config_map(doc):
            continue
        name = (doc.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not re.fullmatch(DNS1123_SUBDOMAIN, name):
            raise JobFileError(f"a ConfigMap needs metadata.name (a DNS-1123 name), got {name!r}")
        if name in maps:
            raise JobFileError(f"ConfigMap {name} appears twice")
        maps[name] = config_map_files(doc)
    return jobs[0], maps


def write_files(files: dict[str, bytes], directory: Path) -> Path:
    """Lay out a ConfigMap's files in ``directory``, read-only as its volume would be."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, content in files.items():
        path = directory / key
        path.unlink(missing_ok=True)  # an older copy is read-only (--resume)
        path.write_bytes(content)
        path.chmod(0o444)
    return directory
