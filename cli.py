"""Thin entry for a source checkout: ``python cli.py ...`` runs the ``simharness`` command.

The command line lives in :mod:`simharness._cli.main` (the console script
``simharness`` points there); this file is not installed.
"""

from simharness._cli.main import main

if __name__ == "__main__":
    main()
