"""``python -m simharness ...``: the ``simharness`` command line."""

from simharness._cli.main import main

if __name__ == "__main__":
    main(prog_name="simharness")
