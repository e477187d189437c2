#!/usr/bin/env bash
# Fetch megatron-core 0.19.2's parallel_state.py into .cache/mcore019/ (git-ignored).
#
# The 0.19.x wheels are cp312-only and need triton at import, so the wheel is
# downloaded (not installed) and only megatron/core/parallel_state.py is
# unpacked; tests/test_profile_019.py loads that one file under Python 3.11
# with stubs (tests/megatron_harness.py::load_parallel_state_019).
# The tests call the same download themselves when the file is missing and
# skip when it cannot be fetched; this script is for doing it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=.cache/mcore019
mkdir -p "$DEST"
printf '*\n' > .cache/.gitignore
"$PY" -m pip download megatron-core==0.19.2 --no-deps --only-binary :all: \
    --python-version 3.12 --timeout 15 --retries 1 -d "$DEST"
"$PY" - "$DEST" <<'PYEOF'
import glob, sys, zipfile
dest = sys.argv[1]
wheel = sorted(glob.glob(f"{dest}/megatron_core-0.19.2-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    z.extract("megatron/core/parallel_state.py", dest)
print(f"{dest}/megatron/core/parallel_state.py")
PYEOF
