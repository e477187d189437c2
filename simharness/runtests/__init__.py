"""Moved to :mod:`simharness.pytest_ranks`; this path re-exports it for one release.

``runtests.runner`` is :mod:`simharness.pytest_ranks.controller`, ``runtests.plugin``
:mod:`simharness.pytest_ranks.rank_plugin`, ``runtests.verdicts``
:mod:`simharness.pytest_ranks.verdicts`.
"""
