# One venv for everything; torch pinned to the CPU build (constraints.txt) so nothing pulls CUDA wheels.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup sweep test test-unit test-integration dry-run clean

$(BIN)/autorl-installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==26.3
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,envs]"  # fast-downward's build runs `python` from PATH
	touch $@

setup: $(BIN)/autorl-installed ## create .venv and install autorl with its pinned dependencies

sweep: setup ## the embedded default: scripted agent × gsm8k fixture × tiny model on a local Ray
	$(BIN)/python -m autorl.sweep

dry-run: setup
	$(BIN)/python -m autorl.sweep task=gsm8k seed=0,1 dry_run=true

test: setup ## unit + integration tests (CPU, local Ray)
	$(BIN)/python -m pytest -q

test-unit: setup
	$(BIN)/python -m pytest -q tests/unit

test-integration: setup
	$(BIN)/python -m pytest -q tests/integration

clean:
	rm -rf $(VENV) outputs .pytest_cache
