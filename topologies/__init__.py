"""The shipped topology files, installed as the package data ``simharness.topologies``
(see ``simharness.topology.loader.topology_dir``). The schema: ``README.md`` here."""
