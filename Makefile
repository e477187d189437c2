# Quick start: `make demo` and `make test`. Both create .venv when missing.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch: the spec pip installs, and an optional index to take it from. The default installs
# torch==2.13.0 from the indexes pip is configured with (PyPI's Linux x86_64 wheel is the CUDA
# build, several GB). For the CPU build, on a machine that reaches PyTorch's CPU index:
#   make test TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))

.PHONY: demo test test-fast lint fetch-mcore setup setup-test bench clean mutate

$(VENV)/.base: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_INDEX) '$(TORCH_SPEC)'
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install -q -e '.[test]'
	touch $@

$(VENV)/.lint: $(VENV)/.base
	$(PY) -m pip install -q -e '.[lint]'
	touch $@

setup: $(VENV)/.base
setup-test: $(VENV)/.test

demo: $(VENV)/.base
	$(VENV)/bin/simharness demo

# -rs: every skip prints its reason (a parity tier that could not run is visible).
# SIMHARNESS_REQUIRE_PARITY=1 (set by .ci/run) turns a parity skip into a failure.
test: $(VENV)/.test
	$(PY) -m pytest -n auto -q -rs

# The pure tier (tests/unit/): starts no process and needs no megatron-core.
test-fast: $(VENV)/.test
	$(PY) -m pytest -n auto -q tests/unit

lint: $(VENV)/.lint
	PYTHON=$(PY) scripts/lint.sh

# The pinned megatron-core wheels (0.17.1, 0.18.2, 0.19.2): parallel_state.py into .cache/mcore0XX,
# the whole megatron/core tree into .cache/mcore0XX-src (the all-gather reader parity test);
# exits non-zero, with the reason, when one cannot be had.
fetch-mcore: $(VENV)/.test
	$(PY) tests/support/megatron_harness.py
	$(PY) tests/support/mcore_sources.py

# Mutation testing (not part of CI): mutmut over tests/mutants/modules.toml, one
# module at a time, each in a scratch copy (.mutate/), then the score per module.
# MUTATE_MODULES="checks rules" for a subset, MUTATE_JOBS=N workers (default 1).
$(VENV)/.mutate: $(VENV)/.test
	$(PY) -m pip install -q -e '.[mutate]'
	touch $@

MUTATE_MODULES ?=
mutate: $(VENV)/.mutate
	nice -n 15 $(PY) scripts/mutate.py run $(MUTATE_MODULES)
	$(PY) scripts/mutate.py score $(MUTATE_MODULES)

bench: $(VENV)/.test
	$(PY) bench/bench_layout.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info .mutate
