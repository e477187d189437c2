"""Helpers shared by the test tiers (imported as ``support``: pyproject's pytest
``pythonpath`` puts tests/ on the path). No test module imports another test module;
what two of them share lives here."""
