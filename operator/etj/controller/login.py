"""kopf's login from the same client configuration the operator's own calls use.

kopf logs in by itself only from ``KUBECONFIG``/``~/.kube/config`` or the in-cluster
service account; ``etj operator --kubeconfig PATH`` would be ignored by its watches. So
when a path is given, the operator registers this login handler, which hands kopf the
credentials of the ``kubernetes`` client configuration ``etj.controller.kube.load_config`` built from
that path (the same translation kopf's own ``login_via_client`` does for the default one).
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes import client


def connection_info(cfg: client.Configuration) -> kopf.ConnectionInfo:
    """kopf's view of a client configuration: server, CA, client cert or token."""
    # Newer clients keep the token under BearerToken, older ones under authorization.
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    parts = header.split(" ", 1) if header else []
    scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0] if parts else None)
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )


def register_login(cfg: client.Configuration) -> None:
    """Make kopf log in with ``cfg`` (instead of its defaults)."""

    @kopf.on.login()
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(cfg)
