"""The process node maps container paths in config files to its directories, once."""

from etj_testcluster.process_node import _map_paths


def test_each_path_is_mapped_once_longest_mount_first():
    mounts = {"/var/lib/etj/checkpoints": "/tmp/h/ckpt", "/tmp": "/n/pod/tmp", "/etc/etj": "/n/cfg"}
    text = '{"directory": "/var/lib/etj/checkpoints/job", "t": "/tmp/x", "c": "/etc/etj"}'
    assert (
        _map_paths(text, mounts)
        == '{"directory": "/tmp/h/ckpt/job", "t": "/n/pod/tmp/x", "c": "/n/cfg"}'
    )


def test_only_whole_path_prefixes():
    assert (
        _map_paths('"/etc/etjx", "/tmpfoo"', {"/etc/etj": "/a", "/tmp": "/b"})
        == '"/etc/etjx", "/tmpfoo"'
    )


def test_etj_images_run_their_entrypoint_from_this_installation_and_nothing_else():
    from etj_testcluster.process_node import image_entrypoint

    operator = image_entrypoint("ghcr.io/etj-dev/etj-operator:0.1.0")
    assert operator is not None and operator[0].endswith("/etj")
    assert image_entrypoint("localhost/etj-trainer@sha256:abc") == ["python", "-m", "etj_trainer"]
    assert image_entrypoint("docker.io/library/busybox:1.36") is None
    assert image_entrypoint("etj-operator-fork:1") is None


def test_a_pod_that_is_not_a_replica_is_a_process_too():
    from etj.local.pod_process import pod_process

    pod = {
        "metadata": {"name": "etj-5d8f", "namespace": "etj-system"},
        "spec": {
            "containers": [
                {
                    "name": "operator",
                    "image": "ghcr.io/etj-dev/etj-operator:0.1.0",
                    "args": ["operator", "--metrics-port=0"],
                    "env": [
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        }
                    ],
                }
            ]
        },
    }
    spec = pod_process(pod, {}, ["/venv/bin/etj"])
    assert spec.command == ["/venv/bin/etj", "operator", "--metrics-port=0"]
    assert spec.env == {"POD_NAME": "etj-5d8f"} and spec.role == ""
    assert pod_process(pod, {}).command == ["operator", "--metrics-port=0"]


def test_a_mount_path_inside_a_longer_path_is_not_mapped():
    """``/var/tmp/ckpt`` (a checkpoint.uri every pod shares) is not the pod's ``/tmp``."""
    mounts = {"/tmp": "/node/pods/p/volumes/tmp"}
    text = '{"directory": "/var/tmp/ckpt/ns/job", "scratch": "/tmp/x"}'
    assert _map_paths(text, mounts) == (
        '{"directory": "/var/tmp/ckpt/ns/job", "scratch": "/node/pods/p/volumes/tmp/x"}'
    )
