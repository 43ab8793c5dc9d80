"""The process node maps container paths in config files to its directories, once."""

from etj.localcluster.node import _map_paths


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
