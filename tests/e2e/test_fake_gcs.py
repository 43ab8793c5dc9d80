"""TensorFlow's own gs:// filesystem against fake-gcs-server, on loopback.

What the local kind cluster's gs:// stand-in (tests/cluster/kind-fake-gcs.sh) must serve:
the calls TF 2.21's built-in GCS filesystem makes for a checkpoint (resumable upload,
metadata stat, ranged reads, listing, rewrite for rename, delete). TF has no endpoint
setting: it always calls https://www.googleapis.com and https://storage.googleapis.com;
how it reaches fake-gcs-server on loopback (a CONNECT proxy, a test CA, gcs-front) is
etj_testcluster.fake_gcs's. Without gcs-front every save fails after 10 retries (7 min):
TF sends ``Transfer-Encoding: identity`` on empty-body POSTs and Go's HTTP server answers
501. In the cluster the pods use hostAliases instead of the proxy.

Skipped without the fake-gcs-server binary (``make fake-gcs`` builds it into
``~/.cache/etj/bin``; as root the suite's kind cluster fixture runs it first) or openssl.
TensorFlow runs in a child process: its GCS filesystem reads the environment once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from etj_testcluster import fake_gcs
from etj_testcluster.fake_gcs import BUCKET, ConnectProxy

from .conftest import kind_is_ours

pytestmark = [pytest.mark.e2e, pytest.mark.trainer]


@pytest.fixture()
def fake_gcs_env(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[dict[str, str], ConnectProxy]]:
    if kind_is_ours():
        # As root the kind cluster's bring-up builds both binaries: wait for it, so that
        # this never skips where the suite can build what it needs.
        request.getfixturevalue("kind_kubeconfig")
    reason = fake_gcs.missing()
    if reason:
        pytest.skip(reason)
    with fake_gcs.serve(tmp_path / "gcs") as gcs:
        yield gcs.env, gcs.proxy


CHECKPOINT_ROUNDTRIP = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf

    root = sys.argv[1]
    steps = {}
    def step(name, fn):
        try:
            steps[name] = {"ok": True, "value": fn()}
        except Exception as e:  # every step reports, so the test shows what fails
            steps[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}

    emb = tf.Variable(np.arange(3 * 1000 * 16, dtype=np.float32).reshape(3000, 16))
    ckpt = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64), emb=emb)
    manager = tf.train.CheckpointManager(ckpt, root, max_to_keep=2)
    def save_three():
        paths = []
        for s in (100, 200, 300):
            ckpt.step.assign(s)
            paths.append(manager.save(checkpoint_number=s))
        return paths
    step("save", save_three)
    step("latest", lambda: tf.train.latest_checkpoint(root))
    step("listdir", lambda: sorted(tf.io.gfile.listdir(root)))
    step("glob", lambda: sorted(tf.io.gfile.glob(root + "/ckpt-*.index")))
    def restore():
        fresh = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64),
                                    emb=tf.Variable(tf.zeros([3000, 16])))
        fresh.restore(tf.train.latest_checkpoint(root)).assert_consumed()
        return {"step": int(fresh.step.numpy()),
                "emb_equal": bool(np.array_equal(fresh.emb.numpy(), emb.numpy()))}
    step("restore", restore)
    def rename():
        tf.io.gfile.rename(root + "/checkpoint", root + "/checkpoint.moved", overwrite=True)
        tf.io.gfile.rename(root + "/checkpoint.moved", root + "/checkpoint", overwrite=True)
        return tf.io.gfile.exists(root + "/checkpoint")
    step("rename", rename)
    def ranged_read():
        with tf.io.gfile.GFile(manager.latest_checkpoint + ".data-00000-of-00001", "rb") as f:
            f.seek(1000)
            return len(f.read(4096))
    step("ranged_read", ranged_read)
    step("stat", lambda: tf.io.gfile.stat(manager.latest_checkpoint + ".index").length)
    step("isdir", lambda: tf.io.gfile.isdir(root))
    def remove_tree():
        tf.io.gfile.rmtree(root)
        return tf.io.gfile.exists(root + "/checkpoint")
    step("rmtree", remove_tree)
    print("RESULT " + json.dumps(steps))
    """
)


def test_tf_checkpoint_roundtrip_on_fake_gcs(
    fake_gcs_env: tuple[dict[str, str], ConnectProxy],
) -> None:
    env, proxy = fake_gcs_env
    proc = subprocess.run(
        [sys.executable, "-c", CHECKPOINT_ROUNDTRIP, f"gs://{BUCKET}/x"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    result_line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result_line, f"TF child failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    steps = json.loads(result_line[0][len("RESULT ") :])
    print(json.dumps(steps, indent=1))
    failed = {k: v["error"] for k, v in steps.items() if not v["ok"]}
    assert not failed, f"steps that failed on fake-gcs-server: {failed}"
    assert steps["latest"]["value"] == f"gs://{BUCKET}/x/ckpt-300"
    # max_to_keep=2: the oldest checkpoint was deleted from the bucket.
    assert steps["glob"]["value"] == [f"gs://{BUCKET}/x/ckpt-{n}.index" for n in (200, 300)]
    assert steps["restore"]["value"] == {"step": 300, "emb_equal": True}
    assert steps["rename"]["value"] is True
    assert steps["ranged_read"]["value"] == 4096
    assert steps["rmtree"]["value"] is False
    assert proxy.tunnels, "TF never went through the proxy"
    assert not proxy.refused, f"TF called other hosts: {proxy.refused}"
