"""Names fixed by the design: API group, kind, labels, ports. Pure constants."""

from __future__ import annotations

GROUP = "training.etj.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "EmbeddingTrainingJob"
PLURAL = "embeddingtrainingjobs"
SINGULAR = "embeddingtrainingjob"
SHORT_NAMES = ["etj"]
# etj's own category (besides "all"): `kubectl get etj-all` lists every kind etj defines.
# Not "etj": kubectl expands a category before it tries short names, so a category "etj"
# would shadow the short name and `kubectl delete etj --all` would one day delete every
# kind in the category, not just the jobs.
CATEGORIES = ["all", "etj-all"]
CRD_NAME = f"{PLURAL}.{GROUP}"

# The value of spec.runPolicy.managedBy that this operator acts on.
MANAGED_BY = "training.etj.dev/operator"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# On the CRD (with LABEL_NAME): the application it belongs to.
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_REPLICA_TYPE = f"{GROUP}/replica-type"
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
APP_NAME = "etj"
# kopf's finalizer on every job the operator manages.
FINALIZER = f"{GROUP}/finalizer"
MANAGED_BY_VALUE = "etj"

TF_PORT = 2222
# runPolicy.watchdogSeconds when a job leaves it out: seconds without a completed chunk of
# steps (after the restore) before the chief stops with WatchdogTimeout. What a healthy job
# never reaches: the chief beats after every chunk (sized to ~1 s by time, or
# stepsPerExecution steps), after every checkpoint save and every inline evaluation, and
# not before the step is traced and compiled. Its longest healthy silence is a checkpoint
# save of the whole state: 17 s for 10.75 GB on local disk (benchmarks/RESULTS.md,
# 2026-11-26, f4e9116), so 300 s covers that state on a volume writing 36 MB/s, or ~150 GB
# at the benchmark's rate. A job whose save takes longer raises it. Was 600 s, which made
# each hung step cost ten minutes of the whole job (issue 39).
DEFAULT_WATCHDOG_SECONDS = 300
METRICS_PORT = 9102
# The name of the trainer container's metrics port: the operator scrapes the pod's port so
# named (or the address in ANNOTATION_METRICS_ADDRESS, which overrides it).
METRICS_PORT_NAME = "metrics"
# Where the leader's metrics page is when the pod's IP and port do not reach it (a
# process-backed node of the test cluster serves it on a loopback port and says so here).
ANNOTATION_METRICS_ADDRESS = f"{GROUP}/metrics-address"
TRAINER_CONFIG_MOUNT = "/etc/etj"
TRAINER_CONFIG_FILE = "trainer.json"
DEFAULT_IMAGE = "ghcr.io/etj-dev/etj-trainer:0.1.0"
CONTAINER_NAME = "trainer"

# Hostnames are DNS labels (63 chars): "<job>-worker-<index>" must fit.
MAX_JOB_NAME_LENGTH = 45

# Where a replica says why it ended: Kubernetes copies this file into the container's
# terminated state (``terminationMessagePath``), and the operator reads it from there.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LOG_ENV = "ETJ_TERMINATION_LOG"

# Kueue's plain-Pod group integration (sigs.k8s.io/kueue pkg/controller/jobs/pod/constants;
# the same keys since v0.7). A job labelled with the queue name runs as one pod group: one
# Kueue Workload admitted all at once. See etj.core.render.kueue.
KUEUE_QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# A WorkloadPriorityClass for the group (copied from the job like the queue name).
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
# "false" on any pod: the group is finished once no pod is active, even if not every pod
# succeeded (etj deletes the ps once the chief succeeds; they never exit by themselves).
# etj sets it only when the job has finished or is suspended: on a running group it would
# make a preempted Workload Finished instead of requeued (etj.core.reconcile.policies.queue).
KUEUE_RETRIABLE_IN_GROUP_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
# What Kueue's webhook puts on the pods it manages: the label, the finalizer (of the same
# name) that keeps a deleted pod until Kueue lets it go, and the scheduling gate that holds
# a pod until the group's Workload is admitted.
KUEUE_MANAGED_LABEL = "kueue.x-k8s.io/managed"
KUEUE_POD_FINALIZER = "kueue.x-k8s.io/managed"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
# The pod condition Kueue sets on the pods of a group it stops; its message says why
# ("Preempted to accommodate a workload ...").
KUEUE_TERMINATION_CONDITION = "TerminationTarget"
# Kueue's API group and the version of it etj reads a group's Workload at (served from
# v0.9 to v0.15, its storage version there): only its owner references are read.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_WORKLOAD_VERSION = "v1beta1"
# The pod conditions that say a pod was taken away rather than failed: Kubernetes'
# DisruptionTarget (preemption, eviction, taint manager, PodGC) and the condition Kueue
# sets on the pods of a group it stops (an evicted or preempted Workload). As batch/v1 Job
# with a podFailurePolicy ``Ignore`` on DisruptionTarget, such a failure is not counted
# against backoffLimit and waits for no back-off.
DISRUPTION_CONDITIONS = ("DisruptionTarget", KUEUE_TERMINATION_CONDITION)

# The main container under its TFJob name: a template's container named so is etj's own.
TFJOB_CONTAINER_NAME = "tensorflow"
TF_CONFIG_ENV = "TF_CONFIG"
# The trainer config file (TRAINER_CONFIG_FILE under TRAINER_CONFIG_MOUNT) of every replica.
TRAINER_CONFIG_ENV = "ETJ_TRAINER_CONFIG"
# The replica's role (a ``Role`` value) and index, beside TF_CONFIG: a job's own program
# reads them (``etj_trainer.sdk.is_leader``) without parsing TF_CONFIG.
REPLICA_TYPE_ENV = "ETJ_REPLICA_TYPE"
REPLICA_INDEX_ENV = "ETJ_REPLICA_INDEX"
# Environment variables whose names start so are etj's (a template may not set them).
ETJ_ENV_PREFIX = "ETJ_"
# Every replica finds the shard plan (``ShardPlan`` wire JSON) in the file this names: the
# trainer config ConfigMap carries it as SHARD_PLAN_FILE next to TRAINER_CONFIG_FILE.
SHARD_PLAN_ENV = "ETJ_SHARD_PLAN"
SHARD_PLAN_FILE = "shard-plan.json"
# The trainer's metrics port, over the trainer config's (``etj run`` and the process node
# give each leader a free local port; 0: no page). The operator's own port is another
# variable (ETJ_OPERATOR_METRICS_PORT, an operator setting).
METRICS_PORT_ENV = "ETJ_METRICS_PORT"
# Seconds between the trainer's progress reports (its metrics and ``progress`` lines).
PROGRESS_SECONDS_ENV = "ETJ_PROGRESS_SECONDS"
# The CPUs a replica may use when its processes share one machine's cores (``etj run``:
# the cores over the processes, ``etj.local.launch.cpu_share``): the trainer sizes its
# thread pools to it and its servers stop spinning. In a pod the container's CPU limit
# says the same.
CPUS_ENV = "ETJ_CPUS"
# The Pod volumes etj renders itself; a template may not define volumes of these names.
VOLUME_TRAINER_CONFIG = "trainer-config"
VOLUME_CHECKPOINTS = "checkpoints"
VOLUME_TMP = "tmp"
VOLUME_DATA = "data"
VOLUME_GCS_CREDENTIALS = "gcs-credentials"
# A warm start's source checkpoints (spec.warmStart), mounted read-only.
VOLUME_WARM_START = "warm-start"
# A custom tower's code (spec.model.custom.configMap): the ConfigMap's files, mounted
# read-only at MODEL_CODE_MOUNT in every replica's trainer container; MODEL_CODE_ENV names
# that directory (a process-backed node remaps it) and the trainer puts it on sys.path.
VOLUME_MODEL_CODE = "model-code"
MODEL_CODE_MOUNT = "/opt/etj/model-code"
MODEL_CODE_ENV = "ETJ_MODEL_CODE"
# A ps' disk tables' files (model.embeddings[].storage.disk without a path): an emptyDir
# sized to the ps' shard files (etj.api.disk.disk_volume_bytes), at DISK_MOUNT.
VOLUME_DISK_TABLES = "disk-tables"
DISK_MOUNT = "/var/lib/etj/disk-tables"
# The directory a ps keeps those files in (DISK_MOUNT; a process-backed node remaps it).
DISK_TABLES_ENV = "ETJ_DISK_TABLES"
ETJ_VOLUMES = (
    VOLUME_TRAINER_CONFIG,
    VOLUME_CHECKPOINTS,
    VOLUME_TMP,
    VOLUME_DATA,
    VOLUME_GCS_CREDENTIALS,
    VOLUME_MODEL_CODE,
    VOLUME_WARM_START,
    VOLUME_DISK_TABLES,
)

# What etj's renderer writes on its objects (etj.core.render) beside the labels above: the
# recommended app.kubernetes.io labels, the job generation a pod was made from, and
# whether a checkpoint claim is kept after its job (checkpoint.storage.retain).
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
ANNOTATION_SPEC_GENERATION = f"{GROUP}/spec-generation"
# How many workers the pod's TF_CONFIG names: a pod of a cluster of another size is
# restarted when the job is scaled (etj.core.reconcile.policies.scale).
ANNOTATION_CLUSTER_WORKERS = f"{GROUP}/cluster-workers"
LABEL_RETAINED = f"{GROUP}/retained"
# Container port name of TensorFlow's gRPC server (the metrics page's: METRICS_PORT_NAME).
PORT_NAME_TF = "tf"
# The environment of every replica's trainer container: the trainer config's path and the
# task it runs (the trainer reads these), the job's and the pod's own names (etj reads
# neither: they are there for a job's own program and its logs), Keras 2 for TensorFlow,
# and the key file of checkpoint.credentialsSecret.
# (TRAINER_CONFIG_ENV, REPLICA_TYPE_ENV and REPLICA_INDEX_ENV are above.)
JOB_NAME_ENV = "ETJ_JOB_NAME"
POD_NAME_ENV = "POD_NAME"
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
GCS_CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
# The label Kubernetes puts on every namespace: its own name (a NetworkPolicy's
# namespaceSelector matches the operator's namespace by it).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
