"""etj_trainer.task.storage_full: the words that mean a full volume, the message; and the
trainer itself, single-process, on a checkpoint volume that fills up (a small tmpfs).

The tmpfs is mounted in a user and mount namespace of the trainer's own (``unshare
--user --map-root-user --mount``), so the test needs no root; where the kernel refuses
unprivileged user namespaces it is skipped, saying so. What the trainer left on the volume
is copied out before the namespace (and its tmpfs) goes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import job_spec, read_events, trainer_config, trainer_env

from etj.api.constants import TERMINATION_LOG_ENV
from etj.api.trainer_reasons import REASON_CHECKPOINT_STORAGE_FULL
from etj_trainer import exitcodes
from etj_trainer.task.storage_full import Volume, full_message, is_storage_full

MiB = 2**20


def test_the_kernel_words_for_a_full_or_over_quota_volume_are_storage_full():
    enospc = (
        "{{function_node __wrapped__SaveV2_dtypes_4_device_/job:ps/replica:0/task:1/device:CPU:0}}"
        " /ckpt/ckpt-3_temp/part-00001-of-00002.data-00000-of-00001.tempstate1; No space left "
        "on device [Op:SaveV2]"
    )
    assert is_storage_full(enospc)
    assert is_storage_full("/ckpt/checkpoint.tmp; Disk quota exceeded")
    # Running out of memory is ResourceExhausted too, and no full volume.
    assert not is_storage_full("OOM when allocating tensor with shape[20000000,64]")


def test_the_message_names_the_volume_its_size_and_what_a_checkpoint_needs():
    volume = Volume(
        total_bytes=10 * MiB, free_bytes=MiB // 2, last_path="/c/ckpt-200", last_bytes=3 * MiB
    )
    text = full_message("/c", 300, 3, volume, planned=MiB)
    assert text.startswith("the checkpoint volume at /c is full: saving step 300 failed")
    assert "it holds 10.00 MiB, 512 B" not in text and "512.00 KiB free" in text
    assert "the last checkpoint (ckpt-200) took 3.00 MiB" in text
    # keep 3 + the one being written.
    assert "with checkpoint.keep 3 the volume needs at least 12.00 MiB" in text
    assert "lower checkpoint.keep" in text


def test_without_a_completed_checkpoint_the_plan_says_what_one_needs():
    text = full_message("gs://b/c", 100, 2, Volume(None, None, None, None), planned=5 * MiB)
    assert "holds" not in text  # an object store has no size
    assert "no checkpoint was completed; one needs about 5.00 MiB" in text
    assert "at least 15.00 MiB" in text


def _unshare_works() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
         "mount -t tmpfs -o size=1m tmpfs /mnt 2>/dev/null || mount -t tmpfs -o size=1m tmpfs /tmp"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"no tmpfs in a user namespace here ({probe.stderr.strip()[:200]})"
    return None


def test_a_full_checkpoint_volume_stops_the_trainer_with_the_reason_and_keeps_the_last_one(
    tmp_path: Path,
):
    why = _unshare_works()
    if why:
        pytest.skip(why)
    spec = job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        training={"batchSizePerReplica": 64, "steps": 100_000, "stepsPerExecution": 10},
    )
    mount = tmp_path / "volume"
    mount.mkdir()
    ckpt = mount / "ckpt"
    config = trainer_config(spec, checkpoint_dir=ckpt, every_steps=20, keep=3)
    (tmp_path / "trainer.json").write_text(json.dumps(config.to_wire()))
    termination = tmp_path / "termination"
    copy = tmp_path / "left"
    env = trainer_env(
        {
            "ETJ_TRAINER_CONFIG": str(tmp_path / "trainer.json"),
            TERMINATION_LOG_ENV: str(termination),
        }
    )
    env.pop("TF_CONFIG", None)
    # A checkpoint of this job is ~0.4 MiB (two small tables with Adagrad slots): two fit
    # in 1 MiB, the third does not.
    script = (
        f'mount -t tmpfs -o size=1m tmpfs "{mount}" && '
        f'"{sys.executable}" -m etj_trainer > "{tmp_path}/out.log" 2>&1; rc=$?; '
        f'cp -a "{ckpt}" "{copy}"; exit $rc'
    )
    out = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    log = (tmp_path / "out.log").read_text(errors="replace")
    # Stopped for good, not crash-looping: a permanent failure's code, the reason first.
    assert out.returncode == exitcodes.USAGE, log[-3000:]
    message = termination.read_text()
    assert message.startswith(
        f"{REASON_CHECKPOINT_STORAGE_FULL}: the checkpoint volume at {ckpt} is full: saving step"
    ), message
    assert "it holds 1.00 MiB" in message and "free" in message
    saved = [e["step"] for e in read_events(tmp_path / "out.log") if e["event"] == "checkpoint"]
    assert saved, log[-3000:]
    assert f"the last checkpoint (ckpt-{saved[-1]}) took" in message
    # What is left: the complete checkpoints, the newest the last saved; none of the failed
    # save's temporary files.
    assert not list(copy.glob("*_temp*")), sorted(p.name for p in copy.iterdir())
    state = (copy / "checkpoint").read_text()
    assert f'model_checkpoint_path: "ckpt-{saved[-1]}"' in state
    assert (copy / f"ckpt-{saved[-1]}.index").exists()
