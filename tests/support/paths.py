"""Where the checkout, the tests and their fixture scripts are."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"  # scripts the process tests run (outside collection)
