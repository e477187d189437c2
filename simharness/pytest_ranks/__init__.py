"""pytest on W ranks: ``simharness run`` and the ``world_size`` marker of
:mod:`simharness.testing` run a framework's own distributed tests, unedited, on CPU ranks.

Named as pytest-xdist names its parts:

- :mod:`.controller`: the process that starts the ranks (rounds through
  :mod:`simharness.launch`), reads their records and prints one verdict per test; the memory
  estimate;
- :mod:`.rank_plugin`: the pytest plugin inside each rank (sync per test, records,
  watchdog, group teardown, ``NeedsGPU`` -> skipped);
- :mod:`.verdicts` (pure): one verdict per test across ranks, pytest's exit status, JUnit XML.

:mod:`simharness.testing` is the user's side: the pytest11 plugin that gives tests the
``world_size`` marker and fixtures, and calls :mod:`.controller` for each marked test.
"""
