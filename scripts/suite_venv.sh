#!/usr/bin/env bash
# A separate venv for Megatron-LM main's unit tests (bench/bench_run.py --suite
# megatron-lm-main): torch, triton (megatron/core imports it at module level), what the tests
# import (with the pytest plugins of its pyproject's `test` dependency group: pytest-mock, mock,
# pytest-asyncio), and this checkout, editable; no megatron-core, so the suite's own megatron/core is
# the one imported. Megatron-LM main asks for Python >= 3.12; with an older interpreter the
# one 3.12 name it uses (typing.override, in megatron/training/models) is taken from
# typing_extensions by a .pth file (every other file compiles under 3.11). See docs/run.md.
#   scripts/suite_venv.sh [VENV]        (default .venv-suite; PYTHON=python3.11 to choose)
set -euo pipefail
venv=${1:-.venv-suite}
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0 triton pytest pytest-mock mock pytest-asyncio pyyaml einops click \
    requests numpy packaging networkx typing_extensions psutil
"$venv/bin/pip" install -q --no-deps -e "$(dirname "$0")/.."
site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
if ! "$venv/bin/python" -c 'import typing; typing.override' 2>/dev/null; then
  echo "import typing, typing_extensions; typing.override = getattr(typing, 'override', typing_extensions.override)" \
    > "$site/simharness_suite_py312.pth"
fi
if "$venv/bin/python" -c 'import megatron.core' 2>/dev/null; then
  echo "error: $venv has a megatron.core installed; the suite needs its own (pip uninstall megatron-core)" >&2
  exit 2
fi
echo "$venv ready"
