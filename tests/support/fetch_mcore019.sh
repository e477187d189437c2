#!/usr/bin/env bash
# Fetch megatron-core's parallel_state.py into .cache/mcoreXYY/ (git-ignored).
#
#   tests/support/fetch_mcore019.sh            # 0.19.2 -> .cache/mcore019
#   tests/support/fetch_mcore019.sh 0.18.2     # 0.18.2 -> .cache/mcore018
#   tests/support/fetch_mcore019.sh 0.17.1     # 0.17.1 -> .cache/mcore017
#
# The 0.17+ wheels are cp312-only and need triton at import, so the wheel is
# downloaded (not installed) and only megatron/core/parallel_state.py is
# unpacked; the parity tests load that one file under Python 3.11 with stubs
# (tests/support/megatron_harness.py::load_parallel_state_file) and check its sha256
# against tests/support/megatron_harness.py::MCORE_WHEELS.
# The tests call the same download themselves when the file is missing and
# skip when it cannot be fetched (fail under SIMHARNESS_REQUIRE_PARITY=1, which
# .ci/run sets after `make fetch-mcore` fetched and verified every pinned version);
# this script is for doing it by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
VERSION=${1:-0.19.2}
IFS=. read -r MAJOR MINOR _ <<<"$VERSION"
DEST=.cache/mcore$(printf '%d%02d' "$MAJOR" "$MINOR")
mkdir -p "$DEST"
printf '*\n' > .cache/.gitignore
"$PY" -m pip download "megatron-core==$VERSION" --no-deps --only-binary :all: \
    --python-version 3.12 --timeout 15 --retries 1 -d "$DEST"
"$PY" - "$DEST" "$VERSION" <<'PYEOF'
import glob, sys, zipfile
dest, version = sys.argv[1:3]
wheel = sorted(glob.glob(f"{dest}/megatron_core-{version}-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    z.extract("megatron/core/parallel_state.py", dest)
print(f"{dest}/megatron/core/parallel_state.py")
PYEOF
