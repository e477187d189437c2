"""Write topologies/calibration/model_error.toml: the cost model's measured error per
network class and size band (:mod:`simharness.topology.model_error`).

    PYTHONPATH=. .venv/bin/python scripts/model_error_table.py [--check]

Run it after changing the NCCL model or the calibration data;
tests/unit/topology/test_model_error.py fails until the shipped table matches.
``--check`` writes nothing and exits 1 when the shipped table is out of date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simharness.topology.model_error import compute_table, table_text  # noqa: E402

# this checkout's files (an editable install's package data may live elsewhere)
CALIBRATION = Path(__file__).resolve().parents[1] / "topologies" / "calibration"
TABLE_PATH = CALIBRATION / "model_error.toml"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when the shipped table differs; write nothing")
    args = ap.parse_args(argv)
    text = table_text(compute_table(CALIBRATION / "nccl_calibration.toml"))
    old = TABLE_PATH.read_text() if TABLE_PATH.exists() else ""
    if args.check:
        print(f"{TABLE_PATH}: {'up to date' if old == text else 'OUT OF DATE'}")
        return 0 if old == text else 1
    TABLE_PATH.write_text(text)
    print(f"wrote {TABLE_PATH} ({'unchanged' if old == text else 'changed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
