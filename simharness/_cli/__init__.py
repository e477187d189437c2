"""The ``simharness`` command line: one module per command (family), each with ``register(main)``;
``main`` builds the group, ``options`` the shared flags, ``errors`` the exit statuses."""
