"""The operator's decisions as pure functions: observed world in, actions out.

``observe`` turns Pod objects into ``PodState``s; ``policies/`` holds one module per rule
(restart, OOM, completion, deadline, TTL, suspend), each with its own tests; ``status``
computes the job's status; ``decide`` composes them into one ``Decision`` per reconcile.
Nothing here does I/O, reads the clock or the environment, or imports kopf or the
Kubernetes client: the caller passes ``now`` and applies the Decision.
"""

from etj.core.reconcile.decide import decide
from etj.core.reconcile.decision import Decision, Event, World
from etj.core.reconcile.observe import PodState, observe_pod

__all__ = ["Decision", "Event", "PodState", "World", "decide", "observe_pod"]
