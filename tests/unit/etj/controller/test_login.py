"""kopf's login with the client configuration ``etj operator --kubeconfig`` loaded."""

from __future__ import annotations

import json

from kubernetes import client, config

from etj.controller.login import connection_info


def test_client_certificate_kubeconfig(tmp_path):
    ca, crt, key = (tmp_path / n for n in ("ca.crt", "admin.crt", "admin.key"))
    for f in (ca, crt, key):
        f.write_text("x")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://127.0.0.1:6443",
                            "certificate-authority": str(ca),
                        },
                    }
                ],
                "users": [
                    {"name": "u", "user": {"client-certificate": str(crt), "client-key": str(key)}}
                ],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    info = connection_info(cfg)
    assert info.server == "https://127.0.0.1:6443"
    assert info.ca_path == str(ca)
    assert (info.certificate_path, info.private_key_path) == (str(crt), str(key))
    assert info.token is None and info.insecure is False


def test_bearer_token():
    cfg = client.Configuration(host="https://k8s.example:443")
    cfg.api_key = {"authorization": "abc123"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    info = connection_info(cfg)
    assert (info.scheme, info.token) == ("Bearer", "abc123")
