# One venv for everything; torch pinned to the CPU build (constraints.txt) so nothing pulls CUDA wheels.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Where agent CLIs are installed, one folder each (autorl/agents/cli.py reads the same variable).
AUTORL_AGENTS_DIR ?= .cache/agents
# The agent CLIs the tests run for real (tests/integration/test_real_cli.py drives codex).
TEST_AGENTS := codex

.PHONY: setup test-deps lint sweep test test-unit test-integration dry-run clean

$(BIN)/autorl-installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==26.3
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,envs]"  # fast-downward's build runs `python` from PATH
	touch $@

setup: $(BIN)/autorl-installed ## create .venv and install autorl with its pinned dependencies

# Headless Chromium from Debian: tests/integration/test_report_sweep.py opens the HTML report in it.
/usr/bin/chromium:
	@[ "$$(id -u)" = 0 ] || { echo "the tests need Debian's chromium: run as root, or: sudo apt-get install -y chromium" >&2; exit 1; }
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# An agent CLI at the version pinned in conf/agent/<name>.yaml (reinstalled when the pin changes).
$(AUTORL_AGENTS_DIR)/%/.installed: conf/agent/%.yaml | $(BIN)/autorl-installed
	$(BIN)/python -m autorl.agents.install $*
	touch $@

test-deps: /usr/bin/chromium $(TEST_AGENTS:%=$(AUTORL_AGENTS_DIR)/%/.installed) ## what the tests need beyond .venv

sweep: setup ## the embedded default: scripted agent × gsm8k fixture × tiny model on a local Ray
	$(BIN)/python -m autorl.sweep

dry-run: setup
	$(BIN)/python -m autorl.sweep task=gsm8k seed=0,1 dry_run=true

lint: setup ## ruff and mypy over autorl/ and tasks/ (their settings are in pyproject.toml)
	$(BIN)/ruff check autorl tasks
	$(BIN)/mypy

# lint before test-deps: a lint failure stops `make test` before Chromium and the agent CLIs are installed.
test: setup lint test-deps ## lints, installs what the tests need, then runs unit + integration tests (CPU, local Ray)
	$(BIN)/python -m pytest -q

test-unit: setup
	$(BIN)/python -m pytest -q tests/unit

test-integration: setup test-deps
	$(BIN)/python -m pytest -q tests/integration

clean:
	rm -rf $(VENV) outputs .pytest_cache
