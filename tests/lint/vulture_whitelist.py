"""Names the dead-code check (``make lint``: vulture, configured in pyproject.toml) cannot
see used: set for a framework that reads them, or fields that only reach the wire.

Vulture counts a name as used wherever it appears, so each line below marks one name used.
Add a name only with its reason; anything else vulture reports is dead code to remove.
Decorated entry points (kopf handlers, click commands, pydantic validators, pytest
fixtures) and pytest's own names are left out by the configuration, not listed here.
"""


class _Used:
    def __getattr__(self, name: str) -> None:
        return None


_ = _Used()

# kopf reads the settings etj.controller.handlers.configure sets.
_.finalizer
_.progress_storage
_.diffbase_storage
_.level
_.server_timeout
_.disabled
_.max_workers

# The Kubernetes client reads its Configuration's and ApiClient's attributes (and the tests'
# fakes stand in for its response and configuration).
_.connection_pool_maxsize
_.user_agent
_.api_key
_.api_key_prefix
_.headers

# API model fields that reach the wire (the CRD, the job's status) without etj reading them.
_.apiVersion
_.creationTimestamp
_.value_from
_.node_selector
_.affinity
_.service_account_name
_.image_pull_secrets
_.observed_generation
_.succeeded
_.resolved_time  # status.warmStart.resolvedTime: when the source was pinned, for people

# Values of the API's Optimizer a job's manifest names (the trainer dispatches on the text).
_.FTRL
_.ADAM
# warmStart.optimizerState Reset: the code asks only whether it is Keep.
_.RESET

# tf.Module tracks a table's own pool by attribute (it is saved in the table's checkpoint).
_.own_pool

# TensorFlow's checkpoint writer calls these of a Trackable (a disk table's saved values).
_._serialize_to_tensors
_._restore_from_tensors
# torch.nn.Module.__call__ calls forward (benchmarks/peers.py: the PyTorch towers).
_.forward

# Enum reads the value a member's own __new__ sets (etj.api.architectures.Architecture).
_._value_
# status.progress.diskTables[].lookupMisses: read by people and dashboards, not the code.
_.lookup_misses
