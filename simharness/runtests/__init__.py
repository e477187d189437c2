"""``simharness run``: a framework's own distributed tests, unedited, on CPU ranks.

- :mod:`.verdicts` (pure): one verdict per test across ranks, pytest's exit status, JUnit XML;
- :mod:`.plugin`: the per-rank pytest plugin (sync per test, records, watchdog, group
  teardown, ``NeedsGPU`` -> skipped);
- :mod:`.runner`: rounds of ranks through :mod:`simharness.launch`, the memory estimate.
"""
