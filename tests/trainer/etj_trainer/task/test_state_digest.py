"""The restore digest sums each variable where it lives.

The chief's ``restored`` event carries the sum of every saved variable (tables, slots,
dense). Under ParameterServer a table shard lives on a ps; an eager op given no device runs
on the chief's default device, so summing without one would copy every shard to the chief
at each restore (measured by ``benchmarks/large_state.py``: 10 GB of tables and slots sent
to the chief, its peak RSS up 0.9 GiB). Here two logical CPUs stand for chief and ps; only
the scalar may reach the default device.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from harness import trainer_env

SCRIPT = textwrap.dedent(
    """
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from etj_trainer.task.state import variable_sum
    with tf.device("/CPU:1"):
        v = tf.Variable(tf.fill([1000, 8], 0.5))
    total = variable_sum(v)
    print("DEVICE", total.device)
    print("SUM", float(total.numpy()))
    """
)


def test_a_variable_is_summed_on_its_own_device() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["DEVICE"].endswith("/device:CPU:1"), lines["DEVICE"]
    assert float(lines["SUM"]) == 4000.0
