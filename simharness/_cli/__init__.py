"""The ``simharness`` command line, split by command family (see ``common``)."""
