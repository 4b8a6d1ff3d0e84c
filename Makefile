# msgstore — `make run` starts a store on ./data, `make test` runs the whole suite.
# Both create the virtualenv and install everything on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
DATA   ?= ./data

.PHONY: run test bench soak install proto deploy clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,operator,spark]'
	$(PY) scripts/fetch_helm.py $(BIN)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/msgstore serve --data-dir $(DATA)

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m tests.bench.run

# the reliability campaigns at full size (200 kills, 60 power-loss copies, 400 fuzz cases each)
soak: $(STAMP)
	MSGSTORE_SOAK=1 $(PY) -m pytest -q tests/reliability --timeout 7200

proto: $(STAMP)
	$(PY) -m msgstore.api.protogen

# plain manifests in deploy/ rendered from charts/msgstore
deploy: $(STAMP)
	$(PY) scripts/render_deploy.py

clean:
	rm -rf $(VENV) build *.egg-info server/msgstore/store/_native.c server/msgstore/store/*.so
