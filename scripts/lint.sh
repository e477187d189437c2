#!/usr/bin/env bash
# Lint and type-check the project: ruff (rules: [tool.ruff] in pyproject.toml)
# and mypy (settings and files: [tool.mypy]). Both run; the exit status is 1
# when either reports a problem.
#
#   scripts/lint.sh                 # uses $PYTHON, else .venv/bin/python, else python3
#   PYTHON=/path/to/python scripts/lint.sh
#
# `ruff format --check` is not run: the tree is not ruff-formatted.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
status=0
echo "ruff check ."
"$PYTHON" -m ruff check . || status=1
echo "mypy (simharness, cli.py)"
"$PYTHON" -m mypy || status=1
exit $status
