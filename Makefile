# msgstore — `make run` starts a store on ./data, `make test` runs the whole suite.
# Both create the virtualenv and install everything on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
DATA   ?= ./data
IMAGE  ?= msgstore:dev

# the end-to-end suite's Kubernetes control plane (tests/e2e/plane.py): the binaries beside this
# checkout when they are there; set MSGSTORE_K8S_ASSETS to use others
ifneq ($(wildcard ../shared/k8s/bin/kube-apiserver*),)
export MSGSTORE_K8S_ASSETS ?= $(abspath ../shared/k8s/bin)
endif

.PHONY: run run-ha test lint test-tools bench bench-compare soak install proto deploy image clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,operator,spark,console]'
	$(PY) scripts/fetch_helm.py $(BIN)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/msgstore serve --data-dir $(DATA)

# a replica group of three with etcd as its arbiter (scripts/run_ha.sh says how to try a failover)
run-ha: $(STAMP)
	BIN=$(BIN) scripts/run_ha.sh

# a skipped test fails the run (tests/conftest.py): every test here is one CI is expected to run
test: $(STAMP) test-tools lint
	MSGSTORE_NO_SKIPS=1 $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# ruff (lint and format) over everything, mypy --strict over the engine and the record codec
lint: $(STAMP)
	$(BIN)/ruff check server operator tests scripts
	$(BIN)/ruff format --check server operator tests scripts
	$(BIN)/mypy

# podman, runc and mmdebstrap for the image test (Debian's packages; only as root, else skipped)
test-tools:
	@scripts/install_test_tools.sh

bench: $(STAMP)
	$(PY) -m tests.bench.run

# this checkout's server against BASELINE's (a commit or tag; default the last tag), alternately, in one run
bench-compare: $(STAMP)
	BASELINE=$(BASELINE) $(PY) -m tests.bench.compare

# the reliability campaigns at full size (200 kills, 60 power-loss copies, 400 fuzz cases each)
soak: $(STAMP)
	MSGSTORE_SOAK=1 $(PY) -m pytest -q tests/reliability --timeout 7200
	MSGSTORE_HA_KILLS=200 $(PY) -m pytest -q tests/ha/test_crash_campaign.py --timeout 7200
	MSGSTORE_NEMESIS_ROUNDS=200 MSGSTORE_SOAK=1 $(PY) -m pytest -q -s tests/ha/test_nemesis.py --timeout 7200
	MSGSTORE_SOAK=1 $(PY) -m pytest -q -m soak tests/e2e

proto: $(STAMP)
	$(PY) -m msgstore.api.protogen

# plain manifests in deploy/ rendered from charts/msgstore
deploy: $(STAMP)
	$(PY) scripts/render_deploy.py

# deploy/Dockerfile's image, without a Docker engine (podman + runc); ENGINE=docker BASE=... also work
image: $(STAMP)
	PYTHON=$(PY) IMAGE=$(IMAGE) scripts/build_image.sh

clean:
	rm -rf $(VENV) build *.egg-info server/msgstore/*/_native.c server/msgstore/*/*.so
