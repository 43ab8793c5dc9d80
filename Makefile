# etj developer entry points. Every install step the tests need lives here (or in a
# script this file calls), so a fresh clone on a fresh machine runs `make test` alone.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ETJ_CACHE ?= $(HOME)/.cache/etj
export PIP_CACHE_DIR ?= $(ETJ_CACHE)/pip
export PIP_DISABLE_PIP_VERSION_CHECK = 1
# Quieter TensorFlow in every test and demo process.
export TF_CPP_MIN_LOG_LEVEL ?= 2
export TF_USE_LEGACY_KERAS ?= 1

.PHONY: help venv kernels lint lint-objects fmt unit test test-all demo crds render binaries cluster-up cluster-down e2e-kind images bench clean \
	node-packages e2e kueue fake-gcs kafka test-deps kind-up kind-down kind-packages benchmark-deps bench-peers chaos

help:
	@echo "make demo      - run the quickstart job locally (no cluster needed)"
	@echo "make test      - lint, type-check and run the test suite (CI's; not the extended checks)"
	@echo "make test-all  - the same with the extended checks (minutes more)"
	@echo "make kernels   - build (or reuse) the trainer's C++ kernels under ~/.cache/etj/kernels"
	@echo "make crds      - regenerate crds/, the chart's CRD and admission policy from the API models"
	@echo "make binaries  - build (or reuse) the Kubernetes control plane under $(ETJ_CACHE)"
	@echo "make kueue     - build (or reuse) Kueue under $(ETJ_CACHE) for the Kueue admission test"
	@echo "make fake-gcs  - build (or reuse) fake-gcs-server and gcs-front under $(ETJ_CACHE) for the gs:// tests"
	@echo "make kafka     - fetch (or reuse) Apache Kafka's jars under $(ETJ_CACHE)/kafka for the Kafka tests"
	@echo "make kind-up   - the 3-node kind cluster of kind-config.yaml, offline (root; cached)"
	@echo "make kind-down - delete it and check nothing is left behind"
	@echo "make e2e       - the end-to-end suite on the kind cluster (root: brings it up, deletes it)"
	@echo "make chaos     - the chaos soak on the kind cluster (CHAOS_MINUTES=20, CHAOS_SEED=39)"
	@echo "make images    - build both images (docker, else buildah as root; cached by input hash)"
	@echo "make benchmark-deps - PyTorch and TorchRec for benchmarks/peers.py (~5 GB, cached)"
	@echo "make bench-peers - benchmarks/peers.py --quick: etj beside PyTorch and TorchRec"

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tests/cluster/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[operator,trainer,dev]'
	@# The test cluster (etj cluster, python -m etj_testcluster): dev only, not in the product.
	$(PY) -m pip install -q -e tests/cluster
	touch $@

# The trainer's own TensorFlow ops (trainer_image/etj_trainer/kernels/*.cc) against the
# installed TensorFlow, cached by the hash of the sources and TensorFlow's version
# (~30 s cold on two cores; warm, a cache check). The tests that run them build them
# through the same step, so a fresh clone needs no separate command.
kernels: venv
	nice -n 10 $(PY) -m etj_trainer.kernels.build

lint: venv
	$(VENV)/bin/ruff check operator trainer_image tests benchmarks
	$(VENV)/bin/ruff format --check operator trainer_image tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	@# Dead code: names defined and used nowhere ([tool.vulture] in pyproject.toml).
	$(VENV)/bin/vulture
	@# The repository's own rules (tests/unit/lint): every product module with logic has its
	@# test module (test_mirror), the drift guard, enum annotations, deadlines, benchmark docstrings.
	$(PY) -m pytest tests/unit/lint -q
	@# Every test module imports (a moved fixture fails here in seconds, not mid-suite).
	@out=$$($(PY) -m pytest --collect-only -q 2>&1) || { echo "$$out" | tail -40; exit 1; }; \
		echo "$$out" | tail -1

# kube-score over the chart (helm template) and every example's rendered objects: zero
# findings but the exceptions tests/lint/kube-score.yaml gives with their reasons. Apart
# from `make lint` because it needs Go builds: kube-score (~160 s cold on 2 cores, a cache
# check warm) and helm (from `make binaries`); `make test` runs it. Warm: ~20 s.
lint-objects: venv binaries
	@ks=$$(nice -n 10 bash tests/cluster/build-kube-score.sh) && $(PY) tests/lint/lint_objects.py "$$ks"

fmt: venv
	$(VENV)/bin/ruff check --fix operator trainer_image tests benchmarks
	$(VENV)/bin/ruff format operator trainer_image tests benchmarks

unit: venv
	$(PY) -m pytest tests/unit -q -m "not extended"

binaries:
	bash tests/cluster/build-binaries.sh

# Kueue's manager from Go modules, for tests/integration/etj_testcluster/test_kueue_admission.py (skipped
# without it).
kueue:
	nice -n 19 bash tests/cluster/build-kueue.sh

# fake-gcs-server (Go modules) and tests/cluster/gcs-front, for the tests that use gs:// on
# loopback (etj_testcluster.fake_gcs: the warm start from a gs:// location under etj run,
# TF's checkpoint round trip); the kind cluster's gs:// stand-in is the same build.
fake-gcs:
	nice -n 10 bash tests/cluster/kind-fake-gcs.sh --binaries

# Apache Kafka's jars from Maven Central (~10 s cold), for the tests that train from a real
# broker (etj_testcluster.kafka); those tests fetch them through the same script themselves.
kafka:
	nice -n 10 bash tests/cluster/build-kafka.sh

# What the suite runs against, all cached under $(ETJ_CACHE): the control plane and Kueue
# (for the Kueue admission test; 150 s cold) always; as root also the packages the image
# build (buildah) and the kind cluster's private Docker engine need, and the kubelet in the
# control plane's own `go build` (the kind node image is built from it; shared packages
# compile once). The kind cluster itself comes up beside the suite
# (tests/cluster/kind-in-background.sh), the images too (tests/cluster/images-in-background.sh);
# the end-to-end tests on it (tests/e2e, as root; elsewhere they skip saying why) run last.
# Warm, every step is a cache check (seconds).
ifeq ($(shell id -u),0)
TEST_DEPS := binaries kueue fake-gcs kafka node-packages kind-packages
TEST_DEPS_ENV := ETJ_WITH_KUBELET=1
HOST_PACKAGES := node-packages kind-packages
else
TEST_DEPS := binaries kueue fake-gcs kafka
endif

test-deps:
	$(TEST_DEPS_ENV) $(MAKE) --no-print-directory $(TEST_DEPS)

# CI's suite: everything but the tests marked `extended` (long acceptance checks, each
# with a faster sibling here), so a warm run stays within CI's budget. Failing fast: lint
# and the unit tests first (no cluster, no TensorFlow process: their verdict within
# minutes of the start). Then, scheduled for a cold machine, where the Go builds and the
# kind node image take most of half an hour: the images and the kind cluster start in the
# background (host packages first: the engines they need), and three lanes side by side
# (tests/cluster/lanes.sh): the processes' (trainer, needs no build) and etj run's at
# once, and the clusters' (integration on the local control plane, then the e2e on kind), which
# first builds the control plane and lints the rendered objects, and builds Kueue beside
# its tests (the Kueue test waits for it). Warm, every build is a cache check (seconds).
test: venv lint unit $(HOST_PACKAGES)
	bash tests/cluster/images-in-background.sh bash tests/cluster/kind-in-background.sh \
		env PY=$(PY) \
		ETJ_CLUSTER_LANE_BEFORE="$(TEST_DEPS_ENV) $(MAKE) --no-print-directory binaries lint-objects fake-gcs" \
		ETJ_CLUSTER_LANE_BESIDE="bash tests/cluster/build-kueue.sh" \
		bash tests/cluster/lanes.sh -q -m "not extended"

# The whole suite, the extended checks included (about 20 min more): before a release.
test-all: venv lint test-deps lint-objects
	$(PY) -m pytest tests/unit -q
	bash tests/cluster/images-in-background.sh bash tests/cluster/kind-in-background.sh \
		env PY=$(PY) bash tests/cluster/lanes.sh -q

demo: venv
	$(VENV)/bin/etj run examples/quickstart.yaml --kill-worker-at 2000

render: venv
	$(VENV)/bin/etj render examples/quickstart.yaml

crds: venv
	$(VENV)/bin/etj crd > crds/embeddingtrainingjobs.training.etj.dev.yaml
	@if [ -d charts/etj/crds ]; then cp crds/*.yaml charts/etj/crds/; fi
	$(PY) -c 'from etj.api.admission import CHART_TEMPLATE, chart_template, with_rules_table; \
		open(CHART_TEMPLATE, "w").write(chart_template()); \
		readme = open("README.md").read(); open("README.md", "w").write(with_rules_table(readme))'

cluster-up: venv binaries
	$(VENV)/bin/etj cluster up

cluster-down: venv
	$(VENV)/bin/etj cluster down

# The local kind cluster (root): a private Docker engine, kind and a node image built
# offline from the project's Kubernetes build, kind-config.yaml's three nodes, the
# etj-shared ReadWriteMany class, fake-gcs-server, the project's images in every node.
# `make test` brings it up beside the suite and its last test deletes it.
kind-up:
	bash tests/cluster/kind-up.sh

kind-down:
	bash tests/cluster/kind-down.sh

# Debian's docker.io, containerd, runc (root; a dpkg check when installed).
kind-packages:
	bash tests/cluster/kind-docker.sh packages

# The end-to-end suite alone (make test runs it too), on the kind cluster: as root it
# builds the images and brings the cluster up itself (cached), and deletes it at the end;
# ETJ_KIND_KUBECONFIG names another cluster to use as it is.
e2e e2e-kind: venv binaries
	$(PY) -m pytest -m e2e tests/e2e -v

# The chaos soak (issue 39; tests/e2e/chaos_driver.py): three jobs through a seeded schedule
# of every fault kind for at least CHAOS_MINUTES, the invariants after every fault, the
# table. On the kind cluster (make kind-up first); tests/e2e/test_chaos.py is CI's version.
CHAOS_MINUTES ?= 20
CHAOS_SEED ?= 39
chaos: venv binaries images
	bash tests/cluster/kind-up.sh
	$(PY) -m tests.e2e.chaos_driver --minutes $(CHAOS_MINUTES) --seed $(CHAOS_SEED)

bench: venv
	$(PY) benchmarks/trainer_throughput.py --quick

# benchmarks/peers.py's peers (PyTorch, TorchRec + FBGEMM on CPU) into the venv: the
# `benchmark` extra, then torchrec without its requirement of the CUDA fbgemm-gpu
# (pyproject.toml says why). ~5 GB installed, its ~3 GB of wheels kept under
# $(BENCH_WHEELS): pip's own cache keeps only responses that carry caching headers, and
# where a proxy strips them (this machine's: 2026-12-07) it keeps nothing, so every fresh
# venv downloaded the 3 GB again. `pip download` skips a wheel already there; the install
# reads only that directory. Never part of `make test`.
TORCHREC := torchrec==1.9.2
BENCH_WHEELS := $(ETJ_CACHE)/wheels/benchmark
BENCH_REQS := $(VENV)/benchmark-requirements.txt
benchmark-deps: $(VENV)/.benchmark-deps

$(VENV)/.benchmark-deps: $(VENV)/.installed pyproject.toml
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["benchmark"]))' > $(BENCH_REQS)
	nice -n 10 $(PY) -m pip download -q -d $(BENCH_WHEELS) -r $(BENCH_REQS)
	nice -n 10 $(PY) -m pip download -q --no-deps -d $(BENCH_WHEELS) '$(TORCHREC)'
	nice -n 10 $(PY) -m pip install -q --no-index --find-links $(BENCH_WHEELS) -r $(BENCH_REQS)
	nice -n 10 $(PY) -m pip install -q --no-index --no-deps --find-links $(BENCH_WHEELS) '$(TORCHREC)'
	$(PY) -c 'import torch, fbgemm_gpu, torchrec; print("torch", torch.__version__, "fbgemm_gpu", fbgemm_gpu.__version__)'
	touch $@

# benchmarks/peers.py --quick from a fresh clone: etj beside PyTorch and TorchRec (DLRM, DeepFM).
bench-peers: benchmark-deps
	nice -n 19 $(PY) benchmarks/peers.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# docker where a Docker engine runs, else buildah (root; Debian packages installed by
# node-packages); a stand-in base image from Debian packages where the registry's cannot
# be pulled. Cached under $(ETJ_CACHE)/images by the hash of the inputs.
images:
	nice -n 19 bash tests/cluster/build-images.sh

# buildah, podman, runc, debootstrap, containerd, CNI plugins (root; idempotent).
node-packages:
	bash tests/cluster/install-node-packages.sh

