"""No privilege, host access or identity lent through a job: the chart's admission
policies and the same checks in ``etj validate``, from one declaration.

The operator creates pods from what a job says (a replica's PodTemplateSpec and
``spec.podTemplate`` are merged over etj's own pod, the checkpoint and data volumes are any
volume source), so whoever may create an EmbeddingTrainingJob could otherwise have the
operator's ServiceAccount create pods they may not create themselves: the operator is a
deputy. Each ``Check`` below names where it looks (a ``Scope``: every replica template's
pod spec, every container, every volume source, every mount, ...), the field, the value
refused, where the rule comes from (``Origin``: the Pod Security Standards' baseline or
restricted profile, or etj's own as a deputy) and how a namespace lifts it (a ``Grant``).
From it come

- the CEL of two ``ValidatingAdmissionPolicy`` objects (``policies()``; the chart's
  ``templates/admission-policy.yaml`` is generated from them by ``make crds`` and a test
  fails when the committed file differs): ``no-host-access`` (the Pod Security rules and
  etj's mount rules; a namespace labelled ``training.etj.dev/allow-privileged: "true"`` is
  left out by its binding) and ``no-borrowed-identity`` (service account, node, priority,
  tolerations; bound everywhere, each rule lifted by its own namespace label or annotation,
  read from ``namespaceObject``),
- the Python check ``admission_problems`` that ``etj validate`` applies, naming the field,
  for a namespace described by its labels and annotations (``Namespace``), and
- the README's table of every rule (``rules_table``).

Pod Security's "must be set" requirements (``runAsNonRoot: true``, ``drop: [ALL]``, a
seccomp profile) are met by the pods etj renders; what a job can do is set the opposite, and
that is refused. Pure: no I/O, no environment; works on the job's wire form (a dict), as
the API server does.
"""

from etj.api.admission.checks import Check, Grant, Namespace, Origin, Scope, scope_items
from etj.api.admission.policy import (
    CHART_TEMPLATE,
    POLICIES,
    PolicyDef,
    admission_problems,
    binding,
    chart_template,
    policy,
    rules_table,
    with_rules_table,
)
from etj.api.admission.rules import (
    ALLOW_ANY_TOLERATION_LABEL,
    ALLOW_NODE_NAME_LABEL,
    ALLOW_PRIVILEGED_LABEL,
    ALLOW_SYSTEM_PRIORITY_LABEL,
    CHECKS,
    HOST_ACCESS_CHECKS,
    IDENTITY_CHECKS,
    PRIVILEGED,
    SERVICE_ACCOUNTS_ANNOTATION,
    SYSTEM_PATH_RE,
    SYSTEM_PATHS,
    UNCLEAN_PATH_RE,
)

__all__ = [
    "ALLOW_ANY_TOLERATION_LABEL",
    "ALLOW_NODE_NAME_LABEL",
    "ALLOW_PRIVILEGED_LABEL",
    "ALLOW_SYSTEM_PRIORITY_LABEL",
    "CHART_TEMPLATE",
    "CHECKS",
    "HOST_ACCESS_CHECKS",
    "IDENTITY_CHECKS",
    "POLICIES",
    "PRIVILEGED",
    "SERVICE_ACCOUNTS_ANNOTATION",
    "SYSTEM_PATHS",
    "SYSTEM_PATH_RE",
    "UNCLEAN_PATH_RE",
    "Check",
    "Grant",
    "Namespace",
    "Origin",
    "PolicyDef",
    "Scope",
    "admission_problems",
    "binding",
    "chart_template",
    "policy",
    "rules_table",
    "scope_items",
    "with_rules_table",
]
