# Quick start: `make demo` and `make test`. Both create .venv when missing.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN := torch==2.13.0

.PHONY: demo test setup setup-test bench clean

$(VENV)/.base: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.base
setup-test: $(VENV)/.test

demo: $(VENV)/.base
	$(VENV)/bin/simharness demo

test: $(VENV)/.test
	$(PY) -m pytest -n auto -q

bench: $(VENV)/.test
	$(PY) bench/bench_layout.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
